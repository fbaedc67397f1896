"""nntrainer's lifespan rules and execution order, checked on hand-derived small graphs."""
from memplan_cli.config import TrainConfig
from memplan_cli.ir.graph import Graph, Operand, Operation
from memplan_cli.profiles.nntrainer import PROFILE, build_nodes, with_loss


def _fc_relu(fused=False):
    """x -> FC(w, b) -> y1 -> Relu -> y2 (or the Relu fused into the FC)."""
    ops = [Operation(0, "FullyConnected", [0, 1, 2], [3])]
    if fused:
        ops[0].attrs["fused_activation"] = "RELU"
        ops[0].outputs = [4]
    else:
        ops.append(Operation(1, "Relu", [3], [4]))
    return Graph([Operand(0, "x", (1, 4), is_input=True), Operand(1, "w", (3, 4), is_const=True),
                  Operand(2, "b", (3,), is_const=True), Operand(3, "y1", (1, 3)),
                  Operand(4, "y2", (1, 3), is_output=True)], ops, [0], [4])


def _by_name(bl):
    return {b.name: b for b in bl.buffers}


def test_execution_order_walks_backward_with_one_order_per_frozen_node():
    g = with_loss(_fc_relu())
    # nodes FC, Relu, Loss (N = 3). Backward from k = 3: Loss CG3 CD4 AG5; Relu CG6 CD7 AG8; FC CG9 CD10 AG11
    nodes = build_nodes(g, {0, 1})
    assert [n.orders for n in nodes] == [(0, 9, 10, 11), (1, 6, 7, 8), (2, 3, 4, 5)]
    # FC frozen: its three backward orders collapse into one
    nodes = build_nodes(g, {1})
    assert [n.orders for n in nodes] == [(0, 9, 9, 9), (1, 6, 7, 8), (2, 3, 4, 5)]


def test_lifespans_of_a_two_layer_graph_sgd():
    bl = PROFILE.build(_fc_relu(), TrainConfig())
    b = _by_name(bl)
    # y1: FC output (F0), Relu reads it FORWARD_FUNC (1) and writes it in place (view),
    # the loss reads the view FORWARD_DERIV (F2, CD4)  ->  [0, 4]
    assert (b["FullyConnected0:out:y1"].first, b["FullyConnected0:out:y1"].last) == (0, 4)
    assert bl.info["lifespans"]["FullyConnected0:out:y1"] == "FORWARD_DERIV"
    # y1's gradient: BACKWARD_FUNC of the FC (9, 10, 11), CALC_DERIV of Relu (7) and of the loss (4)
    g1 = b["FullyConnected0:out:y1:grad"]
    assert (g1.first, g1.last, g1.category) == (4, 11, "back-prop")
    # the Relu output is a view: no buffer of its own
    assert not any(n.startswith("Relu1:out") for n in b)
    # weights live over every order in the weight pool; their gradients over (CG, AG) = (9, 11)
    assert (b["w"].first, b["w"].last, b["w"].pool) == (0, 11, "weight_pool")
    assert bl.info["lifespans"]["w"] == "MAX"
    assert (b["w:grad"].first, b["w:grad"].last, b["w:grad"].category) == (9, 11, "gradient")
    assert bl.info["lifespans"]["w:grad"] == "BACKWARD_FUNC"
    # x is a placeholder read FORWARD_GRAD by the FC: F0 and CG9; the label FORWARD_DERIV by the loss
    assert (b["x"].pool, b["x"].first, b["x"].last) == ("external", 0, 9)
    assert (b["label"].first, b["label"].last) == (2, 4)
    # loss output (F2) and its gradient (3, 4, 5)
    assert (b["loss:out:loss"].first, b["loss:out:loss"].last) == (2, 2)
    assert (b["loss:out:loss:grad"].first, b["loss:out:loss:grad"].last) == (3, 5)
    # exact bytes, no alignment; SGD has no optimizer state
    assert b["w"].size == 48 and b["b"].size == 12
    assert not any(x.category == "opt-variable" for x in bl.buffers)
    # steps: 3 forward + 3 x 3 backward orders
    assert [s.index for s in bl.steps] == list(range(12))


def test_fused_activation_becomes_its_own_node_and_adam_adds_two_states_per_weight():
    bl = PROFILE.build(_fc_relu(fused=True), TrainConfig(optimizer="adam"))
    b = _by_name(bl)
    pre = b["FullyConnected0:out:y2:pre-act"]
    assert (pre.first, pre.last) == (0, 4)
    states = [x for x in bl.buffers if x.category == "opt-variable"]
    assert sorted(x.name for x in states) == ["b:opt0", "b:opt1", "w:opt0", "w:opt1"]
    assert all((x.first, x.last, x.pool) == (0, 11, "weight_pool") for x in states)


def test_frozen_fc_keeps_its_input_only_for_the_forward_and_has_no_weight_gradient():
    bl = PROFILE.build(_fc_relu(), TrainConfig(trainable=(1,)))
    b = _by_name(bl)
    assert (b["x"].first, b["x"].last) == (0, 0)  # FORWARD_FUNC: a frozen reader
    assert "w:grad" not in b
    assert (b["w"].first, b["w"].last) == (0, 9)


def test_a_branch_gets_a_multiout_node_whose_output_gradients_are_separate():
    # x -> FC -> a; a -> Add(a, a2) where a2 = Tanh(a): a has two readers
    g = Graph([Operand(0, "x", (1, 2), is_input=True), Operand(1, "a", (1, 2)), Operand(2, "a2", (1, 2)),
               Operand(3, "s", (1, 2), is_output=True), Operand(4, "w", (2, 2), is_const=True)],
              [Operation(0, "FullyConnected", [0, 4], [1]), Operation(1, "Tanh", [1], [2]),
               Operation(2, "Add", [1, 2], [3])], [0], [3])
    nodes = build_nodes(with_loss(g), {0, 1, 2})
    assert [n.type for n in nodes] == ["FullyConnected", "MultiOut", "Tanh", "Add", "Loss"]
    bl = PROFILE.build(g, TrainConfig())
    grads = sorted(x.name for x in bl.buffers if x.category == "back-prop")
    assert any(":multiout1:out:a:0:grad" in n for n in grads)
    assert any(":multiout1:out:a:1:grad" in n for n in grads)
    # the Tanh reads a MultiOut output: not in place, so it owns its output
    assert any(x.name.startswith("Tanh1:out:a2") for x in bl.buffers)
