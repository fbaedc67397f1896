"""The relaxation of the whole remat space (memplan_cli/remat/full.py): on random plans of real
models (ops kept, recomputed once or before each use, chains), it never counts more live bytes than
the plan truly needs nor more added FLOPs than it truly adds, so its floor and its least added FLOPs
are proven; a budget below the floor is answered at once."""
import random

import pytest

from devtools.modelgen import ModelBuilder, to_graph
from memplan_cli.config import TrainConfig
from memplan_cli.passes.rematerialize import each, forward_end
from memplan_cli.passes.training_graph import align_up
from memplan_cli.remat.problem import RematProblem
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


def _silu_chain(batch=4):
    """Convs each followed by x * sigmoid(x) (SiLU as the exporters write it): a Mul's backward
    writes dA and dB, and only one of them can take over dY's memory."""
    mb = ModelBuilder(seed=1)
    x = mb.input([1, 8, 8, 3])
    for w in (16, 16, 8):
        x = mb.conv2d(x, w, 3)
        x = mb.mul(x, mb.sigmoid(x))
    x = mb.reshape(x, [1, 8 * 8 * 8])
    mb.output(mb.fully_connected(x, 10))
    return to_graph(mb, batch)


def test_an_input_hosts_one_output_of_a_step():
    problem = RematProblem(_silu_chain(), TrainConfig(batch_size=4, optimizer="sgd", loss="mse"))
    tg = problem.relaxed_step()
    size = {t: align_up(tg.tensors[t].nbytes, problem.align) for t in range(len(tg.tensors))}
    hosted = full.hosted_results(tg, tg.steps, size)
    muls = [s for s in tg.steps if s.kind == "calcDerivative" and tg.graph.operations[s.op].type == "Mul"]
    assert len(muls) == 3
    for s in muls:
        # dY hosts one of dA, dB: either the aliasing pass gave it one already, or the relaxation may
        # count one as computed in place, never both
        inputs = {tg.root(r) for r in s.reads}
        sharing = [w for w in s.writes if tg.root(w) in inputs]
        assert len(s.writes) == 2 and len(sharing) + sum(1 for w in s.writes if (s.index, w) in hosted) == 1
    # so the floor counts dY, A, B and one output at the largest Mul's backward, and still holds for
    # every plan (the random plans of test_the_relaxation_never_counts_more_than_a_plan_needs)
    fl, where = problem.full.floor
    big = 4 * 8 * 8 * 16 * 4
    assert "Mul" in where and fl >= 4 * big
    for plan in _random_plans(problem, 16):
        assert fl <= problem.bound(plan)
