"""InstanceNormalization (torch InstanceNorm / GroupNorm exports): gradients by finite differences,
verify, what backward keeps, refusals."""
import numpy as np
from onnx import helper

from memplan_cli.errors import ModelError
from memplan_cli.loaders import load_model
from tests.ops.gradcheck import check_gradients, check_verify, onnx_model, save, training_graph

X = (2, 3, 4, 5)


def _model(x=X, cshape=None):
    # x + p -> InstanceNormalization(scale, bias) -> * q: p's gradient flows through calcDerivative
    rng = np.random.default_rng(1)
    c = x[1]
    inits = {"p": rng.normal(size=x[1:]).astype(np.float32), "q": rng.normal(size=x[1:]).astype(np.float32),
             "scale": rng.uniform(0.5, 1.5, cshape or (c,)).astype(np.float32),
             "bias": rng.normal(size=cshape or (c,)).astype(np.float32)}
    nodes = [helper.make_node("Add", ["x", "p"], ["a"]),
             helper.make_node("InstanceNormalization", ["a", "scale", "bias"], ["n"], epsilon=1e-5),
             helper.make_node("Mul", ["n", "q"], ["y"])]
    return onnx_model(nodes, [("x", x)], [("y", x)], inits)


def test_gradients_and_verify(tmp_path):
    p = save(tmp_path, _model())
    assert load_model(p).operations[1].type == "InstanceNormalization"
    assert check_gradients(p) >= 30
    check_verify(p, "-b", "2")
    p1 = save(tmp_path, _model((2, 4, 6)), "m1.onnx")  # 1-D spatial (wav2vec2's GroupNorm)
    assert check_gradients(p1) >= 20
    check_verify(p1, "-b", "3")


def test_backward_keeps_x_scale_and_two_floats_per_row(tmp_path):
    tg = training_graph(save(tmp_path, _model()))
    k = next(o.index for o in tg.graph.operations if o.type == "InstanceNormalization")
    kept = sorted(tg.graph.operands[i].name for i in tg.rules[k].kept_forward())
    assert kept == ["a", "scale"]
    assert [tuple(e.shape) for e in tg.rules[k].extras] == [(2, 3), (2, 3)]


def test_a_scale_that_is_not_per_channel_is_refused(tmp_path):
    p = save(tmp_path, _model(cshape=(4,)))
    try:
        load_model(p)
    except ModelError as e:
        assert "one value per channel" in str(e)
    else:
        raise AssertionError("loaded")
