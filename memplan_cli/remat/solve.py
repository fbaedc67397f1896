"""The solver: the remat plan with the least added FLOPs whose planned arena fits a budget.

Rules:
- Search on the lower bound (most bytes live at one step), then plan the arena with the memplan
  profile's planner and check it; when the arena exceeds the budget (fragmentation), tighten the
  search target by the excess and search again (at most `ROUNDS` times, all within `WORK`: plans
  scored, each weighted by its steps over the plain step's, so the work bounds the time).
- The space: every candidate kept, recomputed once, or recomputed before each use, chains
  recomputed from kept tensors (`passes/rematerialize.py`).
- Proofs come only from the relaxation of the whole remat space (`remat/full.py`): the floor (no
  plan's live bytes go below it: a budget under it is answered at once, "below the floor") and a
  lower bound on the added FLOPs of any plan whose live bytes fit (HiGHS, a node limit). A plan
  whose added FLOPs meet that bound is "optimal"; otherwise "feasible", with the bound
  (`lower_flops`): the gap to the optimum is at most added - lower.
- The plans: seeds (a greedy that cuts where the plan is over the target; the relaxation's own plan,
  recomputed once and before each use; Chen-style segmentations of a few lengths; every candidate
  dropped), each closed over its chains (`close`: a producer whose result only recomputes
  read is dropped too). The cheapest that fits is improved by a local search, deterministic and
  bounded by a count of plan evaluations (work, never seconds): keep an op again, or recompute it
  once instead of before each use, while the plan still fits, until it is within `GAP` of the step's
  FLOPs of the proven bound. When no seed fits, a descent lowers
  the bound one candidate at a time first.
- No plan found: the answer says the smallest bound found (`reachable`), the floor
  (`reachable_lower_bound`, `floor`) and that it is not proven that none fits.
- The step's FLOPs must be known for every candidate (`passes/cost.py`); otherwise the solver
  refuses (it cannot rank plans by compute), naming the op types.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from memplan_cli.errors import MemplanError
from memplan_cli.remat import chen
from memplan_cli.remat.problem import RematProblem

ROUNDS = 6
WORK = 600  # work per solve (every search round together), in plans the size of the plain step:
# each plan scored costs its steps / the plain step's steps (a plan recomputing much costs more)
TRIES = 8  # greedy: candidate cuts scored per step
GAP = 1e-3  # the local search stops within this fraction of the step's FLOPs of the proven bound


@dataclass
class RematResult:
    budget: int
    fits: bool
    drop: frozenset = frozenset()
    bound: int = 0  # lower bound of the plan
    arena: int = 0  # planned arena of the plan
    added_flops: int = 0
    step_flops: int = 0  # without remat
    status: str = ""  # optimal | feasible | infeasible
    lower_flops: int | None = None  # proven least added FLOPs of any plan fitting the budget (None: no bound)
    reachable: int = 0  # smallest bound found (when nothing fits)
    reachable_drop: frozenset = frozenset()
    reachable_lower_bound: int | None = None  # proven: no plan's live bytes go below it
    floor: int = 0
    floor_step: str = ""
    evaluations: int = 0
    rounds: int = 0
    notes: list = field(default_factory=list)

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


def _reachable(problem: RematProblem, res: RematResult, plans) -> None:
    """Nothing fits: the fewest live bytes found (`reachable`) among `plans`; no plan goes below the
    floor (`reachable_lower_bound`, proven by the relaxation of the whole space)."""
    best = min(plans, key=lambda d: (problem.bound(d), _key(problem, d)))
    res.reachable_drop, res.reachable = best, problem.bound(best)
    res.reachable_lower_bound = floor(problem)[0]
    res.evaluations = problem.evaluations


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
        trials = []
        for k in sorted(held, key=lambda k: (-held[k], k))[:TRIES]:
            if k not in plan and each(k) not in plan:
                trials.append(close(problem, plan | {k}))
            elif k in plan and k in problem.each_ok:
                trials.append((plan - {k}) | {each(k)})
        ex, fl = problem.excess(plan, target), problem.added_flops(plan)
        best, score = None, 0.0
        for trial in trials:
            if problem.effort - n0 >= work:
                break
            gain = ex - problem.excess(trial, target)
            if gain <= 0:
                continue
            sc = gain / (max(problem.added_flops(trial) - fl, 0) + 1)
            if sc > score:
                best, score = trial, sc
        if best is None:
            break
        plan = best
    return plan


def search(problem: RematProblem, target: int, work: int = WORK) -> tuple[frozenset | None, str, int | None]:
    """The cheapest plan found whose lower bound is <= target: (plan, "optimal" | "feasible", lower),
    or (None, "", lower). `lower`: proven least added FLOPs of any plan of the whole space under
    target (`full.py`; None: not known; NONE_FITS when no plan can fit)."""
    from memplan_cli.passes.rematerialize import each

    if problem.bound(()) <= target:
        return frozenset(), "optimal", 0
    start = problem.effort
    lower, hint = None, frozenset()
    try:
        from memplan_cli.remat import full

        b = full.lower_flops(problem, problem.full, target)
        if b.lower == float("inf"):
            return None, "", NONE_FITS
        lower, hint = int(b.lower * (1 - 1e-9)), b.ops
    except ImportError:  # no HiGHS: the search alone, no bound
        pass
    narrow = problem.narrow
    seeds = [greedy(problem, target, work // 2)]
    seeds += [close(problem, hint), close(problem, frozenset(each(k) if k in problem.each_ok else k for k in hint))]
    n = len(narrow)
    for length in sorted({2, 3, 4, max(2, math.isqrt(n)), max(2, 2 * math.isqrt(n))}):
        seeds.append(close(problem, chen.segments(narrow, length)))
    seeds.append(_every(problem))
    seeds = list(dict.fromkeys(seeds))
    fitting = [d for d in seeds if problem.bound(d) <= target]
    if not fitting:
        low = min(seeds, key=lambda d: (problem.bound(d), _key(problem, d)))
        low = greedy(problem, target, work // 4, low)
        if problem.bound(low) > target:
            low = descend(problem, low, target, work // 4)
        if problem.bound(low) > target:
            return None, "", lower
        fitting = [low]
    best = min(fitting, key=lambda d: _key(problem, d))
    improved = True
    close_enough = lower + GAP * problem.flops.total if lower is not None else -1
    while improved and problem.effort - start < work:
        if problem.added_flops(best) <= close_enough:
            break
        improved = False
        cur = _key(problem, best)
        # cheaper neighbours first: keep an op again, or recompute it once instead of before each use
        for trial in sorted(_moves(problem, best), key=lambda d: _cheap(problem, best, d)):
            if _cheap(problem, best, trial) >= (0,):
                break
            if problem.effort - start >= work:
                break
            if problem.bound(trial) <= target and _key(problem, trial) < cur:
                best, improved = trial, True
                break
    if lower is not None and problem.added_flops(best) <= lower:
        return best, "optimal", lower
    return best, "feasible", lower


def _cheap(problem, plan, trial):
    """Sort key of a move from `plan`: the FLOPs it saves at most (negative first); >= (0,): none."""
    d = set(trial) ^ set(plan)
    removed = [k for k in d if k in plan]
    gain = sum(problem.cost.get(k if k >= 0 else -1 - k) or 0 for k in removed)
    if len(trial) >= len(plan) and not any(k < 0 for k in removed):
        return (0,)
    return (-gain, sorted(trial))


NONE_FITS = 1 << 62  # `lower` when no plan can fit (proven)


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

    tg = problem.build(drop)
    bl = tg.to_buffer_list(pools=[Pool("arena", "non-const", pick_planner())], align=problem.align)
    return sum(p.plan.arena for p in plan_buffer_list(bl))


def solve(problem: RematProblem, budget: int, work: int = WORK) -> RematResult:
    if not problem.flops_available:
        missing = sorted({problem.graph.operations[k].type for k, v in problem.cost.items() if v is None}
                         | set(problem.flops.missing))
        raise MemplanError(f"cannot choose the cheapest remat plan: no FLOPs for op {', '.join(missing)}")
    res = RematResult(budget, False, step_flops=problem.flops.total)
    target = budget
    fl = floor(problem)
    if budget < fl[0]:
        # proven: no plan goes below the floor. The smallest reachable: the plain plan or every
        # candidate dropped, whichever bounds lower (two evaluations, not a search)
        res.status, res.floor, res.floor_step = "infeasible", fl[0], fl[1]
        res.notes.append(f"the budget is below the floor {fl[0]:,d} B (persistent state plus what one step "
                         f"needs whatever is recomputed, {fl[1]}): no plan fits, proven")
        _reachable(problem, res, [frozenset(), _every(problem)])
        return res
    spent = problem.effort
    for rnd in range(1, ROUNDS + 1):
        left = work - (problem.effort - spent)  # one work budget for every round
        if left <= 0:
            break
        res.rounds = rnd
        drop, status, lower = search(problem, target, left)
        if rnd == 1:
            res.lower_flops = lower  # proven for the budget (later rounds search a tighter target)
        if drop is None:
            break
        arena = plan_arena(problem, drop)
        if arena <= budget:
            res.fits, res.drop, res.status = True, drop, status
            res.bound, res.arena, res.added_flops = problem.bound(drop), arena, problem.added_flops(drop)
            if rnd > 1:
                res.notes.append(f"the planned arena exceeded the budget {rnd - 1} time(s): searched again "
                                 f"below {target:,d} B")
            if status == "optimal" and rnd > 1:
                res.status = "feasible"  # optimal for a tightened target, not proven for the budget
            if res.lower_flops is not None and res.added_flops <= res.lower_flops:
                res.status = "optimal"  # meets the proven bound for the budget itself
            break
        target -= arena - budget
    res.evaluations = problem.evaluations
    if not res.fits:
        res.status = "infeasible"
        res.floor, res.floor_step = fl
        _reachable(problem, res, [_every(problem)] + list(problem._bounds))
        if res.lower_flops == NONE_FITS:
            res.notes.append("proven: no plan's live bytes fit the budget (the relaxation of the whole remat "
                             "space, which never counts more than a plan needs, has no solution)")
        else:
            res.notes.append(f"no plan found within the search's work budget ({WORK} plans per search); "
                             f"not proven that none fits (no plan goes below {res.reachable_lower_bound:,d} B)")
    if res.lower_flops == NONE_FITS:
        res.lower_flops = None
    return res


# ---- memplan's own plan runs cheap recompute (passes/cheap_recompute.py); the remat problem does not
def _step_flops(analysis) -> int | None:
    from memplan_cli.passes.cost import step_flops

    tg = getattr(analysis.buffers, "training_graph", None)
    f = step_flops(tg) if tg is not None else None
    return f.total if f is not None and f.available else None


def figures_of_the_step_run(res, plain, a) -> None:
    """A fitting remat plan's arena, bound and FLOPs as memplan runs it: the solver's are of the
    step without cheap recompute; the ratio is to memplan's own plain step."""
    res.arena, res.bound = a.planned_total, a.lower_bound
    base, run = _step_flops(plain), _step_flops(a)
    if base is not None and run is not None:
        if res.lower_flops is not None:  # the proven least added FLOPs, rebased on the same step
            res.lower_flops = max(0, res.lower_flops + res.step_flops - base)
        res.step_flops, res.added_flops = base, run - base


