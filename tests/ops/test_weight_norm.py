"""torch's weight_norm as TorchScript exports it: the conv weight is computed in the graph,
w = g * v / ReduceL2(v). The convolution writes the back-prop of its computed weight (dW), and the
gradients of g and v come through Div, ReduceL2 and Mul (finite differences, verify)."""
import numpy as np
from onnx import helper

from memplan_cli.loaders import load_model
from tests.ops.gradcheck import check_gradients, check_verify, onnx_model, save, training_graph


def _model():
    rng = np.random.default_rng(2)
    inits = {"v": rng.normal(size=(4, 3, 3)).astype(np.float32), "g": rng.uniform(0.5, 1.5, (4, 1, 1)).astype(np.float32),
             "b": rng.normal(size=(4,)).astype(np.float32), "ax": np.array([1, 2], np.int64)}
    nodes = [helper.make_node("ReduceL2", ["v", "ax"], ["norm"], keepdims=1),
             helper.make_node("Div", ["v", "norm"], ["dir"]),
             helper.make_node("Mul", ["g", "dir"], ["w"]),
             helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1])]
    return onnx_model(nodes, [("x", (2, 3, 8))], [("y", (2, 4, 8))], inits, opset=18)


def test_a_computed_conv_weight_gets_its_back_prop(tmp_path):
    p = save(tmp_path, _model())
    assert [o.type for o in load_model(p).operations][-1] == "Conv1D"
    tg = training_graph(p)
    names = sorted(tg.graph.operands[w].name for w in tg.grad)
    assert names == ["b", "g", "v"]
    assert check_gradients(p) >= 20
    check_verify(p, "-b", "3")
