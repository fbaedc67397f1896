"""greedy: the best of several placement orders x {first fit, best fit}, smallest arena kept
(XLA's ChooseBestHeapAlgorithm pattern; orders from TFLite/TFLM, XLA kSpatial/kTemporal, TVM USMP,
omnimalloc).

Orders (ties always end in list position):
- size: size descending, ties in claim order (first step, then position): onert's WIC order;
- start: first step ascending: with first fit this is onert's online FirstFit;
- lifetime: (last - first) descending, then size descending;
- area: size x lifetime descending;
- conflicts: number of buffers whose lifetime intersects descending, then size descending;
- conflict_size: conflicts x size descending (omnimalloc's default order, the best single order
  on the large idealloc traces).
Each order is placed with first fit (lowest offset that fits between the intersecting buffers
already placed) and with best fit (the smallest such gap, else on top).

Budget (counts work, never seconds, unless the caller gives `time_limit`):
- One combination costs about n + P, P the number of pairs of buffers whose lifetimes
  intersect (each such pair is looked at once per placement order). The first
  min(len(COMBOS), max(1, work // (n + P))) combinations of COMBOS run, `work` = WORK by
  default: every combination on small and medium lists (so there greedy <= wic and
  greedy <= firstfit), fewer on lists with hundreds of millions of intersecting pairs.
  COMBOS lists the combinations strongest first (measured on benchmarks/plan_bench.py's
  instances).
- With `time_limit` (seconds, asked for by the user) the work budget is not used: the first
  combination always runs and times one placement; a further one starts only while elapsed +
  that time fits in the limit, so the result may depend on the machine's speed and load.
- The smallest arena wins, ties to the earlier combination, so the result does not depend on
  which thread finishes first.

- When even one combination costs more than the budget (n + P > `work`: tens of thousands of
  buffers live together, as in a 100,000-op chain), placing by intersecting pairs would be
  quadratic; greedy then runs the one combination it can place without looking at pairs,
  start/best-fit, as an allocator replay (`start_best_fit`: O(n log n), the same offsets as the
  kernel's start/best-fit). This holds with `time_limit` too.

Runs in the compiled kernels (`_native`), on two threads above PARALLEL_ABOVE buffers.
"""
from __future__ import annotations

import bisect
import heapq
import threading
import time

import numpy as np

from memplan_cli.planners._native import build_index, place
from memplan_cli.planners.base import Plan, register

ORDERS = ("size", "start", "lifetime", "area", "conflicts", "conflict_size")
FIRST, BEST = False, True
COMBOS = (("conflict_size", FIRST), ("conflicts", BEST), ("size", FIRST), ("lifetime", BEST),
          ("size", BEST), ("conflicts", FIRST), ("area", FIRST), ("area", BEST), ("lifetime", FIRST),
          ("start", FIRST), ("start", BEST), ("conflict_size", BEST))
PARALLEL_ABOVE = 2000
# work budget, in (buffers + intersecting pairs) units: all 12 combinations up to ~20M pairs
# (every model and MiniMalloc instance), 1 on idealloc's Y_1 (180M pairs, ~3 s per combination)
WORK = 250_000_000


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
    if name == "conflict_size":
        return np.lexsort((pos, -(s * conflict_counts(f, l))))
    raise ValueError(f"unknown order {name!r}")


