"""loss-insertion on its own: one Loss op after the model, a label per output, the loss the only output."""
from memplan_cli.config import TrainConfig
from memplan_cli.ir.graph import Graph, Operand, Operation
from memplan_cli.passes.infra import run_checked
from tests.passes.graphs import residual, up_to


def test_the_loss_reads_the_output_and_a_new_label():
    tg, p = up_to("loss-insertion", residual(), TrainConfig(loss="cce"))
    assert run_checked(p, tg)
    g = tg.graph
    loss = g.operations[-1]
    assert (loss.index, loss.type, loss.attrs) == (4, "Loss", {"loss": "cce"})
    y, label = loss.inputs
    assert g.operands[y].name == "y" and not g.operands[y].is_output
    assert (g.operands[label].name, g.operands[label].shape, g.operands[label].is_input) == ("label", (2, 4), True)
    assert g.outputs == loss.outputs and g.operands[g.outputs[0]].shape == (1,)
    assert (tg.loss_op, tg.label, tg.labels, tg.loss_outputs) == (4, label, [label], ["y"])


def test_a_model_tensor_named_label_keeps_its_name():
    ops = [Operand(0, "label", (2, 4), is_input=True), Operand(1, "w", (4, 4), is_const=True),
           Operand(2, "y", (2, 4), is_output=True)]
    g = Graph(ops, [Operation(0, "FullyConnected", [0, 1, -1], [2])], [0], [2])
    tg, p = up_to("loss-insertion", g)
    run_checked(p, tg)
    assert tg.graph.operands[tg.label].name == "label#3" and tg.graph.operands[0].name == "label"
