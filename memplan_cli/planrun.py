"""Plan one set of buffers with a named planner and verify the plan: the work behind `memplan plan`,
shared with `benchmarks/plan_bench.py`. Knows nothing about files or output formats.

Every plan goes through the independent verifier (`check.overlap.check_plan`) before it is
returned; a plan that fails it is a bug in the planner and raises `InvalidPlan` (not a
MemplanError: the input was fine). Zero-size buffers are given offset 0 (they occupy nothing).
"""
from __future__ import annotations

import inspect
import time
from dataclasses import dataclass, replace
from typing import Sequence

from memplan_cli.check.overlap import PlanError, check_plan
from memplan_cli.planners import Plan, get_planner, planner_names
from memplan_cli.planners.bound import lower_bound as bound


class InvalidPlan(RuntimeError):
    """A planner returned a plan the verifier rejects (a bug in that planner)."""


@dataclass(frozen=True)
class PlanResult:
    plan: Plan
    buffers: int
    naive: int           # sum of sizes: every buffer its own bytes
    lower_bound: int     # most bytes live at one step: no plan does better
    seconds: float       # wall time of the planner call
    time_limit: float | None = None  # the clock limit the planner ran under, if any

    @property
    def arena(self) -> int:
        return self.plan.arena

    @property
    def ratio(self) -> float | None:
        """arena / lower bound (None when the bound is 0)."""
        return self.plan.arena / self.lower_bound if self.lower_bound else None

    @property
    def status(self) -> str:
        """The planner's status, raised to "optimal" when the arena equals the lower bound (proved)."""
        return "optimal" if self.plan.arena == self.lower_bound else self.plan.status


def default_planner() -> str:
    """`best` when it is registered, else `greedy`."""
    return "best" if "best" in planner_names() else "greedy"


def takes_rounds(name: str) -> bool:
    """True when the planner `name` has a work budget in search rounds (best, exact)."""
    try:
        return "rounds" in inspect.signature(get_planner(name)).parameters
    except (TypeError, ValueError):
        return False


def plan_buffers(name: str, sizes: Sequence[int], firsts: Sequence[int], lasts: Sequence[int], *,
                 time_limit: float | None = None, rounds: int | None = None,
                 names: Sequence[str] | None = None, alignments: Sequence[int] | None = None,
                 lower_bound: int | None = None) -> PlanResult:
    """Plan with the registered planner `name` (KeyError if unknown), verify, return the figures.

    `time_limit` (seconds) replaces the planner's work budgets by the clock (the plan may then
    depend on timing); `rounds` sets a searching planner's work budget (ignored by the others).
    `alignments`, when given, are checked against the offsets (InvalidPlan if one is not a multiple).
    `lower_bound` may be passed when already known (it is computed otherwise).
    """
    planner = get_planner(name)
    t0 = time.perf_counter()
    extra = {"rounds": rounds} if rounds is not None and takes_rounds(name) else {}
    plan = planner(sizes, firsts, lasts, time_limit=time_limit, **extra)
    seconds = time.perf_counter() - t0
    try:
        check_plan(sizes, firsts, lasts, plan.offsets, plan.arena, names=names)
    except PlanError as e:
        raise InvalidPlan(f"planner {name!r} returned an invalid plan: {e}") from None
    if alignments:
        for i, (o, a) in enumerate(zip(plan.offsets, alignments)):
            if a > 1 and o % a:
                who = repr(names[i]) if names is not None else str(i)
                raise InvalidPlan(f"planner {name!r} placed buffer {who} at offset {o}, not a multiple of its "
                                  f"alignment {a}")
    if any(s == 0 and o != 0 for s, o in zip(sizes, plan.offsets)):
        # a zero-size buffer occupies nothing: offset 0 is always valid and says so
        plan = replace(plan, offsets=tuple(0 if s == 0 else o for s, o in zip(sizes, plan.offsets)))
    lb = bound(sizes, firsts, lasts) if lower_bound is None else lower_bound
    return PlanResult(plan, len(sizes), int(sum(int(s) for s in sizes)), int(lb), seconds, time_limit)
