"""The solver: the remat plan with the least added FLOPs whose planned arena fits a budget.

Rules:
- Search on the lower bound (most bytes live at one step), then plan the arena with the memplan
  profile's planner and check it; when the arena exceeds the budget (fragmentation), tighten the
  search target by the excess and search again (at most `ROUNDS` times).
- Exact by enumeration when there are at most `EXACT_MAX` candidates: plans in order of added
  FLOPs (ties: fewer dropped ops, then op indices), the first that fits is optimal
  (status "optimal").
- Otherwise a MILP relaxation first (`remat/relax.py`, HiGHS): its optimum is a proven lower bound
  on the added FLOPs of any plan that fits (its infeasibility proves that none does). Its plan is
  scored; when it fits, it is optimal (status "optimal"); when it does not, a no-good cut excludes
  it and the model is solved again (at most `MILP_ROUNDS` times, each bounded by a node count).
- When that does not close, a local search, deterministic and bounded by a count of plan
  evaluations (work, never seconds), seeded also with the relaxation's plans: start from the cheapest plan that fits among Chen-style segmentations of every length
  (drop all but every L-th candidate, L = 1..n) and dropping every candidate (when none fits, from
  the lowest of them toggle one candidate at a time while that lowers the bound); then repeatedly keep
  a dropped op again (most expensive first) or move a dropped op to a neighbouring candidate when
  that is cheaper, while the plan still fits. Status "feasible", with the relaxation's lower bound
  (`lower_flops`): the gap to the optimum is at most added - lower.
- No plan fits: the answer says the smallest bound found (`reachable`, including the relaxation's
  plan of least peak, whose optimum proves `reachable_lower_bound`), and the floor
  no plan can go below (`floor`): the persistent bytes plus the largest working set one step touches
  (a backward step needs its inputs and outputs live whatever is recomputed).
- The step's FLOPs must be known for every candidate (`passes/cost.py`); otherwise the solver
  refuses (it cannot rank plans by compute), naming the op types.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from memplan_cli.errors import MemplanError
from memplan_cli.remat import chen
from memplan_cli.remat.problem import RematProblem

EXACT_MAX = 12
ROUNDS = 6
MILP_ROUNDS = 20
WORK = 600  # plan evaluations per search


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
    """Persistent bytes + the largest set of non-persistent buffers one step touches (every plan)."""
    tg = problem.build(())
    bl = tg.to_buffer_list(align=problem.align)
    size = {b.ident: b.size for b in bl.buffers}
    pers = {tg.root(t) for t in tg.persistent}
    base = sum(size.get(tg.tensor_key(r), 0) for r in pers)
    best, where = 0, ""
    for s in tg.steps:
        roots = {tg.root(t) for t in s.touched()} - pers
        ws = sum(size.get(tg.tensor_key(r), 0) for r in roots)
        if ws > best:
            best, where = ws, f"step {s.index} ({s.kind} of {s.label})"
    return base + best, where


def _reachable(problem: RematProblem, res: RematResult, plans) -> None:
    """Nothing fits: the fewest live bytes found (`reachable`) among `plans` and the plan of least
    peak in the MILP relaxation, whose optimum also proves that no plan goes below
    `reachable_lower_bound`."""
    plans = list(plans)
    if len(problem.candidates) > EXACT_MAX:
        try:
            from memplan_cli.remat import relax

            lb, plan = relax.least_peak(problem)
            plans.append(plan)
            res.reachable_lower_bound = lb
        except ImportError:
            pass
    best = min(plans, key=lambda d: (problem.bound(d), _key(problem, d)))
    res.reachable_drop, res.reachable = best, problem.bound(best)
    if len(problem.candidates) <= EXACT_MAX and res.lower_flops == NONE_FITS:
        res.reachable_lower_bound = min(problem._bounds.values())  # every plan was scored
    res.evaluations = problem.evaluations


def _key(problem, drop):
    return (problem.added_flops(drop), len(drop), sorted(drop))


def search(problem: RematProblem, target: int, work: int = WORK) -> tuple[frozenset | None, str, int | None]:
    """The cheapest plan whose lower bound is <= target: (plan, "optimal" | "feasible", lower), or
    (None, "", lower). `lower`: proven least added FLOPs of a plan under target (None: not known;
    a huge value when no plan can fit)."""
    cands = problem.candidates
    if problem.bound(()) <= target:
        return frozenset(), "optimal", 0
    if len(cands) <= EXACT_MAX:
        plans = [frozenset(c) for r in range(1, len(cands) + 1) for c in itertools.combinations(cands, r)]
        plans.sort(key=lambda d: _key(problem, d))
        for d in plans:
            if problem.bound(d) <= target:
                return d, "optimal", problem.added_flops(d)
        return None, "", NONE_FITS
    start = problem.evaluations
    lower, tried = None, []
    try:
        lower, tried, proven_none, found, exact = _milp(problem, target)
    except ImportError:  # no HiGHS: local search alone, no bound
        lower, tried, proven_none, found, exact = None, [], False, None, False
    if proven_none:
        return None, "", NONE_FITS
    if found is not None and exact:
        return found, "optimal", problem.added_flops(found)
    if found is not None:  # fits, within the solver's gap of the bound: no local search needed
        return found, "feasible", int(lower * (1 - 1e-9))
    lower_int = None if lower is None else int(lower * (1 - 1e-9))  # the solver's tolerance
    seeds = ([chen.segments(cands, n) for n in range(2, len(cands) + 1)] + [frozenset(cands)] + tried)
    fitting = [d for d in seeds if problem.bound(d) <= target]
    if not fitting:
        low = descend(problem, min(seeds, key=lambda d: (problem.bound(d), _key(problem, d))), target,
                      work // 2)
        if problem.bound(low) > target:
            return None, "", lower_int
        fitting = [low]
    best = min(fitting, key=lambda d: _key(problem, d))
    pos = {c: i for i, c in enumerate(cands)}
    improved = True
    while improved and problem.evaluations - start < work:
        if lower_int is not None and problem.added_flops(best) <= lower_int:
            break
        improved = False
        for c in sorted(best, key=lambda k: (-(problem.cost[k] or 0), k)):
            if problem.evaluations - start >= work:
                break
            trial = best - {c}
            if problem.bound(trial) <= target:
                best, improved = trial, True
                continue
            for j in (pos[c] - 1, pos[c] + 1):  # move the drop to a cheaper neighbour
                if 0 <= j < len(cands) and cands[j] not in best and (problem.cost[cands[j]] or 0) < (problem.cost[c] or 0):
                    trial = (best - {c}) | {cands[j]}
                    if problem.bound(trial) <= target:
                        best, improved = trial, True
                        break
    if lower_int is not None and problem.added_flops(best) <= lower_int:
        return best, "optimal", lower_int
    return best, "feasible", lower_int


NONE_FITS = 1 << 62  # `lower` when no plan can fit (proven)
FIRST_ROWS = 24  # the relaxation starts from the steps that can exceed the budget most


def _milp(problem: RematProblem, target: int):
    """The relaxation's loop: (lower, plans tried, proven that none fits, a fitting plan or None, it
    is optimal).

    Rows (steps) are added lazily: solve on a few, add the steps the answer overflows in the full
    model, solve again (every subset is a relaxation, so each lower bound stands). A plan meeting
    the full model is scored for real; when it fits it is optimal, else a no-good cut excludes it.
    At most MILP_ROUNDS solves."""
    from memplan_cli.remat import relax

    rel = relax.build(problem, target)
    cap = target // rel.unit
    order = sorted(range(len(rel.rows)), key=lambda i: (-rel.rows[i].most, i))
    active = sorted(order[:FIRST_ROWS])
    lower, tried = None, []
    for _ in range(MILP_ROUNDS):
        ans = relax.solve_model(problem, rel, target, rows=active, cuts=tried)
        if ans.optimal or ans.drop is not None:
            lower = ans.lower if lower is None else max(lower, ans.lower)
        if ans.drop is None:
            return lower, tried, ans.optimal, None, False
        vals = relax.row_units(rel, ans.drop)
        over = [i for i in order if vals[i] > cap and i not in set(active)]
        if over:
            active = sorted(set(active) | set(over[:FIRST_ROWS]))
            continue
        if problem.bound(ans.drop) <= target:
            return lower, tried + [ans.drop], False, ans.drop, ans.optimal
        tried.append(ans.drop)
        if not ans.optimal:
            break
    return lower, tried, False, None, False


def descend(problem: RematProblem, start: frozenset, target: int, work: int) -> frozenset:
    """Lower the bound from `start`: toggle one candidate at a time (forward order), keep a change that
    lowers the bound (or keeps it and costs less), until the bound is <= target, nothing improves or
    `work` plans are scored."""
    best, n0 = start, problem.evaluations
    improved = True
    while improved and problem.bound(best) > target and problem.evaluations - n0 < work:
        improved = False
        for c in problem.candidates:
            if problem.evaluations - n0 >= work:
                break
            trial = best ^ {c}
            bt, bb = problem.bound(trial), problem.bound(best)
            if bt < bb or (bt == bb and _key(problem, trial) < _key(problem, best)):
                best, improved = trial, True
                if bt <= target:
                    return best
    return best


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
        res.notes.append(f"the budget is below the floor {fl[0]:,d} B (persistent state plus the largest "
                         f"working set of one step, {fl[1]}): no plan fits")
        _reachable(problem, res, [frozenset(), frozenset(problem.candidates)])
        return res
    for rnd in range(1, ROUNDS + 1):
        res.rounds = rnd
        drop, status, lower = search(problem, target, work)
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
        _reachable(problem, res, [frozenset(problem.candidates), chen.sqrt_n(problem.candidates)]
                   + list(problem._bounds))
        if res.lower_flops == NONE_FITS:
            res.notes.append("proven: no plan's live bytes fit the budget (" + (
                "every plan was scored)" if len(problem.candidates) <= EXACT_MAX else
                "the MILP relaxation, which never counts more than a plan needs, has no solution)"))
    if res.lower_flops == NONE_FITS:
        res.lower_flops = None
    return res
