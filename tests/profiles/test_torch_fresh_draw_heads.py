"""devtools/torch_fresh_draw.py --hf-task (needs torch and transformers; skipped without them, as in
CI): each head's record in a --draw file rebuilds the same network, and the outputs are what the
oracle's loss and `-l cce` read (question answering: two outputs, one loss each, summed)."""
import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
draw = pytest.importorskip("devtools.torch_fresh_draw")
import torch  # noqa: E402

T = draw.T


def _built(head, model_type):
    kept = json.loads(json.dumps(["hft", f"{head}:{model_type}", {"config": dict(draw.SMALL)}]))
    family, build, shape, record = draw._entry(*kept)
    torch.manual_seed(0)
    m = build()
    return m, shape, record


def test_question_answering_trains_both_outputs():
    m, shape, _ = _built("qa", "bert")
    out = m(T.example_batch(shape, 2))
    assert isinstance(out, tuple) and len(out) == 2 and all(o.shape == (2, 32) for o in out)
    y = T.labels_for(out)
    assert isinstance(y, tuple) and all(t.shape == (2,) and int(t.max()) < 32 for t in y)
    total = T._loss(out, y)
    parts = [torch.nn.functional.cross_entropy(o, t) for o, t in zip(out, y)]
    assert torch.allclose(total, parts[0] + parts[1])
    total.backward()
    assert m.m.qa_outputs.weight.grad is not None


def test_masked_lm_reads_the_tied_embedding():
    m, shape, _ = _built("mlm", "bert")
    out = m(T.example_batch(shape, 2))
    assert out.shape == (2, 32, 1000)
    assert m.m.get_output_embeddings().weight is m.m.get_input_embeddings().weight  # one parameter, read twice


def test_multiple_choice_views_the_ids_as_choices():
    m, shape, _ = _built("mc", "bert")
    assert shape == ("ids", 64, 1000)
    assert m(T.example_batch(shape, 2)).shape == (2, draw.HF_TASK_CHOICES)


def test_seq2seq_decoder_reads_the_shifted_ids():
    m, shape, record = _built("s2s", "bart")
    ids = T.example_batch(shape, 2)
    seen = {}
    m.m.register_forward_pre_hook(lambda mod, a, kw: seen.update(kw), with_kwargs=True)
    assert m(ids).shape == (2, 32, 1000)
    dec = seen["decoder_input_ids"]
    assert torch.equal(dec[:, 1:], ids[:, :-1]) and bool((dec[:, 0] == m.start).all())
    assert record == ("hft", "s2s:bart", {"config": dict(draw.SMALL)})


def test_a_decoder_only_type_is_no_seq2seq_draw():
    with pytest.raises(ValueError, match="encoder-decoder"):
        draw.hf_task_builder("s2s", "llama", dict(draw.SMALL))()
