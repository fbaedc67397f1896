"""The solver: the remat plan with the least added FLOPs whose planned arena fits a budget.

Rules:
- One model of the step: every plan is scored through the memplan profile's own pass list
  (`problem.py`), so its lower bound, planned arena and FLOPs are those of the step `analyze
  --budget` reports and `verify --budget` runs; nothing is patched afterwards.
- Monotone by construction: the plans come from a ladder that does not depend on the budget.
  From the plain plan down to the floor, rung targets `LADDER` equal steps apart; each rung is
  reached by cuts where the plan is over the rung's target (`cut`: from the rung above's plan and
  from no plan; when both get stuck, by a seed already under the target, else from the seed with
  the least bound) and the plan reaching it
  is improved by a local search at that target (keep an op again, or recompute it once instead of
  before each use, while the plan still fits the target). The front of every plan scored (no
  cheaper plan has a lower bound; plans cheaper than memplan's own plain step left out) is the
  same for every budget, and the answer for a budget is the cheapest front plan whose planned
  arena fits it (arenas planned in FLOPs order for the plans whose bound fits, no count limit). A
  larger budget admits every plan a smaller one does, so it never costs more FLOPs, and a single
  budget's answer is the one a sweep gives there. Work is counted in training steps built while
  scoring plans (`WORK` for the whole ladder), never in seconds: the same input gives the same plan
  on any machine.
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

from memplan_cli.analysis import analyze_graph, plan_buffer_list
from memplan_cli.buffers import Pool
from memplan_cli.errors import MemplanError
from memplan_cli.passes.rematerialize import each, plan_ops
from memplan_cli.profiles.memplan import pick_planner
from memplan_cli.remat import chen
from memplan_cli.remat.problem import RematProblem

LADDER = 16  # rungs between the plain plan and the floor
WORK = 200_000  # work for the whole ladder, in training steps built (each plan scored costs its
# steps: a plan recomputing much costs more, a large network's plans more than a small one's)
REACH = 0.6  # a rung's share of the work for its cuts (the rest for its local search)
HINT_NODES = 20  # branch-and-bound nodes of the relaxation's solve per rung (a hint, not a proof)
HINT_WORK = 12  # a hint's solve counts as this many plans the size of the plain step (measured:
# about as long as scoring 12 plans, on densenet121 b4 and mobilenet_v2 b8)
TRIES = 6  # cut: drops scored per step once one gains
GAINING = 2  # cut: scored until this many lower the excess
RUNS = (0, 3, 8)  # cut: each op dropped alone and with this many producers before it
REPAIRS = 3  # cut: rounds of dropping what a drop made held longer


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
    for k in problem.candidates:
        e = each(k)
        state = e if e in plan else (k if k in plan else None)
        base = plan - {k, e}
        for nxt in (None, k, e):
            if nxt == state or (nxt == e and k not in problem.each_ok):
                continue
            yield base if nxt is None else base | {nxt}


def descend(problem: RematProblem, start: frozenset, target: int, work: float) -> frozenset:
    """Lower the bound from `start` when the cuts are stuck: one candidate at a time (forward order)
    kept, recomputed once or before each use; a change that lowers the bound (or keeps it and costs
    less) is kept, until the bound is <= target, nothing improves or `work` is spent."""
    best, s0 = start, problem.steps_built
    improved = True
    while improved and problem.bound(best) > target and _spent(problem, s0) < work:
        improved = False
        for trial in list(_moves(problem, best)):
            if _spent(problem, s0) >= work:
                break
            bt, bb = problem.bound(trial), problem.bound(best)
            if bt < bb or (bt == bb and _key(problem, trial) < _key(problem, best)):
                best, improved = trial, True
                if bt <= target:
                    return best
    return best


def _spent(problem: RematProblem, start: float) -> float:
    return problem.steps_built - start


def cut(problem: RematProblem, plan: frozenset, target: int, start: float, work: float,
        rejected: set) -> frozenset | None:
    """One greedy step towards `target`. The ops whose results `plan` holds, untouched, where it is
    over the target (`RematProblem.holders`: bytes x such steps) give drop trials: the op alone,
    with 3 or 8 producers before it (`_run`), with its block (`RematProblem.block`), or recomputed
    before each use, each closed over chains (`close`). They are taken alternately by most held
    bytes per FLOP the drop adds and by most held bytes, and scored until `GAINING` lower the plan's
    excess bytes (or one does and `TRIES` are scored; while none does, every trial in turn); a fresh
    trial that does not gain is repaired (`_repair`: what the drop made held longer dropped too) and
    scored again; the one removing most excess bytes per added FLOP wins. Only when no fresh drop
    gains, a dropped op
    is recomputed before each use instead of once. None: nothing gains (or `work` is spent)."""
    held = problem.holders(plan, target)
    if not held:
        return None
    ex, fl = problem.excess(plan, target), problem.added_flops(plan)
    dropped = set(plan_ops(plan))
    fresh, upgrades = {}, {}
    seen: set = set()
    cost = problem.cost
    for k in sorted(held):
        if k not in dropped:
            # k alone, or with the ops before it (a run recomputed from the tensor before it: its
            # input is then not held for the recompute either), its block, or before each use
            for depth in RUNS + ("block", "each"):
                if ((k, depth), plan) in rejected or (depth == "each" and k not in problem.each_ok):
                    continue
                if depth == "block":
                    ops = set(problem.block.get(k, ())) | {k}
                elif depth == "each":
                    ops = {each(k)}
                else:
                    ops = _run(problem, plan, k, depth)
                key = frozenset(ops)
                if key in seen:
                    continue
                seen.add(key)
                # closed over chains only when scored (`close` is the costly part)
                fresh[(k, depth)] = (sum(cost[j if j >= 0 else -1 - j] or 0 for j in ops
                                         if (j if j >= 0 else -1 - j) not in dropped), ops)
        elif k in plan and k in problem.each_ok:
            upgrades[(k, 0)] = (cost[k] or 0, (plan - {k}) | {each(k)})
    for group in (fresh, upgrades):
        by_rate = sorted(group, key=lambda kd: (-held[kd[0]] / (group[kd][0] + 1), str(kd[1]), kd[0]))
        by_size = sorted(group, key=lambda kd: (-held[kd[0]], str(kd[1]), kd[0]))
        order = list(dict.fromkeys(kd for pair in zip(by_rate, by_size) for kd in pair))
        best, score, gaining = None, 0.0, 0
        for n, kd in enumerate(order):
            if gaining >= GAINING or (n >= TRIES and gaining) or _spent(problem, start) >= work:
                break
            trial = close(problem, plan | group[kd][1]) if group is fresh else group[kd][1]
            gain = ex - problem.excess(trial, target)
            if gain <= 0 and group is fresh:  # what the drop made held longer, dropped too
                trial = _repair(problem, plan, trial, target, start, work)
                gain = ex - problem.excess(trial, target) if trial is not None else 0
            if gain <= 0:
                rejected.add((kd, plan))
                continue
            gaining += 1
            sc = gain / (max(problem.added_flops(trial) - fl, 0) + 1)
            if sc > score:
                best, score = trial, sc
        if best is not None:
            return best
    return None


def _repair(problem: RematProblem, plan, trial, target: int, start: float, work: float):
    """A drop that does not gain may hold other results longer instead (a Conv dropped: the cheap
    recompute of its BatchNormalization now costs the Conv too, so the BN's output is kept, and with
    it the activation computed in place over it): drop those too, up to `REPAIRS` rounds, until the
    excess over `target` falls below `plan`'s. None when it never does (or `work` is spent)."""
    before = problem.spans(plan)
    ex = problem.excess(plan, target)
    for _ in range(REPAIRS):
        if _spent(problem, start) >= work:
            return None
        dropped = set(plan_ops(trial))
        longer = {k for k, v in problem.spans(trial).items() if k not in dropped and v > before.get(k, 0)}
        if not longer:
            return None
        trial = close(problem, trial | longer)
        if problem.excess(trial, target) < ex:
            return trial
    return None


