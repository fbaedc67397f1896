"""greedy: the best of several placement orders x {first fit, best fit}, smallest arena kept
(XLA's ChooseBestHeapAlgorithm pattern; orders from TFLite/TFLM, XLA kSpatial/kTemporal, TVM USMP).

Orders (ties always end in list position):
- size: size descending, ties in claim order (first step, then position): onert's WIC order;
- start: first step ascending: with first fit this is onert's online FirstFit;
- lifetime: (last - first) descending, then size descending;
- area: size x lifetime descending;
- conflicts: number of buffers whose lifetime intersects descending, then size descending.
Each order is placed with first fit (lowest offset that fits between the intersecting buffers
already placed) and with best fit (the smallest such gap, else on top). So greedy <= wic and
greedy <= firstfit on every input.

Runs in a compiled kernel (numba) on two threads; with `time_limit`, combinations not yet started
when time runs out are skipped (the first two run always).
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from memplan_cli.planners._greedy_kernel import build_index, place
from memplan_cli.planners.base import Plan, register

ORDERS = ("size", "start", "lifetime", "area", "conflicts")


def compress(firsts, lasts) -> tuple[np.ndarray, np.ndarray]:
    """Steps mapped to dense ranks, preserving every intersection between inclusive lifetimes."""
    f = np.asarray(firsts, dtype=np.int64)
    l = np.asarray(lasts, dtype=np.int64)
    pts = np.unique(np.concatenate([f, l]))
    return np.searchsorted(pts, f), np.searchsorted(pts, l)


def conflict_counts(f: np.ndarray, l: np.ndarray) -> np.ndarray:
    """For each buffer, how many other buffers' lifetimes intersect it."""
    sf, sl = np.sort(f), np.sort(l)
    return np.searchsorted(sf, l, side="right") - np.searchsorted(sl, f, side="left") - 1


def order_of(name: str, s: np.ndarray, f: np.ndarray, l: np.ndarray) -> np.ndarray:
    n = s.size
    pos = np.arange(n)
    life = l - f + 1
    if name == "size":
        return np.lexsort((pos, f, -s))
    if name == "start":
        return np.lexsort((pos, f))
    if name == "lifetime":
        return np.lexsort((pos, -s, -life))
    if name == "area":
        return np.lexsort((pos, -(s * life)))
    if name == "conflicts":
        return np.lexsort((pos, -s, -conflict_counts(f, l)))
    raise ValueError(f"unknown order {name!r}")


class Index:
    """Sizes, compressed lifetimes and the block index, built once and shared by every order."""

    def __init__(self, sizes, firsts, lasts):
        self.s = np.asarray(sizes, dtype=np.int64)
        self.f, self.l = compress(firsts, lasts)
        span = int(self.l.max()) + 1 if self.s.size else 1
        self.width = max(1, span // 2048)
        self.tables = build_index(self.f, self.l, self.width)

    def place(self, order: np.ndarray, best_fit: bool, stop_above: int = 0):
        return place(self.s, self.f, self.l, order, best_fit, self.width, *self.tables, stop_above)


def run_greedy(sizes, firsts, lasts, *, time_limit=None, orders=ORDERS, fits=(False, True),
               threads: int = 2):
    """Returns (offsets, arena, label) of the best combination, label like 'size/first-fit'."""
    n = len(sizes)
    if n == 0:
        return np.zeros(0, np.int64), 0, "empty"
    t0 = time.perf_counter()
    ix = Index(sizes, firsts, lasts)
    combos = [(o, bf) for o in orders for bf in fits]
    best = [None, None, None]

    def job(combo):
        o, bf = combo
        if time_limit is not None and time.perf_counter() - t0 > time_limit and best[0] is not None:
            return
        offs, arena = ix.place(order_of(o, ix.s, ix.f, ix.l), bf,
                               best[1] if best[1] is not None else 0)
        if arena >= 0 and (best[1] is None or arena < best[1]):
            best[:] = [offs, arena, f"{o}/{'best' if bf else 'first'}-fit"]

    if threads > 1 and n > 2000:
        with ThreadPoolExecutor(threads) as ex:
            list(ex.map(job, combos))
    else:
        for c in combos:
            job(c)
    return best[0], int(best[1]), best[2]


@register("greedy")
def plan_greedy(sizes, firsts, lasts, *, time_limit=None) -> Plan:
    t0 = time.perf_counter()
    offs, arena, _ = run_greedy(sizes, firsts, lasts, time_limit=time_limit)
    return Plan(tuple(int(x) for x in offs), arena, "greedy", "feasible", time.perf_counter() - t0)
