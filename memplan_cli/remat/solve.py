"""The solver: the remat plan with the least added FLOPs whose planned arena fits a budget.

Rules:
- Search on the lower bound (most bytes live at one step), then plan the arena with the memplan
  profile's planner and check it; when the arena exceeds the budget (fragmentation), tighten the
  search target by the excess and search again (at most `ROUNDS` times).
- Exact by enumeration when there are at most `EXACT_MAX` candidates: plans in order of added
  FLOPs (ties: fewer dropped ops, then op indices), the first that fits is optimal
  (status "optimal").
- Otherwise a local search, deterministic and bounded by a count of plan evaluations (work, never
  seconds): start from the cheapest plan that fits among Chen-style segmentations of every length
  (drop all but every L-th candidate, L = 1..n) and dropping every candidate (when none fits, from
  the lowest of them toggle one candidate at a time while that lowers the bound); then repeatedly keep
  a dropped op again (most expensive first) or move a dropped op to a neighbouring candidate when
  that is cheaper, while the plan still fits. Status "feasible": no optimality proof.
- No plan fits: the answer says the smallest bound found (`reachable`) with its peak, and the floor
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
    reachable: int = 0  # smallest bound found (when nothing fits)
    reachable_drop: frozenset = frozenset()
    floor: int = 0
    floor_step: str = ""
    evaluations: int = 0
    rounds: int = 0
    notes: list = field(default_factory=list)

    @property
    def ratio(self) -> float:
        return (self.step_flops + self.added_flops) / self.step_flops if self.step_flops else 1.0


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


def _key(problem, drop):
    return (problem.added_flops(drop), len(drop), sorted(drop))


def search(problem: RematProblem, target: int, work: int = WORK) -> tuple[frozenset | None, str]:
    """The cheapest plan whose lower bound is <= target: (plan, "optimal" | "feasible"), or (None, "")."""
    cands = problem.candidates
    if problem.bound(()) <= target:
        return frozenset(), "optimal"
    if len(cands) <= EXACT_MAX:
        plans = [frozenset(c) for r in range(1, len(cands) + 1) for c in itertools.combinations(cands, r)]
        plans.sort(key=lambda d: _key(problem, d))
        for d in plans:
            if problem.bound(d) <= target:
                return d, "optimal"
        return None, ""
    start = problem.evaluations
    seeds = [chen.segments(cands, n) for n in range(2, len(cands) + 1)] + [frozenset(cands)]
    fitting = [d for d in seeds if problem.bound(d) <= target]
    if not fitting:
        low = descend(problem, min(seeds, key=lambda d: (problem.bound(d), _key(problem, d))), target,
                      work // 2)
        if problem.bound(low) > target:
            return None, ""
        fitting = [low]
    best = min(fitting, key=lambda d: _key(problem, d))
    pos = {c: i for i, c in enumerate(cands)}
    improved = True
    while improved and problem.evaluations - start < work:
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
    return best, "feasible"


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
        plans = [frozenset(), frozenset(problem.candidates)]
        best = min(plans, key=lambda d: (problem.bound(d), _key(problem, d)))
        res.reachable_drop, res.reachable = best, problem.bound(best)
        res.notes.append(f"the budget is below the floor {fl[0]:,d} B (persistent state plus the largest "
                         f"working set of one step, {fl[1]}): no plan fits")
        res.evaluations = problem.evaluations
        return res
    for rnd in range(1, ROUNDS + 1):
        res.rounds = rnd
        drop, status = search(problem, target, work)
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
            break
        target -= arena - budget
    res.evaluations = problem.evaluations
    if not res.fits:
        res.status = "infeasible"
        best = min(problem._bounds.items(), key=lambda kv: (kv[1], _key(problem, kv[0])))
        res.reachable_drop, res.reachable = best[0], best[1]
        res.floor, res.floor_step = fl
    return res
