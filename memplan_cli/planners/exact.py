"""exact: the smallest arena a search finds within its budget; "optimal" when it is proven
(MiniMalloc-style search written anew from its published ideas; the search and its pruning rules
are in `_exact_kernel`).

Rules:
- Greedy's plan is the starting point and the fallback: exact never returns a larger arena.
- Budget: in rounds (below), ROUNDS by default; the clock is never read. Only when the caller
  gives `time_limit` (seconds, asked for by the user) is the budget wall-clock time instead,
  and then the result may depend on the machine's speed and load. Below, "time" means
  whichever of the two is in use.
- Decision procedure for a capacity: do all buffers fit in [0, cap)? First asked at
  cap = lower bound, with half the time left. If that fails or runs out of time, capacities
  are bisected between the lower bound and the best arena found, never from 0 (bisecting from
  0 spends the budget below the lower bound, planning.md 2.9). A bisection probe gets a third
  of the time left, at most PROBE_MAX of the limit (at least one round); one that runs out of
  time counts as "too small" for this window. Which capacity a search settles fast is luck more than monotone in
  the capacity (MiniMalloc's J: 1.0595 x LB undecided in 1 s, 1.0558 found in 0.04 s), so when
  a window is done (gap below LB / RESOLUTION), a new one is bisected below the lowest
  capacity given up on, until time runs out or nothing was given up on.
- Each decision runs three static preorders (TWA, TAW, WAT) side by side, in rounds: one turn
  of a fixed node count each (`slice_nodes`, ~10 ms compiled), on two threads after the first
  round; after each round the first of them (in that order) that finished decides. A time
  limit is checked between rounds, so it is overrun by about one round.
- Every plan a probe finds is checked (`no_overlap`, a plain pairwise test on the raw input)
  before it is kept. The layering rule keeps planners from importing memplan_cli.check; the
  caller (analysis.plan_buffer_list) runs the independent verifier on every plan anyway.
- status "optimal" when the arena equals the lower bound or every smaller capacity was proven
  too small; else "feasible".
- Above MAX_BUFFERS buffers greedy's plan is returned as is: the search does not scale there
  (planning.md section 3: MiniMalloc timed out on 18.7k and 28.5k buffers without one
  backtrack; greedy is within ~1-3% of the bound on such graphs). Building the search also
  takes O(n^2) memory (neighbour lists, candidate pools).
- Zero-size buffers get offset 0 and take no part in the search.
- Deterministic for a given input without `time_limit`: rounds are counted in nodes, and the
  node counts do not depend on which kernels run (C or the Python reference).
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from memplan_cli.planners import _exact_kernel as K
from memplan_cli.planners._native import search as _search
from memplan_cli.planners.base import Plan, register
from memplan_cli.planners.bound import lower_bound
from memplan_cli.planners.greedy import run_greedy

MAX_BUFFERS = 2000
ROUNDS = 600       # default budget of `exact`: ~18 s of one core (MiniMalloc D needs ~510)
PREORDERS = ("TWA", "TAW", "WAT")
# work per turn of one search, in steps of (buffers + section spans) per node: ~10 ms compiled
SLICE_WORK = 10_000_000
THREADS = 2
PROBE_LB = 0.5     # share of the time left for the probe at the lower bound
PROBE_MAX = 0.1    # at most this share of the time limit for one bisection probe
RESOLUTION = 2000  # bisection stops at gaps below lower bound / RESOLUTION


class Instance:
    """The non-empty buffers in the search's terms: sections, neighbour lists, static keys."""

    def __init__(self, sizes, firsts, lasts):
        s = np.asarray(sizes, dtype=np.int64)
        f = np.asarray(firsts, dtype=np.int64)
        l = np.asarray(lasts, dtype=np.int64)
        self.keep = np.flatnonzero(s > 0)
        s, f, l = s[self.keep], f[self.keep], l[self.keep]
        self.s = s
        # sections: the spans between consecutive events (a first step, or a last step + 1), so
        # the buffers live in a section are the same all through it; c covers [f[c], l[c] + 1)
        pts = np.unique(np.concatenate([f, l + 1]))
        self.a = np.searchsorted(pts, f).astype(np.int64)
        self.b = (np.searchsorted(pts, l + 1) - 1).astype(np.int64)
        self.n_sections = max(pts.size - 1, 1)
        # neighbours: buffers whose lifetimes intersect
        ov = (self.a[:, None] <= self.b[None, :]) & (self.a[None, :] <= self.b[:, None])
        np.fill_diagonal(ov, False)
        self.adj_ptr = np.concatenate([[0], np.cumsum(ov.sum(axis=1))]).astype(np.int64)
        self.adj = np.nonzero(ov)[1].astype(np.int64)
        # static keys: bytes live in the most crowded section of a buffer, lifetime, area
        live = np.zeros(self.n_sections + 1, np.int64)
        np.add.at(live, self.a, s)
        np.add.at(live, self.b + 1, -s)
        live = np.cumsum(live)
        self.total = np.array([live[x:y + 1].max() for x, y in zip(self.a, self.b)], np.int64)
        self.width = l - f + 1
        # only the order of areas matters: keep their dense rank (size x steps may overflow)
        self.area = np.unique(s.astype(np.float64) * self.width, return_inverse=True)[1]
        self.area = self.area.reshape(-1).astype(np.int64)

    def rank(self, preorder: str) -> np.ndarray:
        """rank[c] = position of c in `preorder` (letters T total, W width, A area, each
        descending; ties by list position)."""
        key = {"T": self.total, "W": self.width, "A": self.area}
        order = np.lexsort([np.arange(self.s.size)] + [-key[ch] for ch in reversed(preorder)])
        rank = np.empty(self.s.size, np.int64)
        rank[order] = np.arange(self.s.size)
        return rank


