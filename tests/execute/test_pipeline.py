"""The executor on training graphs the pass pipeline builds from tiny hand-built models, with
memplan's rules (in place, views, masks) and with every saving rule off (onert's): a good plan
passes with no difference at all, and every single-buffer lifetime or offset fault fails."""
import pytest

from memplan_cli.config import TrainConfig
from memplan_cli.execute.executor import execute
from memplan_cli.passes.pipeline import build_training_graph
from memplan_cli.passes.policy import Policy
from tests.execute.graphs import GRAPHS
from tests.execute.helpers import first_fit, with_placement

POLICIES = {"memplan": Policy(), "baseline": Policy.baseline()}


def _tg(graph, policy, optimizer="sgd", loss="mse"):
    return build_training_graph(GRAPHS[graph](), TrainConfig(optimizer=optimizer, loss=loss),
                                policy=POLICIES[policy])


@pytest.mark.parametrize("graph", sorted(GRAPHS))
@pytest.mark.parametrize("policy", sorted(POLICIES))
@pytest.mark.parametrize("optimizer,loss", [("sgd", "mse"), ("adam", "cce"), ("momentum", "mse")])
def test_a_good_plan_passes(graph, policy, optimizer, loss):
    tg = _tg(graph, policy, optimizer, loss)
    lay = first_fit(tg)
    res = execute(tg, lay, optimizer=optimizer, learning_rate=0.01)
    assert res.passed, res.message
    assert res.max_diff == 0.0
    n_weights = sum(1 for t in tg.tensors if t.role == "weight")
    assert res.weights_updated == n_weights > 0
    assert res.loss is not None and res.loss[0] == res.loss[1]


def _reads_at(tg, root, step):
    s = tg.steps[step]
    return any(tg.root(t) == root for t in list(s.reads) + [a for a, _, _ in s.accumulate])


@pytest.mark.parametrize("graph", sorted(GRAPHS))
@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_every_shortened_lifetime_fails_naming_the_buffer(graph, policy):
    tg = _tg(graph, policy)
    lay = first_fit(tg)
    checked = 0
    for r, p in lay.placements.items():
        if p.last == p.first or any(m in tg.persistent for m in tg.groups()[r]):
            continue
        bad = with_placement(lay, r, last=p.last - 1)
        res = execute(tg, bad)
        assert not res.passed and res.failed_step == p.last and p.name in res.buffers, (p.name, res.message)
        assert f"step {p.last} (" in res.message or "read after the last step" in res.message
        assert p.name in res.message and f"live {p.first}..{p.last - 1}" in res.message, res.message
        if _reads_at(tg, r, p.last):  # the data alone shows it: the buffer was poisoned before the read
            res = execute(tg, bad, check_live=False)
            assert not res.passed and p.name in res.buffers, (p.name, res.message)
            assert p.name in res.message and f"step {res.failed_step} (" in res.message, res.message
        checked += 1
    assert checked >= 10


@pytest.mark.parametrize("graph", sorted(GRAPHS))
def test_an_offset_moved_onto_each_live_neighbour_fails(graph):
    tg = _tg(graph, "memplan", "adam", "cce")
    lay = first_fit(tg)
    pl = list(lay.placements.items())
    tried = 0
    for r, p in pl:
        for q_root, q in pl:
            if q_root == r or not (p.first <= q.last and q.first <= p.last) or not p.size or not q.size:
                continue
            res = execute(tg, with_placement(lay, r, offset=q.offset))
            assert not res.passed, (p.name, q.name)
            assert {p.name, q.name} <= set(res.buffers) or p.name in res.buffers, (p.name, q.name, res.message)
            assert f"step {res.failed_step} (" in res.message
            # the moved buffer is named in the message, with its (new) bytes
            assert f"{p.name} [arena bytes {q.offset}..{q.offset + p.size}" in res.message or \
                f"buffers {p.name} and " in res.message or f" and {p.name} share bytes" in res.message, res.message
            # and the plan's overlap with the neighbour is listed
            assert any({a, b} == {p.name, q.name} for _, a, b in res.conflicts)
            tried += 1
            break
        if tried >= 12:
            break
    assert tried >= 10
