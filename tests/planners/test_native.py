"""The compiled kernels (_kernels.c) against their Python reference (_greedy_kernel, _exact_kernel):
the same offsets, arenas, statuses and node counts, turn by turn, so a plan never depends on which
one ran. And the common path imports no JIT compiler."""
from __future__ import annotations

import random
import subprocess
import sys

import numpy as np
import pytest

from memplan_cli.planners import _exact_kernel as EK
from memplan_cli.planners import _greedy_kernel as GK
from memplan_cli.planners import _native
from memplan_cli.planners.bound import lower_bound
from memplan_cli.planners.exact import PREORDERS, Instance, slice_nodes
from memplan_cli.planners.greedy import COMBOS, Index, order_of

needs_c = pytest.mark.skipif(_native.BACKEND != "c", reason="the compiled kernels are not built")


def test_the_install_built_the_kernels():
    # `pip install` builds _kernels.c (setup.py); without it every planner runs ~100x slower
    assert _native.BACKEND == "c", ("memplan_cli/planners/_kernels.c is not built: run "
                                    "`.venv/bin/pip install -e .` again (it compiles the planners' kernels)")


def random_instance(rng, n, steps, big=1000):
    sizes = [rng.choice([0, 1, 2, 3, rng.randint(1, big)]) for _ in range(n)]
    firsts = [rng.randrange(steps) for _ in range(n)]
    lasts = [f + min(rng.choice([0, 1, 2, rng.randrange(steps)]), steps) for f in firsts]
    return sizes, firsts, lasts


@needs_c
@pytest.mark.parametrize("seed", range(12))
def test_greedy_place_matches_the_reference(seed):
    rng = random.Random(seed)
    inst = random_instance(rng, rng.choice([1, 5, 40, 300]), rng.choice([3, 50, 5000]))
    ix = Index(*inst)
    ix.width = rng.choice([1, 2, 7])   # several blocks, so both index lists are used
    ref_tables = GK.build_index(ix.f, ix.l, ix.width)
    c_tables = _native.build_index(ix.f, ix.l, ix.width)
    for r, c in zip(ref_tables, c_tables):
        assert np.array_equal(r, c)
    for name, best_fit in COMBOS:
        order = order_of(name, ix.s, ix.f, ix.l)
        for stop in (0, max(1, lower_bound(*inst))):
            r_off, r_arena = GK.place(ix.s, ix.f, ix.l, order, best_fit, ix.width, *ref_tables, stop)
            c_off, c_arena = _native.place(ix.s, ix.f, ix.l, order, best_fit, ix.width, *c_tables, stop)
            assert c_arena == r_arena
            if r_arena >= 0:
                assert np.array_equal(c_off, r_off)


def run_turns(inst, cap, preorder, budget, search, turns=200):
    """Statuses and node counts after each turn of `budget` nodes, and the final offsets."""
    pre = np.array(["TWA".index(ch) for ch in preorder], np.int64)
    state = EK.new_state(inst.rank(preorder), inst.n_sections, int(inst.adj.size))
    trace = []
    for _ in range(turns):
        st = search(inst.s, inst.a, inst.b, inst.adj_ptr, inst.adj, inst.width, inst.area, pre, cap,
                    budget, True, True, *state)
        trace.append((int(st), int(state[-1][EK.S_NODES])))
        if st != EK.PAUSED:
            break
    return trace, state[2].copy()


@needs_c
@pytest.mark.parametrize("seed", range(10))
def test_exact_search_matches_the_reference(seed):
    rng = random.Random(100 + seed)
    sizes, firsts, lasts = random_instance(rng, rng.choice([6, 12, 25]), rng.choice([4, 12, 30]), big=20)
    if not any(sizes):
        sizes[0] = 3
    inst = Instance(sizes, firsts, lasts)
    lb = lower_bound(sizes, firsts, lasts)
    for cap in (lb, lb + max(1, lb // 10), lb + lb // 3 + 1):
        for preorder in PREORDERS:
            budget = rng.choice([1, 7, 50])
            ref = run_turns(inst, cap, preorder, budget, EK.search)
            got = run_turns(inst, cap, preorder, budget, _native.search)
            assert got[0] == ref[0]
            if ref[0][-1][0] == EK.FOUND:
                assert np.array_equal(got[1], ref[1])


@needs_c
def test_a_long_search_matches_the_reference_turn_by_turn():
    from tests.planners.test_exact import random_tiling

    # a 100-piece tiling whose search at the lower bound runs past 40,000 nodes (backtracking,
    # decomposition and re-ranking all happen): 15 turns of 250 nodes, then the state compared
    inst_t = random_tiling(100, 2)
    inst, lb = Instance(*inst_t), lower_bound(*inst_t)
    for preorder in ("TWA", "WAT"):
        ref = run_turns(inst, lb, preorder, 250, EK.search, turns=15)
        got = run_turns(inst, lb, preorder, 250, _native.search, turns=15)
        assert got[0] == ref[0]
        assert np.array_equal(got[1], ref[1])


def test_slice_nodes_does_not_depend_on_the_backend():
    inst = Instance([4, 2, 4], [0, 1, 2], [1, 2, 3])
    assert slice_nodes(inst) == 1 << 16     # SLICE_WORK // (3 + 6), capped


def test_the_common_path_imports_no_jit(tmp_path):
    code = ("import sys; from memplan_cli.cli import main\n"
            "try:\n    main(['analyze', 'sample_models/mnist.circle', '-f', 'json', '-o', sys.argv[1]])\n"
            "except SystemExit:\n    pass\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('numba', 'llvmlite'))\n"
            "print(','.join(bad))")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "r.json")], capture_output=True, text=True,
                         cwd=str(__import__("pathlib").Path(__file__).parents[2]), check=True).stdout
    assert out.strip() == ""
    assert (tmp_path / "r.json").stat().st_size > 0
