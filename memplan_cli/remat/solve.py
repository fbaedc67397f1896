"""The solver: the remat plan with the least added FLOPs whose planned arena fits a budget.

Rules:
- One model of the step: every plan is scored through the memplan profile's own pass list
  (`problem.py`), so its lower bound, planned arena and FLOPs are those of the step `analyze
  --budget` reports and `verify --budget` runs; nothing is patched afterwards.
- Monotone by construction: the plans come from a ladder that does not depend on the budget.
  From the plain plan down to the floor, rung targets `LADDER` equal steps apart; each rung is
  reached by a greedy that cuts where the plan is over the rung's target (warm-started from the rung
  above) and improved by a local search at that target (keep an op again, or recompute it once
  instead of before each use, while the plan still fits the target). Every plan scored while
  building the ladder (with Chen-style segmentations and every candidate dropped) is a candidate;
  the answer for a budget is the cheapest of them whose planned arena fits it (arenas planned in
  FLOPs order, at most `ARENAS` per budget). A larger budget admits every plan a smaller one does,
  so it never costs more FLOPs. Work is counted in plans scored, each weighted by its steps over
  the plain step's (`WORK` for the whole ladder), never in seconds: the same input gives the same
  plan on any machine.
- No contradiction: a plan is reported as fitting exactly when its planned arena (the same planner
  as the analysis) is at or under the budget; when none is found, the smallest figure reported is
  above the budget by construction (an arena planned over it, or a lower bound over it).
- Claims are structured (`RematResult.proof`, `.status`): "infeasible" only with a proof (the budget
  is below the floor, or the relaxation of the whole remat space has no solution under it);
  otherwise nothing found is "none_found", worded as such.
- Proofs come only from the relaxation of the whole remat space (`remat/full.py`), built on the
  step without any recompute, of which every plan here (cheap recomputes included) is a case: the
  floor, and a lower bound on the added FLOPs of any plan whose live bytes fit (HiGHS, a node
  limit), rebased on memplan's own plain step (less the FLOPs its cheap recomputes already spend). A
  plan whose added FLOPs meet that bound is "optimal"; otherwise "feasible", with the bound.
- The step's FLOPs must be known for every candidate (`passes/cost.py`); otherwise the solver
  refuses (it cannot rank plans by compute), naming the op types.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from memplan_cli.errors import MemplanError
from memplan_cli.remat import chen
from memplan_cli.remat.problem import RematProblem

LADDER = 8  # rungs between the plain plan and the floor
LADDER_WORK = 240  # work for the whole ladder, in plans the size of the plain step (each plan scored
# costs its steps / the plain step's steps: a plan recomputing much costs more)
WORK = 480  # work of the search at the budget itself (every round together)
ROUNDS = 3  # searches at most: each after the first below the budget by the arena's excess
ARENAS = 12  # arenas planned per budget at most (cheapest plans whose bound fits first)
TRIES = 6  # greedy: holders whose cut removes excess bytes scored per step
RUNS = (0, 3, 8)  # greedy: each cut tried alone and with this many producers before it
GAP = 1e-3  # a rung's local search stops within this fraction of the step's FLOPs of its target's floor


@dataclass
class RematResult:
    budget: int
    fits: bool
    drop: frozenset = frozenset()
    bound: int = 0  # lower bound of the plan
    arena: int = 0  # planned arena of the plan
    added_flops: int = 0
    step_flops: int = 0  # memplan's own step without a budget
    status: str = ""  # optimal | feasible | infeasible (proven) | none_found (not proven)
    proof: str | None = None  # why nothing fits, when proven: "below_floor" | "no_relaxed_plan"
    lower_flops: int | None = None  # proven least added FLOPs of any plan fitting the budget (None: no bound)
    reachable: int = 0  # nothing fits: the smallest figure found (an arena or a lower bound), > budget
    reachable_kind: str = ""  # "arena" | "lower_bound"
    reachable_drop: frozenset = frozenset()
    reachable_lower_bound: int | None = None  # proven: no plan's live bytes go below it
    floor: int = 0
    floor_step: str = ""
    evaluations: int = 0
    arenas_planned: int = 0

    @property
    def ratio(self) -> float:
        return (self.step_flops + self.added_flops) / self.step_flops if self.step_flops else 1.0

    @property
    def ratio_lower(self) -> float | None:
        """The proven least FLOPs ratio of any plan fitting the budget."""
        if self.lower_flops is None or not self.step_flops:
            return None
        return (self.step_flops + self.lower_flops) / self.step_flops


def floor(problem: RematProblem) -> tuple[int, str]:
    """What no plan's live bytes go below (`full.py`): persistent state plus the most one step needs
    whatever is recomputed (its working set and the values no recompute can replace), and where."""
    return problem.full.floor


def _key(problem, drop):
    return (problem.added_flops(drop), len(drop), sorted(drop))


def close(problem: RematProblem, plan) -> frozenset:
    """Add to `plan` the producers whose results only recomputes read after the forward pass (a
    Conv before a dropped ReLU, a Pad before a dropped conv): keeping them would hold their results
    for the recompute, so the chain recomputes from the kept tensors before it."""
    from memplan_cli.passes.rematerialize import plan_ops

    narrow = set(problem.narrow)
    fwd = problem.fwd_reads
    out = set(plan)
    ops = set(plan_ops(out))
    changed = True
    while changed:
        changed = False
        for d in sorted(ops):
            for j in fwd.get(d, ()):
                if j in problem.cost and j not in narrow and j not in ops:
                    out.add(j)
                    ops.add(j)
                    changed = True
    return frozenset(out)


def _moves(problem: RematProblem, plan: frozenset):
    """Plans one step from `plan`: each candidate kept, recomputed once or before each use."""
    from memplan_cli.passes.rematerialize import each

    for k in problem.candidates:
        e = each(k)
        state = e if e in plan else (k if k in plan else None)
        base = plan - {k, e}
        for nxt in (None, k, e):
            if nxt == state or (nxt == e and k not in problem.each_ok):
                continue
            yield base if nxt is None else base | {nxt}


def greedy(problem: RematProblem, target: int, work: int, plan: frozenset = frozenset()) -> frozenset:
    """Cut where the plan is over `target`: among the ops whose results it holds there untouched
    (`RematProblem.holders`, the `TRIES` holding most), drop one (with its chain, `close`) or
    recompute a dropped one before each use instead of once, whichever removes most excess bytes
    per added FLOP; repeat until the plan fits, nothing helps or `work` plans are scored."""
    from memplan_cli.passes.rematerialize import each

    n0 = problem.effort
    while problem.bound(plan) > target and problem.effort - n0 < work:
        held = problem.holders(plan, target)
        ex, fl = problem.excess(plan, target), problem.added_flops(plan)
        best, score, gaining = None, 0.0, 0
        # the ops holding most first; past the first TRIES only until one removes excess bytes
        for k in sorted(held, key=lambda k: (-held[k], k)):
            if gaining >= TRIES or problem.effort - n0 >= work:
                break
            if k not in plan and each(k) not in plan:
                # k alone, or k with the ops before it (a run recomputed from the tensor before it:
                # its input is then not held for the recompute either)
                trials = [close(problem, plan | _run(problem, plan, k, depth)) for depth in RUNS]
            elif k in plan and k in problem.each_ok:
                trials = [(plan - {k}) | {each(k)}]
            else:
                continue
            gained = False
            for trial in dict.fromkeys(trials):
                if problem.effort - n0 >= work:
                    break
                gain = ex - problem.excess(trial, target)
                if gain <= 0:
                    continue
                gained = True
                sc = gain / (max(problem.added_flops(trial) - fl, 0) + 1)
                if sc > score:
                    best, score = trial, sc
            gaining += gained
        if best is None:
            break
        plan = best
    return plan


def _run(problem: RematProblem, plan, k: int, depth: int) -> set:
    """k and the candidates up to `depth` producers before it (through their forward reads) that
    `plan` keeps: dropped together, they recompute from the tensors before the run."""
    from memplan_cli.passes.rematerialize import plan_ops

    dropped = set(plan_ops(plan))
    out, front = {k}, [k]
    for _ in range(depth):
        front = [j for d in front for j in problem.fwd_reads.get(d, ()) if j not in out and j not in dropped]
        out.update(front)
    return out


def _cheap(problem, plan, trial):
    """Sort key of a move from `plan`: the FLOPs it saves at most (negative first); >= (0,): none."""
    d = set(trial) ^ set(plan)
    removed = [k for k in d if k in plan]
    gain = sum(problem.cost.get(k if k >= 0 else -1 - k) or 0 for k in removed)
    if len(trial) >= len(plan) and not any(k < 0 for k in removed):
        return (0,)
    return (-gain, sorted(trial))


def descend(problem: RematProblem, start: frozenset, target: int, work: int) -> frozenset:
    """Lower the bound from `start`: one candidate at a time (forward order) kept, recomputed once or
    before each use; keep a change that lowers the bound (or keeps it and costs less), until the bound
    is <= target, nothing improves or `work` plans are scored."""
    best, n0 = start, problem.effort
    improved = True
    while improved and problem.bound(best) > target and problem.effort - n0 < work:
        improved = False
        for trial in list(_moves(problem, best)):
            if problem.effort - n0 >= work:
                break
            bt, bb = problem.bound(trial), problem.bound(best)
            if bt < bb or (bt == bb and _key(problem, trial) < _key(problem, best)):
                best, improved = trial, True
                if bt <= target:
                    return best
    return best


def _every(problem: RematProblem) -> frozenset:
    """Every candidate dropped, recomputed before each use where it can be: the least memory, roughly."""
    from memplan_cli.passes.rematerialize import each

    return frozenset(each(k) if k in problem.each_ok else k for k in problem.candidates)


def plan_arena(problem: RematProblem, drop) -> int:
    """The arena memplan's own profile plans for this plan (planned and checked like `analyze`)."""
    from memplan_cli.analysis import plan_buffer_list
    from memplan_cli.buffers import Pool
    from memplan_cli.profiles.memplan import pick_planner

    key = frozenset(drop)
    cache = problem.__dict__.setdefault("_arenas", {})
    if key not in cache:
        tg = problem.build(key)
        bl = tg.to_buffer_list(pools=[Pool("arena", "non-const", pick_planner(problem.planner))],
                               align=problem.align)
        cache[key] = sum(p.plan.arena for p in plan_buffer_list(bl, planner_override=problem.planner))
    return cache[key]


