"""ops/lrn.py: ONNX LRN (the zoo's AlexNet / Inception-v1 / ZFNet) and TFLite
LOCAL_RESPONSE_NORMALIZATION: forward against the operator's definition, gradients by finite differences,
what backward keeps, verify."""
import numpy as np
import pytest
from onnx import helper

from devtools.modelgen import ModelBuilder
from memplan_cli.loaders import load_model
from tests.ops.gradcheck import check_gradients, check_verify, onnx_model, run_forward, save, training_graph


def _model(size, alpha=0.02, beta=0.75, bias=1.5, C=5):
    # x -> Add(p) -> LRN -> Mul(q) -> y: p's gradient flows through LRN's calcDerivative
    nodes = [helper.make_node("Add", ["x", "p"], ["a"]),
             helper.make_node("LRN", ["a"], ["l"], size=size, alpha=alpha, beta=beta, bias=bias),
             helper.make_node("Mul", ["l", "q"], ["y"])]
    inits = {"p": np.linspace(-1, 1, C * 3).reshape(1, C, 3, 1).astype(np.float32),
             "q": np.linspace(0.5, 2, C).reshape(1, C, 1, 1).astype(np.float32)}
    return onnx_model(nodes, [("x", (2, C, 3, 2))], [("y", (2, C, 3, 2))], inits)


@pytest.mark.parametrize("size", [1, 2, 3, 5])
def test_forward_matches_the_onnx_reference(tmp_path, size):
    # the operator's definition, channel by channel (onnx.reference's LRN loops over the batch axis
    # instead of the channels: not an oracle)
    xv = np.random.default_rng(size).normal(size=(2, 5, 3, 2)).astype(np.float64)
    want = np.empty_like(xv)
    lo, hi = (size - 1) // 2, -(-(size - 1) // 2)
    for c in range(5):
        sq = np.sum(xv[:, max(0, c - lo):min(5, c + hi + 1)] ** 2, axis=1)
        want[:, c] = xv[:, c] / (1.5 + 0.02 / size * sq) ** 0.75
    g = load_model(save(tmp_path, _model(size)))
    op = next(o for o in g.operations if o.type == "LRN")
    got = run_forward(op, [xv], [xv.shape])[0]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("size", [1, 2, 3, 5])
def test_gradients_keep_x_only_and_verify(tmp_path, size):
    p = save(tmp_path, _model(size))
    tg = training_graph(p)
    k = next(o.index for o in tg.graph.operations if o.type == "LRN")
    assert [tg.graph.operands[i].name for i in tg.rules[k].kept_forward()] == ["a"]
    assert check_gradients(p) >= 15
    check_verify(p, "-b", "2")
    check_verify(p, "-b", "2", "-O", "adam")


def test_tflite_local_response_normalization(tmp_path):
    from circle_schema.v0_10.circle.BuiltinOptions import BuiltinOptions
    from circle_schema.v0_10.circle.LocalResponseNormalizationOptions import LocalResponseNormalizationOptionsT

    m = ModelBuilder(seed=2)
    x = m.input([2, 4, 4, 6])
    h = m.conv2d(x, 6, 3)
    o = LocalResponseNormalizationOptionsT()
    o.radius, o.bias, o.alpha, o.beta = 2, 1.0, 0.01, 0.75
    y = m._op(13, [h], [2, 4, 4, 6], BuiltinOptions.LocalResponseNormalizationOptions, o)
    m.output(m.fully_connected(m.reshape(y, [2, 96]), 3))
    p = m.save(str(tmp_path / "l.tflite"))
    op = next(o for o in load_model(p).operations if o.type == "LRN")
    assert (op.attrs["lo"], op.attrs["hi"], op.attrs["axis"]) == (2, 2, -1)
    assert check_gradients(p) >= 24
    check_verify(p, "-b", "2")


def test_onert_refuses_it(tmp_path):
    from click.testing import CliRunner

    from memplan_cli.cli import main

    r = CliRunner().invoke(main, ["analyze", save(tmp_path, _model(3)), "-p", "onert"])
    assert r.exit_code == 2 and "LRN" in r.stderr
