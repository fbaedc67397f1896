"""libstdc++'s unordered_map order, emulated (stdhash.UnorderedMap), and onert's orders built on it.

The expected orders were printed by a g++ 12 / libstdc++ program (std::unordered_map<unsigned
long, int>, emplace/erase, range-for); `test_against_gxx` re-derives random ones when g++ is there.
"""
import random
import shutil
import subprocess

import pytest

from memplan_cli.profiles.onert.stdhash import UnorderedMap, dfs_topological, reinserted, training_hash
from memplan_cli.profiles.onert.trainir import build_train_ir
from devtools import zoo
from devtools.modelgen import to_graph


def test_small_map_grows_to_29_buckets_and_lists_new_buckets_first():
    m = reinserted(range(20))
    assert m.nbkt == 29
    assert m.keys() == [19, 18, 17, 16, 15, 14, 13] + list(range(13))


def test_training_index_hash_pairs():
    ops = [21, 5, 15, 29, 7, 28, 9, 0, 13, 8, 27, 22, 26, 14, 23, 24, 19, 6, 16, 25, 18, 11, 3, 17, 2,
           1, 20, 12, 4, 10]
    m = UnorderedMap(lambda k: k)
    for i in ops:
        for f in (1, 0):
            m.insert((i << 16) | f)
    assert m.nbkt == 127
    assert m.keys()[:12] == [655360, 1507329, 1703936, 1114113, 1703937, 1769472, 1179649, 524288,
                             851968, 262145, 851969, 1441792]
    assert len(m) == 60
    assert m.keys()[-5:] == [196608, 131072, 65537, 65536, 262144]
    assert training_hash((7, True)) == (7 << 16) | 1 and training_hash((7, False)) == 7 << 16


def test_erase_then_insert():
    m = reinserted(range(40))
    for k in (3, 17, 29, 30, 5, 39):
        m.erase(k)
    for k in (100, 41, 3):
        m.insert(k)
    assert m.nbkt == 59
    assert m.keys() == [3, 41, 100, 38, 37, 36, 35, 34, 33, 32, 31, 12, 11, 10, 9, 8, 7, 6, 4, 2, 1, 0,
                        13, 14, 15, 16, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28]


