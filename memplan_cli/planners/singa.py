"""singa: a SINGA-style online pool (no offline plan), the figure a runtime reaches without planning.

Facts from SINGA PR #626 (shared/seeds): memory is allocated lazily at a tensor's first use and
returned when its reference count drops to zero. Rules here, in step order:
- at step t, the buffers whose first step is t are allocated (in list order), then the buffers
  whose last step is t are freed (their last reader is done);
- allocation is first fit over the free blocks in address order, the space above the highest
  block in use counting as one unbounded free block; freeing coalesces with free neighbours;
- the arena is the pool's high-water mark.
First fit over coalesced free blocks is the same rule as the lowest gap between the blocks in use,
so this equals onert's FirstFit replayed in step order (ties by list position).
"""
from __future__ import annotations

import bisect
import time

from memplan_cli.planners.base import Plan, register


@register("singa")
def plan_singa(sizes, firsts, lasts, *, time_limit=None) -> Plan:
    t0 = time.perf_counter()
    n = len(sizes)
    # free list of (start, end) blocks below the high-water mark `top`, coalesced, ordered
    free: list[tuple[int, int]] = []
    top = 0
    offsets = [0] * n
    steps = sorted(set(firsts) | set(lasts))
    start_at: dict[int, list[int]] = {}
    end_at: dict[int, list[int]] = {}
    for i in range(n):
        start_at.setdefault(firsts[i], []).append(i)
        end_at.setdefault(lasts[i], []).append(i)
    for t in steps:
        for i in start_at.get(t, ()):
            s = sizes[i]
            if s == 0:
                continue
            for k, (a, b) in enumerate(free):
                if b - a >= s:
                    offsets[i] = a
                    if b - a == s:
                        del free[k]
                    else:
                        free[k] = (a + s, b)
                    break
            else:
                # the unbounded block above `top`, merged with a free block touching `top`
                if free and free[-1][1] == top:
                    offsets[i] = free.pop()[0]
                else:
                    offsets[i] = top
                top = offsets[i] + s
        for i in end_at.get(t, ()):
            s = sizes[i]
            if s == 0:
                continue
            a, b = offsets[i], offsets[i] + s
            k = bisect.bisect_left(free, (a, b))
            if k < len(free) and free[k][0] == b:          # merge with the block above
                b = free.pop(k)[1]
            if k > 0 and free[k - 1][1] == a:              # merge with the block below
                a = free.pop(k - 1)[0]
                k -= 1
            free.insert(k, (a, b))
    return Plan(tuple(offsets), top, "singa", "feasible", time.perf_counter() - t0)
