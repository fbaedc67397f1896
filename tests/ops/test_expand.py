"""Expand and Tile: gradients summed over broadcast / repeated copies, ONNX and TFLite, re-batching,
refusal of a Tile whose output is not whole copies, the onnx package's expand and repeat models."""
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from memplan_cli.loaders import load_model
from devtools.modelgen import ModelBuilder
from tests.ops.gradcheck import check_gradients, check_verify, onnx_model, save


def _ints(name, v):
    return helper.make_node("Constant", [], [name], value=helper.make_tensor(name, TensorProto.INT64, [len(v)], v))


def _model(op, arg, out):
    nodes = [helper.make_node("Add", ["x", "p"], ["a"]), _ints("k", arg),
             helper.make_node(op, ["a", "k"], ["t"]),
             helper.make_node("MatMul", ["t", "w"], ["y"])]
    inits = {"p": np.ones((1, 3), np.float32), "w": np.ones((out[-1], 2), np.float32)}
    return onnx_model(nodes, [("x", (2, 1, 3))], [("y", tuple(out[:-1]) + (2,))], inits)


@pytest.mark.parametrize("op,arg,out", [("Expand", [2, 4, 3], (2, 4, 3)), ("Expand", [3, 1, 1, 1], (3, 2, 1, 3)),
                                        ("Tile", [1, 3, 2], (2, 3, 6)), ("Tile", [2, 1, 1], (4, 1, 3))])
def test_gradients_and_verify(tmp_path, op, arg, out):
    p = save(tmp_path, _model(op, arg, out))
    g = load_model(p)
    o = next(o for o in g.operations if o.type == op)
    assert len(o.inputs) == 1
    assert check_gradients(p) >= 12
    check_verify(p)


def test_rebatch(tmp_path):
    m = _model("Tile", [1, 3, 2], (2, 3, 6))
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    p = save(tmp_path, m)
    g = load_model(p, batch_size=5)
    assert next(o for o in g.operands if o.name == "t").shape == (5, 3, 6)
    check_verify(p, "-b", "3")


def test_tflite_tile_and_broadcast_to(tmp_path):
    m = ModelBuilder()
    x = m.input([2, 1, 3])
    a = m.add(x, m.const([1, 3]))
    t = m._op(69, [a, m.const([3], "int32", np.array([1, 2, 1], np.int32))], [2, 2, 3])
    b = m._op(130, [t, m.const([3], "int32", np.array([2, 2, 3], np.int32))], [2, 2, 3])
    m.output(m.fully_connected(m.reshape(b, [2, 6]), 4))
    p = m.save(str(tmp_path / "m.tflite"))
    types = {op.source_type: op.type for op in load_model(p).operations}
    assert types["TILE"] == "Tile" and types["BROADCAST_TO"] == "Expand"
    assert check_gradients(p) >= 12
    check_verify(p, "-b", "2")


def test_onnx_package_models():
    base = os.path.join(os.path.dirname(onnx.__file__), "backend/test/data")
    for m in ("pytorch-operator/test_operator_repeat", "pytorch-operator/test_operator_repeat_dim_overflow"):
        check_verify(os.path.join(base, m, "model.onnx"), "-O", "sgd")