def improve(problem: RematProblem, plan: frozenset, target: int, work: int, lower: int = 0) -> frozenset:
    """Local search at `target`: keep an op again, or recompute it once instead of before each use
    (cheaper moves first), while the plan's bound stays <= target, until nothing improves, the plan
    is within GAP of the step's FLOPs of `lower`, or `work` plans are scored."""
    best, n0 = plan, problem.effort
    close_enough = lower + GAP * (problem.flops.total or 0)
    improved = True
    while improved and problem.effort - n0 < work and problem.added_flops(best) > close_enough:
        improved = False
        cur = _key(problem, best)
        for trial in sorted(_moves(problem, best), key=lambda d: _cheap(problem, best, d)):
            if _cheap(problem, best, trial) >= (0,) or problem.effort - n0 >= work:
                break
            if problem.bound(trial) <= target and _key(problem, trial) < cur:
                best, improved = trial, True
                break
    return best


def ladder(problem: RematProblem, work: int = LADDER_WORK) -> list:
    """The plans every budget chooses among (see the module rules): built once per problem, from the
    problem alone (never from a budget), deterministic and bounded by `work`."""
    cached = problem.__dict__.get("_ladder")
    if cached is not None:
        return cached
    start = problem.effort
    seen_before = set(problem._bounds)
    top, fl = problem.bound(()), floor(problem)[0]
    narrow = problem.narrow
    seeds = [frozenset(), _every(problem)]
    n = len(narrow)
    for length in sorted({2, 3, 4, max(2, math.isqrt(n)), max(2, 2 * math.isqrt(n))}):
        seeds.append(close(problem, chen.segments(narrow, length)))
    for d in seeds:
        problem.bound(d)
    plan = frozenset()
    share = max(work - (problem.effort - start), 0) / max(LADDER, 1)
    for j in range(1, LADDER + 1):
        target = top - (top - fl) * j // LADDER
        spent = problem.effort
        if problem.bound(plan) > target:
            plan = greedy(problem, target, share * 0.6, plan)
        if problem.bound(plan) > target:
            low = min(seeds + [plan], key=lambda d: (problem.bound(d), _key(problem, d)))
            plan = greedy(problem, target, share * 0.2, low)
        if problem.bound(plan) <= target:
            plan = improve(problem, plan, target, max(share - (problem.effort - spent), share * 0.2))
        if problem.effort - start >= work * 1.5:
            break
    out = [d for d in problem._bounds if d not in seen_before] or [frozenset()]
    out.sort(key=lambda d: _key(problem, d))
    problem.__dict__["_ladder"] = out
    return out


