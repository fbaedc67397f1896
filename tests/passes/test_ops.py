"""Each op family's rule on a tiny graph: what its backward steps read and write."""
import pytest

from memplan_cli.config import TrainConfig
from memplan_cli.ir.graph import Graph, Operand, Operation
from memplan_cli.passes.pipeline import build_training_graph
from memplan_cli.passes.policy import Policy
from tests.passes.graphs import chain


def _io(tg, kind, op):
    s = next((s for s in tg.steps if s.kind == kind and s.op == op), None)
    if s is None:
        return None
    return [tg.tensors[t].name for t in s.reads], [tg.tensors[t].name for t in s.writes]


def _tg(g, **policy):
    return build_training_graph(g, TrainConfig(), policy=Policy(**policy))


@pytest.mark.parametrize("op_type", ["Relu", "Relu6", "Sigmoid", "Tanh", "Softmax"])
def test_activations_keep_their_output_only(op_type):
    tg = _tg(chain(op_type), relu_mask=False)
    assert _io(tg, "calcDerivative", 1) == (["t1", "t1:bp"], ["t0:bp"])


def test_relu_family_reads_a_mask_when_nothing_else_keeps_its_output():
    tg = _tg(chain("Relu6", "Relu"))  # t1 is read by the next Relu only in forward
    assert _io(tg, "calcDerivative", 1)[0] == ["#1:relu_mask", "t1:bp"]
    assert _io(tg, "forward", 1) == (["t0"], ["t1", "#1:relu_mask"])


@pytest.mark.parametrize("op_type,reads", [("Add", ["c:bp"]), ("Sub", ["c:bp"]), ("Mul", ["c:bp", "b", "a"]),
                                           ("Div", ["c:bp", "b", "a"])])
def test_binary_ops_keep_what_their_derivative_needs(op_type, reads):
    ops = [Operand(0, "x", (2, 8), is_input=True), Operand(1, "w0", (8, 8), is_const=True), Operand(2, "a", (2, 8)),
           Operand(3, "w1", (8, 8), is_const=True), Operand(4, "b", (2, 8)), Operand(5, "c", (2, 8))]
    g = Graph(ops, [Operation(0, "FullyConnected", [0, 1, -1], [2]), Operation(1, "FullyConnected", [0, 3, -1], [4]),
                    Operation(2, op_type, [2, 4], [5], {"activation": "NONE"})], [0], [5])
    tg = _tg(g, inplace=False)
    r, w = _io(tg, "calcDerivative", 2)
    assert r == reads and w == ["a:bp", "b:bp"]


def test_binary_op_with_a_constant_operand_trains_it():
    ops = [Operand(0, "x", (2, 8), is_input=True), Operand(1, "w", (8, 8), is_const=True), Operand(2, "a", (2, 8)),
           Operand(3, "bias", (8,), is_const=True), Operand(4, "y", (2, 8))]
    g = Graph(ops, [Operation(0, "MatMul", [0, 1], [2]), Operation(1, "Add", [2, 3], [4], {"activation": "NONE"})],
              [0], [4])
    tg = _tg(g)
    assert _io(tg, "calcGradient", 1) == (["y:bp"], ["bias:grad"])
    assert _io(tg, "calcGradient", 0) == (["a:bp", "x"], ["w:grad"])


def test_pad_mean_concat_read_only_the_incoming_back_prop_and_constants():
    ops = [Operand(0, "x", (1, 4, 4, 2), is_input=True), Operand(1, "w", (2, 1, 1, 2), is_const=True),
           Operand(2, "c", (1, 4, 4, 2)), Operand(3, "pads", (4, 2), "int32", is_const=True),
           Operand(4, "p", (1, 5, 5, 2)), Operand(5, "axes", (2,), "int32", is_const=True), Operand(6, "m", (1, 2)),
           Operand(7, "m2", (1, 2)), Operand(8, "cat", (1, 4))]
    g = Graph(ops, [Operation(0, "Conv2D", [0, 1, -1], [2], {"activation": "NONE"}), Operation(1, "Pad", [2, 3], [4]),
                    Operation(2, "Mean", [4, 5], [6]), Operation(3, "Mean", [2, 5], [7]),
                    Operation(4, "Concat", [6, 7], [8], {"axis": 1})], [0], [8])
    tg = _tg(g)
    assert _io(tg, "calcDerivative", 4) == (["cat:bp"], ["m:bp", "m2:bp"])
    assert _io(tg, "calcDerivative", 2) == (["m:bp", "axes"], ["p:bp"])
    assert _io(tg, "calcDerivative", 1) == (["p:bp", "pads"], ["c:bp@1"])  # c has two readers
    assert _io(tg, "calcDerivative", 3) == (["m2:bp", "axes"], ["c:bp"])


def test_avg_pool_keeps_nothing_and_depthwise_reads_like_conv():
    ops = [Operand(0, "x", (1, 4, 4, 2), is_input=True), Operand(1, "w", (1, 3, 3, 2), is_const=True),
           Operand(2, "d", (1, 4, 4, 2)), Operand(3, "p", (1, 2, 2, 2))]
    g = Graph(ops, [Operation(0, "DepthwiseConv2D", [0, 1, -1], [2], {"activation": "NONE"}),
                    Operation(1, "AvgPool2D", [2], [3], {"filter": (2, 2), "activation": "NONE"})], [0], [3])
    tg = _tg(g)
    assert _io(tg, "calcDerivative", 1) == (["p:bp"], ["d:bp"])
    assert _io(tg, "calcGradient", 0) == (["d:bp", "x"], ["w:grad"])
    assert _io(tg, "calcDerivative", 0) is None  # x is a graph input: no back-prop


@pytest.mark.parametrize("loss", ["mse", "cce"])
def test_loss_reads_prediction_and_label_and_writes_over_the_label(loss):
    tg = build_training_graph(chain(), TrainConfig(loss=loss))
    assert _io(tg, "calcDerivative", 1) == (["t0", "label"], ["t0:bp"])
    assert tg.buffer_name(tg.bp[2]) == "label"
