"""ColossalAI-style per-node figures on a hand-built training graph."""
from memplan_cli.ir.graph import Graph, Operand, Operation
from memplan_cli.passes.training_graph import TrainingGraph
from memplan_cli.report.colossal import per_layer_extra, per_node_figures


def _tg():
    g = Graph([Operand(0, "x", (1, 4)), Operand(1, "w", (4, 4), is_const=True), Operand(2, "y", (1, 4)),
               Operand(3, "label", (1, 4)), Operand(4, "l", (1,))],
              [Operation(0, "FullyConnected", [0, 1], [2]), Operation(1, "Loss", [2, 3], [4])], [0, 3], [4])
    tg = TrainingGraph(g, None)
    t = tg.add_tensor
    x = t("x", "non-const", (1, 4), "float32", "input", None, 0)
    w = t("w", "trainable", (4, 4), "float32", "weight", 0, 1)
    y = t("y", "non-const", (1, 4), "float32", "activation", 0, 2)
    lab = t("label", "non-const", (1, 4), "float32", "label", None, 3)
    loss = t("l", "non-const", (1,), "float32", "loss", 1, 4)
    saved = t("saved", "extra", (1, 8), "float32", "extra:saved", 0)
    dy = t("dy", "back-prop", (1, 4), "float32", "back-prop", 1, 2)
    dw = t("dw", "gradient", (4, 4), "float32", "gradient", 0, 1)
    s1 = t("scratch1", "extra", (1, 3), "float32", "extra:s1", 0)
    s2 = t("scratch2", "extra", (1, 10), "float32", "extra:s2", 0)
    tg.fwd = {0: x, 2: y, 3: lab, 4: loss}
    tg.persistent.add(w)
    tg.fed.update({x, lab})
    tg.add_step("forward", 0, [x, w], [y, saved])
    tg.add_step("forward", 1, [y, lab], [loss])
    tg.add_step("calcDerivative", 1, [y, lab, loss], [dy])
    tg.add_step("calcGradient", 0, [dy, x, saved], [dw, s1])
    tg.add_step("calcDerivative", 0, [dy, w], [s2])
    tg.add_step("applyGradient", 0, [dw, w], [w])
    return tg


def test_per_node_figures_by_hand():
    figs = per_node_figures(_tg())
    # FC: output y (16 B); saved-for-backward 32 B; backward makes dw (64 B) for the optimizer and two
    # scratch buffers in different steps: the peak is the larger (40 B)
    assert figs[0] == {"fwd_mem_out": 16, "fwd_mem_tmp": 32, "bwd_mem_tmp": 40, "bwd_mem_out": 64}
    # loss: output 4 B; its backward makes dy (16 B) for the FC
    assert figs[1] == {"fwd_mem_out": 4, "fwd_mem_tmp": 0, "bwd_mem_tmp": 0, "bwd_mem_out": 16}


def test_scratch_buffers_alive_together_add_up():
    tg = _tg()
    tg.steps[4].reads.append(8)  # scratch1 (id 8) now lives into the calcDerivative step too
    assert per_node_figures(tg)[0]["bwd_mem_tmp"] == 12 + 40


def test_hook_is_keyed_by_the_owner_label():
    extra = per_layer_extra(_tg())
    assert list(extra) == ["#0 FullyConnected", "#1 Loss"]
