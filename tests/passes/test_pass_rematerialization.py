"""rematerialization on its own: a dropped op's result recomputed before backward reads it."""
import pytest

from memplan_cli.passes.infra import run_checked
from memplan_cli.passes.rematerialize import each
from tests.passes.graphs import fc_gelu_fc, up_to


def test_the_dropped_gelu_runs_again_before_the_fc_gradient_reads_it():
    tg, p = up_to("rematerialization", fc_gelu_fc(), remat=[1])
    n = len(tg.steps)
    assert run_checked(p, tg)
    assert len(tg.steps) == n + 1
    re = next(s for s in tg.steps if s.label.endswith("(recompute)"))
    assert re.op == 1 and [tg.tensors[t].name for t in re.writes] == ["g@remat"]
    grad = next(s for s in tg.steps if (s.kind, s.op) == ("calcGradient", 2))
    assert re.index < grad.index and re.writes[0] in grad.reads and grad.subst == {tg.fwd[3]: re.writes[0]}
    assert tg.remat.dropped == [1] and tg.remat.recomputed_tensors == ["g@remat"]


def test_no_plan_nothing_changes():
    tg, p = up_to("rematerialization", fc_gelu_fc())
    assert not run_checked(p, tg) and tg.remat is None


def test_an_op_that_cannot_run_again_is_refused():
    tg, p = up_to("rematerialization", fc_gelu_fc(), remat=[3])  # the loss writes the live-out loss
    with pytest.raises(ValueError, match="cannot run again"):
        run_checked(p, tg)


def test_each_use_recomputes_before_every_reader():
    tg, p = up_to("rematerialization", fc_gelu_fc(), remat=[each(1)])
    run_checked(p, tg)
    assert tg.remat.recomputes == [1] * len(tg.remat.recomputed_tensors)
