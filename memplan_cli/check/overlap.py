"""The plan verifier: written apart from the planners and sharing no code with them.

A plan (offsets, arena) for buffers (size, first, last), lifetimes inclusive, is valid when:
- every offset is >= 0 and every offset + size <= arena;
- no two buffers whose lifetimes intersect (first_i <= last_j and first_j <= last_i) share a
  byte: [offset_i, offset_i + size_i) and [offset_j, offset_j + size_j) are disjoint.
Zero-size buffers occupy no bytes and never conflict.

Method: a sweep over time. At each step the buffers that start there are checked against the
buffers live at that moment, kept ordered by offset; a new buffer only needs comparing with its
two neighbours in that order, because live buffers are pairwise disjoint (checked as they
enter). O(n log n) plus the cost of the ordered list.
"""
from __future__ import annotations

import bisect
from typing import Sequence


class PlanError(ValueError):
    """A plan breaks a rule; the message names the buffer(s)."""


def check_plan(sizes: Sequence[int], firsts: Sequence[int], lasts: Sequence[int],
               offsets: Sequence[int], arena: int, names: Sequence[str] | None = None) -> None:
    """Raise PlanError naming the first broken rule, else return None."""
    n = len(sizes)
    if not (len(firsts) == len(lasts) == len(offsets) == n):
        raise PlanError(f"lengths differ: {n} sizes, {len(firsts)} firsts, {len(lasts)} lasts, "
                        f"{len(offsets)} offsets")

    def nm(i: int) -> str:
        return f"buffer {names[i]!r}" if names is not None else f"buffer {i}"

    # Python ints once (the inputs may be numpy arrays): the sweep below reads each several times
    offsets, sizes = [int(x) for x in offsets], [int(x) for x in sizes]
    firsts, lasts = [int(x) for x in firsts], [int(x) for x in lasts]
    for i in range(n):
        o, s = offsets[i], sizes[i]
        if s < 0:
            raise PlanError(f"{nm(i)} has negative size {s}")
        if firsts[i] > lasts[i]:
            raise PlanError(f"{nm(i)} has first step {firsts[i]} after last step {lasts[i]}")
        if o < 0:
            raise PlanError(f"{nm(i)} has negative offset {o}")
        if o + s > arena:
            raise PlanError(f"{nm(i)} ends at {o + s}, past the arena of {arena} bytes")

    # events: at step t, buffers ending at t-1 leave before buffers starting at t enter
    starts = sorted((firsts[i], i) for i in range(n) if sizes[i] > 0)
    ends = sorted((lasts[i], i) for i in range(n) if sizes[i] > 0)
    live: list[tuple[int, int]] = []   # (offset, index), ordered
    bisect_left = bisect.bisect_left
    e, n_ends = 0, len(ends)
    for t, i in starts:
        while e < n_ends and ends[e][0] < t:
            _, j = ends[e]
            del live[bisect_left(live, (offsets[j], j))]
            e += 1
        key = (offsets[i], i)
        k = bisect_left(live, key)
        oi = key[0]
        ei = oi + sizes[i]
        if k > 0:
            ob, j = live[k - 1]
            if ob + sizes[j] > oi:
                raise PlanError(_clash(nm(j), nm(i), ob, ob + sizes[j], oi, ei))
        if k < len(live):
            oa, j = live[k]
            if oa < ei:
                raise PlanError(_clash(nm(i), nm(j), oi, ei, oa, oa + sizes[j]))
        live.insert(k, key)


def _clash(a: str, b: str, a0: int, a1: int, b0: int, b1: int) -> str:
    return (f"{a} [{a0}, {a1}) and {b} [{b0}, {b1}) overlap in bytes while both are live")