def _run(problem: RematProblem, plan, k: int, depth: int) -> set:
    """k and the candidates up to `depth` producers before it (through their forward reads) that
    `plan` keeps: dropped together, they recompute from the tensors before the run."""
    dropped = set(plan_ops(plan))
    out, front = {k}, [k]
    for _ in range(depth):
        front = [j for d in front for j in problem.fwd_reads.get(d, ()) if j not in out and j not in dropped]
        out.update(front)
    return out


def reach(problem: RematProblem, plan: frozenset, target: int, work: float) -> frozenset:
    """Cut (`cut`) from `plan` until its lower bound is at most `target`, nothing lowers it or
    `work` is spent; the last plan reached."""
    start, rejected = problem.steps_built, set()
    while problem.bound(plan) > target and _spent(problem, start) < work:
        nxt = cut(problem, plan, target, start, work, rejected)
        if nxt is None:
            break
        plan = nxt
    return plan


def plan_arena(problem: RematProblem, drop) -> int:
    """The arena memplan's own profile plans for this plan (planned and checked like `analyze`)."""
    key = frozenset(drop)
    cache = problem.__dict__.setdefault("_arenas", {})
    if key not in cache:
        tg = problem.build(key)
        bl = tg.to_buffer_list(pools=[Pool("arena", "non-const", pick_planner(problem.planner))],
                               align=problem.align)
        cache[key] = sum(p.plan.arena for p in plan_buffer_list(bl, planner_override=problem.planner))
    return cache[key]


