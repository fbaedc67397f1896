"""`--profile nntrainer --planner nntrainer-v1|v2|v3`: each planner is selectable, and v2 gets to know
which buffers are weight gradients (it places them in their own region above v1's pool)."""
import json
import os

import pytest
from click.testing import CliRunner

from memplan_cli.analysis import analyze, plan_buffer_list
from memplan_cli.cli import main
from memplan_cli.config import TrainConfig
from memplan_cli.planners import get_planner

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MNIST = os.path.join(ROOT, "sample_models", "mnist.circle")
PLANNERS = ("nntrainer-v1", "nntrainer-v2", "nntrainer-v3")


@pytest.fixture(scope="module")
def by_planner():
    out = {}
    for p in PLANNERS:
        r = CliRunner().invoke(main, ["analyze", MNIST, "-p", "nntrainer", "--planner", p, "-b", "4", "-O", "adam",
                                      "-f", "json"])
        assert r.exit_code == 0, r.output
        out[p] = json.loads(r.stdout)
    return out


def test_each_planner_is_used_for_both_pools(by_planner):
    for p, doc in by_planner.items():
        pools = {x["name"]: x for x in doc["pools"]}
        assert pools["tensor_pool"]["planner"] == p and pools["weight_pool"]["planner"] == p
        assert doc["totals"]["planned"] == sum(x["arena"] for x in doc["pools"])
        # the weight pool holds only long-term (MAX) requests: every planner stacks them
        assert pools["weight_pool"]["arena"] == pools["weight_pool"]["lower_bound"]
        assert doc["totals"]["lower_bound"] <= doc["totals"]["planned"] <= doc["totals"]["naive"]
    # same requests, so the same naive total and lower bound; the plans differ
    assert len({d["totals"]["naive"] for d in by_planner.values()}) == 1
    assert by_planner["nntrainer-v2"]["totals"]["planned"] != by_planner["nntrainer-v1"]["totals"]["planned"]


def test_v2_places_weight_gradients_above_v1s_pool():
    a = analyze(MNIST, TrainConfig(batch_size=4, optimizer="adam"), profile="nntrainer", planner="nntrainer-v2")
    tp = next(p for p in a.pools if p.pool.name == "tensor_pool")
    grads = [i for i, b in enumerate(tp.buffers) if b.category == "gradient"]
    rest = [i for i, b in enumerate(tp.buffers) if b.category != "gradient"]
    assert grads and rest
    v1 = get_planner("nntrainer-v1")([tp.buffers[i].size for i in rest], [tp.buffers[i].first for i in rest],
                                     [tp.buffers[i].last for i in rest])
    # non-gradients are planned exactly as v1 plans them alone; gradients start at v1's pool size
    assert [tp.plan.offsets[i] for i in rest] == list(v1.offsets)
    assert min(tp.plan.offsets[i] for i in grads) == v1.arena
    # and the plan is what the planner gives when told the kinds directly
    direct = get_planner("nntrainer-v2")([b.size for b in tp.buffers], [b.first for b in tp.buffers],
                                         [b.last for b in tp.buffers], kinds=[b.category for b in tp.buffers])
    assert tp.plan.offsets == direct.offsets


def test_planner_without_kinds_is_called_as_before():
    from memplan_cli.buffers import Buffer, BufferList, Pool, Step

    bl = BufferList([Buffer("a", "gradient", 4, 0, 1), Buffer("b", "non-const", 4, 2, 3)],
                    [Step(i, "forward", -1) for i in range(4)], [Pool("arena", "non-const", "nntrainer-v1")])
    (p,) = plan_buffer_list(bl)
    assert p.plan.arena == 4  # v1 ignores kinds: b reuses a's slot (same size, expired)
    (p,) = plan_buffer_list(bl, planner_override="nntrainer-v2")
    assert p.plan.offsets == (4, 0) and p.plan.arena == 8  # v2: the gradient above v1's pool of b


def test_memory_optimization_flag_selects_the_planner_and_the_requests():
    fixtures = os.path.join(ROOT, "tests", "fixtures", "nntrainer")
    model = os.path.join(fixtures, "mlp.onnx")
    real = {c["memory_optimization"]: c["pools"] for c in json.load(open(os.path.join(fixtures, "mlp.json")))[
        "configurations"] if c["batch"] == 8 and c["optimizer"] == "adam"}
    for flag, on in (("on", True), ("off", False), (None, True)):
        # no --loss: a model ending in a Softmax trains with nntrainer's Loss = cross, as measured
        args = ["analyze", model, "-p", "nntrainer", "-b", "8", "-O", "adam", "-f", "json"]
        r = CliRunner().invoke(main, args + (["--nntrainer-memory-optimization", flag] if flag else []))
        assert r.exit_code == 0, r.output
        doc = json.loads(r.stdout)
        pools = {p["name"]: p for p in doc["pools"]}
        assert pools["tensor_pool"]["planner"] == ("nntrainer-v1" if on else "nntrainer-basic")
        assert pools["tensor_pool"]["arena"] == real[on]["tensor"]["size"]
        assert pools["weight_pool"]["arena"] == real[on]["weight"]["size"]
        assert doc["config"]["profile_options"] == {"memory_optimization": on}
        assert doc["figures"]["nntrainer"]["loss_layer"] == "cross_softmax" and doc["figures"]["nntrainer"]["nodes"] == 7
    # a loss named on the command line is nntrainer's: mse keeps the Softmax as an activation layer
    r = CliRunner().invoke(main, ["analyze", model, "-p", "nntrainer", "-b", "8", "--loss", "mse", "-f", "json"])
    doc = json.loads(r.stdout)
    assert doc["figures"]["nntrainer"]["loss_layer"] == "mse"
    assert doc["figures"]["nntrainer"]["nodes"] == 8  # input, fc0, relu, fc1, relu, fc2, softmax, mse
    r = CliRunner().invoke(main, ["compare", model, "-b", "8", "--loss", "cce", "-f", "json",
                                  "--nntrainer-memory-optimization", "off"])
    assert r.exit_code == 0 and json.loads(r.stdout)["columns"]["nntrainer"]["planners"] == ["naive", "nntrainer-basic"]
