"""nntrainer's layers, execution orders, lifespans and in-place views, checked on small graphs derived by
hand from nntrainer 0.6.0's rules (memplan_cli/profiles/nntrainer.py; the measured models are in
test_nntrainer_fixtures.py)."""
import pytest

from memplan_cli.analysis import plan_buffer_list
from memplan_cli.config import TrainConfig
from memplan_cli.errors import UnsupportedOpError
from memplan_cli.ir.graph import Graph, Operand, Operation
from memplan_cli.profiles.nntrainer import PROFILE, build_nodes, refusal


def _fc_relu(fused=False, last="Relu"):
    """x (1x4) -> FC(w, b) -> y1 -> Relu (or `last`) -> y2 (or the Relu fused into the FC)."""
    ops = [Operation(0, "FullyConnected", [0, 1, 2], [3])]
    if fused:
        ops[0].attrs["fused_activation"] = "RELU"
        ops[0].outputs = [4]
    else:
        ops.append(Operation(1, last, [3], [4]))
    return Graph([Operand(0, "x", (1, 4), is_input=True), Operand(1, "w", (3, 4), is_const=True),
                  Operand(2, "b", (3,), is_const=True), Operand(3, "y1", (1, 3)),
                  Operand(4, "y2", (1, 3), is_output=True)], ops, [0], [4])


def _by_name(bl):
    return {b.name: b for b in bl.buffers}


def _span(b):
    return b.first, b.last


def test_execution_order_has_the_input_layer_and_one_order_per_frozen_layer():
    g = _fc_relu()
    # layers x (input), FC, Relu, mse (N = 4). Backward from k = 4: mse 4 5 6; Relu 7 8 9; FC 10 11 12; x 13 14 15
    nodes = build_nodes(g, {0, 1})
    assert [(n.kind, n.orders) for n in nodes] == [("input", (0, 13, 14, 15)), ("fully_connected", (1, 10, 11, 12)),
                                                   ("activation", (2, 7, 8, 9)), ("loss", (3, 4, 5, 6))]
    # FC frozen: its three backward orders collapse into one; weightless layers stay trainable
    nodes = build_nodes(g, {1})
    assert [n.orders for n in nodes] == [(0, 11, 12, 13), (1, 10, 10, 10), (2, 7, 8, 9), (3, 4, 5, 6)]


def test_lifespans_with_memory_optimization():
    bl = PROFILE.build(_fc_relu(), TrainConfig())
    b = _by_name(bl)
    assert bl.info["last_order"] == 12  # the FC's apply-gradient: its backward runs last
    # y1: FC output F1; the Relu works in place (F2, its output F2 and CD8); mse reads it F3, CD5
    assert _span(b["FullyConnected0:out0"]) == (1, 8)
    assert not any(n.startswith("Relu1:out0") for n in b)
    # its gradient: FC CG10 CD11; Relu input CD8, output CG7 CD8; mse input CD5
    assert _span(b["FullyConnected0:out0:grad"]) == (5, 11) and b["FullyConnected0:out0:grad"].category == "back-prop"
    # weights live over every planned order, in the weight pool; their gradients over (CG, AG)
    assert (*_span(b["FullyConnected0:weight"]), b["FullyConnected0:weight"].pool) == (0, 12, "weight_pool")
    assert _span(b["FullyConnected0:weight:grad"]) == (10, 12)
    assert bl.info["lifespans"]["FullyConnected0:weight:grad"] == "BACKWARD_FUNC"
    # the loss output: its forward and the last forward order; its gradient is the label (external)
    assert _span(b["mse0:out0"]) == (3, 3)
    assert b["x:input0"].pool == b["mse0:out0:label"].pool == "external"
    # exact bytes, no alignment; SGD has no optimizer state; tensor pool order is nntrainer's
    assert b["FullyConnected0:weight"].size == 48 and b["FullyConnected0:bias"].size == 12
    assert [x.name for x in bl.buffers if x.pool == "tensor_pool"] == [
        "FullyConnected0:out0", "FullyConnected0:out0:grad", "FullyConnected0:weight:grad",
        "FullyConnected0:bias:grad", "mse0:out0"]
    assert [s.index for s in bl.steps] == list(range(13))  # the input layer's backward is not run