def fits_without_remat(problem, plain, limit: int):
    """memplan's own plan (cheap recompute included) fits the budget: nothing is recomputed for it.
    The remat problem models the step without cheap recompute (its plain arena can be above the
    budget), so its search is not asked: it would recompute for a budget already met."""
    res = RematResult(limit, True, status="optimal", bound=plain.lower_bound, arena=plain.planned_total,
                      step_flops=_step_flops(plain) or problem.flops.total, lower_flops=0,
                      evaluations=problem.evaluations)
    res.notes.append("memplan's plan without recomputation fits the budget: nothing to recompute")
    return res


def drop_proofs_about_another_step(res, problem, plain) -> None:
    """The remat problem models the step without cheap recompute (passes/cheap_recompute.py), which
    the plan then runs with. Where that pass changes memplan's own plan, the solver's proofs (least
    added FLOPs, "no plan fits") are about another step than the one memplan runs: they are dropped,
    and the report says so. The floor (persistent state plus one step's working set) holds either way."""
    if plain.planned_total >= plan_arena(problem, frozenset()):
        return  # cheap recompute changes nothing here: the proofs are about this very step
    if res.status == "optimal":
        res.status = "feasible"
    res.lower_flops = None
    res.reachable_lower_bound = None
    if res.fits or res.budget >= res.floor:
        res.notes = [n for n in res.notes if not n.startswith("proven: no plan's live bytes fit")
                     and not n.startswith("no plan found within")]
        if not res.fits:
            res.notes.append(f"no plan found within the search's work budget ({WORK} plans per search); not "
                             "proven that none fits")
        res.notes.append("no optimality proof: the solver's bounds model the step without cheap recompute, "
                         "which memplan's plan runs with (it only shrinks the arena)")


