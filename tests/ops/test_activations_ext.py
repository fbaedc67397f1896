"""Erf, Gelu, HardSigmoid, HardSwish, LeakyRelu, Elu, Selu, Softplus, Softsign, Mish and PRelu:
forward against closed forms, gradients by finite differences on inputs that cross every branch,
what backward keeps (X or Y), verify, TFLite builtins and the pytorch-converted models."""
import math
import os

import numpy as np
import onnx
import pytest
from onnx import helper

from memplan_cli.errors import ModelError
from memplan_cli.loaders import load_model
from memplan_cli.ops._pointwise import erf
from devtools.modelgen import ModelBuilder
from tests.execute.helpers import run_backward
from tests.ops.gradcheck import check_gradients, check_verify, onnx_model, save, training_graph

SHAPE = (2, 3, 4, 5)
# x spans [-5, 5): every branch (HardSwish's +-3, HardSigmoid's +-2.5, the negative side) is crossed
X = np.linspace(-5, 4.9, int(np.prod(SHAPE))).reshape(SHAPE) + 0.0123


def _model(op, opset=20, **attrs):
    nodes = [helper.make_node("Add", ["x", "p"], ["a"]), helper.make_node(op, ["a"], ["s"], **attrs),
             helper.make_node("Mul", ["s", "q"], ["y"])]
    inits = {"p": np.zeros(SHAPE[1:], np.float32), "q": np.ones(SHAPE[1:], np.float32)}
    return onnx_model(nodes, [("x", SHAPE)], [("y", SHAPE)], inits, opset=opset)


def _sig(x):
    return 1 / (1 + np.exp(-x))


Phi = np.vectorize(lambda v: 0.5 * (1 + math.erf(v / math.sqrt(2))))
REF = {
    "Erf": ({}, np.vectorize(math.erf), "a"),
    "Gelu": ({}, lambda x: x * Phi(x), "a"),
    "GeluTanh": ({"approximate": "tanh"},
                 lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))), "a"),
    "HardSigmoid": ({"alpha": 0.25, "beta": 0.375}, lambda x: np.clip(0.25 * x + 0.375, 0, 1), "s"),
    "HardSwish": ({}, lambda x: x * np.clip(x + 3, 0, 6) / 6, "a"),
    "LeakyRelu": ({"alpha": 0.125}, lambda x: np.where(x > 0, x, 0.125 * x), "s"),
    "LeakyReluNeg": ({"alpha": -0.5}, lambda x: np.where(x > 0, x, -0.5 * x), "a"),
    "Elu": ({"alpha": 2.0}, lambda x: np.where(x > 0, x, 2 * (np.exp(x) - 1)), "s"),
    "Selu": ({}, lambda x: 1.0507009873554805 * np.where(x > 0, x, 1.6732632423543772 * (np.exp(x) - 1)), "s"),
    "Softplus": ({}, lambda x: np.log1p(np.exp(x)), "s"),
    "Softsign": ({}, lambda x: x / (1 + np.abs(x)), "s"),
    "Mish": ({}, lambda x: x * np.tanh(np.log1p(np.exp(x))), "a"),
}


def _op(name):
    return {"GeluTanh": "Gelu", "LeakyReluNeg": "LeakyRelu"}.get(name, name)


def _forward(tg, names):
    mem = run_backward(tg, {next(t.id for t in tg.tensors if t.name == "x"): X.copy()}, backward=False)
    return {t.name: np.asarray(mem.view(t.id)) for t in tg.tensors if t.name in names}


@pytest.mark.parametrize("name", sorted(REF))
def test_forward_gradients_keeps_and_verify(tmp_path, name):
    attrs, ref, kept = REF[name]
    op = _op(name)
    p = save(tmp_path, _model(op, **attrs))
    tg = training_graph(p)
    v = _forward(tg, ("a", "s"))
    np.testing.assert_allclose(v["s"], ref(v["a"]), rtol=1e-9, atol=1e-12)
    k = next(o.index for o in tg.graph.operations if o.type == op)
    assert [tg.graph.operands[i].name for i in tg.rules[k].kept_forward()] == [kept]
    assert check_gradients(p, feeds={"x": X}) >= 24
    check_verify(p, "-b", "2")


def test_erf_matches_math_erf():
    xs = np.linspace(-9, 9, 40001)
    assert np.max(np.abs(erf(xs) - np.vectorize(math.erf)(xs))) < 5e-15
    assert erf(np.float32([0.5])).dtype == np.float32


