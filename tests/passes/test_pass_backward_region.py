"""backward-region on its own: which ops run backward and which operands need a back-prop."""
from memplan_cli.config import TrainConfig
from memplan_cli.passes.infra import run_checked
from memplan_cli.passes.policy import Policy
from tests.passes.graphs import conv_relu_fc, up_to


def test_everything_trains_no_input_gets_a_back_prop():
    tg, p = up_to("backward-region", conv_relu_fc())
    assert run_checked(p, tg)
    assert tg.backward_ops == {0, 1, 2, 3, 4} and tg.order == [0, 1, 2, 3, 4]
    names = {tg.graph.operands[i].name for i in tg.needs_bp}
    assert names == {"c0", "r", "f", "y"}  # never x, the label or a constant
    assert tg.defs[3] == 0 and tg.loss_ancestors == {0, 1, 2, 3, 4}


def test_training_the_last_op_stops_backward_there():
    tg, p = up_to("backward-region", conv_relu_fc(), TrainConfig(trainable=1))
    run_checked(p, tg)
    assert tg.backward_ops == {3, 4} and {tg.graph.operands[i].name for i in tg.needs_bp} == {"y"}


def test_onerts_input_backprop_gives_every_non_constant_input_one():
    tg, p = up_to("backward-region", conv_relu_fc(), policy=Policy(input_backprop=True))
    run_checked(p, tg)
    assert {"x", "label"} <= {tg.graph.operands[i].name for i in tg.needs_bp}


def test_nothing_trains_nothing_runs_backward():
    tg, p = up_to("backward-region", conv_relu_fc(), TrainConfig(trainable="none"))
    assert not run_checked(p, tg)