def search(problem: RematProblem, target: int, work: int, hint=frozenset(), lower: int = 0) -> None:
    """Plans for `target` (scored into the problem; the caller chooses among every plan scored):
    seeds (a greedy that cuts where the plan is over the target; the relaxation's own plan `hint`,
    recomputed once and before each use; the cheapest ladder plan under the target), the cheapest
    seed under the target improved by the local search, else a descent from the lowest."""
    from memplan_cli.passes.rematerialize import each

    start = problem.effort
    seeds = [greedy(problem, target, work // 3)]
    if hint:
        seeds += [close(problem, hint), close(problem, frozenset(each(k) if k in problem.each_ok else k for k in hint))]
    under = [d for d in ladder(problem) if problem.bound(d) <= target]
    seeds += under[:1]
    fitting = [d for d in seeds if problem.bound(d) <= target]
    if not fitting:
        low = min(seeds + ladder(problem), key=lambda d: (problem.bound(d), _key(problem, d)))
        low = greedy(problem, target, work // 6, low)
        if problem.bound(low) > target:
            low = descend(problem, low, target, work // 6)
        if problem.bound(low) > target:
            return
        fitting = [low]
    best = min(fitting, key=lambda d: _key(problem, d))
    improve(problem, best, target, max(work - (problem.effort - start), 0), lower)


def _choose(problem: RematProblem, budget: int, plans):
    """The cheapest of `plans` whose planned arena fits `budget` (arenas planned in FLOPs order, at
    most ARENAS): (plan or None, arenas planned, the smallest (figure, kind, plan) over the budget)."""
    smallest = None
    planned = 0
    for d in sorted(plans, key=lambda d: _key(problem, d)):
        b = problem.bound(d)
        if b > budget:
            if smallest is None or (smallest[1] == "lower_bound" and b < smallest[0]):
                smallest = (b, "lower_bound", d)
            continue
        if planned >= ARENAS:
            continue
        a = plan_arena(problem, d)
        planned += 1
        if a <= budget:
            return d, planned, smallest
        if smallest is None or smallest[1] == "lower_bound" or a < smallest[0]:
            smallest = (a, "arena", d)
    return None, planned, smallest


def solve(problem: RematProblem, budget: int, work: int = WORK) -> RematResult:
    if not problem.flops_available:
        missing = sorted({problem.graph.operations[k].type for k, v in problem.cost.items() if v is None}
                         | set(problem.flops.missing))
        raise MemplanError(f"cannot choose the cheapest remat plan: no FLOPs for op {', '.join(missing)}")
    res = RematResult(budget, False, step_flops=problem.flops.total)
    fl = floor(problem)
    res.floor, res.floor_step = fl
    if budget < fl[0]:
        # proven: no plan goes below the floor; the smallest reachable of two plans (no search)
        res.status, res.proof, res.reachable_lower_bound = "infeasible", "below_floor", fl[0]
        best = min((frozenset(), _every(problem)), key=lambda d: (problem.bound(d), _key(problem, d)))
        res.reachable_drop, res.reachable, res.reachable_kind = best, problem.bound(best), "lower_bound"
        res.evaluations = problem.evaluations
        return res
    if plan_arena(problem, ()) <= budget:
        # optimal unless the plain plan's own cheap recomputes could be traded for fewer FLOPs
        res.fits, res.arenas_planned = True, 1
        res.status, res.lower_flops = ("optimal", 0) if not problem.cheap_flops else ("feasible", None)
        res.bound, res.arena = problem.bound(()), plan_arena(problem, ())
        res.evaluations = problem.evaluations
        return res
    lower, hint = None, frozenset()
    try:
        from memplan_cli.remat import full

        b = full.lower_flops(problem, problem.full, budget)
        if b.lower == float("inf"):
            lower = math.inf
        else:  # about the step without any recompute: rebased on memplan's own plain step
            lower, hint = int(b.lower * (1 - 1e-9)) - problem.cheap_flops, b.ops  # may be < 0
    except ImportError:  # no HiGHS: the search alone, no bound
        pass
    drop, smallest = None, None
    if lower != math.inf:
        ladder(problem)
        spent, target = problem.effort, budget
        for _ in range(ROUNDS):
            left = work - (problem.effort - spent)
            if left <= 0:
                break
            search(problem, target, left, hint, lower if lower is not None else 0)
            drop, planned, smallest = _choose(problem, budget, problem._bounds)
            res.arenas_planned += planned
            if drop is not None or smallest is None or smallest[1] != "arena":
                break
            target -= smallest[0] - budget  # fragmentation: search below the budget by the excess
    if drop is None and smallest is None:
        drop, planned, smallest = _choose(problem, budget, [frozenset(), _every(problem)])
        res.arenas_planned += planned
    res.evaluations = problem.evaluations
    if drop is not None:
        res.fits, res.drop = True, drop
        res.bound, res.arena, res.added_flops = problem.bound(drop), plan_arena(problem, drop), problem.added_flops(drop)
        if lower is not None:
            res.lower_flops = lower
        res.status = "optimal" if res.lower_flops is not None and res.added_flops <= res.lower_flops else "feasible"
        return res
    res.reachable_lower_bound = fl[0]
    if smallest is None:  # every plan scored is under the budget by its bound, none planned: the plain plan
        smallest = (plan_arena(problem, ()), "arena", frozenset())
    res.reachable, res.reachable_kind, res.reachable_drop = smallest
    if lower == math.inf:
        res.status, res.proof = "infeasible", "no_relaxed_plan"
    else:
        res.status = "none_found"
    return res


def solve_as_run(graph, cfg, problem: RematProblem, budget: int, **analyze_kw):
    """The remat answer for `budget`: (RematResult, profile options, Analysis of the plan that is
    reported and that `verify --budget` runs). The analysis is memplan's own profile with
    `remat=plan`: the very pipeline the problem scored, so its planned arena is the solver's."""
    from memplan_cli.analysis import analyze_graph

    analyze_kw.pop("time_limit", None)  # planned on the work budget, as the solver planned it
    res = solve(problem, budget)
    opts = {"remat": sorted(res.drop)} if res.fits and res.drop else {}
    a = analyze_graph(graph, cfg, profile_options=opts, planner=problem.planner, **analyze_kw)
    if res.fits and a.planned_total != res.arena:
        raise AssertionError(f"remat: the analysis planned {a.planned_total} B for the plan the solver "
                             f"planned in {res.arena} B")  # one pipeline, one planner: cannot differ
    return res, opts, a
