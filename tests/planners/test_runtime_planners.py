"""onert, nntrainer and SINGA-style planners on small cases derived by hand (derivations in the
comments). Lifetimes are inclusive [first, last]."""
from memplan_cli.check import check_plan
from memplan_cli.planners import get_planner
from memplan_cli.planners.bound import lower_bound

# Case A: b0 2B steps 0-1, b1 4B steps 0-3, b2 4B steps 2-3. LB = 8 (step 2: b1 + b2).
A = ([2, 4, 4], [0, 0, 2], [1, 3, 3])


def run(name, inst, **kw):
    plan = get_planner(name)(*inst, **kw)
    check_plan(*inst, plan.offsets, plan.arena)
    return list(plan.offsets), plan.arena


def test_case_a_lower_bound():
    assert lower_bound(*A) == 8


def test_bump_claim_order_no_reuse():
    # claim order b0, b1 (both step 0, list order), b2: offsets 0, 2, 6
    assert run("bump", A) == ([0, 2, 6], 10)
    # claim order follows first steps, not list position
    assert run("bump", ([5, 3], [4, 1], [6, 2])) == ([3, 0], 8)


def test_firstfit_online():
    # b0 -> 0; b1 -> above b0 at 2; b0 released after step 1; b2 (4B) does not fit the
    # 2-byte hole at 0, goes above b1 at 6
    assert run("firstfit", A) == ([0, 2, 6], 10)


def test_wic_size_descending_claim_order_ties():
    # order b1 (4, claimed 2nd), b2 (4, claimed 3rd), b0 (2): b1 -> 0; b2 interferes b1 -> 4;
    # b0 interferes only b1 ([0,4)) -> 4 (b2 is not live with b0)
    assert run("wic", A) == ([4, 0, 4], 8)


def test_firstfit_reuses_freed_hole():
    # b0 4B steps 0-1, b1 2B steps 0-3, b2 3B steps 2-3: b2 fits b0's freed bytes [0, 4)
    assert run("firstfit", ([4, 2, 3], [0, 0, 2], [1, 3, 3])) == ([0, 4, 0], 6)


def test_singa_fragmentation_exceeds_lower_bound():
    # step 0: b0 -> [0,2), b1 -> [2,6), high-water 6; after step 1 b0 is freed: free [0,2).
    # step 2: b2 (4B) fits no free block; the free block does not touch the top -> at 6.
    # High-water 10 against LB 8: fragmentation.
    assert run("singa", A) == ([0, 2, 6], 10)


def test_singa_coalesces_freed_neighbours():
    # b0 [0,2) and b1 [2,4) freed after step 1 merge into [0,4), which takes b2 (4B)
    assert run("singa", ([2, 2, 4], [0, 0, 2], [1, 1, 3])) == ([0, 2, 0], 4)


def test_singa_grows_a_free_block_touching_the_top():
    # b1 [2,4) freed after step 1 touches the top (4): b2 (3B) starts at 2, high-water 5
    assert run("singa", ([2, 2, 3], [0, 0, 2], [3, 1, 3])) == ([0, 2, 2], 5)


# nntrainer: half-open [first, last + 1). Case B: b0 2B [0,2), b1 4B [0,4), b2 1B [2,4).
B = ([2, 4, 1], [0, 0, 2], [1, 3, 3])


def test_nntrainer_v1_only_exact_size_reuse():
    # b2 (1B): b0 expired at 2 but is 2B: no reuse; on top of b1 -> 6, pool 7
    assert run("nntrainer-v1", B) == ([0, 2, 6], 7)
    # same with b2 2B: reuses b0's slot at 0
    assert run("nntrainer-v1", ([2, 4, 2], [0, 0, 2], [1, 3, 3])) == ([0, 2, 0], 6)


