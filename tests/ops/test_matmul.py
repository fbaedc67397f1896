"""MatMul with batch dimensions and broadcasting, 1-D operands, Gemm with transposes and C, TFLite
BATCH_MATMUL (adj_x / adj_y); FLOPs; refusals (alpha / beta, shapes that do not multiply)."""
import numpy as np
import pytest
from onnx import helper

from memplan_cli import ops
from memplan_cli.errors import ModelError
from memplan_cli.loaders import load_model
from devtools.modelgen import ModelBuilder
from tests.ops.gradcheck import check_gradients, check_verify, onnx_model, save


def _two_activations(sa, sb, out):
    # a = x + p, b = z + q, y = a @ b: both back-props, broadcast over batch dims
    nodes = [helper.make_node("Add", ["x", "p"], ["a"]), helper.make_node("Add", ["z", "q"], ["b"]),
             helper.make_node("MatMul", ["a", "b"], ["y"])]
    inits = {"p": np.ones(sa[-1:], np.float32), "q": np.ones(sb[-1:], np.float32)}
    return onnx_model(nodes, [("x", sa), ("z", sb)], [("y", out)], inits)


@pytest.mark.parametrize("sa,sb,out", [((2, 1, 3, 4), (3, 4, 5), (2, 3, 3, 5)),
                                       ((2, 3, 4), (2, 4, 5), (2, 3, 5)),
                                       ((2, 4), (4,), (2,)),
                                       ((4,), (2, 4, 3), (2, 3))])
def test_batch_dims_and_broadcasting(tmp_path, sa, sb, out):
    p = save(tmp_path, _two_activations(sa, sb, out))
    assert check_gradients(p, min_checked=2) >= 2
    check_verify(p)


def test_a_weight_shared_over_batch_dims_gets_the_summed_gradient(tmp_path):
    nodes = [helper.make_node("Add", ["x", "p"], ["a"]), helper.make_node("MatMul", ["a", "w"], ["y"])]
    m = onnx_model(nodes, [("x", (2, 3, 4))], [("y", (2, 3, 5))],
                   {"p": np.ones((4,), np.float32), "w": np.ones((4, 5), np.float32)})
    p = save(tmp_path, m)
    assert check_gradients(p) >= 16
    check_verify(p, "-b", "2")


