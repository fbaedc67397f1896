"""training-configuration on its own: which ops are selected and which of them train."""
from memplan_cli.config import TrainConfig
from memplan_cli.passes.infra import run_checked
from tests.passes.graphs import conv_relu_fc, up_to


def test_every_op_is_selected_and_those_with_weights_train():
    g = conv_relu_fc()
    tg, p = up_to("training-configuration", g)
    assert run_checked(p, tg)
    assert tg.selected_ops == {0, 1, 2, 3} and tg.trainable_ops == {0, 3}  # Relu, Reshape: no weights
    assert tg.model_ops == 4 and tg.frozen_params == set()
    assert tg.graph is not g and tg.graph.operations is not g.operations  # a copy the passes may extend


def test_the_last_op_only():
    tg, p = up_to("training-configuration", conv_relu_fc(), TrainConfig(trainable=1))
    run_checked(p, tg)
    assert tg.selected_ops == {3} and tg.trainable_ops == {3}


def test_biases_only_freeze_every_other_weight():
    tg, p = up_to("training-configuration", conv_relu_fc(), TrainConfig(train=("biases",)))
    run_checked(p, tg)
    names = {tg.graph.operands[i].name for i in tg.frozen_params}
    assert names == {"w0", "w1", "shape"} and tg.trainable_ops == {0, 3}  # every constant but the biases