def remat_plan_as_run(graph, cfg, res, **analyze_kw):
    """(profile options, Analysis) of a fitting remat plan as memplan runs it: with cheap recompute
    when the arena then stays within the budget (the pass usually shrinks it), else without it,
    which is exactly the step the solver planned and proved things about."""
    from memplan_cli.analysis import analyze_graph

    opts = {"remat": sorted(res.drop)}
    a = analyze_graph(graph, cfg, profile_options=opts, **analyze_kw)
    if a.planned_total > res.budget:
        opts = {**opts, "cheap_recompute": False}
        a = analyze_graph(graph, cfg, profile_options=opts, **analyze_kw)
    return opts, a


def solve_as_run(graph, cfg, problem: RematProblem, plain, budget: int, **analyze_kw):
    """The remat answer for `budget` about the step memplan runs: (RematResult, profile options,
    Analysis of the plan as run). `graph`, `cfg`: the model and setup `problem` was built from;
    `plain`: memplan's own plan without a budget (cheap recompute included). It fits: nothing is recomputed. Else the solver's plan, run as `remat_plan_as_run`
    says, with its proofs kept only where they concern that very step."""
    if plain.planned_total <= budget:
        return fits_without_remat(problem, plain, budget), {}, plain
    res = solve(problem, budget)
    if not res.fits:
        drop_proofs_about_another_step(res, problem, plain)
        return res, {}, plain
    opts, a = remat_plan_as_run(graph, cfg, res, **analyze_kw)
    if opts.get("cheap_recompute", True):
        drop_proofs_about_another_step(res, problem, plain)
    figures_of_the_step_run(res, plain, a)
    return res, opts, a