@pytest.mark.parametrize("ta,tb", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_gemm_with_transposes_and_c(tmp_path, ta, tb):
    sa = (4, 3) if ta else (3, 4)
    sb = (5, 4) if tb else (4, 5)
    nodes = [helper.make_node("Add", ["x", "p"], ["a"]), helper.make_node("Add", ["z", "q"], ["b"]),
             helper.make_node("Gemm", ["a", "b", "c"], ["y"], transA=ta, transB=tb)]
    m = onnx_model(nodes, [("x", sa), ("z", sb)], [("y", (3, 5))],
                   {"p": np.ones(sa, np.float32), "q": np.ones(sb, np.float32), "c": np.ones((5,), np.float32)},
                   opset=13)
    p = save(tmp_path, m)
    op = next(o for o in load_model(p).operations if o.source_type == "Gemm")
    assert op.type == "MatMul" and op.attrs == {"trans_a": bool(ta), "trans_b": bool(tb)}
    assert check_gradients(p) >= 24
    check_verify(p)


def test_gemm_with_a_constant_b_is_fully_connected(tmp_path):
    nodes = [helper.make_node("Add", ["x", "p"], ["a"]), helper.make_node("Gemm", ["a", "w", "c"], ["y"], transB=1)]
    m = onnx_model(nodes, [("x", (3, 4))], [("y", (3, 5))],
                   {"p": np.ones((4,), np.float32), "w": np.ones((5, 4), np.float32), "c": np.ones((5,), np.float32)})
    p = save(tmp_path, m)
    op = next(o for o in load_model(p).operations if o.source_type == "Gemm")
    assert op.type == "FullyConnected" and op.attrs["trans_b"] is True
    assert check_gradients(p) >= 20


@pytest.mark.parametrize("trans_b", [0, 1])
def test_fully_connected_flops_whichever_way_the_weight_is_stored(tmp_path, trans_b):
    # Y[3, 5] = X[3, 4] . W + c: 2 x 3 x 4 x 5 multiply-adds and 15 bias adds, W stored [4, 5]
    # (transB=0, as GPT-2's Conv1D exports) or [5, 4] (transB=1, nn.Linear)
    w = np.ones((5, 4) if trans_b else (4, 5), np.float32)
    nodes = [helper.make_node("Add", ["x", "p"], ["a"]),
             helper.make_node("Gemm", ["a", "w", "c"], ["y"], transB=trans_b)]
    m = onnx_model(nodes, [("x", (3, 4))], [("y", (3, 5))],
                   {"p": np.ones((4,), np.float32), "w": w, "c": np.ones((5,), np.float32)})
    g = load_model(save(tmp_path, m))
    op = next(o for o in g.operations if o.source_type == "Gemm")
    assert op.type == "FullyConnected"
    assert ops.get("FullyConnected").flops(op, g.operands) == (2 * 3 * 4 * 5 + 15, 4 * 3 * 4 * 5 + 15)


def test_gemm_alpha_is_refused(tmp_path):
    nodes = [helper.make_node("Gemm", ["x", "z"], ["y"], alpha=0.5)]
    m = onnx_model(nodes, [("x", (3, 4)), ("z", (4, 5))], [("y", (3, 5))], {})
    # the op is labelled by its canonical type (MatMul): the line names the file's Gemm attribute
    with pytest.raises(ModelError, match="op #0 MatMul has Gemm's alpha=0.5"):
        load_model(save(tmp_path, m))


def test_gemm_beta_0_drops_c():
    import os

    import onnx

    path = os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/pytorch-operator/test_operator_mm/model.onnx")
    op = next(o for o in load_model(path).operations if o.source_type == "Gemm")
    assert op.type == "MatMul" and len(op.inputs) == 2
    check_verify(path)


def test_flops():
    from memplan_cli.ir.graph import Operand, Operation

    operands = [Operand(0, "a", (2, 3, 4)), Operand(1, "b", (4, 5)), Operand(2, "y", (2, 3, 5))]
    op = Operation(0, "MatMul", [0, 1], [2], {})
    assert ops.get("MatMul").flops(op, operands) == (2 * 2 * 3 * 4 * 5, 4 * 2 * 3 * 4 * 5)


def test_tflite_batch_matmul_adjoints(tmp_path):
    from circle_schema.v0_10.circle.BatchMatMulOptions import BatchMatMulOptionsT
    from circle_schema.v0_10.circle.BuiltinOptions import BuiltinOptions

    m = ModelBuilder()
    x = m.input([2, 4, 3])
    a = m.add(x, m.const([4, 3]))
    o = BatchMatMulOptionsT()
    o.adjointLhs, o.adjointRhs = True, True
    y = m._op(126, [a, m.const([5, 4])], [2, 3, 5], BuiltinOptions.BatchMatMulOptions, o)
    m.output(m.fully_connected(m.reshape(y, [2, 15]), 3))
    p = m.save(str(tmp_path / "m.tflite"))
    op = next(o for o in load_model(p).operations if o.source_type == "BATCH_MATMUL")
    assert op.type == "MatMul" and op.attrs == {"trans_a": True, "trans_b": True}
    assert check_gradients(p) >= 24
    check_verify(p, "-b", "3")


def test_a_parameter_as_the_data_operand_of_a_fused_linear_trains(tmp_path):
    """MatMul(P, W) + b with P a stored float initializer (learned queries through a Linear): P trains,
    its gradient dZ W^T is computed in calcGradient (it was left unwritten: NaN in verify)."""
    nodes = [helper.make_node("MatMul", ["P", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["hb"]),
             helper.make_node("Relu", ["hb"], ["r"]), helper.make_node("MatMul", ["r", "w2"], ["t"]),
             helper.make_node("Add", ["x", "t"], ["y"])]
    inits = {"P": np.linspace(-1, 1, 18).reshape(1, 3, 3, 2).astype(np.float32),
             "w": np.linspace(-0.5, 1, 16).reshape(2, 8).astype(np.float32),
             "b": np.linspace(0.1, 0.2, 8).astype(np.float32),
             "w2": np.linspace(-1, 0.5, 32).reshape(8, 4).astype(np.float32)}
    p = save(tmp_path, onnx_model(nodes, [("x", (2, 3, 3, 4))], [("y", (2, 3, 3, 4))], inits))
    assert check_gradients(p) >= 40
    check_verify(p, "-b", "2")


@pytest.mark.parametrize("trans", [False, True])
def test_matmul_of_an_operand_with_itself(tmp_path, trans):
    """a @ a (and a @ a^T: Keras' Attention()([h, h]) converts to BATCH_MATMUL(h, h, adj_y)): both
    sides' gradients go to a's one back-prop, summed (verify refused it: "MatMul of an operand with
    itself"); checked against finite differences."""
    nodes = [helper.make_node("Add", ["x", "p"], ["a"])]
    if trans:
        nodes.append(helper.make_node("Gemm", ["a", "a"], ["y"], transB=1))
    else:
        nodes.append(helper.make_node("MatMul", ["a", "a"], ["y"]))
    shape = (4, 4) if trans else (2, 4, 4)
    p = save(tmp_path, onnx_model(nodes, [("x", shape)], [("y", (4, 4) if trans else shape)],
                                  {"p": np.linspace(-1, 1, 16).reshape(4, 4).astype(np.float32)}))
    assert check_gradients(p) >= 8
    check_verify(p)