def test_output_kept_ops_may_run_in_place(tmp_path):
    tg = training_graph(save(tmp_path, _model("Elu")))
    k = next(o.index for o in tg.graph.operations if o.type == "Elu")
    assert [tuple(p[0]) for p in tg.rules[k].inplace] == [("bp", tg.graph.operations[k].outputs[0]),
                                                          ("fwd", tg.graph.operations[k].inputs[0])]


def test_bad_attributes_are_refused(tmp_path):
    with pytest.raises(ModelError, match="approximate"):
        load_model(save(tmp_path, _model("Gelu", approximate="fast")))
    with pytest.raises(ModelError, match="alpha"):
        load_model(save(tmp_path, _model("Elu", alpha=-1.0)))


@pytest.mark.parametrize("slope_shape", [(1,), (5,), (3, 1, 1), (3, 4, 5)])
def test_prelu_learned_slope(tmp_path, slope_shape):
    nodes = [helper.make_node("Add", ["x", "p"], ["a"]), helper.make_node("PRelu", ["a", "slope"], ["s"]),
             helper.make_node("Mul", ["s", "q"], ["y"])]
    inits = {"p": np.zeros(SHAPE[1:], np.float32), "slope": np.full(slope_shape, 0.25, np.float32),
             "q": np.ones(SHAPE[1:], np.float32)}
    p = save(tmp_path, onnx_model(nodes, [("x", SHAPE)], [("y", SHAPE)], inits, opset=16))
    tg = training_graph(p)
    assert "slope" in {tg.graph.operands[o].name for o in tg.grad}
    assert check_gradients(p, feeds={"x": X}) >= 24
    check_verify(p, "-b", "2")


def test_pytorch_converted():
    base = os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/pytorch-converted")
    for m in ("test_ELU", "test_LeakyReLU", "test_LeakyReLU_with_negval", "test_SELU", "test_Softplus",
              "test_PReLU_1d", "test_PReLU_1d_multiparam", "test_PReLU_2d",
              "test_PReLU_2d_multiparam", "test_PReLU_3d", "test_PReLU_3d_multiparam"):
        check_verify(os.path.join(base, m, "model.onnx"), "-O", "sgd")


def test_tflite_builtins(tmp_path):
    from circle_schema.v0_10.circle.BuiltinOptions import BuiltinOptions
    from circle_schema.v0_10.circle.LeakyReluOptions import LeakyReluOptionsT

    m = ModelBuilder()
    x = m.input([2, 6])
    a = m.add(x, m.const([6]))
    h = m._op(117, [a], [2, 6])  # HARD_SWISH
    o = LeakyReluOptionsT()
    o.alpha = 0.2
    lk = m._op(98, [h], [2, 6], BuiltinOptions.LeakyReluOptions, o)  # LEAKY_RELU
    pr = m._op(54, [lk, m.const([6])], [2, 6])  # PRELU: a learned slope per feature
    el = m._op(111, [pr], [2, 6])  # ELU
    m.output(m.fully_connected(el, 3))
    p = m.save(str(tmp_path / "m.tflite"))
    types = {op.source_type: (op.type, op.attrs) for op in load_model(p).operations}
    assert types["HARD_SWISH"][0] == "HardSwish" and types["LEAKY_RELU"] == ("LeakyRelu", {"alpha": pytest.approx(0.2)})
    assert types["PRELU"][0] == "PRelu" and types["ELU"][0] == "Elu"
    assert check_gradients(p) >= 24
    check_verify(p, "-b", "3")


def test_tflite_flex_erf_is_erf(tmp_path):
    """onnx2tf writes torch's exact GELU (x * (1 + erf(x / sqrt 2)) / 2) with TensorFlow's Erf kept as
    a Select TF op: custom code "FlexErf" (TF Lite has no ERF builtin). It is Erf."""
    from tests.loaders import fbmodels as fb

    t = [fb.tensor("x", [2, 6]), fb.tensor("e", [2, 6]), fb.tensor("w", [3, 6], data="fill"),
         fb.tensor("b", [3], data="fill"), fb.tensor("y", [2, 3])]
    ops = [fb.op("FlexErf", [0], [1]), fb.op(fb.OPS.FULLY_CONNECTED, [1, 2, 3], [4], fb.fc_opts(),
                                            fb.BO.FullyConnectedOptions)]
    p = fb.write(tmp_path, "m.tflite", fb.build(t, ops, [0], [4], fmt="tflite"))
    assert [op.type for op in load_model(p).operations] == ["Erf", "FullyConnected"]
    assert check_gradients(p) >= 6
    check_verify(p, "-b", "3")
