"""exact and best: cases derived by hand, properties on random instances, tilings whose optimum is
the lower bound by construction, the time limit, determinism. Lifetimes are inclusive.
No timing assertions here (time targets belong in the benchmarks)."""
import itertools
import random

from hypothesis import given, settings, strategies as st

from memplan_cli.check import check_plan
from memplan_cli.planners import _exact_kernel as K
from memplan_cli.planners import get_planner, planner_names
from memplan_cli.planners.bound import lower_bound
from memplan_cli.planners.exact import MAX_BUFFERS, PREORDERS, Instance, Search, run_exact
from memplan_cli.planners.greedy import run_greedy
from tests.planners.brute import brute_force_errors

# Five buffers (size, first, last): b0 2B 1-3, b1 1B 2-4, b2 2B 0-1, b3 3B 3-3, b4 4B 0-0.
# Live bytes per step: 6, 4, 3, 6, 1, so LB = 6.
FIVE = ([2, 1, 2, 3, 4], [1, 2, 0, 3, 0], [3, 4, 1, 3, 0])
# Size-descending greedy (ties: earlier first step): b4, b3, b2, b0, b1.
#   b4 -> 0 [0,4); b3 -> 0 [0,3) (not live with b4); b2 (steps 0-1, meets b4) -> 4 [4,6);
#   b0 (steps 1-3) meets b3 [0,3) and b2 [4,6): the hole [3,4) is 1 byte, so b0 -> 6 [6,8);
#   b1 (1B) -> 3 [3,4). Arena 8, with first fit and with best fit alike.
# Optimum 6: b4 [0,4), b2 [4,6), b0 [0,2) (b4 is gone at step 1), b3 [2,5), b1 [5,6).
FIVE_OPTIMAL_OFFSETS = [0, 5, 4, 2, 0]


# A wall-clock limit no test run reaches (for the tests of --time-limit's path).
LONG = 120


def plan(name, inst, **kw):
    p = get_planner(name)(*inst, **kw)
    check_plan(*inst, p.offsets, p.arena)
    assert not brute_force_errors(*inst, list(p.offsets), p.arena)
    return p


def brute_optimum(sizes, firsts, lasts):
    """Smallest arena over every placement order, each buffer on top of the earlier buffers it
    meets: an optimal plan stacked in offset order is one of these orders."""
    n, best = len(sizes), None
    for perm in itertools.permutations(range(n)):
        offs, top = [0] * n, 0
        for k, i in enumerate(perm):
            offs[i] = max([offs[j] + sizes[j] for j in perm[:k]
                           if firsts[j] <= lasts[i] and firsts[i] <= lasts[j]], default=0)
            top = max(top, offs[i] + sizes[i])
            if best is not None and top >= best:
                break
        best = top if best is None else min(best, top)
    return best or 0


def test_registered_and_default_for_memplan():
    from memplan_cli.profiles.memplan import pick_planner

    assert {"exact", "best"} <= set(planner_names())
    assert pick_planner() == "best"


def test_five_buffers_exact_finds_six_where_size_greedy_needs_eight():
    assert lower_bound(*FIVE) == 6
    check_plan(*FIVE, FIVE_OPTIMAL_OFFSETS, 6)
    for best_fit in (False, True):
        offs, arena, _ = run_greedy(*FIVE, combos=(("size", best_fit),))
        assert arena == 8 and list(offs) == [6, 3, 4, 0, 0]
    assert run_greedy(*FIVE)[1] == 7          # no greedy order reaches 6 either
    for name in ("exact", "best"):
        p = plan(name, FIVE)
        assert (p.arena, p.status, p.planner) == (6, "optimal", name)


def test_small_hand_cases():
    assert plan("exact", ([], [], [])).arena == 0
    assert plan("exact", ([5], [0], [3])).arena == 5
    # zero-size buffers take no bytes and get offset 0
    p = plan("exact", ([0, 4, 0], [0, 0, 1], [2, 2, 1]))
    assert (list(p.offsets), p.arena) == ([0, 0, 0], 4)
    # never live together: all share offset 0; always live together: sizes add up
    assert plan("exact", ([3, 7, 2], [0, 1, 2], [0, 1, 2])).arena == 7
    assert plan("exact", ([3, 7, 2], [0, 0, 0], [4, 4, 4])).arena == 12
    # b0 (2B, 0-1), b1 (2B, 1-2), b2 (2B, 2-3), b3 (2B, 0-0), b4 (2B, 3-3): LB 4 at every step
    p = plan("exact", ([2, 2, 2, 2, 2], [0, 1, 2, 0, 3], [1, 2, 3, 0, 3]))
    assert (p.arena, p.status) == (4, "optimal")


