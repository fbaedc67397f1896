"""A broadcast folded into a constant holds only the values it repeats (`Policy.broadcast_views`):
DeBERTa's relative-position indices, clamped then expanded to batch x heads x seq², are a stride-0
view of their seq² values in the own plan, as PyTorch's `expand`; kernels read the view correctly
(gradients by finite differences and a verified step with real indices, against the same step with
the broadcast's own bytes)."""
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

from memplan_cli.analysis import analyze_graph
from memplan_cli.config import TrainConfig
from memplan_cli.ir.graph import broadcasts_to
from memplan_cli.loaders import load_model
from memplan_cli.passes.policy import Policy
from memplan_cli.verification import verify_analysis
from tests.ops.gradcheck import check_gradients, check_verify, onnx_model, save

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
B, H, S, D = 2, 4, 32, 8  # B x H x S x S = 8192 indices: more than the ONNX loader folds itself


def _rel_gather(tmp_path, source=(1, S, S)):
    """Add(x, p) -> MatMul(., w): scores [B, H, S, S]; GatherElements along the last axis with
    indices Clip(pos) expanded to [B, H, S, S] (DeBERTa's c2p term); MatMul to the output."""
    pos = np.arange(int(np.prod(source)), dtype=np.int64).reshape(source) % S
    nodes = [helper.make_node("Add", ["x", "p"], ["a"]),
             helper.make_node("MatMul", ["a", "w"], ["s"]),
             helper.make_node("Constant", [], ["lo"], value=helper.make_tensor("lo", TensorProto.INT64, [], [0])),
             helper.make_node("Constant", [], ["hi"], value=helper.make_tensor("hi", TensorProto.INT64, [], [S - 1])),
             helper.make_node("Clip", ["pos", "lo", "hi"], ["c"]),
             helper.make_node("Constant", [], ["shape"],
                              value=helper.make_tensor("shape", TensorProto.INT64, [4], [B, H, S, S])),
             helper.make_node("Expand", ["c", "shape"], ["idx"]),
             helper.make_node("GatherElements", ["s", "idx"], ["g"], axis=3),
             helper.make_node("MatMul", ["g", "v"], ["y"])]
    inits = {"p": np.ones(D, np.float32), "w": np.ones((D, S), np.float32), "v": np.ones((S, 2), np.float32),
             "pos": pos}
    return save(tmp_path, onnx_model(nodes, [("x", (B, H, S, D))], [("y", (B, H, S, 2))], inits))


def _index(g):
    return next(g.operands[op.inputs[1]] for op in g.operations if op.type == "GatherElements")


def test_a_folded_broadcast_records_the_values_it_repeats(tmp_path):
    g = load_model(_rel_gather(tmp_path))
    idx = _index(g)
    assert idx.is_const and idx.shape == (B, H, S, S) and idx.broadcast_of == (1, S, S)
    assert not any(op.type == "Expand" for op in g.operations)


def test_the_own_plan_holds_the_source_bytes_and_baseline_the_broadcasts(tmp_path):
    g = load_model(_rel_gather(tmp_path))
    cfg = TrainConfig(batch_size=B, optimizer="sgd", loss="mse")
    on = analyze_graph(g, cfg)
    off = analyze_graph(g, cfg, profile_options={"broadcast_views": False})
    size_on, size_off = (next(b.size for b in a.buffers.buffers if b.name == "idx") for a in (on, off))
    assert size_on == S * S * 8 and size_off == B * H * S * S * 8
    # the index is held the whole step: the arena shrinks by exactly the bytes no longer held
    assert sum(p.plan.arena for p in off.pools) - sum(p.plan.arena for p in on.pools) == size_off - size_on
    # naive is every tensor its whole shape, no views: the same either way, the view counts as saved
    assert on.buffers.naive_total() == off.buffers.naive_total()
    assert on.buffers.folded_total() - off.buffers.folded_total() == size_off - size_on


def test_kernels_read_the_broadcast_view(tmp_path):
    """Real (non-zero) indices: the gradients match finite differences under memplan's rules (the
    view) and with every rule off (the broadcast's own bytes), and the step run in the arena with the
    view updates every weight exactly as the step with the materialised broadcast."""
    p = _rel_gather(tmp_path)
    src = (np.arange(S * S, dtype=np.int64).reshape(1, S, S) * 7) % S
    check_gradients(p, feeds={"idx": src})
    check_verify(p)
    g = load_model(p)
    cfg = TrainConfig(batch_size=B, optimizer="adam", loss="mse")
    runs = []
    for opts, feed in (({}, src), ({"broadcast_views": False}, np.broadcast_to(src, (B, H, S, S)))):
        a = analyze_graph(g, cfg, profile_options=opts)
        r = verify_analysis(a, feeds={"idx": np.array(feed)}).result
        assert r.passed, r.message
        runs.append(r)
    assert runs[0].loss == runs[1].loss and runs[0].updated.keys() == runs[1].updated.keys()
    for k in runs[0].updated:
        assert np.array_equal(runs[0].updated[k], runs[1].updated[k]), k


