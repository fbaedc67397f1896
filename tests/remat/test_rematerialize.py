"""Rematerialization (passes/rematerialize.py) and the remat solver (memplan_cli/remat/): recompute
steps are ordinary forward steps; a remat plan runs in its arena and gives the no-remat step's loss
and weights bit for bit; the solver's plans fit, and are optimal where it says so."""
import itertools
import pathlib

import numpy as np
import pytest

from devtools.modelgen import ModelBuilder, to_graph
from memplan_cli.analysis import analyze_graph
from memplan_cli.config import TrainConfig
from memplan_cli.verification import verify_analysis
from memplan_cli.loaders import load_model
from memplan_cli.passes.cost import step_flops
from memplan_cli.passes.pipeline import build_training_graph
from memplan_cli.passes.rematerialize import droppable, forward_end
from memplan_cli.planners.bound import lower_bound
from memplan_cli.remat import chen, relax
from memplan_cli.remat.problem import RematProblem
from memplan_cli.remat.solve import floor, solve

ROOT = pathlib.Path(__file__).parents[2]


def chain(layers=6, batch=4, widths=(8,)):
    """Conv chain with fused ReLUs, a pool and a dense head: a chain-like graph."""
    mb = ModelBuilder(seed=1)
    x = mb.input([1, 12, 12, 3])
    for i in range(layers):
        x = mb.conv2d(x, widths[i % len(widths)], 3, activation="RELU" if i % 2 else "RELU6")
    x = mb.max_pool(x)
    x = mb.reshape(x, [1, 6 * 6 * mb.shape(x)[-1]])
    mb.output(mb.fully_connected(x, 10))
    return to_graph(mb, batch)


def chain_file(tmp_path, layers=6, batch=8, widths=(4, 12, 8)) -> str:
    """The chain as a circle file (batch in the model)."""
    mb = ModelBuilder(seed=1)
    x = mb.input([batch, 12, 12, 3])
    for i in range(layers):
        x = mb.conv2d(x, widths[i % len(widths)], 3, activation="RELU" if i % 2 else "RELU6")
    x = mb.max_pool(x)
    x = mb.reshape(x, [batch, 6 * 6 * mb.shape(x)[-1]])
    mb.output(mb.fully_connected(x, 10))
    return mb.save(str(tmp_path / "chain.circle"))


def _bound(tg):
    bs = tg.to_buffer_list().buffers
    return lower_bound([b.size for b in bs], [b.first for b in bs], [b.last for b in bs])


def test_recompute_steps_are_forward_steps_of_the_dropped_ops():
    g = chain()
    cfg = TrainConfig(batch_size=4, optimizer="adam", loss="mse")
    base = build_training_graph(g, cfg)
    cands = droppable(base)
    assert cands and all(base.steps[k].kind == "forward" for k in range(forward_end(base)))
    drop = set(cands[1::2])
    tg = build_training_graph(g, cfg, remat=drop)
    f = forward_end(tg)
    assert f == forward_end(base)
    again = [s for s in tg.steps[f:] if s.kind == "forward"]
    assert sorted(s.op for s in again) == sorted(drop)  # each dropped op runs again, once
    assert all(s.label.endswith("(recompute)") for s in again)
    for s in again:  # a recompute step writes copies, never the forward's tensors
        assert all(tg.tensors[t].name.endswith("@remat") for t in s.writes)
    # FLOPs: exactly the dropped ops' forward FLOPs more
    p = RematProblem(g, cfg)
    assert step_flops(tg).total - step_flops(base).total == p.added_flops(drop)
    assert p.bound(drop) == _bound(tg)  # the fork scores what the full pipeline builds


def test_the_lean_bound_is_the_buffer_lists_bound():
    g = load_model(str(ROOT / "sample_models" / "mobilenetv2.circle"), batch_size=2)
    p = RematProblem(g, TrainConfig(batch_size=2, optimizer="adam", loss="cce"))
    for k in (1, 2, 3, 5, 9, len(p.candidates)):
        d = chen.segments(p.candidates, k)
        bs = p.buffer_list(d).buffers
        assert p.bound(d) == lower_bound([b.size for b in bs], [b.first for b in bs], [b.last for b in bs])