def improve(problem: RematProblem, plan: frozenset, target: int, work: float) -> frozenset:
    """Local search at `target`: keep a dropped op again, or recompute it once instead of before each
    use, the moves saving most FLOPs first, each kept when the plan's bound stays <= target; one pass
    over the dropped ops (again while it improves), until `work` is spent."""
    start = problem.steps_built
    best = plan
    improved = True
    while improved and _spent(problem, start) < work:
        improved = False
        moves = []
        for e in best:
            k = e if e >= 0 else -1 - e
            if e < 0:  # before each use -> once, or kept
                moves.append((-(problem.cost[k] or 0), k, 0))
            else:
                moves.append((-(problem.cost[k] or 0), k, 1))
        for _, k, kind in sorted(moves):
            if _spent(problem, start) >= work:
                break
            cur = each(k) if each(k) in best else k
            if cur not in best:
                continue
            trials = [best - {cur}] + ([(best - {cur}) | {k}] if cur != k else [])
            for trial in trials:
                if _key(problem, trial) < _key(problem, best) and problem.bound(trial) <= target:
                    best, improved = trial, True
                    break
    return best


def _hint(problem: RematProblem, target: int) -> frozenset | None:
    """The plan of the relaxation of the whole space (`full.lower_flops`) at `target`: the ops it runs
    again, dropped once and closed over chains; None without HiGHS or when it has none."""
    try:
        from memplan_cli.remat import full

        full_model = problem.full
        problem._steps_built += HINT_WORK * len(problem._base.steps)  # its solve, counted as work
        b = full.lower_flops(problem, full_model, target, max_nodes=HINT_NODES, rounds=1)
    except ImportError:
        return None
    return close(problem, b.ops) if b.ops and b.lower != math.inf else None


def _seeds(problem: RematProblem) -> list:
    """Plans the ladder falls back on when its cuts get stuck: every candidate inside the forward
    pass's blocks dropped (`RematProblem.block`), the ones backward reads or all, and Chen's segments
    of 2, 3, 4 and sqrt(n) candidates (closed over chains)."""
    inblock = {k for v in problem.block.values() for k in v}
    narrow = problem.narrow
    out = [frozenset(k for k in narrow if k in inblock), frozenset(inblock)]
    for length in sorted({2, 3, 4, max(2, math.isqrt(len(narrow)))}):
        out.append(close(problem, chen.segments(narrow, length)))
    return [d for d in dict.fromkeys(out) if d]


