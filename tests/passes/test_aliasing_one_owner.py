"""Aliasing: two outputs of one backward step never both take over dY's memory. A Mul's dA that is a
contribution (its operand has two readers: accumulated at this very step, so it dies here) took dY;
dB must then get its own bytes (HF RWKV's WKV recurrence: verify failed before)."""
import numpy as np
from onnx import helper

from memplan_cli.config import TrainConfig
from memplan_cli.loaders import load_model
from memplan_cli.passes.pipeline import build_training_graph
from tests.ops.gradcheck import check_gradients, check_verify, onnx_model, save


def _model():
    # a = x + p; e = Exp(a); g = Sigmoid(a); m = e * g; y = m + e  (e has two readers)
    nodes = [helper.make_node("Add", ["x", "p"], ["a"]), helper.make_node("Exp", ["a"], ["e"]),
             helper.make_node("Sigmoid", ["a"], ["g"]), helper.make_node("Mul", ["e", "g"], ["m"]),
             helper.make_node("Add", ["m", "e"], ["y"])]
    inits = {"p": np.linspace(-1, 1, 6).reshape(2, 3).astype(np.float32)}
    return onnx_model(nodes, [("x", (2, 3))], [("y", (2, 3))], inits)


def test_one_step_writes_at_most_one_output_over_dy(tmp_path):
    p = save(tmp_path, _model())
    tg = build_training_graph(load_model(p), TrainConfig())
    for s in tg.steps:
        roots = [tg.root(t) for t in s.writes]
        assert len(roots) == len(set(roots)), [tg.tensors[t].name for t in s.writes]
    assert check_gradients(p) >= 6
    check_verify(p, "-b", "2")