def test_lifespans_without_memory_optimization():
    bl = PROFILE.build(_fc_relu(), TrainConfig(), memory_optimization=False)
    b = _by_name(bl)
    assert bl.info["last_order"] == 15  # backwarding down to the input layer
    # the input layer's output is its own tensor: F0, FC reads it F1 CG10; gradient CG13 CD14, FC's CD11
    assert _span(b["x:out0"]) == (0, 10) and _span(b["x:out0:grad"]) == (11, 14)
    # no in-place: the Relu reads y1 F2 only, and owns its output: F2 CD8, mse F3 CD5
    assert _span(b["FullyConnected0:out0"]) == (1, 2)
    assert _span(b["Relu1:out0"]) == (2, 8) and _span(b["Relu1:out0:grad"]) == (5, 8)  # CG7 CD8, mse CD5
    (tp,) = [p for p in plan_buffer_list(bl) if p.pool.name == "tensor_pool"]
    assert tp.pool.planner == "nntrainer-basic" and tp.plan.arena == sum(x.size for x in tp.buffers)


def test_fused_activation_is_its_own_layer_and_adam_states_follow_every_weight():
    bl = PROFILE.build(_fc_relu(fused=True), TrainConfig(optimizer="adam"))
    nodes = build_nodes(_fc_relu(fused=True), {0})
    assert [n.name for n in nodes][1:3] == ["FullyConnected0", "FullyConnected0/activation_realized"]
    assert [x.name for x in bl.buffers if x.pool == "weight_pool"] == [
        "FullyConnected0:weight", "FullyConnected0:bias", "FullyConnected0:weight:opt0",
        "FullyConnected0:weight:opt1", "FullyConnected0:bias:opt0", "FullyConnected0:bias:opt1"]


def test_frozen_fc_reads_its_input_for_the_forward_only_and_has_no_weight_gradient():
    bl = PROFILE.build(_fc_relu(), TrainConfig(trainable=(1,)), memory_optimization=False)
    b = _by_name(bl)
    assert _span(b["x:out0"]) == (0, 1)  # FORWARD_FUNC: a frozen reader
    assert "FullyConnected0:weight:grad" not in b
    # nothing before the Relu learns: the backward ends with the Relu... but off, down to the input
    assert bl.info["last_order"] == 13
    bl = PROFILE.build(_fc_relu(), TrainConfig(trainable=(1,)))
    assert bl.info["last_order"] == 6  # on: no layer learns, the backward end is the loss's


def test_cross_entropy_fuses_the_final_softmax_into_the_loss():
    g = _fc_relu(last="Softmax")
    nodes = build_nodes(g, {0}, loss="cce")
    assert [n.kind for n in nodes] == ["input", "fully_connected", "loss"] and nodes[-1].name == "cross_softmax0"
    b = _by_name(PROFILE.build(g, TrainConfig(loss="cce")))
    assert _span(b["FullyConnected0:out0"]) == (1, 4)  # the loss (F2, CD4) reads it
    # mse keeps the Softmax as an activation layer
    assert [n.kind for n in build_nodes(g, {0})] == ["input", "fully_connected", "activation", "loss"]
    assert "Softmax or Sigmoid" in refusal(_fc_relu(), "cce")