def _same_step(g, cfg, drop):
    a0 = analyze_graph(g, cfg)
    a1 = analyze_graph(g, cfg, profile_options={"remat": sorted(drop)})
    r0, r1 = verify_analysis(a0).result, verify_analysis(a1).result
    assert r0.passed and r1.passed, r1.message
    assert r1.loss[0] == r0.loss[0]
    assert r0.updated.keys() == r1.updated.keys() and r0.updated
    for k in r0.updated:
        assert np.array_equal(r0.updated[k], r1.updated[k]), k
    return a0, a1


def test_chain_remat_runs_in_its_arena_and_equals_the_reference_bit_for_bit():
    g = chain()
    cfg = TrainConfig(batch_size=4, optimizer="adam", loss="mse")
    cands = droppable(build_training_graph(g, cfg))
    for drop in (set(cands[1::2]), set(cands[:3]), set(cands)):
        _same_step(g, cfg, drop)


@pytest.mark.parametrize("name", ["mnist.circle", "mobilenetv2.circle"])
def test_samples_remat_verify_bit_for_bit(name):
    g = load_model(str(ROOT / "sample_models" / name), batch_size=2)
    cfg = TrainConfig(batch_size=2, optimizer="adam", loss="cce")
    p = RematProblem(g, cfg)
    drop = chen.sqrt_n(p.candidates)
    assert drop
    a0, a1 = _same_step(g, cfg, drop)
    if name.startswith("mobilenet"):
        assert a1.lower_bound < a0.lower_bound  # Chen's segments do save memory there


def test_exact_solver_agrees_with_brute_force_on_small_chains():
    for layers, batch, widths in ((5, 4, (8,)), (6, 8, (4, 12, 8)), (7, 4, (16, 4))):
        g = chain(layers, batch, widths)
        cfg = TrainConfig(batch_size=batch, optimizer="sgd", loss="mse")
        p = RematProblem(g, cfg)
        assert len(p.candidates) <= 12
        base_tg = build_training_graph(g, cfg)
        base_flops = step_flops(base_tg).total
        # brute force through the full pipeline, independently of the solver's fork and cost sums
        table = []
        for r in range(len(p.candidates) + 1):
            for d in itertools.combinations(p.candidates, r):
                tg = build_training_graph(g, cfg, remat=d)
                table.append((_bound(tg), step_flops(tg).total - base_flops, d))
        bounds = sorted({b for b, _, _ in table})
        assert len(bounds) >= 2  # remat changes the peak on these chains
        for target in bounds[:-1]:
            best = min(f for b, f, _ in table if b <= target)
            res = solve(p, target)
            if res.fits:
                assert res.status == "optimal" and res.added_flops == best and res.arena <= target
            else:  # only when fragmentation keeps every fitting bound's arena above the target
                assert all(f >= 0 for _, f, _ in table)
        below = bounds[0] - 1
        res = solve(p, below)
        assert not res.fits and res.status == "infeasible" and res.reachable == bounds[0]
        assert res.floor <= bounds[0]


def test_the_solver_beats_or_equals_chen_on_mobilenetv2():
    g = load_model(str(ROOT / "sample_models" / "mobilenetv2.circle"), batch_size=4)
    cfg = TrainConfig(batch_size=4, optimizer="adam", loss="cce")
    p = RematProblem(g, cfg)
    c = chen.sqrt_n(p.candidates)
    res = solve(p, p.bound(c) + 4096)
    assert res.fits and res.arena <= res.budget and res.added_flops <= p.added_flops(c)
    # the relaxation's bound: met (optimal) or within the solver's stated gap of the step's FLOPs
    assert res.lower_flops <= res.added_flops <= res.lower_flops + relax.ABS_GAP * res.step_flops + 1
    assert (res.status == "optimal") == (res.lower_flops >= res.added_flops)
    fl, where = floor(p)
    assert fl <= res.bound and where.startswith("step ")
