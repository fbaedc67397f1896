"""Empty tensors (a dimension of 0): eager makes them where a mask selects nothing (an expert with no
token, Longformer's local slots with no global token) and trains through them; each takes 0 bytes.
The loader reads them as values of no element; the ops run on them as NumPy's kernels do."""
import numpy as np
import pytest
from onnx import TensorProto, helper

from memplan_cli.loaders import load_model
from tests.ops.gradcheck import analyze_json, check_verify, onnx_model, save, training_graph


def _c(name, v, dtype=TensorProto.INT64):
    return helper.make_node("Constant", [], [name], value=helper.make_tensor(name + "_v", dtype, [], [v]))


def _empty_scatter():
    """`h[mask] = h[mask] * 2` where the mask (computed from shapes) selects nothing: NonZero's indices
    (0 x 1), the rows gathered and the rows written (0 x 3 x 4) are empty."""
    nodes = [
        _c("zero0", 0), _c("two0", 2), _c("one0", 1), _c("twof", 2.0, TensorProto.FLOAT),
        helper.make_node("Range", ["zero0", "two0", "one0"], ["r"]),
        helper.make_node("Less", ["r", "zero0"], ["mask"]),
        helper.make_node("NonZero", ["mask"], ["nz"]),
        helper.make_node("Transpose", ["nz"], ["idx"], perm=[1, 0]),
        helper.make_node("Mul", ["x", "w"], ["h"]),
        helper.make_node("GatherND", ["h", "idx"], ["rows"]),
        helper.make_node("Mul", ["rows", "twof"], ["rows2"]),
        helper.make_node("ScatterND", ["h", "idx", "rows2"], ["y"]),
    ]
    m = onnx_model(nodes, [("x", (2, 3, 4))], [("y", (2, 3, 4))], {"w": np.ones((3, 4), np.float32)})
    m.producer_name = "pytorch"
    return m


def test_an_empty_selection_loads_with_no_bytes(tmp_path):
    g = load_model(save(tmp_path, _empty_scatter()))
    by = {o.name: o for o in g.operands}
    assert by["idx"].shape == (0, 1) and by["idx"].is_const  # folded: the mask is computed from shapes
    assert by["rows"].shape == (0, 3, 4) and by["rows"].nbytes == 0
    assert by["rows2"].shape == (0, 3, 4) and by["rows2"].nbytes == 0


@pytest.mark.parametrize("profile", ["memplan", "torch"])
def test_an_empty_selection_analyses_and_verifies(tmp_path, profile):
    p = save(tmp_path, _empty_scatter())
    doc = analyze_json(p, "-O", "adam", "-p", profile)
    assert doc["categories"]["gradient"]["naive"] in (48, 64)  # w's gradient (64 in an aligned arena)
    check_verify(p, "-O", "adam")


def _expert_with_no_token():
    """A mixture of experts traced by TorchScript with the routing of export time: the Split's sizes
    are constants, and one expert got no row (4 = 3 + 0 + 1). Its piece is empty, and so is its
    output; its weight still gets a gradient (mm's backward of no row: zeros of the weight's shape)."""
    nodes = [helper.make_node("Split", ["x", "sizes"], ["a", "b", "c"], axis=0)]
    for k, piece in enumerate("abc"):
        nodes.append(helper.make_node("MatMul", [piece, f"w{k}"], [f"h{k}"]))
    nodes.append(helper.make_node("Concat", ["h0", "h1", "h2"], ["y"], axis=0))
    inits = {"sizes": np.array([3, 0, 1], np.int64)}
    inits.update({f"w{k}": np.full((4, 5), k + 1.0, np.float32) for k in range(3)})
    m = onnx_model(nodes, [("x", (4, 4))], [("y", (4, 5))], inits)
    m.producer_name = "pytorch"
    return m


def test_an_expert_with_no_token_analyses_and_verifies(tmp_path):
    p = save(tmp_path, _expert_with_no_token())
    g = load_model(p)
    by = {o.name: o for o in g.operands}
    assert by["b"].shape == (0, 4) and by["h1"].shape == (0, 5) and by["h1"].nbytes == 0
    tg = training_graph(p)
    assert sorted(tg.graph.operands[w].name for w in tg.grad) == ["w0", "w1", "w2"]
    doc = analyze_json(p, "-O", "adam", "-p", "torch")
    assert doc["figures"]["torch"]["split"]["optimizer"] >= 3 * 2 * 80  # Adam's two states of each weight
    check_verify(p, "-O", "adam")


def test_an_empty_constant_written_through_an_empty_index_verifies(tmp_path):
    """`scores[rows] = -10000.0` over no row: TorchScript expands the value written to the rows'
    shape (0 x 3 x 4), which folds into an empty float constant; verify draws nothing for it."""
    nodes = [
        _c("zero0", 0), _c("two0", 2), _c("one0", 1), _c("minus", -10000.0, TensorProto.FLOAT),
        helper.make_node("Constant", [], ["fshape"], value=helper.make_tensor("fs", TensorProto.INT64, [3], [0, 3, 4])),
        helper.make_node("Expand", ["minus", "fshape"], ["fill"]),
        helper.make_node("Range", ["zero0", "two0", "one0"], ["r"]),
        helper.make_node("Less", ["r", "zero0"], ["mask"]),
        helper.make_node("NonZero", ["mask"], ["nz"]),
        helper.make_node("Transpose", ["nz"], ["idx"], perm=[1, 0]),
        helper.make_node("Mul", ["x", "w"], ["h"]),
        helper.make_node("ScatterND", ["h", "idx", "fill"], ["y"]),
    ]
    m = onnx_model(nodes, [("x", (2, 3, 4))], [("y", (2, 3, 4))], {"w": np.ones((3, 4), np.float32)})
    m.producer_name = "pytorch"
    p = save(tmp_path, m)
    check_verify(p, "-O", "adam")
