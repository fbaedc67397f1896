"""What a constant folded at load is (ir/fold.py): a ConstantOfShape fill standing in for a weight
(the zoo's light models) trains; a mask computed from fills, indices and scalars (Swin's shifted-window
attention mask: ConstantOfShape, ScatterND, Reshape, Sub, Equal, Where) is a buffer and does not."""
import numpy as np
from onnx import TensorProto, helper

from tests.ops.gradcheck import check_verify, onnx_model, save, training_graph


def _c(name, v, dtype=TensorProto.INT64, dims=None):
    v = list(v)
    return helper.make_node("Constant", [], [name], value=helper.make_tensor(name, dtype, [len(v)] if dims is None
                                                                               else dims, v))


def _model():
    fill = helper.make_tensor("v", TensorProto.FLOAT, [1], [0.0])
    one = helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0])
    nodes = [
        # a weight written as a fill (zoo light): ConstantOfShape -> MatMul weight
        _c("wshape", [4, 4]), helper.make_node("ConstantOfShape", ["wshape"], ["w"], value=one),
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        # a mask: zeros, two rows set by ScatterND, compared and turned into an additive mask
        _c("mshape", [3, 4]), helper.make_node("ConstantOfShape", ["mshape"], ["zeros"], value=fill),
        _c("idx", [0, 2], dims=[2, 1]), helper.make_node("ConstantOfShape", ["ushape"], ["upd"], value=one),
        _c("ushape", [2, 4]),
        helper.make_node("ScatterND", ["zeros", "idx", "upd"], ["marks"]),
        helper.make_node("Reshape", ["marks", "mshape"], ["marks2"]),
        helper.make_node("Sub", ["marks2", "half"], ["centred"]),
        helper.make_node("Add", ["h", "centred"], ["y"]),
    ]
    # constants first so that the graph is topologically sorted
    nodes = [n for n in nodes if n.op_type == "Constant"] + [n for n in nodes if n.op_type != "Constant"]
    return onnx_model(nodes, [("x", (3, 4))], [("y", (3, 4))], {"half": np.full((4,), 0.5, np.float32)})


def test_a_fill_weight_trains_and_a_computed_mask_does_not(tmp_path):
    p = save(tmp_path, _model())
    tg = training_graph(p)
    g = tg.graph
    trained = sorted(g.operands[w].name for w in tg.grad)
    assert trained == ["half", "w"]  # the fill weight and the file's own float constant; not the mask
    mask = next(o for o in g.operands if o.name == "marks2")
    assert mask.is_const and mask.computed
    check_verify(p)