def test_a_branch_gets_a_multiout_layer_and_a_reader_of_it_does_not_work_in_place():
    # x -> FC -> a; a2 = Tanh(a); s = Add(a, a2): a has two readers
    g = Graph([Operand(0, "x", (1, 2), is_input=True), Operand(1, "a", (1, 2)), Operand(2, "a2", (1, 2)),
               Operand(3, "s", (1, 2), is_output=True), Operand(4, "w", (2, 2), is_const=True)],
              [Operation(0, "FullyConnected", [0, 4], [1]), Operation(1, "Tanh", [1], [2]),
               Operation(2, "Add", [1, 2], [3])], [0], [3])
    nodes = build_nodes(g, {0, 1, 2})
    assert [n.kind for n in nodes] == ["input", "fully_connected", "multiout", "activation", "addition", "loss"]
    assert nodes[3].inputs == [(2, 0)] and nodes[4].inputs == [(2, 1), (3, 0)]
    b = _by_name(PROFILE.build(g, TrainConfig()))
    # multiout outputs are views of its input, their gradients its own
    assert "FullyConnected0/generated_out_0:out0" not in b and "FullyConnected0/generated_out_0:out1:grad" in b
    # the Tanh reads a RESTRICTING layer: it owns its output
    assert "Tanh1:out0" in b


def test_refusals_name_what_nntrainer_cannot_train():
    two = Graph([Operand(0, "x", (1, 2), is_input=True), Operand(1, "a", (1, 2), is_output=True),
                 Operand(2, "c", (1, 2), is_output=True)],
                [Operation(0, "Relu", [0], [1]), Operation(1, "Tanh", [0], [2])], [0], [1, 2])
    assert "2 outputs" in refusal(two)
    dw = Graph([Operand(0, "x", (1, 4, 4, 2), is_input=True), Operand(1, "w", (1, 3, 3, 2), is_const=True),
                Operand(2, "y", (1, 2, 2, 2), is_output=True)], [Operation(0, "DepthwiseConv2D", [0, 1], [2])], [0], [2])
    with pytest.raises(UnsupportedOpError, match="depthwise convolution: nntrainer 0.6.0 cannot train it"):
        PROFILE.build(dw, TrainConfig())


def test_layers_run_in_nntrainers_depth_first_order():
    # x -> FC a -> Relu r; main path FC m1 -> FC m2; shortcut FC p (listed after the main path); Add(m2, p).
    # nntrainer's reverse post-order visits r's consumers m1 then p: p finishes last, so it runs first.
    g = Graph([Operand(0, "x", (1, 2), is_input=True), Operand(1, "a", (1, 2)), Operand(2, "r", (1, 2)),
               Operand(3, "m1", (1, 2)), Operand(4, "m2", (1, 2)), Operand(5, "p", (1, 2)),
               Operand(6, "s", (1, 2), is_output=True)] +
              [Operand(7 + i, f"w{i}", (2, 2), is_const=True) for i in range(4)],
              [Operation(0, "FullyConnected", [0, 7], [1], name="a"), Operation(1, "Relu", [1], [2], name="r"),
               Operation(2, "FullyConnected", [2, 8], [3], name="m1"),
               Operation(3, "FullyConnected", [3, 9], [4], name="m2"),
               Operation(4, "FullyConnected", [2, 10], [5], name="p"), Operation(5, "Add", [4, 5], [6], name="s")],
              [0], [6])
    nodes = build_nodes(g, set(range(6)))
    assert [n.name for n in nodes] == ["x", "a", "r", "r/generated_out_0", "p", "m1", "m2", "s", "mse0"]
    # multiout outputs follow the readers' order in the file: m1 reads out0, p reads out1
    mo = 3
    assert nodes[5].inputs == [(mo, 0)] and nodes[4].inputs == [(mo, 1)]
    assert nodes[7].inputs == [(6, 0), (4, 0)]


def test_momentum_is_refused_nntrainer_sgd_has_none():
    with pytest.raises(UnsupportedOpError, match="no momentum optimizer"):
        PROFILE.build(_fc_relu(), TrainConfig(optimizer="momentum"))


def test_an_add_of_a_constant_is_refused():
    g = Graph([Operand(0, "x", (1, 2), is_input=True), Operand(1, "c", (1, 2), is_const=True),
               Operand(2, "y", (1, 2), is_output=True)], [Operation(0, "Add", [0, 1], [2])], [0], [2])
    assert "addition layer adds layer outputs of one shape" in refusal(g)