def test_nntrainer_v1_pops_expired_top():
    # b0 3B [0,5), b1 2B [1,3) -> 3; b2 5B [3,4): b1 popped (3 <= 3), on top of b0 -> 3
    assert run("nntrainer-v1", ([3, 2, 5], [0, 1, 3], [4, 2, 3])) == ([0, 3, 3], 8)


def test_nntrainer_v3_fills_gaps():
    # b2 (1B): b0 expired, vacant gap [0,2) below b1 -> 0; pool stays 6
    assert run("nntrainer-v3", B) == ([0, 2, 0], 6)


def test_nntrainer_v2_gradient_region():
    sizes, firsts, lasts = [4, 2, 3, 3], [0, 1, 2, 5], [3, 2, 4, 6]
    kinds = ["activation", "activation", "wgrad", "wgrad"]
    # v1 part: b0 -> 0, b1 -> 4, pool 6; gradients from 6: b2 -> 6; b3 [5,7) is disjoint from
    # b2 [2,5) and no larger: shares b2's slot
    assert run("nntrainer-v2", (sizes, firsts, lasts), kinds=kinds) == ([0, 4, 6, 6], 9)
    # without kinds v2 is v1
    assert run("nntrainer-v2", (sizes, firsts, lasts)) == run("nntrainer-v1", (sizes, firsts, lasts))


def test_nntrainer_v2_true_interval_test():
    # b3 [1,3) starts before b2 [2,5) and ends inside it: nntrainer's own test would merge them
    # (an overlap); memplan opens a new slot at 6 + 3 = 9
    sizes, firsts, lasts = [4, 2, 3, 3], [0, 1, 2, 1], [3, 2, 4, 2]
    kinds = ["x", "x", "wgrad", "wgrad"]
    assert run("nntrainer-v2", (sizes, firsts, lasts), kinds=kinds) == ([0, 4, 6, 9], 12)


# From nntrainer's unit tests (test/unittest/memory/unittest_memory_planner.cpp), as facts:
# full overlap: every request valid over [1,2) -> pool = sum of sizes, no gaps;
# no overlap: request i valid over [i, i+1) -> pool = max size, every offset equal.
def test_nntrainer_full_overlap_packs_without_gaps():
    sizes = [(7 * i) % 50 + 1 for i in range(100)]
    for name in ("nntrainer-v1", "nntrainer-v2", "nntrainer-v3"):
        offs, pool = run(name, (sizes, [1] * 100, [1] * 100))
        assert pool == sum(sizes)
        assert sorted(zip(offs, sizes))[0][0] == 0
        cover = sorted(zip(offs, sizes))
        assert all(a + s == b for (a, s), (b, _) in zip(cover, cover[1:]))


def test_nntrainer_none_overlap_shares_one_slot():
    sizes = [(13 * i) % 50 + 1 for i in range(100)]
    for name in ("nntrainer-v1", "nntrainer-v3"):
        offs, pool = run(name, (sizes, list(range(100)), list(range(100))))
        assert pool == max(sizes)
        assert set(offs) == {0}


def test_nntrainer_partial_overlap_v1_stacks_on_live_top():
    # nntrainer's validateIntervalOverlap: after dropping expired requests, each request sits
    # exactly at the highest end among the live ones (no equal-size reuse happens here)
    import random
    rng = random.Random(0)
    sizes = [rng.randint(1, 50) for _ in range(100)]
    firsts = list(range(100))
    lasts = [i + rng.randint(1, 5) - 1 for i in range(100)]
    offs, pool = run("nntrainer-v1", (sizes, firsts, lasts))
    assert max(sizes) <= pool <= sum(sizes)
    live = []
    for i in sorted(range(100), key=lambda i: (firsts[i], lasts[i], i)):
        live = [j for j in live if lasts[j] >= firsts[i]]
        top = max((offs[j] + sizes[j] for j in live), default=0)
        if not any(sizes[j] == sizes[i] and offs[j] == offs[i] for j in range(i)):
            assert offs[i] == top
        live.append(i)
