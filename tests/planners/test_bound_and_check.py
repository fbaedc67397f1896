import pytest
from hypothesis import given, settings, strategies as st

from memplan_cli.check import PlanError, check_plan
from memplan_cli.planners.bound import live_profile, lower_bound
from tests.planners.brute import brute_force_errors


def test_lower_bound_inclusive_ends_touch():
    # b0 lives 0..2 and b1 starts at 2: both live at step 2
    assert lower_bound([4, 3], [0, 2], [2, 5]) == 7
    # b1 starts at 3: never live together
    assert lower_bound([4, 3], [0, 3], [2, 5]) == 4


def test_live_profile_by_step():
    steps, live = live_profile([1, 2, 4], [0, 1, 3], [1, 3, 3])
    assert steps == [0, 1, 3]
    assert live == [1, 3, 6]


def test_empty():
    assert lower_bound([], [], []) == 0
    check_plan([], [], [], [], 0)


def test_verifier_accepts_valid_plan():
    check_plan([4, 3, 2], [0, 2, 4], [2, 5, 6], [0, 4, 0], 7)


def test_verifier_names_both_overlapping_buffers():
    with pytest.raises(PlanError, match=r"buffer 'b' .* buffer 'a'|buffer 'a' .* buffer 'b'"):
        check_plan([4, 3], [0, 2], [2, 5], [0, 2], 6, names=["a", "b"])


def test_verifier_same_step_end_and_start_conflict():
    # b0's last step is 2 and b1's first step is 2: sharing bytes is an error
    with pytest.raises(PlanError, match="buffer 0 .* buffer 1"):
        check_plan([4, 4], [0, 2], [2, 3], [0, 0], 4)
    check_plan([4, 4], [0, 3], [2, 3], [0, 0], 4)


def test_verifier_arena_and_negative_offset():
    with pytest.raises(PlanError, match="past the arena"):
        check_plan([4], [0], [0], [1], 4)
    with pytest.raises(PlanError, match="negative offset"):
        check_plan([4], [0], [0], [-1], 4)


instances = st.integers(1, 12).flatmap(lambda n: st.tuples(
    st.lists(st.integers(0, 6), min_size=n, max_size=n),
    st.lists(st.integers(0, 8), min_size=n, max_size=n),
    st.lists(st.integers(0, 3), min_size=n, max_size=n),
    st.lists(st.integers(0, 14), min_size=n, max_size=n),
))


@settings(max_examples=400, deadline=None)
@given(instances)
def test_sweep_checker_agrees_with_brute_force(inst):
    sizes, firsts, spans, offsets = inst
    lasts = [f + d for f, d in zip(firsts, spans)]
    arena = max(o + s for o, s in zip(offsets, sizes))
    errs = brute_force_errors(sizes, firsts, lasts, offsets, arena)
    try:
        check_plan(sizes, firsts, lasts, offsets, arena)
        ok = True
    except PlanError:
        ok = False
    assert ok == (not errs)


@settings(max_examples=200, deadline=None)
@given(instances)
def test_lower_bound_matches_step_by_step_sum(inst):
    sizes, firsts, spans, _ = inst
    lasts = [f + d for f, d in zip(firsts, spans)]
    by_step = max(sum(s for s, f, l in zip(sizes, firsts, lasts) if f <= t <= l)
                  for t in range(0, 12))
    assert lower_bound(sizes, firsts, lasts) == by_step


def test_live_profile_matches_a_step_by_step_count():
    import random

    rng = random.Random(3)
    for _ in range(50):
        n = rng.randint(1, 30)
        firsts = [rng.randint(0, 20) for _ in range(n)]
        lasts = [f + rng.randint(0, 10) for f in firsts]
        sizes = [rng.randint(1, 100) for _ in range(n)]
        steps, live = live_profile(sizes, firsts, lasts)
        assert steps == sorted(set(firsts))
        assert live == [sum(s for s, f, l in zip(sizes, firsts, lasts) if f <= t <= l) for t in steps]
