"""The relaxation of the whole remat space (memplan_cli/remat/full.py): on random plans of real
models (ops kept, recomputed once or before each use, chains), it never counts more live bytes than
the plan truly needs nor more added FLOPs than it truly adds, so its floor and its least added FLOPs
are proven; a budget below the floor is answered at once."""
import random

import pytest

from memplan_cli.passes.rematerialize import each, forward_end
from memplan_cli.remat import full
from memplan_cli.remat.solve import solve
from tests.remat.test_relax import _problems


def _random_plans(problem, n, seed=11):
    rng = random.Random(seed)
    out = [frozenset(), frozenset(problem.candidates),
           frozenset(each(k) if k in problem.each_ok else k for k in problem.candidates)]
    for _ in range(n):
        q = rng.random()
        plan = set()
        for k in problem.candidates:
            r = rng.random()
            if r < q / 2:
                plan.add(k)
            elif r < q and k in problem.each_ok:
                plan.add(each(k))
        out.append(frozenset(plan))
    return out


def model_bytes(fu, rerun) -> int:
    """The relaxation's live bytes at its worst step when the ops `rerun` run again."""
    return fu.unit * max(fu.must[t] + sum(w for ks, w in fu.terms[t].items() if not set(ks) <= rerun)
                         for t in range(len(fu.must)))


@pytest.mark.parametrize("name,problem", list(_problems()), ids=lambda v: v if isinstance(v, str) else "")
def test_the_relaxation_never_counts_more_than_a_plan_needs(name, problem):
    fu = problem.full
    fl, where = fu.floor
    assert where.startswith("step ")
    for plan in _random_plans(problem, 16):
        tg = problem.build(plan)
        # every op the step runs again: the plan's recomputes and memplan's cheap recomputes
        rerun = {s.op for s in tg.steps[forward_end(tg):] if s.kind == "forward"}
        true = problem.bound(plan)
        assert fl <= model_bytes(fu, rerun) <= true, (name, sorted(plan))
        # the least added FLOPs at this plan's own bound is at most what the plan adds
        b = full.lower_flops(problem, fu, true)  # about the step without any recompute
        assert b.lower <= (problem.added_flops(plan) + problem.cheap_flops) * (1 + 1e-9) + 1, (name, sorted(plan))


@pytest.mark.parametrize("name,problem", list(_problems())[:3], ids=lambda v: v if isinstance(v, str) else "")
def test_below_the_floor_is_answered_at_once(name, problem):
    fl, _ = problem.full.floor
    res = solve(problem, fl - 1)
    assert not res.fits and res.status == "infeasible" and res.floor == fl
    assert res.evaluations <= 2 and res.reachable_lower_bound == fl <= res.reachable
    assert res.proof == "below_floor"
