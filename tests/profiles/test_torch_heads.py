"""The torch profile on models with several outputs (a question-answering head's start and end
logits, two vocabulary-sized heads): `-l cce` puts one cross-entropy on each output and sums them, as
`loss = ce(a, ya) + ce(b, yb)` does in eager. Measured with torch 2.14 on one thread
(devtools/torch_family_zoo.py fam_heads_wide fam_heads_span fam_heads_apart -b 4 -O adam, both
exporters: the profile within 4 B of the allocator's peak; docs/torchprof.md "Heads with several
outputs")."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import helper  # noqa: E402

from memplan_cli.analysis import analyze  # noqa: E402
from memplan_cli.config import TrainConfig  # noqa: E402
from tests.ops.gradcheck import onnx_model, save  # noqa: E402

B, S, D, C = 4, 32, 64, 512


def _two_heads(tmp_path, classes=(C, C)):
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("MatMul", ["h", "wa"], ["a"]),
             helper.make_node("MatMul", ["h", "wb"], ["b"])]
    inits = {"w": np.zeros((D, D), np.float32), "wa": np.zeros((D, classes[0]), np.float32),
             "wb": np.zeros((D, classes[1]), np.float32)}
    return save(tmp_path, onnx_model(nodes, [("x", (B, S, D))], [("a", (B, S, classes[0])),
                                                                    ("b", (B, S, classes[1]))], inits))


def _torch(path):
    return analyze(path, TrainConfig(loss="cce", optimizer="adam", batch_size=B), profile="torch")


def test_each_output_keeps_its_own_log_softmax_and_int64_labels(tmp_path):
    a = _torch(_two_heads(tmp_path, (C, 256)))
    bufs = a.buffers.buffers
    ls = sorted(b.size for b in bufs if b.name.endswith(":log_softmax"))
    assert ls == [B * S * 256 * 4, B * S * C * 4]
    # a class label per row (int64), not a float tensor of the output's shape
    assert sorted(b.size for b in bufs if b.name == "label") == [B * S * 8, B * S * 8]
    grads = {b.name: b.size for b in bufs if b.name in ("a:grad", "b:grad")}
    assert grads == {"a:grad": B * S * C * 4, "b:grad": B * S * 256 * 4}
    assert {"wa:grad", "wb:grad"} <= {b.name for b in bufs}


def test_the_last_output_s_loss_runs_backward_first_each_in_its_own_step(tmp_path):
    bufs = _torch(_two_heads(tmp_path)).buffers.buffers
    nll = [b for b in bufs if b.name.endswith(":nll_grad")]
    assert len(nll) == 2 and nll[0].last < nll[1].first  # nll_loss's gradient freed before the next one
    ga, gb = (next(b for b in bufs if b.name == n) for n in ("a:grad", "b:grad"))
    assert gb.first < ga.first  # autograd runs the loss made last first (higher sequence number)
    ls = sorted((b for b in bufs if b.name.endswith(":log_softmax")), key=lambda b: b.last)
    assert ls[0].last < ls[1].last  # each output's saved log_softmax freed by its own backward


def test_under_autocast_each_output_gets_its_float32_loss_copies(tmp_path):
    # bf16-mixed: each output's loss computes on a float32 copy of its bfloat16 logits, and its
    # log_softmax gradient is float32 before the cast back (autocast.py), once per output
    a = analyze(_two_heads(tmp_path), TrainConfig(loss="cce", optimizer="adam", batch_size=B,
                                                  precision="bf16-mixed"), profile="torch")
    bufs = a.buffers.buffers
    assert len([b for b in bufs if b.name.endswith(":logits_fp32")]) == 2
    fp32 = [b for b in bufs if b.name.endswith(":log_softmax_grad")]
    assert len(fp32) == 2 and all(b.size == B * S * C * 4 for b in fp32)
