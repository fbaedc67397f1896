"""Tiny hand-built graphs for the pass tests, and `up_to`: a training graph ready for one pass."""
from memplan_cli.config import TrainConfig
from memplan_cli.ir.graph import Graph, Operand, Operation
from memplan_cli.passes.infra import run_checked
from memplan_cli.passes.pipeline import memplan_pipeline
from memplan_cli.passes.policy import Policy
from memplan_cli.passes.rules import default_rules
from memplan_cli.passes.training_graph import TrainingGraph


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


def up_to(name: str, graph, config=None, *, policy=None, remat=()):
    """(training graph, pass): every pass before `name` of memplan's pipeline run on `graph`, and the
    pass `name` itself, not run yet (run it with `run_checked(p, tg)`, which checks its contract)."""
    config = config or TrainConfig()
    tg = TrainingGraph(graph, config)
    for p in memplan_pipeline(policy or Policy(), default_rules(), remat, config).passes:
        if p.name == name:
            return tg, p
        run_checked(p, tg)
    raise KeyError(name)


def fc_gelu_fc():
    """x(2,8) -FC(w0)-> a -Gelu-> g -FC(w1)-> y(2,4): the second FC reads g for its dW."""
    ops = [Operand(0, "x", (2, 8), is_input=True), Operand(1, "w0", (8, 8), is_const=True),
           Operand(2, "a", (2, 8)), Operand(3, "g", (2, 8)), Operand(4, "w1", (4, 8), is_const=True),
           Operand(5, "y", (2, 4), is_output=True)]
    g = Graph(ops, [Operation(0, "FullyConnected", [0, 1, -1], [2], {"activation": "NONE"}),
                    Operation(1, "Gelu", [2], [3]),
                    Operation(2, "FullyConnected", [3, 4, -1], [5], {"activation": "NONE"})], [0], [5])
    g.verify()
    return g


def projection(name="layer.q_proj"):
    """x(2,3,8) -MatMul(w: 8x8, named `name`)-> y(2,3,8): a LoRA target."""
    ops = [Operand(0, "x", (2, 3, 8), is_input=True), Operand(1, f"{name}.weight", (8, 8), is_const=True),
           Operand(2, "y", (2, 3, 8), is_output=True)]
    g = Graph(ops, [Operation(0, "MatMul", [0, 1], [2], name=name)], [0], [2])
    g.verify()
    return g
