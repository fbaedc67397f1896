"""cheap-recompute on its own: a GELU output recomputed from its kept input instead of kept."""
from memplan_cli.passes.infra import run_checked
from memplan_cli.passes.policy import Policy
from tests.passes.graphs import fc_gelu_fc, up_to


def test_the_gelu_output_is_recomputed_from_its_kept_input():
    tg, p = up_to("cheap-recompute", fc_gelu_fc())
    assert run_checked(p, tg)
    assert tg.cheap_recomputed == ["g"]
    re = next(s for s in tg.steps if s.label.endswith("(recompute)"))
    assert re.op == 1 and re.reads == [tg.fwd[2]]  # from a, which the GELU's own backward reads anyway
    grad = next(s for s in tg.steps if (s.kind, s.op) == ("calcGradient", 2))
    assert grad.index == re.index + 1 and re.writes[0] in grad.reads
    # the copy names what it is a copy of (the figures count the recompute's FLOPs by this link)
    assert tg.cheap_copies == {re.writes[0]: tg.fwd[3]}


def test_off_nothing_changes():
    tg, p = up_to("cheap-recompute", fc_gelu_fc(), policy=Policy(cheap_recompute=False))
    steps = list(tg.steps)
    assert not run_checked(p, tg)
    assert tg.steps == steps and tg.cheap_recomputed == [] and tg.cheap_copies == {}
