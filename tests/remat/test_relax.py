"""The single-recompute MILP (memplan_cli/remat/relax.py, a seed of the search): it never counts more
bytes than a plan of its space truly needs; the solver is never worse than brute force over that
space on small chains and a residual block, and its bound (of the whole space) stays below it."""
import itertools
import pathlib
import random

import pytest

from devtools.modelgen import ModelBuilder, to_graph
from memplan_cli.config import TrainConfig
from memplan_cli.loaders import load_model
from memplan_cli.passes.cost import step_flops
from memplan_cli.passes.pipeline import build_training_graph
from memplan_cli.planners.bound import lower_bound
from memplan_cli.remat import relax
from memplan_cli.remat.problem import RematProblem
from memplan_cli.remat.solve import plan_arena, solve
from tests.remat.test_rematerialize import chain

ROOT = pathlib.Path(__file__).parents[2]


def residual(batch=4):
    """Two residual blocks (a projection shortcut in the second), ReLUs, a dense head."""
    mb = ModelBuilder(seed=3)
    x = mb.input([1, 10, 10, 4])
    for width in (4, 8):
        y = mb.conv2d(x, width, 3, activation="RELU")
        y = mb.conv2d(y, width, 3)
        short = x if mb.shape(x)[-1] == width else mb.conv2d(x, width, 1)
        x = mb.add(y, short, activation="RELU")
    x = mb.mean(x, [1, 2], keep_dims=False)
    mb.output(mb.fully_connected(x, 10))
    return to_graph(mb, batch)


def _problems():
    yield "chain", RematProblem(chain(7, 4, (16, 4)), TrainConfig(batch_size=4, optimizer="sgd", loss="mse"))
    yield "residual", RematProblem(residual(), TrainConfig(batch_size=4, optimizer="adam", loss="mse"))
    for name, b in (("sample_models/mobilenetv2.circle", 2), ("tests/corpus/bert_tiny_dynamo.onnx", 2),
                    ("tests/corpus/mobilenet_v3_tiny_dynamo.onnx", 2), ("tests/corpus/llama_tiny_dynamo.onnx", 2)):
        g = load_model(str(ROOT / name), batch_size=b)
        yield name, RematProblem(g, TrainConfig(batch_size=b, optimizer="adam", loss="cce"))


@pytest.mark.parametrize("name,problem", list(_problems()), ids=lambda v: v if isinstance(v, str) else "")
def test_the_model_never_counts_more_than_the_plan_needs(name, problem):
    rel = relax.build(problem, 0)  # every step a row
    rng = random.Random(7)
    cands = problem.narrow  # the single-recompute space the model describes
    plans = [frozenset(), frozenset(cands)] + [frozenset(c for c in cands if rng.random() < q)
                                               for q in (0.1, 0.3, 0.5, 0.7, 0.9) for _ in range(6)]
    tight = 0
    for d in plans:
        # the model is of the single-recompute space of the step without cheap recompute
        m, true = relax.model_bytes(rel, d), problem._lean_bound(problem.build(d, cheap=False))
        assert m <= true, (name, sorted(d))
        tight += m == true
    assert tight >= len(plans) // 2  # and it is close enough to be useful: often exact


def _brute(g, cfg, cands):
    base = step_flops(build_training_graph(g, cfg)).total
    table = []
    for r in range(len(cands) + 1):
        for d in itertools.combinations(cands, r):
            tg = build_training_graph(g, cfg, remat=d)
            bs = tg.to_buffer_list().buffers
            table.append((lower_bound([b.size for b in bs], [b.first for b in bs], [b.last for b in bs]),
                          step_flops(tg).total - base))
    return table


@pytest.mark.parametrize("which", ["chain5", "chain7", "residual"])
def test_the_solver_is_never_worse_than_brute_force_over_single_recomputes(which):
    """Every set of ops recomputed once is a plan of the whole space: the proven least added FLOPs
    is at most the cheapest of them under each target, and the solver's plan no dearer."""
    g = {"chain5": lambda: chain(5, 4, (8,)), "chain7": lambda: chain(7, 4, (16, 4)), "residual": residual}[which]()
    cfg = TrainConfig(batch_size=4, optimizer="sgd", loss="mse")
    p = RematProblem(g, cfg)
    assert 4 <= len(p.narrow) <= 12
    table = _brute(g, cfg, p.narrow)
    bounds = sorted({b for b, _ in table})
    assert len(bounds) >= 3
    for target in bounds[:-1]:
        best = min(f for b, f in table if b <= target)
        res = solve(RematProblem(g, cfg), target)
        assert res.lower_flops is not None and res.lower_flops <= best  # the bound is a bound
        if res.fits:
            assert res.arena <= target and res.lower_flops <= res.added_flops <= best
            if res.status == "optimal":
                assert res.added_flops == res.lower_flops


def test_a_budgeted_run_through_the_milp_is_byte_identical_across_processes():
    """Two interpreters with different hash seeds, the JSON on stdout: the same bytes, and nothing
    but the JSON (HiGHS prints a banner on file descriptor 1 unless memplan stops it)."""
    import json
    import os
    import subprocess
    import sys

    # a model where memplan's plan runs no cheap recompute, so the solver's bound is about the step run
    model = str(ROOT / "tests" / "corpus" / "keras_se_block.tflite")
    base = [sys.executable, "-m", "memplan_cli", "analyze", model, "-b", "16", "-O", "adam", "-f", "json"]
    from tests.remat.plain import plain_plan

    planned = plain_plan(model, 16)  # what memplan plans without a budget
    outs = []
    for seed in ("1", "2"):
        r = subprocess.run(base + ["--budget", str(planned * 9 // 10)], capture_output=True, text=True,
                           env={**os.environ, "PYTHONHASHSEED": seed})
        assert r.returncode == 0, r.stderr
        outs.append(r.stdout)
    assert outs[0] == outs[1]
    rm = json.loads(outs[0])["remat"]  # stdout is exactly the report
    assert rm["fits"] and rm["recomputed_ops"] and "added_flops_lower_bound" in rm