_GXX = r"""
#include <unordered_map>
#include <cstdio>
int main() {
  std::unordered_map<unsigned long, int> m; char op[4]; unsigned long k;
  while (scanf("%3s", op) == 1) {
    if (op[0] == 'i') { scanf("%lu", &k); m.emplace(k, 0); }
    else if (op[0] == 'e') { scanf("%lu", &k); m.erase(k); }
    else { printf("%zu:", m.bucket_count()); for (auto &e : m) printf(" %lu", e.first); printf("\n"); }
  }
}
"""


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ to build a libstdc++ reference")
def test_against_gxx(tmp_path):
    src, exe = tmp_path / "um.cc", tmp_path / "um"
    src.write_text(_GXX)
    subprocess.run(["g++", "-O1", "-o", str(exe), str(src)], check=True)
    for trial in range(25):
        rnd = random.Random(trial)
        n = rnd.choice([5, 14, 30, 100, 600, 1500])
        keys = list(range(2 * n)) if trial % 2 else list({rnd.randrange(1 << 20) << 16 | rnd.randrange(2)
                                                          for _ in range(n)})
        rnd.shuffle(keys)
        m, cmds = UnorderedMap(), []
        for k in keys[:n]:
            cmds.append(f"i {k}")
            m.insert(k)
        for k in rnd.sample(keys[:n], n // 3):
            cmds.append(f"e {k}")
            m.erase(k)
        for k in keys[n:n + n // 2]:
            cmds.append(f"i {k}")
            m.insert(k)
        out = subprocess.run([str(exe)], input="\n".join(cmds + ["p"]), capture_output=True, text=True,
                             check=True).stdout
        nb, rest = out.split(":")
        assert (int(nb), [int(x) for x in rest.split()]) == (m.nbkt, m.keys()), trial


def test_dfs_topological_follows_start_order_and_use_order():
    # 0 -> {1, 2} -> 3: the use visited last comes first after reversal
    outs = {0: ["a"], 1: ["b"], 2: ["c"], 3: []}
    assert dfs_topological([0, 1, 2, 3], {"a": [1, 2], "b": [3], "c": [3]}, outs) == [0, 2, 1, 3]
    assert dfs_topological([0, 1, 2, 3], {"a": [2, 1], "b": [3], "c": [3]}, outs) == [0, 1, 2, 3]
    # a later start op first: its subtree is pushed first, so it comes last
    assert dfs_topological([2, 0, 1, 3], {"a": [1, 2], "b": [3], "c": [3]}, outs) == [0, 1, 2, 3]


def replay_of(mb, batch=1):
    g = to_graph(mb, batch)
    return build_train_ir(g, set(range(len(g.operations))), stage="compile").replay


def test_zero_def_claim_order_measured():
    # onert 0.1.0's FF_PLANNER log: depthwise claims %22 (y_true') then %21 (x'), mnist-like
    # tiny_cnn %15 (y_true') then %14 (x'), two_branches %24 (x') then %25 (y_true')
    assert replay_of(zoo.depthwise()).zero_def == [(22, "y_true"), (21, 0)]
    assert replay_of(zoo.tiny_cnn()).zero_def == [(15, "y_true"), (14, 0)]
    assert replay_of(zoo.two_branches()).zero_def == [(24, 0), (25, "y_true")]
    # two inputs (tensors 0 and 1; Permutes made for %10 -> %13, %1 -> %14, %0 -> %15, %11 -> %16):
    # claims %16 y_true', %15 x0', %14 x1'
    assert replay_of(zoo.two_inputs()).zero_def == [(16, "y_true"), (15, 0), (14, 1)]


def test_shared_constant_copies_and_unused_tensor_shift_permute_indices():
    # 17 tensors, one unused; the constant read by 3 ops gets copies %19, %20; Permutes %21..%23
    r = replay_of(zoo.shared_const())
    assert sorted(r.permuted.values()) == [21, 22, 23]
    assert r.zero_def == [(21, "y_true"), (23, 0)]


def test_two_topological_orders():
    # measured: TensorPlanner's claims follow 0,1,2,3,4,...; "Linearize for forwarding order" 0,1,3,4,2,...
    r = replay_of(zoo.branch_orders())
    assert r.planner_order == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    assert r.kernel_order == [0, 1, 3, 4, 2, 5, 6, 7, 8, 9]


def test_replay_is_fast_on_a_large_graph():
    import time

    from devtools.modelgen import ModelBuilder

    m = ModelBuilder()
    y = m.input([1, 2, 2, 2])
    skip = y
    for k in range(400):
        y = m.conv2d(y, 2, 1)
        if k % 3 == 2:
            y = m.add(y, skip)
            skip = y
    m.output(m.fully_connected(m.reshape(y, [-1, 8]), 2))
    t0 = time.perf_counter()
    r = replay_of(m)
    assert time.perf_counter() - t0 < 5
    assert len(r.planner_order) == len(r.kernel_order) == len(m.ops) + 1


def _node_by_node(keys, hash_fn):
    m = UnorderedMap(hash_fn)
    for k in keys:
        m.insert(k)
    return m


@pytest.mark.parametrize("n", [1, 2, 13, 14, 30, 700, 1999, 2001, 6000, 12000])
def test_reinserted_per_bucket_count_equals_node_by_node(n):
    # reinserted() computes the order per bucket count (numpy above 2,000 keys); after it, the map
    # must behave as one filled key by key, also for later erases and inserts
    rnd = random.Random(n)
    for keys, h in (([rnd.randrange(1 << 20) for _ in range(n)], lambda k: k),
                    ([(rnd.randrange(1 << 14), rnd.random() < 0.5) for _ in range(n)], training_hash)):
        a, b = _node_by_node(keys, h), reinserted(keys, h)
        assert (a.nbkt, len(a), a.keys()) == (b.nbkt, len(b), b.keys())
        more = [k for k in ([rnd.randrange(1 << 20) for _ in range(n // 2 + 2)] if h is not training_hash
                            else [(rnd.randrange(1 << 14), True) for _ in range(n // 2 + 2)])]
        for m in (a, b):
            m.erase(keys[0])
            for k in more:
                m.insert(k)
        assert (a.nbkt, a.keys()) == (b.nbkt, b.keys())
