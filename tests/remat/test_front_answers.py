"""benchmarks/remat_torch.py answers every budget from one remat search (`Front`): the solver's front
does not depend on the budget, so the cheapest front plan whose bound and planned arena fit a budget
is what a fresh `solve` at that budget gives. Checked on the MNIST sample over budgets from below the
floor to above the plain plan and at each front plan's own arena."""
import importlib.util
import pathlib

from memplan_cli.config import TrainConfig
from memplan_cli.loaders import load_model
from memplan_cli.remat.problem import RematProblem
from memplan_cli.remat.solve import solve

ROOT = pathlib.Path(__file__).parents[2]
MODEL, BATCH = ROOT / "sample_models" / "mnist.circle", 8


def _front():
    spec = importlib.util.spec_from_file_location("remat_torch", ROOT / "benchmarks" / "remat_torch.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.Front(str(MODEL), BATCH)


def test_one_search_answers_each_budget_as_a_fresh_solve():
    f = _front()
    budgets = [f.floor - 1, f.plain, f.plain + 1] + [f.floor + k * (f.plain - f.floor) // 6 for k in range(6)]
    budgets += [f.fig[d][0] for d in f.plans]  # each front plan's own arena
    for budget in sorted(set(budgets)):
        g = load_model(str(MODEL), batch_size=BATCH)
        r = solve(RematProblem(g, TrainConfig(batch_size=BATCH, optimizer="sgd", loss="cce")), budget)
        d = f.answer(budget)
        assert r.fits == (d is not None), budget
        if r.fits:
            assert (r.drop, r.arena, r.added_flops) == (d, f.fig[d][0], f.problem.added_flops(d)), budget
    assert len(f.answers) > 2  # the check above saw plans other than the plain one fit
