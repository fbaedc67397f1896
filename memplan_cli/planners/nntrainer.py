"""nntrainer's planners, replayed (nnstreamer/nntrainer `nntrainer/tensor/optimized_v{1,2,3}_planner.cpp`;
facts from shared/research/onert-training-memory.md section 6 and those sources).

nntrainer's validity is half-open, [start, end); memplan's lifetimes are inclusive, so a buffer is
turned into start = first, end = last + 1, and a request "has expired" for a new one when
end <= new.start, i.e. last < new.first.

Requests are visited by (start, end) ascending, sorted as nntrainer sorts them: libstdc++'s
std::sort (introsort: median-of-three quicksort down to runs of 16, heapsort past 2 log2 n levels,
then one insertion sort), reproduced step by step, so requests with equal intervals end up in the
same order as in the library (a stable sort gives other offsets, and sometimes a larger pool).
The buffers' list order is nntrainer's token order (the order the profile requests them in).

- basic (BasicPlanner, nntrainer's planner when `memory_optimization` is off): every request its
  own bytes, stacked in list order.

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


def std_sort(a: list, less) -> list:
    """libstdc++'s std::sort of `a` in place under the strict order `less` (bits/stl_algo.h:
    __introsort_loop with _S_threshold 16 and depth 2 * floor(log2 n), __final_insertion_sort)."""
    n = len(a)
    if n > 1:
        _introsort(a, 0, n, 2 * (n.bit_length() - 1), less)
        if n > _THRESHOLD:
            _insertion(a, 0, _THRESHOLD, less)
            for i in range(_THRESHOLD, n):
                _linear_insert(a, i, less)
        else:
            _insertion(a, 0, n, less)
    return a


_THRESHOLD = 16


def _introsort(a, first, last, depth, less):
    while last - first > _THRESHOLD:
        if depth == 0:
            _heapsort(a, first, last, less)
            return
        depth -= 1
        mid = first + (last - first) // 2
        x, y, z = first + 1, mid, last - 1  # median of three moved to first
        if less(a[x], a[y]):
            m = y if less(a[y], a[z]) else (z if less(a[x], a[z]) else x)
        elif less(a[x], a[z]):
            m = x
        else:
            m = z if less(a[y], a[z]) else y
        a[first], a[m] = a[m], a[first]
        lo, hi = first + 1, last  # unguarded partition around a[first]
        while True:
            while less(a[lo], a[first]):
                lo += 1
            hi -= 1
            while less(a[first], a[hi]):
                hi -= 1
            if not lo < hi:
                break
            a[lo], a[hi] = a[hi], a[lo]
            lo += 1
        _introsort(a, lo, last, depth, less)
        last = lo


def _insertion(a, first, last, less):
    for i in range(first + 1, last):
        v = a[i]
        if less(v, a[first]):
            a[first + 1:i + 1] = a[first:i]
            a[first] = v
        else:
            _linear_insert(a, i, less)


def _linear_insert(a, last, less):
    v = a[last]
    while less(v, a[last - 1]):
        a[last] = a[last - 1]
        last -= 1
    a[last] = v


def _heapsort(a, first, last, less):
    n = last - first
    for parent in range((n - 2) // 2, -1, -1):
        _adjust_heap(a, first, parent, n, a[first + parent], less)
    while last - first > 1:
        last -= 1
        v = a[last]
        a[last] = a[first]
        _adjust_heap(a, first, 0, last - first, v, less)


def _adjust_heap(a, first, hole, n, v, less):
    top = child = hole
    while child < (n - 1) // 2:
        child = 2 * (child + 1)
        if less(a[first + child], a[first + child - 1]):
            child -= 1
        a[first + hole] = a[first + child]
        hole = child
    if n % 2 == 0 and child == (n - 2) // 2:
        child = 2 * (child + 1)
        a[first + hole] = a[first + child - 1]
        hole = child - 1
    parent = (hole - 1) // 2
    while hole > top and less(a[first + parent], v):
        a[first + hole] = a[first + parent]
        hole = parent
        parent = (hole - 1) // 2
    a[first + hole] = v


def _requests(idx, firsts, lasts):
    # nntrainer's comparator: start ascending, then (half-open) end ascending
    def less(i, j):
        return lasts[i] < lasts[j] if firsts[i] == firsts[j] else firsts[i] < firsts[j]
    return std_sort(list(idx), less)


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


@register("nntrainer-basic")
def plan_nntrainer_basic(sizes, firsts, lasts, *, time_limit=None) -> Plan:
    t0 = time.perf_counter()
    offsets, top = [], 0
    for s in sizes:
        offsets.append(top)
        top += s
    return Plan(tuple(offsets), top, "nntrainer-basic", "feasible", time.perf_counter() - t0)


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
