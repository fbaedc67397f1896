"""Softmax / LogSoftmax on any axis: opset 13's one axis, the older opsets' coercion to 2-D at
`axis` (default 1), TFLite SOFTMAX (beta) and LOG_SOFTMAX; gradients, verify, the pytorch-converted
models, and that backward keeps Y only."""
import os

import numpy as np
import onnx
import pytest
from onnx import helper

from memplan_cli.loaders import load_model
from devtools.modelgen import ModelBuilder
from tests.ops.gradcheck import check_gradients, check_verify, onnx_model, save, training_graph


def _model(op, opset, **attrs):
    nodes = [helper.make_node("Add", ["x", "p"], ["a"]), helper.make_node(op, ["a"], ["s"], **attrs),
             helper.make_node("Mul", ["s", "q"], ["y"])]
    inits = {"p": np.ones((3, 4, 5), np.float32), "q": np.ones((3, 4, 5), np.float32)}
    return onnx_model(nodes, [("x", (2, 3, 4, 5))], [("y", (2, 3, 4, 5))], inits, opset=opset)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("opset,attrs,axes", [(13, {}, (3,)), (13, {"axis": 1}, (1,)), (11, {}, (1, 2, 3)),
                                              (11, {"axis": 2}, (2, 3)), (11, {"axis": -1}, (3,))])
def test_axes_gradients_and_verify(tmp_path, op, opset, attrs, axes):
    p = save(tmp_path, _model(op, opset, **attrs))
    s = next(o for o in load_model(p).operations if o.type == op)
    assert s.attrs["axes"] == axes
    assert check_gradients(p) >= 24
    check_verify(p, "-b", "2")


def test_opset_11_softmax_normalises_the_coerced_rows(tmp_path):
    from memplan_cli.execute.executor import _Inputs
    from tests.execute.helpers import run_backward

    tg = training_graph(save(tmp_path, _model("Softmax", 11, axis=2)))
    mem = run_backward(tg, {}, backward=False)
    s = np.asarray(mem.view(next(t.id for t in tg.tensors if t.name == "s")))
    np.testing.assert_allclose(s.sum(axis=(2, 3)), 1.0)
    assert not np.allclose(s.sum(axis=3), 1.0)
    assert _Inputs  # the harness's source of values


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_backward_keeps_the_output_only(tmp_path, op):
    tg = training_graph(save(tmp_path, _model(op, 13)))
    k = next(o.index for o in tg.graph.operations if o.type == op)
    assert [tg.graph.operands[v].name for v in tg.rules[k].kept_forward()] == ["s"]


def test_pytorch_converted():
    base = os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/pytorch-converted")
    for m in ("test_Softmax", "test_LogSoftmax", "test_softmax_functional_dim3", "test_log_softmax_dim3",
              "test_log_softmax_lastdim", "test_softmax_lastdim"):
        check_verify(os.path.join(base, m, "model.onnx"), "-O", "sgd")


def test_tflite_softmax_beta_and_log_softmax(tmp_path):
    m = ModelBuilder()
    x = m.input([2, 6])
    a = m.add(x, m.const([6]))
    s = m.softmax(a, beta=0.5)
    ls = m._op(50, [s], [2, 6])
    m.output(m.fully_connected(ls, 3))
    p = m.save(str(tmp_path / "m.tflite"))
    types = {o.source_type: (o.type, o.attrs) for o in load_model(p).operations}
    assert types["SOFTMAX"] == ("Softmax", {"beta": 0.5}) and types["LOG_SOFTMAX"][0] == "LogSoftmax"
    assert check_gradients(p) >= 12
    check_verify(p, "-b", "3")