def test_decision_procedure_at_and_below_the_optimum():
    inst = Instance(*FIVE)
    for pre in PREORDERS:
        s = Search(inst, 6, pre)
        assert s.run(10_000) == K.FOUND
        check_plan(*FIVE, list(s.offsets), 6)
        assert Search(inst, 5, pre).run(10_000) == K.INFEASIBLE


tiny = st.integers(1, 6).flatmap(lambda n: st.tuples(
    st.lists(st.integers(1, 6), min_size=n, max_size=n),
    st.lists(st.integers(0, 6), min_size=n, max_size=n),
    st.lists(st.integers(0, 4), min_size=n, max_size=n)))


@settings(max_examples=200, deadline=None)
@given(tiny, st.booleans(), st.booleans(), st.integers(1, 3))
def test_search_variants_agree_with_brute_force(inst, decompose, rerank, budget):
    """Every preorder, with and without decomposition / re-ranking, resumed every few nodes:
    finds a plan at the optimum and proves the capacity below it too small."""
    sizes, firsts, spans = inst
    lasts = [f + d for f, d in zip(firsts, spans)]
    opt = brute_optimum(sizes, firsts, lasts)
    ins = Instance(sizes, firsts, lasts)
    for pre in PREORDERS:
        for cap, want in ((opt, K.FOUND), (opt - 1, K.INFEASIBLE)):
            s = Search(ins, cap, pre, decompose=decompose, rerank=rerank)
            while (status := s.run(budget)) == K.PAUSED:
                pass
            assert status == want
            if want == K.FOUND:
                check_plan(sizes, firsts, lasts, list(s.offsets), opt)


small = st.integers(1, 14).flatmap(lambda n: st.tuples(
    st.lists(st.integers(0, 9), min_size=n, max_size=n),
    st.lists(st.integers(0, 10), min_size=n, max_size=n),
    st.lists(st.integers(0, 5), min_size=n, max_size=n)))


@settings(max_examples=300, deadline=None)
@given(small)
def test_exact_and_best_properties(inst):
    sizes, firsts, spans = inst
    lasts = [f + d for f, d in zip(firsts, spans)]
    lb = lower_bound(sizes, firsts, lasts)
    g = plan("greedy", (sizes, firsts, lasts))
    naive = plan("naive", (sizes, firsts, lasts))
    e = plan("exact", (sizes, firsts, lasts))
    b = plan("best", (sizes, firsts, lasts))
    for p in (e, b):
        assert lb <= p.arena <= g.arena <= naive.arena
        if p.arena == lb:
            assert p.status == "optimal"
    if e.status == "optimal":
        assert b.arena == e.arena
    if len(sizes) <= 6:
        assert e.arena == brute_optimum(sizes, firsts, lasts)


@st.composite
def tilings(draw):
    """Cut a W x H rectangle (steps x bytes) recursively into rectangles, each a buffer: every
    step is covered by exactly H bytes, so LB = H, and the cut itself is a plan of arena H."""
    width, height = draw(st.integers(1, 10)), draw(st.integers(1, 40))
    rects = []

    def cut(x0, x1, y0, y1, depth):
        how = draw(st.sampled_from(["stop", "time", "space"])) if depth < 6 else "stop"
        if how == "time" and x1 > x0:
            c = draw(st.integers(x0, x1 - 1))
            cut(x0, c, y0, y1, depth + 1)
            cut(c + 1, x1, y0, y1, depth + 1)
        elif how == "space" and y1 - y0 > 1:
            c = draw(st.integers(y0 + 1, y1 - 1))
            cut(x0, x1, y0, c, depth + 1)
            cut(x0, x1, c, y1, depth + 1)
        else:
            rects.append((y1 - y0, x0, x1, y0))

    cut(0, width - 1, 0, height, 0)
    rects = draw(st.permutations(rects))
    return height, rects


