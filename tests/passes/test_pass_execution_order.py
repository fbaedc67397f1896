"""execution-order on its own: forward in order, then each op's backward steps in reverse."""
from memplan_cli.passes.infra import run_checked
from memplan_cli.passes.policy import Policy
from tests.passes.graphs import residual, up_to

FORWARD = [("forward", k) for k in range(5)]


def test_forward_then_per_op_gradient_derivative_update():
    tg, p = up_to("execution-order", residual())
    assert run_checked(p, tg)
    assert [(s.kind, s.op) for s in tg.steps] == FORWARD + [
        ("calcDerivative", 4), ("calcGradient", 3), ("calcDerivative", 3), ("applyGradient", 3),
        ("calcDerivative", 2), ("calcGradient", 1), ("calcDerivative", 1), ("applyGradient", 1),
        ("calcGradient", 0), ("applyGradient", 0)]
    # FC #1's derivative ends with the branch point's accumulation
    step = next(s for s in tg.steps if (s.kind, s.op) == ("calcDerivative", 1))
    assert step.accumulate == tg.accumulate[1]


def test_deferred_updates_run_after_the_whole_backward_pass():
    tg, p = up_to("execution-order", residual(), policy=Policy(apply_immediately=False))
    run_checked(p, tg)
    assert [s.kind for s in tg.steps[-3:]] == ["applyGradient"] * 3


def test_a_runtime_backward_order_comes_first():
    tg, p = up_to("execution-order", residual())
    tg.backward_order = [4, 3, 1, 2, 0]
    run_checked(p, tg)
    assert [s.op for s in tg.steps if s.kind == "calcDerivative"] == [4, 3, 1, 2]
