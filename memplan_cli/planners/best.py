"""best: greedy, then the exact search when it can still help (memplan's default planner).

Rules:
- Run greedy (best of several orders x first/best fit, within greedy's work budget).
- If greedy's arena is above the lower bound and there are at most exact.MAX_BUFFERS buffers,
  run the exact search from greedy's plan for ROUNDS rounds (a count of search nodes, see
  exact.py). The budget is small because `memplan analyze` plans every model with it.
- Budgets count work, never seconds, so the same input gives the same plan on any machine at
  any load. Only when the caller gives `time_limit` (seconds, asked for by the user) do greedy
  and the search stop on the clock instead: greedy within the limit, the search in the time
  left; the result may then depend on the machine's speed and load.
- Keep the smallest plan that passes the overlap check (greedy's when the search finds nothing
  better); status "optimal" when its arena is the lower bound (or proven minimal). The check
  is exact.no_overlap, since planners may not import memplan_cli.check (tests/test_layering.py);
  analysis.plan_buffer_list runs the independent verifier, check_plan, on every plan.
"""
from __future__ import annotations

import time

import numpy as np

from memplan_cli.planners.base import Plan, register
from memplan_cli.planners.bound import lower_bound
from memplan_cli.planners.exact import MAX_BUFFERS, no_overlap, run_exact
from memplan_cli.planners.greedy import run_greedy

ROUNDS = 150  # ~2 s of search at most, on the 2-core dev box


def run_best(sizes, firsts, lasts, *, time_limit=None, rounds=None):
    """(offsets, arena, status) of `best`; `rounds` overrides ROUNDS (no effect with `time_limit`)."""
    t0 = time.perf_counter()
    g_offs, g_arena, _ = run_greedy(sizes, firsts, lasts, time_limit=time_limit)
    offs, arena = np.asarray(g_offs, np.int64), int(g_arena)
    lb = lower_bound(sizes, firsts, lasts)
    status = "optimal" if arena <= lb else "feasible"
    if arena > lb and len(sizes) <= MAX_BUFFERS:
        if time_limit is None:
            budget = {"rounds": ROUNDS if rounds is None else rounds}
        else:
            left = float(time_limit) - (time.perf_counter() - t0)
            budget = {"time_limit": left} if left > 0 else None
        if budget:
            e_offs, e_arena, e_status, _ = run_exact(sizes, firsts, lasts, greedy=(offs, arena), **budget)
            if e_arena < arena and no_overlap(sizes, firsts, lasts, e_offs):
                offs, arena, status = e_offs, e_arena, e_status
            elif e_arena == arena:
                status = e_status       # the search may have proven greedy's arena minimal
    return offs, arena, status


@register("best")
def plan_best(sizes, firsts, lasts, *, time_limit=None, rounds=None) -> Plan:
    """Greedy, then up to ROUNDS (or `rounds`) rounds of exact search; `time_limit`: seconds."""
    t0 = time.perf_counter()
    offs, arena, status = run_best(sizes, firsts, lasts, time_limit=time_limit, rounds=rounds)
    return Plan(tuple(int(x) for x in offs), arena, "best", status, time.perf_counter() - t0)