def ladder(problem: RematProblem, work: float = WORK) -> list:
    """The plans every budget chooses among (see the module rules): built once per problem, from the
    problem alone (never from a budget), deterministic and bounded by `work`. From the plain plan
    down to the floor, rung targets `LADDER` equal steps apart: each rung is reached by cuts from the
    rung above's plan (`reach`), then improved at its target (`improve`); after a rung it cannot
    reach, the next goes on from the least bound reached. Returns the plans on the front: every plan scored that no cheaper
    plan beats on its lower bound, in FLOPs order."""
    cached = problem.__dict__.get("_ladder")
    if cached is not None:
        return cached
    start = problem.steps_built
    top, fl = problem.bound(()), floor(problem)[0]
    seeds = _seeds(problem)
    for d in seeds:
        problem.bound(d)
    plan = frozenset()
    for j in range(1, LADDER + 1):
        target = top - (top - fl) * j // LADDER
        left = work - _spent(problem, start)
        if left <= 0:
            break
        share = 2 * left / (LADDER + 1 - j)  # a rung may use what the rungs above left over
        spent = problem.steps_built
        # from the rung above's plan and from no plan (cuts chosen for this target from the start),
        # both with repairs: without them from no plan, efficientnet_b0 exported from a
        # pre/blocks/post module found nothing between its floor and 216 MiB
        tries = [reach(problem, plan, target, share * REACH / 2)]
        if plan or problem.bound(tries[0]) > target:
            tries.append(reach(problem, frozenset(), target, share * REACH - (problem.steps_built - spent)))
        left = share * REACH - (problem.steps_built - spent)
        # the relaxation's plan at this target, closed over chains
        hint = _hint(problem, target) if left > HINT_WORK * len(problem._base.steps) else None
        if hint is not None:
            tries.append(reach(problem, hint, target, share * REACH - (problem.steps_built - spent)))
        best = min(tries, key=lambda d: (problem.bound(d) > target, _key(problem, d), problem.bound(d)))
        under = [d for d in seeds if problem.bound(d) <= target]
        if problem.bound(best) > target and under:  # stuck: a seed under the target reaches the rung
            best = min(under, key=lambda d: _key(problem, d))  # as it is (the local search trades its FLOPs)
        if problem.bound(best) > target:  # stuck: from the seed (or plan) with the least bound
            low = min(seeds + tries, key=lambda d: (problem.bound(d), _key(problem, d)))
            left = min(work - _spent(problem, start), share * REACH - (problem.steps_built - spent))
            if low not in tries and left > 0:
                best = reach(problem, low, target, left)
            left = min(work - _spent(problem, start), share * REACH - (problem.steps_built - spent))
            if problem.bound(best) > target and left > 0:  # every single move from the lowest
                low = min([best, low], key=lambda d: (problem.bound(d), _key(problem, d)))
                best = descend(problem, low, target, left)
        if problem.bound(best) > target:  # the next rung goes on from the least bound reached
            plan = min(tries + [best], key=lambda d: (problem.bound(d), _key(problem, d)))
            continue
        left = work - _spent(problem, start)
        plan = improve(problem, best, target, min(left, share * (1 - REACH)))
    front, low = [], None
    # plans cheaper than memplan's own plain step (trading its cheap recomputes) are left out: the
    # plain plan answers every budget it meets, so no smaller budget may cost less
    for d in sorted((d for d in problem._bounds if problem.added_flops(d) >= 0), key=lambda d: _key(problem, d)):
        b = problem.bound(d)
        if low is None or b < low:
            front.append(d)
            low = b
    problem.__dict__["_ladder"] = front
    return front


def _choose(problem: RematProblem, budget: int, plans):
    """The cheapest of `plans` (in FLOPs order) whose planned arena fits `budget`, arenas planned
    only for plans whose bound fits (every one of them, so the answer never depends on a count):
    (plan or None, arenas planned, the smallest (figure, kind, plan) over the budget)."""
    smallest = None
    planned = 0
    for d in plans:
        b = problem.bound(d)
        if b > budget:
            if smallest is None or (smallest[1] == "lower_bound" and b < smallest[0]):
                smallest = (b, "lower_bound", d)
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
        res.reachable_drop, res.reachable, res.reachable_kind = frozenset(), problem.bound(()), "lower_bound"
        res.evaluations = problem.evaluations
        return res
    if plan_arena(problem, ()) <= budget:
        # optimal unless the plain plan's own cheap recomputes could be traded for fewer FLOPs
        res.fits, res.arenas_planned = True, 1
        res.status, res.lower_flops = ("optimal", 0) if not problem.cheap_flops else ("feasible", None)
        res.bound, res.arena = problem.bound(()), plan_arena(problem, ())
        res.evaluations = problem.evaluations
        return res
    lower = None
    try:
        from memplan_cli.remat import full

        b = full.lower_flops(problem, problem.full, budget)
        if b.lower == float("inf"):
            lower = math.inf
        else:  # about the step without any recompute: rebased on memplan's own plain step
            lower = int(b.lower * (1 - 1e-9)) - problem.cheap_flops  # may be < 0
    except ImportError:  # no HiGHS: the search alone, no bound
        pass
    drop, smallest = None, None
    if lower != math.inf:
        drop, planned, smallest = _choose(problem, budget, ladder(problem, work))
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
    analyze_kw.pop("time_limit", None)  # planned on the work budget, as the solver planned it
    res = solve(problem, budget)
    opts = {"remat": sorted(res.drop)} if res.fits and res.drop else {}
    a = analyze_graph(graph, cfg, profile_options=opts, planner=problem.planner, **analyze_kw)
    if res.fits and a.planned_total != res.arena:
        raise AssertionError(f"remat: the analysis planned {a.planned_total} B for the plan the solver "
                             f"planned in {res.arena} B")  # one pipeline, one planner: cannot differ
    return res, opts, a