class Index:
    """Sizes, compressed lifetimes and the block index, built once and shared by every order."""

    def __init__(self, sizes, firsts, lasts):
        self.s = np.ascontiguousarray(sizes, dtype=np.int64)
        f, l = compress(firsts, lasts)
        self.f, self.l = np.ascontiguousarray(f, np.int64), np.ascontiguousarray(l, np.int64)
        span = int(self.l.max()) + 1 if self.s.size else 1
        self.width = max(1, span // 2048)
        self.tables = build_index(self.f, self.l, self.width)

    def place(self, order: np.ndarray, best_fit: bool, stop_above: int = 0):
        return place(self.s, self.f, self.l, order, best_fit, self.width, *self.tables, stop_above)


def overlapping_pairs(f: np.ndarray, l: np.ndarray) -> int:
    """Pairs of buffers whose (inclusive) lifetimes intersect."""
    return int(conflict_counts(f, l).sum()) // 2


def combos_within(work: int, n: int, pairs: int, available: int) -> int:
    """How many combinations a work budget pays for (at least one)."""
    return min(available, max(1, int(work) // (n + pairs)))


def start_best_fit(sizes, firsts, lasts) -> tuple[np.ndarray, int]:
    """(offsets, arena) of the start order with best fit, without looking at intersecting pairs.

    In start order (first step, then list position) the placed buffers whose lifetimes intersect
    buffer i are exactly those still live at its first step, so the kernel's best fit among them
    is an allocator's: the smallest free gap below the top of the live blocks that holds i (ties:
    the lowest offset), else the top. Frees coalesce with their neighbours. A buffer whose last
    step is t is still live at step t. Zero-size buffers go at 0 and block nothing."""
    n = len(sizes)
    order = sorted(range(n), key=lambda i: (firsts[i], i))
    offsets = np.zeros(n, np.int64)
    gaps: list[tuple[int, int]] = []      # (length, start), sorted: best fit is one bisect
    gap_end: dict[int, int] = {}          # start -> end
    gap_start: dict[int, int] = {}        # end -> start
    live: list[tuple[int, int]] = []      # heap of (last, index)
    top = arena = 0

    def drop_gap(a, b):
        del gaps[bisect.bisect_left(gaps, (b - a, a))]
        del gap_end[a], gap_start[b]

    for i in order:
        fi = firsts[i]
        while live and live[0][0] < fi:
            j = heapq.heappop(live)[1]
            a, b = int(offsets[j]), int(offsets[j]) + sizes[j]
            if a in gap_start:
                a0 = gap_start[a]
                drop_gap(a0, a)
                a = a0
            if b == top:
                top = a
                continue
            if b in gap_end:
                b1 = gap_end[b]
                drop_gap(b, b1)
                b = b1
            bisect.insort(gaps, (b - a, a))
            gap_end[a], gap_start[b] = b, a
        s = sizes[i]
        if s <= 0:
            continue
        k = bisect.bisect_left(gaps, (s, -1))
        if k < len(gaps):
            length, a = gaps[k]
            drop_gap(a, a + length)
            if length > s:
                bisect.insort(gaps, (length - s, a + s))
                gap_end[a + s], gap_start[a + length] = a + length, a + s
            off = a
        else:
            off = top
            top += s
        offsets[i] = off
        arena = max(arena, off + s)
        heapq.heappush(live, (lasts[i], i))
    return offsets, arena


def run_greedy(sizes, firsts, lasts, *, time_limit=None, work=None, combos=COMBOS, threads: int = 2):
    """Returns (offsets, arena, label) of the best combination, label like 'size/first-fit'.
    Without `time_limit`, runs the combinations `work` (default WORK) pays for."""
    n = len(sizes)
    if n == 0:
        return np.zeros(0, np.int64), 0, "empty"
    budget = WORK if work is None else work
    f, l = compress(firsts, lasts)
    pairs = overlapping_pairs(f, l)
    if n + pairs > budget:
        offs, arena = start_best_fit([int(x) for x in sizes], f.tolist(), l.tolist())
        return offs, arena, "start/best-fit"
    t0 = time.perf_counter()
    ix = Index(sizes, firsts, lasts)
    if time_limit is None:
        combos = combos[:combos_within(budget, n, pairs, len(combos))]
    done: dict[int, tuple[int, np.ndarray]] = {}  # combination index -> (arena, offsets)
    lock = threading.Lock()

    def job(k):
        o, bf = combos[k]
        with lock:
            known = [a for a, _ in done.values() if a >= 0]
        offs, arena = ix.place(order_of(o, ix.s, ix.f, ix.l), bf, min(known) if known else 0)
        with lock:
            done[k] = (int(arena), offs)

    t1 = time.perf_counter()
    job(0)
    one = time.perf_counter() - t1
    todo = list(range(1, len(combos)))

    def next_job():
        with lock:
            if not todo or (time_limit is not None and time.perf_counter() - t0 + one > time_limit):
                return None
            return todo.pop(0)

    def worker():
        while (k := next_job()) is not None:
            job(k)

    if threads > 1 and n > PARALLEL_ABOVE:
        pool = [threading.Thread(target=worker) for _ in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
    else:
        worker()
    k = min((k for k, (a, _) in done.items() if a >= 0), key=lambda k: (done[k][0], k))
    o, bf = combos[k]
    return done[k][1], done[k][0], f"{o}/{'best' if bf else 'first'}-fit"


@register("greedy")
def plan_greedy(sizes, firsts, lasts, *, time_limit=None) -> Plan:
    """Every combination WORK pays for; with `time_limit`, as many as fit in it."""
    t0 = time.perf_counter()
    offs, arena, _ = run_greedy(sizes, firsts, lasts, time_limit=time_limit)
    return Plan(tuple(int(x) for x in offs), arena, "greedy", "feasible", time.perf_counter() - t0)
