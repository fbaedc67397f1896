"""activation-masks on its own: a ReLU-family derivative from a 1-bit mask."""
from memplan_cli.passes.infra import run_checked
from memplan_cli.passes.policy import Policy
from tests.passes.graphs import conv_relu_fc, up_to


def test_the_fused_relu6_gets_a_mask_the_kept_relu_does_not():
    tg, p = up_to("activation-masks", conv_relu_fc())
    assert run_checked(p, tg)
    masks = [t for t in tg.tensors if t.role == "extra:relu_mask"]
    # the Conv's fused ReLU6: 512 elements -> 64 bytes; the Relu's output r is read by the FC's dW
    # through the Reshape view, so it stays a float
    assert [(t.name, t.shape, t.dtype) for t in masks] == [("#0:relu_mask", (64,), "uint8")]
    assert ("extra", 0) in tg.rules[0].forward.writes
    assert all(("fwd", 3) not in s.reads for s in tg.rules[0].backward_steps())


def test_off_nothing_changes():
    tg, p = up_to("activation-masks", conv_relu_fc(), policy=Policy(relu_mask=False))
    n = len(tg.tensors)
    assert not run_checked(p, tg)
    assert len(tg.tensors) == n
