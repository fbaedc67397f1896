"""Shape-computing ops (Shape, Size, ConstantOfShape, Range, comparisons, logic, Cast): they run
forward only and keep nothing; Cast float->float is differentiable; a run-time Slice end and a
position-embedding Range computed from the input's shape run through verify."""
import numpy as np
import pytest
from onnx import TensorProto, helper

from memplan_cli.errors import ModelError
from memplan_cli.loaders import load_model
from tests.ops.gradcheck import check_gradients, check_verify, onnx_model, save, training_graph


def _c(name, v, dtype=TensorProto.INT64, dims=None):
    v = list(v)
    return helper.make_node("Constant", [], [name], value=helper.make_tensor(name, dtype, [len(v)] if dims is None
                                                                               else dims, v))


def _dynamic(batch_dim="N"):
    """x[N,3,6] -> Add -> Slice(axis 2, 1 : -1) -> MatMul; positions Range(0, 3) -> Gather(pos table)
    added in; a mask from Shape / ConstantOfShape / comparisons / logic, cast to float. (Slice and
    Range parameters computed from Shape do not load: ONNX shape inference leaves their outputs'
    dims unknown.)"""
    nodes = [helper.make_node("Add", ["x", "p"], ["a"]),
             helper.make_node("Shape", ["a"], ["sh"]),
             _c("i2", [2], dims=[]), _c("i1", [1], dims=[]), _c("one", [1]), _c("zero", [0], dims=[]),
             _c("d1", [1], dims=[]), _c("ax", [2]),
             helper.make_node("Gather", ["sh", "i2"], ["n2"]),
             helper.make_node("Unsqueeze", ["n2", "zero1"], ["n2v"]),
             helper.make_node("Sub", ["n2v", "one"], ["end"]),
             helper.make_node("Slice", ["a", "one", "four", "ax"], ["s"]),  # [N,3,4]
             helper.make_node("Gather", ["sh", "i1"], ["n1"]),
             helper.make_node("Range", ["zero", "three", "d1"], ["pos"]),
             helper.make_node("Gather", ["pe", "pos"], ["pv"]),  # [3,4]
             helper.make_node("Add", ["s", "pv"], ["sp"]),
             helper.make_node("Shape", ["sp"], ["sh2"], start=1),
             helper.make_node("ConstantOfShape", ["sh2"], ["ones"],
                              value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0])),
             helper.make_node("Greater", ["ones", "half"], ["g"]),
             helper.make_node("Less", ["ones", "half"], ["l"]),
             helper.make_node("Equal", ["ones", "ones"], ["e"]),
             helper.make_node("Not", ["l"], ["nl"]),
             helper.make_node("And", ["g", "nl"], ["an"]),
             helper.make_node("Or", ["an", "e"], ["m"]),
             helper.make_node("Cast", ["m"], ["mf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["sp", "mf"], ["spm"]),
             helper.make_node("Cast", ["spm"], ["d"], to=TensorProto.DOUBLE),
             helper.make_node("Cast", ["d"], ["f"], to=TensorProto.FLOAT),
             helper.make_node("MatMul", ["f", "w"], ["y"])]
    inits = {"p": np.ones((3, 6), np.float32), "pe": np.ones((5, 4), np.float32), "w": np.ones((4, 2), np.float32),
             "half": np.array([0.5], np.float32), "four": np.array([-1], np.int64), "three": np.array(3, np.int64), "zero1": np.array([0], np.int64)}
    m = onnx_model(nodes, [("x", (2, 3, 6))], [("y", (2, 3, 2))], inits)
    if batch_dim:
        m.graph.input[0].type.tensor_type.shape.dim[0].dim_param = batch_dim
        m.graph.output[0].type.tensor_type.shape.dim[0].dim_param = batch_dim
    return m


def test_loads_with_shapes_resolved(tmp_path):
    g = load_model(save(tmp_path, _dynamic()), batch_size=2)
    sl = next(o for o in g.operations if o.type == "Slice")
    assert g.operands[sl.outputs[0]].shape == (2, 3, 4)
    types = {o.type for o in g.operations}
    assert {"Shape", "ConstantOfShape", "Greater", "Less", "Equal", "Not", "And", "Or", "Cast"} <= types
    # Range on constants folds; the Gather of position rows from the table does not (it would train
    # a [3, 4] copy in place of the [5, 4] table)
    assert "Range" not in types
    ga = [o for o in g.operations if o.type == "Gather" and g.operands[o.inputs[0]].name == "pe"]
    assert len(ga) == 1


def test_shape_ops_run_forward_only_and_keep_nothing(tmp_path):
    tg = training_graph(save(tmp_path, _dynamic()), batch=2)
    g = tg.graph
    for k, op in enumerate(g.operations):
        if op.type in ("Shape", "ConstantOfShape", "Greater", "Less", "Equal", "Not", "And", "Or"):
            assert k not in tg.backward_ops
            assert tg.rules[k].kept_forward() == []
    # Shape reads no data: it does not keep its input alive
    k = next(k for k, op in enumerate(g.operations) if op.type == "Shape")
    assert tg.rules[k].forward.reads == []
    # the float->double->float casts are differentiable; the bool->float mask cast is not
    casts = [k for k, op in enumerate(g.operations) if op.type == "Cast"]
    assert [k in tg.backward_ops for k in casts] == [False, True, True]


def test_gradients_and_verify(tmp_path):
    p = save(tmp_path, _dynamic())
    assert check_gradients(p, batch=2) >= 20
    check_verify(p, "-b", "2")
    check_verify(p, "-b", "3")


def test_rebatching_follows_shape_values(tmp_path):
    """A fixed-batch file whose Shape values feed Gather / Unsqueeze / Sub (opgraph/shape_values follows
    them): re-batched, and the plan runs."""
    p = save(tmp_path, _dynamic(batch_dim=None))
    g = load_model(p, batch_size=4)
    assert g.operands[g.outputs[0]].shape == (4, 3, 2)
    check_verify(p, "-b", "4")


def test_rebatching_a_batch_value_that_is_not_followed_is_refused(tmp_path):
    """Range(0, batch) sizes a tensor by the batch; the loader folds it at the file's batch, so the
    re-batched graph no longer broadcasts: refused, never planned with the old size."""
    nodes = [helper.make_node("Shape", ["x"], ["sh"]), _c("z", [0], dims=[]), _c("d", [1], dims=[]),
             helper.make_node("Gather", ["sh", "z"], ["n"]),
             helper.make_node("Range", ["z", "n", "d"], ["r"]),
             helper.make_node("Cast", ["r"], ["rf"], to=TensorProto.FLOAT),
             helper.make_node("Unsqueeze", ["rf", "ax"], ["ru"]),
             helper.make_node("Add", ["x", "ru"], ["a"]),
             helper.make_node("Mul", ["a", "p"], ["y"])]
    m = onnx_model(nodes, [("x", (2, 3))], [("y", (2, 3))],
                   {"p": np.ones((3,), np.float32), "ax": np.array([1], np.int64)})
    p = save(tmp_path, m)
    load_model(p)  # its own batch is fine
    with pytest.raises(ModelError, match="cannot re-batch op"):
        load_model(p, batch_size=4)


def test_size_and_constant_fill(tmp_path):
    nodes = [helper.make_node("Add", ["x", "p"], ["a"]),
             helper.make_node("Size", ["a"], ["n"]),
             helper.make_node("Cast", ["n"], ["nf"], to=TensorProto.FLOAT),
             helper.make_node("Div", ["a", "nf"], ["y"])]
    m = onnx_model(nodes, [("x", (2, 3))], [("y", (2, 3))], {"p": np.ones((3,), np.float32)})
    p = save(tmp_path, m)
    assert check_gradients(p) >= 3
    check_verify(p)


def test_castlike_is_a_cast_to_its_second_inputs_type(tmp_path):
    """ONNX CastLike (onnxscript's function bodies use it) was refused inside the backward region: it is
    a Cast whose target type comes from `like`; `like` is read for its type only (no gradient)."""
    nodes = [helper.make_node("Add", ["x", "p"], ["a"]), helper.make_node("CastLike", ["a", "like"], ["c"]),
             helper.make_node("Mul", ["c", "w"], ["y"])]
    inits = {"p": np.full((1, 4), 0.5, np.float32), "like": np.zeros((1,), np.float64),
             "w": np.full((1, 4), 2.0, np.float64)}
    p = save(tmp_path, onnx_model(nodes, [("x", (2, 4))], [("y", (2, 4), TensorProto.DOUBLE)], inits))
    g = load_model(p)
    cast = next(o for o in g.operations if o.source_type == "CastLike")
    assert cast.type == "Cast" and len(cast.inputs) == 1 and g.operands[cast.outputs[0]].dtype == "float64"
    assert check_gradients(p) >= 4
    check_verify(p, "-b", "2")


@pytest.mark.parametrize("fill", [True, 1.0])
def test_tflite_fill_of_a_computed_shape_follows_the_batch(tmp_path, monkeypatch, fill):
    """TF Lite's FILL(dims, value) is ConstantOfShape with its scalar read at load. Keras's
    MultiHeadAttention(use_causal_mask=True) writes ones_like of its scores as SHAPE -> FILL(True): a
    file converted at batch 1 then re-batches (it was refused: a batch value memplan did not follow)."""
    from devtools import modelgen
    from devtools.modelgen import ModelBuilder

    monkeypatch.setitem(modelgen.TYPE, "bool", 6)  # TensorType.BOOL
    monkeypatch.setitem(modelgen.NP_TYPE, "bool", np.bool_)
    dtype = "bool" if fill is True else "float32"
    m = ModelBuilder()
    x = m.input([1, 4])
    sh = m._op(77, [x], [2], out_dtype="int32")  # SHAPE
    f = m._op(94, [sh, m.const([], dtype, value=np.array(fill, bool if fill is True else np.float32))], [1, 4],
              out_dtype=dtype)  # FILL
    if fill is True:
        y = m._op(123, [f, x, m.const([4])], [1, 4])  # SELECT_V2
    else:
        y = m._op(18, [x, f], [1, 4])  # MUL
    m.output(m.fully_connected(y, 3))
    p = m.save(str(tmp_path / "m.tflite"))
    op = next(o for o in load_model(p).operations if o.source_type == "FILL")
    assert op.type == "ConstantOfShape" and op.attrs["value"] == fill and len(op.inputs) == 1
    g = load_model(p, batch_size=3)
    assert g.operands[op.outputs[0]].shape == (3, 4)
    check_verify(p, "-b", "3")