@settings(max_examples=200, deadline=None)
@given(tilings())
def test_exact_reaches_the_height_of_a_tiling(tiling):
    height, rects = tiling
    sizes, firsts, lasts, offs = (list(col) for col in zip(*rects))
    check_plan(sizes, firsts, lasts, offs, height)      # the cut is a plan
    assert lower_bound(sizes, firsts, lasts) == height
    p = plan("exact", (sizes, firsts, lasts))
    assert (p.arena, p.status) == (height, "optimal")


def random_tiling(n, seed, width=200, height=1 << 16):
    """A W x H rectangle cut at random into n rectangles (buffers): optimum = LB = H."""
    assert n <= width * height       # else the cutting never ends
    rng = random.Random(seed)
    rects = [(0, width - 1, 0, height)]
    while len(rects) < n:
        k = rng.randrange(len(rects))
        x0, x1, y0, y1 = rects[k]
        if rng.random() < 0.5 and x1 > x0:
            c = rng.randint(x0, x1 - 1)
            rects[k:k + 1] = [(x0, c, y0, y1), (c + 1, x1, y0, y1)]
        elif y1 - y0 > 1:
            c = rng.randint(y0 + 1, y1 - 1)
            rects[k:k + 1] = [(x0, x1, y0, c), (x0, x1, c, y1)]
    rng.shuffle(rects)
    return ([y1 - y0 for _, _, y0, y1 in rects], [x0 for x0, _, _, _ in rects],
            [x1 for _, x1, _, _ in rects])


def test_time_limit_returns_a_valid_plan_no_worse_than_greedy():
    inst = random_tiling(250, 0)     # greedy 1.40 x LB; the search does not settle it quickly
    lb, g_arena = lower_bound(*inst), run_greedy(*inst)[1]
    assert g_arena > lb
    for limit in (0, 1e-3, 0.05):
        p = plan("exact", inst, time_limit=limit)
        assert lb <= p.arena <= g_arena
        if p.status == "optimal":
            assert p.arena == lb
    # no time for the search: greedy's plan (greedy itself cut short the same way)
    assert plan("best", inst, time_limit=0).arena == run_greedy(*inst, time_limit=0)[1]


def test_above_max_buffers_returns_greedys_plan():
    inst = random_tiling(MAX_BUFFERS + 1, 1, width=4000)
    offs, arena, _ = run_greedy(*inst)
    p = plan("exact", inst)
    assert (list(p.offsets), p.arena) == (list(offs), arena)
    assert run_exact(*inst)[3]["probes"] == []


def test_same_input_same_plan():
    inst = random_tiling(120, 0)     # greedy 1.14 x LB; the search reaches LB in well under 1 s
    assert run_greedy(*inst)[1] > lower_bound(*inst)
    for name in ("exact", "best"):
        a = plan(name, inst)
        b = plan(name, inst)
        assert (a.offsets, a.arena, a.status) == (b.offsets, b.arena, b.status)
        assert a.arena == lower_bound(*inst)


@settings(max_examples=200, deadline=None)
@given(small, st.lists(st.integers(0, 20), min_size=14, max_size=14))
def test_no_overlap_agrees_with_the_verifier(inst, offsets):
    from memplan_cli.check import PlanError
    from memplan_cli.planners.exact import no_overlap

    sizes, firsts, spans = inst
    lasts = [f + d for f, d in zip(firsts, spans)]
    offs = offsets[:len(sizes)]
    try:
        check_plan(sizes, firsts, lasts, offs, max(o + s for o, s in zip(offs, sizes)))
        ok = True
    except PlanError:
        ok = False
    assert no_overlap(sizes, firsts, lasts, offs) == ok


def test_bisection_with_a_stub_decision(monkeypatch):
    """The capacity loop alone: every probe 'infeasible' proves greedy's arena optimal; every
    probe 'timeout' leaves it feasible; neither probes below the lower bound."""
    import memplan_cli.planners.exact as ex

    inst = random_tiling(120, 0)
    lb, g_arena = lower_bound(*inst), run_greedy(*inst)[1]
    for outcome, status in (("infeasible", "optimal"), ("timeout", "feasible")):
        caps = []
        monkeypatch.setattr(ex, "decide", lambda i, cap, dl, pool=None, clock=None, o=outcome:
                            caps.append(cap) or (o, None))
        offs, arena, got, info = ex.run_exact(*inst)
        assert (arena, got) == (g_arena, status)
        assert caps[0] == lb and all(lb <= c < g_arena for c in caps)
        if outcome == "infeasible":
            assert info["proven_lower_bound"] == g_arena
