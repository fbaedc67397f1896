"""Tiny hand-built graphs for the pass tests."""
from memplan_cli.ir.graph import Graph, Operand, Operation


def conv_relu_fc():
    """x(2,8,8,3) -Conv 4@3x3 +ReLU6-> c0(2,8,8,4) -Relu-> r -Reshape-> f(2,256) -FC 10-> y(2,10)."""
    ops = [Operand(0, "x", (2, 8, 8, 3), is_input=True), Operand(1, "w0", (4, 3, 3, 3), is_const=True),
           Operand(2, "b0", (4,), is_const=True), Operand(3, "c0", (2, 8, 8, 4)), Operand(4, "r", (2, 8, 8, 4)),
           Operand(5, "shape", (2,), "int32", is_const=True), Operand(6, "f", (2, 256)),
           Operand(7, "w1", (10, 256), is_const=True), Operand(8, "b1", (10,), is_const=True),
           Operand(9, "y", (2, 10), is_output=True)]
    g = Graph(ops, [Operation(0, "Conv2D", [0, 1, 2], [3], {"activation": "RELU6", "padding": "SAME",
                                                                 "stride": (1, 1), "dilation": (1, 1)}),
                    Operation(1, "Relu", [3], [4]), Operation(2, "Reshape", [4, 5], [6]),
                    Operation(3, "FullyConnected", [6, 7, 8], [9], {"activation": "NONE"})], [0], [9])
    g.verify()
    return g


def residual():
    """x -FC(w0)-> a ; a -FC(w1)-> b ; Add(a, b) -> c ; c -FC(w2)-> y: a is a branch point."""
    ops = [Operand(0, "x", (2, 8), is_input=True), Operand(1, "w0", (8, 8), is_const=True),
           Operand(2, "a", (2, 8)), Operand(3, "w1", (8, 8), is_const=True), Operand(4, "b", (2, 8)),
           Operand(5, "c", (2, 8)), Operand(6, "w2", (4, 8), is_const=True), Operand(7, "y", (2, 4), is_output=True)]
    g = Graph(ops, [Operation(0, "FullyConnected", [0, 1, -1], [2]),
                    Operation(1, "FullyConnected", [2, 3, -1], [4]),
                    Operation(2, "Add", [2, 4], [5], {"activation": "NONE"}),
                    Operation(3, "FullyConnected", [5, 6, -1], [7])], [0], [7])
    g.verify()
    return g


def chain(*types, shape=(2, 8), attrs=None):
    """x -> op0 -> op1 ... with one FC (weight w) first so that something trains."""
    ops = [Operand(0, "x", shape, is_input=True), Operand(1, "w", (shape[-1], shape[-1]), is_const=True),
           Operand(2, "t0", shape)]
    opers = [Operation(0, "FullyConnected", [0, 1, -1], [2])]
    for k, t in enumerate(types):
        ops.append(Operand(len(ops), f"t{k + 1}", shape))
        opers.append(Operation(k + 1, t, [len(ops) - 2], [len(ops) - 1], dict((attrs or {}).get(t, {}))))
    g = Graph(ops, opers, [0], [len(ops) - 1])
    g.verify()
    return g
