"""nntrainer's own planner unit tests, ported: `test/unittest/memory/unittest_memory_planner.cpp`
(MemoryPlannerValidate, parameterised there over BasicPlanner and OptimizedV1Planner; the checks
that hold for v2 without weight gradients and for v3 are run on those too).

nntrainer's validity is half-open [start, end); memplan's lifetimes are inclusive, so a request
valid over [s, e) is first = s, last = e - 1. MEM_QUANT = 100 requests of 1..MEM_BYTES = 128 bytes,
intervals of 1..INTERVAL_SIZE = 5 orders, as in the C++ file (Python's RNG instead of mt19937: the
checks are properties, not fixed numbers).
"""
import random

import pytest

from memplan_cli.check import check_plan
from memplan_cli.planners import get_planner

MEM_BYTES, MEM_QUANT, INTERVAL_SIZE = 128, 100, 5
OPTIMIZED = ("nntrainer-v1", "nntrainer-v2", "nntrainer-v3")


def plan(name, sizes, validity):
    firsts = [s for s, _ in validity]
    lasts = [e - 1 for _, e in validity]
    p = get_planner(name)(sizes, firsts, lasts)
    check_plan(sizes, firsts, lasts, p.offsets, p.arena)  # validateOverflow and no overlap in time
    return list(p.offsets), p.arena


def sizes_(seed):
    rng = random.Random(seed)
    return [rng.randint(1, MEM_BYTES) for _ in range(MEM_QUANT)]


def no_gaps(sizes, offsets, pool):
    """validateNoOverlap: the requests tile [0, pool) exactly, no byte twice, no byte unused."""
    used = [0] * pool
    for s, o in zip(sizes, offsets):
        for b in range(o, o + s):
            used[b] += 1
    return all(u == 1 for u in used)


@pytest.mark.parametrize("name", OPTIMIZED)
def test_full_overlap(name):
    """TEST_P full_overlap: every request valid over [1, 2): pool = sum of sizes, no gaps."""
    sizes = sizes_(1)
    offsets, pool = plan(name, sizes, [(1, 2)] * MEM_QUANT)
    assert pool == sum(sizes)
    assert no_gaps(sizes, offsets, pool)


@pytest.mark.parametrize("name", OPTIMIZED)
def test_none_overlap(name):
    """TEST_P none_overlap: request i valid over [i, i+1): pool = max size, validateAllOverlap (one
    offset for all)."""
    sizes = sizes_(2)
    offsets, pool = plan(name, sizes, [(i, i + 1) for i in range(MEM_QUANT)])
    assert pool == max(sizes)
    assert set(offsets) == {0}


@pytest.mark.parametrize("name", OPTIMIZED)
def test_partial_overlap_shuffled(name):
    """TEST_P partial_overlap: [i, i + U(1..5)), shuffled; max size <= pool <= sum of sizes, and
    validateIntervalOverlap: walking the requests by (start, end), a request never overlaps in memory
    any request still valid at its start."""
    rng = random.Random(3)
    sizes = sizes_(3)
    validity = [(i, i + rng.randint(1, INTERVAL_SIZE)) for i in range(MEM_QUANT)]
    rng.shuffle(validity)
    offsets, pool = plan(name, sizes, validity)
    assert max(sizes) <= pool <= sum(sizes)
    live = []
    for i in sorted(range(MEM_QUANT), key=lambda i: validity[i]):
        live = [j for j in live if validity[j][1] > validity[i][0]]
        for j in live:
            assert offsets[j] >= offsets[i] + sizes[i] or offsets[j] + sizes[j] <= offsets[i]
        live.append(i)


@pytest.mark.parametrize("name", OPTIMIZED)
def test_validate_memory_full_overlap(name):
    """TEST_P validate_memory_full_overlap: every request starts at 1 and ends at 1 + U(1..5), so all
    are valid at order 1: the pool is the sum of the sizes."""
    rng = random.Random(4)
    sizes = sizes_(4)
    _, pool = plan(name, sizes, [(1, 1 + rng.randint(1, INTERVAL_SIZE)) for _ in range(MEM_QUANT)])
    assert pool == sum(sizes)


@pytest.mark.parametrize("name", OPTIMIZED)
def test_validate_memory_no_overlap(name):
    """TEST_P validate_memory_no_overlap: chained intervals, each starting where the previous ends:
    nothing is valid together, so the pool is the largest request."""
    rng = random.Random(5)
    sizes = sizes_(5)
    validity, prev = [], 0
    for _ in range(MEM_QUANT):
        end = prev + rng.randint(1, INTERVAL_SIZE)
        validity.append((prev, end))
        prev = end
    _, pool = plan(name, sizes, validity)
    assert pool == max(sizes)


@pytest.mark.parametrize("name", OPTIMIZED)
def test_validate_memory_partial_overlap(name):
    """TEST_P validate_memory_partial_overlap: starts U(1..100), lengths U(1..5):
    max size <= pool <= sum of sizes."""
    rng = random.Random(6)
    sizes = sizes_(6)
    validity = []
    for _ in range(MEM_QUANT):
        start = rng.randint(1, 100)
        validity.append((start, start + rng.randint(1, INTERVAL_SIZE)))
    _, pool = plan(name, sizes, validity)
    assert max(sizes) <= pool <= sum(sizes)


def test_basic_planner_is_naive():
    """nntrainer's BasicPlanner (the other parameter there): every request its own bytes; memplan's
    `naive` planner is that rule."""
    sizes = sizes_(7)
    offsets, pool = plan("naive", sizes, [(i, i + 1) for i in range(MEM_QUANT)])
    assert pool == sum(sizes) and no_gaps(sizes, offsets, pool)
