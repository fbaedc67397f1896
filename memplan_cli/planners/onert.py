"""onert's train-backend planners, replayed (ONE `runtime/onert/core/src/backend/basic/MemoryPlanner.cc`
and `runtime/onert/backend/train/MemoryPlanner.cc`, which implement the same algorithms; facts from
memplan's research notes, shared/research/onert-training-memory.md section 1.2).

Claim order: by `firsts`, ties by list position. A buffer is claimed at step `first` and released
after step `last` (inclusive lifetimes): at one step all claims happen before the releases, so a
buffer whose last step is t conflicts with one whose first step is t. (onert's own event indices
are distinct, so this tie rule only matters for general inputs.) Sizes are used as given: the
profile aligns them, the planners do not.
"""
from __future__ import annotations

import bisect
import time

from memplan_cli.errors import MemplanError
from memplan_cli.planners.base import Plan, register

# plan_wic: the compiled kernel above this many buffers (numpy's import costs more below), and the
# most intersecting pairs it replays (~1 s of the kernel; a 100,000-op chain has 10^9)
WIC_NATIVE_ABOVE = 1000
WIC_WORK = 250_000_000


def claim_order(firsts) -> list[int]:
    """Indices in claim order: by first step, ties by list position."""
    return sorted(range(len(firsts)), key=lambda i: (firsts[i], i))


@register("bump")
def plan_bump(sizes, firsts, lasts, *, time_limit=None) -> Plan:
    """onert Bump: each claim takes `offset = capacity; capacity += size`; release does nothing.
    No reuse: the arena is the sum of sizes, laid out in claim order."""
    t0 = time.perf_counter()
    offsets = [0] * len(sizes)
    cap = 0
    for i in claim_order(firsts):
        offsets[i] = cap
        cap += sizes[i]
    return Plan(tuple(offsets), cap, "bump", "feasible", time.perf_counter() - t0)


def online_first_fit(sizes, firsts, lasts, name: str) -> Plan:
    """Claims in claim order, each at the lowest offset where it fits between the blocks live at
    that moment (walked in offset order); releases after the last step. Capacity = max end."""
    t0 = time.perf_counter()
    n = len(sizes)
    order = claim_order(firsts)
    by_last = sorted(range(n), key=lambda i: (lasts[i], i))
    live: list[tuple[int, int]] = []      # (offset, index) ordered by offset
    offsets = [0] * n
    cap = 0
    r = 0
    for i in order:
        t = firsts[i]
        while r < n and lasts[by_last[r]] < t:   # released after an earlier step
            j = by_last[r]
            r += 1
            if sizes[j] > 0:
                del live[bisect.bisect_left(live, (offsets[j], j))]
        s = sizes[i]
        nxt = 0
        for base, j in live:
            if nxt + s <= base:
                break
            nxt = max(nxt, base + sizes[j])
        offsets[i] = nxt
        if s > 0:
            bisect.insort(live, (nxt, i))
        cap = max(cap, nxt + s)
    return Plan(tuple(offsets), cap, name, "feasible", time.perf_counter() - t0)


@register("firstfit")
def plan_firstfit(sizes, firsts, lasts, *, time_limit=None) -> Plan:
    """onert FirstFit: online. A claim takes the first gap, in offset order, between the blocks
    live at that moment (`next_offset + size <= claimed_base_offset`), else goes above them;
    release frees the block. No look-ahead. Capacity = max end seen."""
    return online_first_fit(sizes, firsts, lasts, "firstfit")


def interferes(firsts, lasts, i: int, j: int) -> bool:
    return firsts[i] <= lasts[j] and firsts[j] <= lasts[i]


@register("wic")
def plan_wic(sizes, firsts, lasts, *, time_limit=None) -> Plan:
    """onert WIC (weighted interval colouring): buffers taken by size descending, ties in claim
    order (a `std::multimap<size, index, std::greater>`); each goes at the first offset that fits
    among the already-placed buffers it interferes with (lifetimes intersect), walked in offset
    order. Capacity = max(offset + size).

    Work: each buffer looks at the placed buffers it interferes with, so the replay costs the
    number of intersecting pairs. Above WIC_NATIVE_ABOVE buffers it runs in greedy's compiled
    kernel (its size order with first fit is this order and this rule: the same offsets); above
    WIC_WORK intersecting pairs (tens of thousands of buffers live together) it refuses with a
    MemplanError rather than run for minutes, deterministically (it counts pairs, not seconds)."""
    t0 = time.perf_counter()
    n = len(sizes)
    if n > WIC_NATIVE_ABOVE:
        from memplan_cli.planners.greedy import FIRST, Index, compress, order_of, overlapping_pairs

        pairs = overlapping_pairs(*compress(firsts, lasts))
        if pairs > WIC_WORK:
            raise MemplanError(
                f"onert's WIC planner, replayed, would compare {pairs:,} pairs of buffers whose lifetimes "
                f"intersect, above memplan's work budget of {WIC_WORK:,}")
        ix = Index(sizes, firsts, lasts)
        offs, cap = ix.place(order_of("size", ix.s, ix.f, ix.l), FIRST)
        return Plan(tuple(int(x) for x in offs), int(cap), "wic", "feasible", time.perf_counter() - t0)
    rank = {i: r for r, i in enumerate(claim_order(firsts))}
    order = sorted(range(n), key=lambda i: (-sizes[i], rank[i]))
    # placed buffers bucketed by first step would be faster; onert graphs are small
    placed: list[int] = []
    offsets = [0] * n
    cap = 0
    for i in order:
        s, fi, li = sizes[i], firsts[i], lasts[i]
        # `interferes` inlined: this loop is most of the onert profile's planning time
        blocks = sorted((offsets[j], offsets[j] + sizes[j]) for j in placed if fi <= lasts[j] and firsts[j] <= li)
        nxt = 0
        for base, end in blocks:
            if nxt + s <= base:
                break
            if nxt < end:
                nxt = end
        offsets[i] = nxt
        if s > 0:  # an empty buffer blocks nothing
            placed.append(i)
        cap = max(cap, nxt + s)
    return Plan(tuple(offsets), cap, "wic", "feasible", time.perf_counter() - t0)
