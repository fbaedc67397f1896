"""The `singa` planner (online first fit, coalescing on free) replayed by hand on a trace that splits
a free block, grows the block touching the top, and frees a block between two free neighbours."""
from memplan_cli.check import check_plan
from memplan_cli.planners import get_planner
from memplan_cli.planners.bound import lower_bound


def test_split_grow_and_merge_with_both_neighbours():
    sizes = [2, 2, 2, 3, 1, 3, 7]
    firsts = [0, 0, 0, 1, 2, 2, 4]
    lasts = [0, 1, 0, 3, 3, 3, 4]
    # step 0: b0@0, b1@2, b2@4 (top 6); b0, b2 freed -> free [0,2), [4,6) (the latter touches the top)
    # step 1: b3 (3B): [0,2) too small; [4,6) touches the top and grows -> b3@4, top 7;
    #         b1 freed -> [2,4) merges with [0,2) below -> free [0,4)
    # step 2: b4 (1B) -> @0, the block splits into [1,4); b5 (3B) takes [1,4) exactly
    # step 3: b3 freed -> [4,7); b4 -> [0,1); b5 [1,4) merges with both -> one free block [0,7)
    # step 4: b6 (7B) -> @0: the high-water mark stays 7, the lower bound (steps 2 and 4: 7 bytes live)
    plan = get_planner("singa")(sizes, firsts, lasts)
    check_plan(sizes, firsts, lasts, plan.offsets, plan.arena)
    assert list(plan.offsets) == [0, 2, 4, 4, 0, 1, 0]
    assert plan.arena == 7 == lower_bound(sizes, firsts, lasts)
    # without coalescing [0,1) [1,4) [4,7) the 7-byte b6 would have had to go to the top (14)