def test_a_broadcast_of_a_parameter_is_not_a_view(tmp_path):
    """A float parameter expanded is not folded (it would train a copy): no broadcast constant."""
    nodes = [helper.make_node("Constant", [], ["shape"], value=helper.make_tensor("shape", TensorProto.INT64, [2],
                                                                                    [64, 80])),
             helper.make_node("Expand", ["t", "shape"], ["e"]),
             helper.make_node("Add", ["x", "e"], ["y"])]
    p = save(tmp_path, onnx_model(nodes, [("x", (64, 80))], [("y", (64, 80))], {"t": np.ones((1, 80), np.float32)}))
    g = load_model(p)
    assert any(op.type == "Expand" for op in g.operations)
    assert not any(o.broadcast_of for o in g.operands)


def test_the_report_names_the_views_and_the_recomputes():
    """`analyze` names what the own plan does that eager does not: the broadcast constants held as
    their values (and the bytes that saves), the forward results recomputed before backward (and
    the FLOPs that adds); the JSON report validates."""
    import json

    import jsonschema
    from click.testing import CliRunner

    from memplan_cli.cli import main
    from memplan_cli.schemas import load_schema

    p = str(CORPUS / "deberta_tiny_ts.onnx")
    r = CliRunner().invoke(main, ["analyze", p, "-b", "2", "-O", "adam", "-l", "cce", "-f", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    jsonschema.validate(doc, load_schema("analysis"))
    bv, rec = doc["figures"]["broadcast_views"], doc["figures"]["recomputed"]
    assert len(bv["constants"]) == 2 and bv["saved"] == 2 * (4 - 1) * 64 * 64 * 8
    assert any("Gelu" in n for n in rec["results"]) and rec["flops"] > 0
    assert 0 < rec["share"] < 0.05
    r = CliRunner().invoke(main, ["analyze", p, "-b", "2", "-O", "adam", "-l", "cce"], env={"COLUMNS": "200"})
    text = r.output
    assert f"recomputed before backward instead of kept: {len(rec['results'])} forward result(s)" in text
    assert "broadcast views: 2 constant(s) folded from a broadcast hold only the values they repeat (192.00 KiB less)" in text
    # with both rules off: no such figures, no such lines
    a = analyze_graph(load_model(p, batch_size=2), TrainConfig(batch_size=2, optimizer="adam", loss="cce"),
                      profile_options={"broadcast_views": False, "cheap_recompute": False})
    assert "broadcast_views" not in a.extras and "recomputed" not in a.extras


def test_a_real_deberta_export():
    """TorchScript's DeBERTa-v2 (tests/corpus): the c2p / p2c indices, clamped relative positions
    expanded to batch x heads x seq², are held as their seq² values, and the step verifies."""
    p = str(CORPUS / "deberta_tiny_ts.onnx")
    g = load_model(p, batch_size=2)
    folded = [o for o in g.operands if o.broadcast_of is not None]
    assert [(o.shape, o.dtype, o.broadcast_of) for o in folded] == [((4, 64, 64), "int64", (1, 64, 64))] * 2
    cfg = TrainConfig(batch_size=2, optimizer="adam", loss="cce")
    on, off = analyze_graph(g, cfg), analyze_graph(g, cfg, profile_options={"broadcast_views": False})
    arena = [sum(q.plan.arena for q in a.pools) for a in (on, off)]
    assert arena[1] - arena[0] == 2 * (4 - 1) * 64 * 64 * 8  # held the whole step: every byte counts
    r = verify_analysis(on).result
    assert r.passed and r.loss[0] == r.loss[1], r.message


@pytest.mark.parametrize("src,dst,ok", [((1, 4), (3, 4), True), ((4,), (2, 3, 4), True), ((3, 1), (3, 5), True),
                                        ((3, 4), (3, 4), False), ((2, 4), (3, 4), False),
                                        ((1, 2, 4), (2, 4), False)])
def test_broadcasts_to(src, dst, ok):
    assert broadcasts_to(src, dst) is ok


def test_the_baseline_and_singa_hold_the_broadcast():
    from memplan_cli.profiles import singa

    assert Policy().broadcast_views and not Policy.baseline().broadcast_views
    assert not singa.policy().broadcast_views
