"""best: greedy, then the exact search when it can still help (memplan's default planner).

Rules:
- Run greedy (best of several orders x first/best fit).
- If greedy's arena is above the lower bound and there are at most exact.MAX_BUFFERS buffers,
  run the exact search from greedy's plan within `time_limit` seconds, DEFAULT_TIME_LIMIT
  when None. The default is small because `memplan analyze` plans every model with it.
- Keep the smallest plan that passes the overlap check (greedy's when the search finds nothing
  better); status "optimal" when its arena is the lower bound (or proven minimal). The check
  is exact.no_overlap, since planners may not import memplan_cli.check (tests/test_layering.py);
  analysis.plan_buffer_list runs the independent verifier, check_plan, on every plan.
- Deterministic for a given input when the search ends within the time limit (greedy always
  is; the search counts its turns in nodes, not seconds).
"""
from __future__ import annotations

import time

import numpy as np

from memplan_cli.planners.base import Plan, register
from memplan_cli.planners.bound import lower_bound
from memplan_cli.planners.exact import MAX_BUFFERS, no_overlap, run_exact
from memplan_cli.planners.greedy import run_greedy

DEFAULT_TIME_LIMIT = 2.0


@register("best")
def plan_best(sizes, firsts, lasts, *, time_limit=None) -> Plan:
    t0 = time.perf_counter()
    limit = DEFAULT_TIME_LIMIT if time_limit is None else float(time_limit)
    g_offs, g_arena, _ = run_greedy(sizes, firsts, lasts, time_limit=limit)
    offs, arena = np.asarray(g_offs, np.int64), int(g_arena)
    lb = lower_bound(sizes, firsts, lasts)
    status = "optimal" if arena <= lb else "feasible"
    left = limit - (time.perf_counter() - t0)
    if arena > lb and len(sizes) <= MAX_BUFFERS and left > 0:
        e_offs, e_arena, e_status, _ = run_exact(sizes, firsts, lasts, time_limit=left,
                                                 greedy=(offs, arena))
        if e_arena < arena and no_overlap(sizes, firsts, lasts, e_offs):
            offs, arena, status = e_offs, e_arena, e_status
        elif e_arena == arena:
            status = e_status       # the search may have proven greedy's arena minimal
    return Plan(tuple(int(x) for x in offs), arena, "best", status, time.perf_counter() - t0)

