"""nntrainer's planners, replayed (nnstreamer/nntrainer `nntrainer/tensor/optimized_v{1,2,3}_planner.cpp`;
facts from shared/research/onert-training-memory.md section 6 and those sources).

nntrainer's validity is half-open, [start, end); memplan's lifetimes are inclusive, so a buffer is
turned into start = first, end = last + 1, and a request "has expired" for a new one when
end <= new.start, i.e. last < new.first.

Requests are visited by (start, end) ascending; nntrainer uses an unstable std::sort, here ties
keep list order.

- v1 (OptimizedV1Planner, nntrainer's default): a stack of requests. Pop the top while it has
  expired. Then, from the top down, the first expired request left in the stack with exactly the
  same size gives up its slot (same offset; the new request replaces it in the stack). Otherwise
  the request goes on top: offset = top.offset + top.size (0 on an empty stack).
- v2 (OptimizedV2Planner): v1 for the requests that are not weight gradients. Weight gradients go
  in a region starting at v1's pool size: taken by size descending (ties: list order), each joins
  the first existing gradient slot (in creation order) that is at least as large and whose
  requests' intervals are all disjoint from its own, at that slot's offset; else it opens a new
  slot above the last one. nntrainer's own disjointness test misses some overlaps (a request that
  starts before a slot interval and ends inside it, or covers it, or shares its start); memplan
  uses a true interval test so its plans stay valid. Which buffers are weight gradients is given by
  `kinds` (a sequence of strings, "wgrad" or "gradient" marks one); without it v2 equals v1.
- v3 (OptimizedV3Planner): remove every expired request from the live set; list the vacant gaps
  between live blocks in offset order; the request takes the first gap that is large enough, at
  the gap's bottom, else goes at the top of the highest live block.
Each returns pool size = max(offset + size) over requests placed on top (gap and slot reuse never
raise it).
"""
from __future__ import annotations

import time
from typing import Sequence

from memplan_cli.planners.base import Plan, register

WGRAD_KINDS = frozenset({"wgrad", "gradient", "weight_gradient"})


def _requests(idx, firsts, lasts):
    # (start, end) ascending with half-open end = last + 1; ties: list order
    return sorted(idx, key=lambda i: (firsts[i], lasts[i] + 1, i))


def _v1(idx, sizes, firsts, lasts, offsets) -> int:
    stack: list[int] = []
    pool = 0
    for i in _requests(idx, firsts, lasts):
        start = firsts[i]
        while stack and lasts[stack[-1]] + 1 <= start:
            stack.pop()
        for k in range(len(stack) - 1, -1, -1):
            j = stack[k]
            if lasts[j] + 1 <= start and sizes[j] == sizes[i]:
                offsets[i] = offsets[j]
                stack[k] = i
                break
        else:
            offsets[i] = offsets[stack[-1]] + sizes[stack[-1]] if stack else 0
            pool = max(pool, offsets[i] + sizes[i])
            stack.append(i)
    return pool


@register("nntrainer-v1")
def plan_nntrainer_v1(sizes, firsts, lasts, *, time_limit=None) -> Plan:
    t0 = time.perf_counter()
    offsets = [0] * len(sizes)
    pool = _v1(range(len(sizes)), sizes, firsts, lasts, offsets)
    return Plan(tuple(offsets), pool, "nntrainer-v1", "feasible", time.perf_counter() - t0)


@register("nntrainer-v2")
def plan_nntrainer_v2(sizes, firsts, lasts, *, time_limit=None,
                      kinds: Sequence[str] | None = None) -> Plan:
    """`kinds[i]` in {"wgrad", "gradient", "weight_gradient"} marks buffer i as a weight gradient."""
    t0 = time.perf_counter()
    n = len(sizes)
    is_wgrad = [bool(kinds) and kinds[i] in WGRAD_KINDS for i in range(n)]
    offsets = [0] * n
    pool = _v1([i for i in range(n) if not is_wgrad[i]], sizes, firsts, lasts, offsets)
    wg = sorted((i for i in range(n) if is_wgrad[i]), key=lambda i: (-sizes[i], i))
    slots: list[tuple[int, list[int]]] = []   # (owner = first request, members)
    for i in wg:
        for owner, members in slots:
            if sizes[owner] >= sizes[i] and all(
                    lasts[j] < firsts[i] or lasts[i] < firsts[j] for j in members):
                offsets[i] = offsets[owner]
                members.append(i)
                break
        else:
            offsets[i] = offsets[slots[-1][0]] + sizes[slots[-1][0]] if slots else pool
            slots.append((i, [i]))
    top = max((offsets[i] + sizes[i] for i in wg), default=0)
    return Plan(tuple(offsets), max(pool, top), "nntrainer-v2", "feasible",
                time.perf_counter() - t0)


@register("nntrainer-v3")
def plan_nntrainer_v3(sizes, firsts, lasts, *, time_limit=None) -> Plan:
    t0 = time.perf_counter()
    n = len(sizes)
    offsets = [0] * n
    live: list[int] = []
    pool = 0
    for i in _requests(range(n), firsts, lasts):
        live = [j for j in live if not lasts[j] + 1 <= firsts[i]]
        live.sort(key=lambda j: offsets[j])
        bottom, top = 0, 0
        place = None
        for j in live:
            if offsets[j] > bottom and offsets[j] - bottom >= sizes[i] and place is None:
                place = bottom
            bottom = offsets[j] + sizes[j]
            top = max(top, bottom)
        if place is None:
            place = top
            pool = max(pool, place + sizes[i])
        offsets[i] = place
        live.append(i)
    return Plan(tuple(offsets), pool, "nntrainer-v3", "feasible", time.perf_counter() - t0)