class Search:
    """One resumable decision search: does everything fit under `cap`, with `preorder`?"""

    def __init__(self, inst: Instance, cap: int, preorder: str, decompose: bool = True,
                 rerank: bool = True):
        self.inst, self.cap = inst, int(cap)
        self.flags = (bool(decompose), bool(rerank))
        self.pre = np.array(["TWA".index(ch) for ch in preorder], np.int64)
        self.state = K.new_state(inst.rank(preorder), inst.n_sections, int(inst.adj.size))

    def run(self, budget: int) -> int:
        """FOUND, INFEASIBLE or PAUSED after at most `budget` more nodes."""
        i = self.inst
        return _search(i.s, i.a, i.b, i.adj_ptr, i.adj, i.width, i.area, self.pre, self.cap,
                       int(budget), *self.flags, *self.state)

    @property
    def offsets(self) -> np.ndarray:
        return self.state[2]

    @property
    def nodes(self) -> int:
        return int(self.state[-1][K.S_NODES])


def slice_nodes(inst: Instance) -> int:
    """Nodes per turn: a node costs about (buffers + total section span) steps. Fixed per
    instance, so where the searches stand after each round does not depend on timing."""
    work = inst.s.size + int((inst.b - inst.a + 1).sum())
    return int(min(max(SLICE_WORK // max(work, 1), 16), 1 << 16))


class Rounds:
    """The default clock: rounds run so far (`tick` after each). Read like time.perf_counter."""

    def __init__(self):
        self.n = 0

    def __call__(self) -> float:
        return float(self.n)

    def tick(self) -> None:
        self.n += 1


class Seconds:
    """The clock under a user's time limit: wall-clock seconds."""

    def __call__(self) -> float:
        return time.perf_counter()

    def tick(self) -> None:
        pass


def decide(inst: Instance, cap: int, deadline: float, preorders=PREORDERS, pool=None, clock=None):
    """('found', offsets) | ('infeasible', None) | ('timeout', None) for capacity `cap`; rounds
    run while clock() < deadline (at least one)."""
    if inst.s.size == 0:
        return "found", np.zeros(0, np.int64)
    clock = clock or Seconds()
    searches = [Search(inst, cap, p) for p in preorders]
    budget = slice_nodes(inst)
    first = True
    while first or clock() < deadline:
        if first or pool is None:      # small cases end in the first round: no threads
            statuses = [srch.run(budget) for srch in searches]
            first = False
        else:
            statuses = list(pool.map(lambda srch: srch.run(budget), searches))
        clock.tick()
        for srch, st in zip(searches, statuses):
            if st == K.FOUND:
                return "found", srch.offsets.copy()
            if st == K.INFEASIBLE:
                return "infeasible", None
    return "timeout", None


def run_exact(sizes, firsts, lasts, *, time_limit=None, rounds=None, greedy=None):
    """(offsets, arena, status, info). The budget: `rounds` (default ROUNDS), or `time_limit`
    seconds when given. `greedy` = (offsets, arena) of a greedy plan already computed (else
    greedy runs first, within its own work budget). info: lower bound, greedy's arena, proven
    lower bound, rounds run and each probe as (capacity, outcome, rounds or seconds), for
    benchmarks."""
    clock = Rounds() if time_limit is None else Seconds()
    t0 = clock()
    deadline = t0 + (float(ROUNDS if rounds is None else rounds) if time_limit is None else float(time_limit))
    n = len(sizes)
    lb = lower_bound(sizes, firsts, lasts)
    if greedy is None:
        g_offs, g_arena, _ = run_greedy(sizes, firsts, lasts, time_limit=time_limit)
        greedy = (g_offs, g_arena)
    best, arena = np.asarray(greedy[0], np.int64), int(greedy[1])
    info = {"lower_bound": lb, "greedy": arena, "proven_lower_bound": lb, "probes": [], "rounds": 0}
    if arena <= lb or n > MAX_BUFFERS:
        return best, arena, ("optimal" if arena <= lb else "feasible"), info
    inst = Instance(sizes, firsts, lasts)
    limit = deadline - t0
    step = max(1, lb // RESOLUTION)   # windows narrower than this are not bisected further
    proven = lb       # no plan is smaller (raised when a probe proves a capacity too small)
    lo, hi = lb, arena        # the window being bisected: [lo, hi)
    lowest_given_up = None    # lowest capacity of this window whose probe ran out of time
    with ThreadPoolExecutor(THREADS) as pool:
        while True:
            now = clock()
            if now >= deadline or arena <= proven:
                break
            # proofs go down to the byte; windows above a given-up capacity stop at `step`
            if hi - lo < (1 if lo <= proven else step):
                # window done. Which capacity a search settles fast is luck more than monotone
                # in the capacity, so bisect again below the lowest one given up on
                if lowest_given_up is None:
                    break
                lo, hi = max(proven, lb + 1), min(lowest_given_up, arena)
                lowest_given_up = None
                continue
            cap = lb if lo == lb else (lo + hi) // 2
            left = deadline - now
            share = left * PROBE_LB if cap == lb else min(left / 3, limit * PROBE_MAX)
            res, sub = decide(inst, cap, min(deadline, now + share), pool=pool, clock=clock)
            info["probes"].append((cap, res, round(clock() - now, 3)))
            if res == "found":
                offs = np.zeros(n, np.int64)
                offs[inst.keep] = sub
                top = int((offs[inst.keep] + inst.s).max())
                if not no_overlap(sizes, firsts, lasts, offs):
                    # a bug in the search: keep what we had and stop searching
                    info["error"] = f"plan at capacity {cap} failed the check"
                    break
                if top < arena:
                    best, arena = offs, top
                hi = min(hi, top)
            else:
                if res == "infeasible":
                    proven = max(proven, cap + 1)
                elif cap != lb and (lowest_given_up is None or cap < lowest_given_up):
                    lowest_given_up = cap
                lo = cap + 1
    info["proven_lower_bound"] = proven
    info["rounds"] = clock.n if isinstance(clock, Rounds) else None
    return best, arena, ("optimal" if arena <= proven else "feasible"), info


def no_overlap(sizes, firsts, lasts, offsets) -> bool:
    """True when offsets are >= 0 and no two non-empty buffers live at a common step share a
    byte. O(n^2) pairwise, written apart from the search (for n <= MAX_BUFFERS)."""
    s = np.asarray(sizes, np.int64)
    f = np.asarray(firsts, np.int64)
    l = np.asarray(lasts, np.int64)
    o = np.asarray(offsets, np.int64)
    if s.size == 0:
        return True
    e = o + s
    clash = (f[:, None] <= l[None, :]) & (f[None, :] <= l[:, None])
    clash &= (o[:, None] < e[None, :]) & (o[None, :] < e[:, None])
    clash &= (s[:, None] > 0) & (s[None, :] > 0)
    np.fill_diagonal(clash, False)
    return bool((o >= 0).all() and not clash.any())


@register("exact")
def plan_exact(sizes, firsts, lasts, *, time_limit=None, rounds=None) -> Plan:
    """ROUNDS (or `rounds`) rounds of search from greedy's plan; with `time_limit`, seconds."""
    t0 = time.perf_counter()
    offs, arena, status, _ = run_exact(sizes, firsts, lasts, time_limit=time_limit, rounds=rounds)
    return Plan(tuple(int(x) for x in offs), arena, "exact", status, time.perf_counter() - t0)
