"""Squeeze, Unsqueeze, Identity: axes as attributes (opset < 13) and inputs (13+), no axes, TFLite
SQUEEZE / EXPAND_DIMS; the output is a view of the input under memplan's policy, a copy under onert's."""
import numpy as np
import pytest
from onnx import TensorProto, helper

from memplan_cli.errors import ModelError
from memplan_cli.loaders import load_model
from memplan_cli.passes.policy import Policy
from devtools.modelgen import ModelBuilder
from tests.ops.gradcheck import check_gradients, check_verify, onnx_model, save, training_graph


def _axes(name, v):
    return helper.make_node("Constant", [], [name], value=helper.make_tensor(name, TensorProto.INT64, [len(v)], v))


def _model(opset, with_axes=True):
    # x[2,1,3] -> Add -> Squeeze(1) -> Unsqueeze(0, 3) -> Identity -> MatMul
    nodes = [helper.make_node("Add", ["x", "p"], ["a"])]
    if opset < 13:
        kw = {"axes": [1]} if with_axes else {}
        nodes += [helper.make_node("Squeeze", ["a"], ["s"], **kw),
                  helper.make_node("Unsqueeze", ["s"], ["u"], axes=[0, -1])]
    else:
        nodes += [_axes("sa", [-2]), _axes("ua", [0, 3]),
                  helper.make_node("Squeeze", ["a", "sa"] if with_axes else ["a"], ["s"]),
                  helper.make_node("Unsqueeze", ["s", "ua"], ["u"])]
    nodes += [helper.make_node("Identity", ["u"], ["i"]),
              helper.make_node("Reshape", ["i", "rs"], ["r"]),
              helper.make_node("MatMul", ["r", "w"], ["y"])]
    inits = {"p": np.ones((1, 3), np.float32), "w": np.ones((3, 4), np.float32),
             "rs": np.array([2, 3], np.int64)}
    return onnx_model(nodes, [("x", (2, 1, 3))], [("y", (2, 4))], inits, opset=opset)


@pytest.mark.parametrize("opset,with_axes", [(11, True), (11, False), (13, True), (13, False)])
def test_loads_gradients_and_verify(tmp_path, opset, with_axes):
    p = save(tmp_path, _model(opset, with_axes))
    g = load_model(p)
    ops = {o.type: o for o in g.operations}
    assert ops["Squeeze"].attrs["axes"] == (1,) and ops["Unsqueeze"].attrs["axes"] == (0, 3)
    assert all(len(o.inputs) == 1 for o in g.operations if o.type in ("Squeeze", "Unsqueeze", "Identity"))
    assert check_gradients(p) >= 12
    check_verify(p)


def test_views_share_the_input_buffer_and_copies_do_not(tmp_path):
    p = save(tmp_path, _model(13))
    for policy, shared in ((Policy(), True), (Policy.baseline(), False)):
        tg = training_graph(p, policy)
        names = {t.name: t.id for t in tg.tensors}
        roots = {tg.root(names[n]) for n in ("a", "s", "u", "i")}
        assert (len(roots) == 1) is shared


def test_squeezing_a_dimension_that_is_not_one_is_refused(tmp_path):
    m = _model(11)
    m.graph.node[1].attribute[0].ints[:] = [2]
    with pytest.raises(ModelError):
        load_model(save(tmp_path, m))


def test_tflite_squeeze_and_expand_dims(tmp_path):
    from circle_schema.v0_10.circle.BuiltinOptions import BuiltinOptions
    from circle_schema.v0_10.circle.SqueezeOptions import SqueezeOptionsT

    m = ModelBuilder()
    x = m.input([2, 1, 3])
    a = m.add(x, m.const([1, 3]))
    o = SqueezeOptionsT()
    o.squeezeDims = [1]
    s = m._op(43, [a], [2, 3], BuiltinOptions.SqueezeOptions, o)
    e = m._op(70, [s, m.const([1], "int32", np.array([-1], np.int32))], [2, 3, 1])
    m.output(m.fully_connected(m.reshape(e, [2, 3]), 4))
    p = m.save(str(tmp_path / "m.tflite"))
    types = {op.source_type: (op.type, op.attrs.get("axes")) for op in load_model(p).operations}
    assert types["SQUEEZE"] == ("Squeeze", (1,)) and types["EXPAND_DIMS"] == ("Unsqueeze", (2,))
    assert check_gradients(p) >= 12
    check_verify(p, "-b", "3")
