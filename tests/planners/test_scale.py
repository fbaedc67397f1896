"""Planners on lists too large to look at every pair of intersecting lifetimes (issue 28): greedy's
allocator replay of start/best-fit and onert WIC's compiled path give the same offsets as the
pairwise placements they stand in for, and the work budgets decide deterministically."""
from __future__ import annotations

import random

import pytest

from memplan_cli.check.overlap import check_plan
from memplan_cli.errors import MemplanError
from memplan_cli.planners import greedy, onert
from memplan_cli.planners.greedy import BEST, Index, order_of, overlapping_pairs, compress, start_best_fit


def random_instance(rng, n, steps, big=1000):
    sizes = [rng.choice([0, 1, 16, 48, rng.randint(1, big)]) for _ in range(n)]
    firsts = [rng.randrange(steps) for _ in range(n)]
    lasts = [f + rng.choice([0, 1, 2, rng.randrange(steps)]) for f in firsts]
    return sizes, firsts, lasts


def nested(n):
    """A chain's training lifetimes: buffer i lives from step i to step 2n - i (all intersect)."""
    return [64 + 16 * (i % 3) for i in range(n)], list(range(n)), [2 * n - i for i in range(n)]


@pytest.mark.parametrize("seed", range(40))
def test_start_best_fit_is_the_kernels_start_best_fit(seed):
    rng = random.Random(seed)
    sizes, firsts, lasts = random_instance(rng, rng.choice([1, 7, 60, 400]), rng.choice([2, 20, 500]))
    ix = Index(sizes, firsts, lasts)
    want_offsets, want_arena = ix.place(order_of("start", ix.s, ix.f, ix.l), BEST)
    offsets, arena = start_best_fit(sizes, firsts, lasts)
    assert arena == want_arena
    assert offsets.tolist() == want_offsets.tolist()


def test_greedy_over_its_budget_replays_start_best_fit():
    sizes, firsts, lasts = nested(300)
    pairs = overlapping_pairs(*compress(firsts, lasts))
    offs, arena, label = greedy.run_greedy(sizes, firsts, lasts, work=len(sizes) + pairs - 1)
    assert label == "start/best-fit"
    check_plan(sizes, firsts, lasts, offs.tolist(), arena)
    want_offsets, want_arena = start_best_fit(sizes, firsts, lasts)
    assert (offs.tolist(), arena) == (want_offsets.tolist(), want_arena)
    # within the budget the combinations run as before
    assert greedy.run_greedy(sizes, firsts, lasts, work=len(sizes) + pairs)[2] != "start/best-fit"


@pytest.mark.parametrize("seed", range(20))
def test_wic_compiled_path_matches_the_replay(seed, monkeypatch):
    rng = random.Random(seed)
    sizes, firsts, lasts = random_instance(rng, rng.choice([3, 50, 400]), rng.choice([4, 40, 600]))
    monkeypatch.setattr(onert, "WIC_NATIVE_ABOVE", 10**9)
    want = onert.plan_wic(sizes, firsts, lasts)
    monkeypatch.setattr(onert, "WIC_NATIVE_ABOVE", 0)
    got = onert.plan_wic(sizes, firsts, lasts)
    assert (got.offsets, got.arena) == (want.offsets, want.arena)


def test_wic_refuses_over_its_work_budget(monkeypatch):
    sizes, firsts, lasts = nested(200)
    monkeypatch.setattr(onert, "WIC_NATIVE_ABOVE", 0)
    monkeypatch.setattr(onert, "WIC_WORK", 200 * 199 // 2 - 1)
    with pytest.raises(MemplanError, match="19,900 pairs"):
        onert.plan_wic(sizes, firsts, lasts)
    monkeypatch.setattr(onert, "WIC_WORK", 200 * 199 // 2)
    assert onert.plan_wic(sizes, firsts, lasts).arena == sum(sizes)
