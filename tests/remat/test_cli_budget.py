"""`memplan analyze MODEL --budget SIZE`: the cheapest remat plan that fits (JSON under the schema,
the table's remat lines), exit 3 with the smallest reachable budget and the floor when nothing fits,
exit 2 for a bad budget or another profile."""
import json
import pathlib

import jsonschema
from click.testing import CliRunner

from memplan_cli.cli import main
from tests.remat.test_rematerialize import chain_file
from memplan_cli.schemas import load_schema

ROOT = pathlib.Path(__file__).parents[2]
MNIST = str(ROOT / "sample_models" / "mnist.circle")
SCHEMA = load_schema("analysis")


def run(*args):
    return CliRunner().invoke(main, ["analyze", *args], env={"NO_COLOR": "1"})


def test_budget_finds_a_plan_that_fits(tmp_path):
    model = chain_file(tmp_path)
    plain = json.loads(run(model, "-O", "sgd", "-f", "json").stdout)
    budget = plain["totals"]["planned"] * 9 // 10
    r = run(model, "-O", "sgd", "-f", "json", "--budget", str(budget))
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    jsonschema.validate(doc, SCHEMA)
    rm = doc["remat"]
    assert rm["fits"] and rm["arena"] <= budget and rm["recomputed_ops"] and rm["recomputed_tensors"]
    assert doc["totals"]["planned"] == rm["arena"]  # the report is the plan's own analysis
    assert rm["flops_ratio"] > 1 and doc["flops"]["step"] == rm["step_flops"] + rm["added_flops"]
    t = run(model, "-O", "sgd", "--budget", str(budget))
    assert t.exit_code == 0 and f"remat under" in t.stdout and "recomputed before backward" in t.stdout
    q = run(model, "-O", "sgd", "--budget", str(budget), "-q")  # the one line says the budget's answer
    assert q.exit_code == 0 and q.stdout.count("\n") == 1
    assert f"remat under {budget} B: fits, FLOPs {rm['flops_ratio']:.3f} x, {len(rm['recomputed_ops'])} op(s)" in q.stdout


def test_nothing_fits_exit_3_with_the_smallest_reachable_and_the_floor(tmp_path):
    r = run(MNIST, "-b", "4", "-f", "json", "--budget", "1MiB")
    assert r.exit_code == 3, r.output
    doc = json.loads(r.stdout)
    jsonschema.validate(doc, SCHEMA)
    rm = doc["remat"]
    assert not rm["fits"] and rm["status"] == "infeasible"
    assert rm["floor"] <= rm["reachable"] and rm["reachable"] > 1 << 20 and rm["floor_step"].startswith("step ")
    t = run(MNIST, "-b", "4", "--budget", "1MiB")
    assert t.exit_code == 3 and "nothing fits" in t.stdout and "floor:" in t.stdout
    q = run(MNIST, "-b", "4", "--budget", "1MiB", "-q")
    assert q.exit_code == 3 and f"nothing fits, proven, smallest found {rm['reachable']} B" in q.stdout


def test_a_budget_the_plain_plan_meets_recomputes_nothing():
    r = run(MNIST, "-b", "4", "-f", "json", "--budget", "1GiB")
    assert r.exit_code == 0
    rm = json.loads(r.stdout)["remat"]
    assert rm["fits"] and rm["recomputed_ops"] == [] and rm["added_flops"] == 0 and rm["status"] in ("optimal", "feasible")


def test_bad_budget_and_other_profiles_exit_2():
    r = run(MNIST, "--budget", "lots")
    assert r.exit_code == 2 and "--budget" in r.output
    r = run(MNIST, "--budget", "64MiB", "-p", "onert")
    assert r.exit_code == 2 and "memplan's own profile" in r.output


def verify(*args):
    return CliRunner().invoke(main, ["verify", *args], env={"NO_COLOR": "1"})


def test_verify_runs_the_remat_plan_and_compares_with_the_plain_step(tmp_path):
    model = chain_file(tmp_path)
    plain = json.loads(run(model, "-O", "adam", "-f", "json").stdout)
    budget = str(plain["totals"]["planned"] * 9 // 10)
    r = verify(model, "-O", "adam", "--budget", budget, "-f", "json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["passed"] and doc["remat"]["fits"] and doc["remat"]["recomputed_ops"]
    assert doc["remat"]["compared_to_plain_step"] and doc["remat"]["equal_to_plain_step"]
    assert doc["arena_bytes"] <= int(budget)
    t = verify(model, "-O", "adam", "--budget", budget)
    assert t.exit_code == 0 and "equal to the step without remat, bit for bit" in t.stdout
    assert t.stdout.rstrip().splitlines()[-1].startswith("PASS")
    n = verify(model, "-O", "adam", "--budget", "1KiB")
    assert n.exit_code == 3 and "nothing to verify" in n.stdout


def test_verify_runs_remat_plans_of_small_transformers():
    """Issue 16: the remat plan of a small transformer (real torch.onnx exports) runs in its arena,
    bit for bit equal to the step without remat."""
    import pathlib

    from tests.remat.plain import plain_plan

    corpus = pathlib.Path(__file__).parents[1] / "corpus"
    for name in ("bert_tiny_dynamo.onnx", "llama_tiny_dynamo.onnx"):
        model = str(corpus / name)
        plain = plain_plan(model, 16)  # what memplan plans without a budget
        budget = str(plain * 9 // 10)
        r = verify(model, "-b", "16", "-O", "adam", "--budget", budget, "-f", "json")
        assert r.exit_code == 0, r.output
        doc = json.loads(r.stdout)
        assert doc["passed"] and doc["remat"]["fits"] and len(doc["remat"]["recomputed_ops"]) > 0, name
        assert doc["remat"]["equal_to_plain_step"] and doc["arena_bytes"] <= int(budget)


def test_the_solver_scores_the_step_memplan_runs():
    """One model of the step: the remat problem runs the memplan profile's own passes (cheap
    recompute included), so a plan's arena and FLOPs are those of the analysis `verify --budget`
    runs, and the plain plan is memplan's own plan without a budget."""
    import pathlib

    from memplan_cli.analysis import analyze_graph
    from memplan_cli.api import analyze, config_from_flags
    from memplan_cli.loaders import load_model
    from memplan_cli.passes.cost import step_flops
    from memplan_cli.remat.problem import RematProblem
    from memplan_cli.remat.solve import plan_arena
    from tests.remat.plain import plain_plan

    model = str(pathlib.Path(__file__).parents[1] / "corpus" / "keras_mobile_block.tflite")
    plain = plain_plan(model, 16)
    g = load_model(model, batch_size=16)
    cfg = config_from_flags(g.metadata, batch_size=16, optimizer="adam")
    without = analyze_graph(g, cfg, profile_options={"cheap_recompute": False}).planned_total
    assert plain < without  # cheap recompute changes this model's plan
    p = RematProblem(g, cfg)
    assert plan_arena(p, ()) == plain and p.cheap_flops > 0
    r = analyze(model, batch_size=16, optimizer="adam", budget=(plain + without) // 2)
    rm = r.report["remat"]
    assert rm["fits"] and rm["recomputed_ops"] == [] and r.planned == plain
    seen = 0
    for frac in (9, 8, 7):
        budget = plain * frac // 10
        r = analyze(model, batch_size=16, optimizer="adam", budget=budget)
        rm = r.report["remat"]
        if not rm["fits"]:
            assert rm["reachable"] > budget
            continue
        seen += 1
        tg = r.analysis.buffers.training_graph
        assert rm["recomputed_ops"] and rm["arena"] == r.planned <= budget
        assert rm["step_flops"] + rm["added_flops"] == step_flops(tg).total  # the FLOPs of the step reported
        assert "added_flops_lower_bound" not in rm or rm["added_flops_lower_bound"] <= rm["added_flops"]
    assert seen


def _answers(model, batch, fractions):
    """(budget, remat section) at each fraction between the floor and the plain plan."""
    from memplan_cli.api import analyze

    floor = analyze(model, batch_size=batch, optimizer="sgd", budget=1).report["remat"]["floor"]
    from tests.remat.plain import plain_plan

    plain = plain_plan(model, batch, "sgd")
    for f in fractions:
        budget = int(floor + f * (plain - floor))
        yield budget, analyze(model, batch_size=batch, optimizer="sgd", budget=budget).report["remat"]


def _wording(model, batch, budget, rm):
    """The text and the one-line report say what the JSON says: "fits" with the plan's arena at or
    under the budget; "nothing fits" only with a proof; "no plan found" otherwise; any figure named
    as the smallest found is above the budget."""
    import re

    text = run(model, "-b", str(batch), "-O", "sgd", "--budget", str(budget)).stdout
    line = run(model, "-b", str(batch), "-O", "sgd", "--budget", str(budget), "-q").stdout
    for out in (text, line):
        assert ("nothing fits" in out) == (rm["status"] == "infeasible"), (budget, out)
        assert ("no plan found" in out) == (rm["status"] == "none_found"), (budget, out)
        for figure in re.findall(r"smallest found:? ([\d,]+) B", out):
            assert int(figure.replace(",", "")) > budget, (budget, out)
    assert (f"remat under {budget} B: fits" in line) == rm["fits"], line


def test_no_answer_contradicts_itself_and_a_larger_budget_never_costs_more():
    """Over budgets from below the floor to the plain plan on small real models: "nothing fits"
    (infeasible) only with a proof; a fitting plan's arena is at or under the budget; when nothing
    is found, the smallest figure named is above the budget (so no report names a found plan that
    fits while saying nothing does), in the JSON, the text and the one-line report alike; and the
    FLOPs never rise as the budget grows."""
    import pathlib

    from hypothesis import given, settings, strategies as st

    corpus = pathlib.Path(__file__).parents[1] / "corpus"
    models = [(str(ROOT / "sample_models" / "mnist.circle"), 8), (str(corpus / "bert_tiny_dynamo.onnx"), 4),
              (str(corpus / "keras_mobile_block.tflite"), 8)]

    def check(model, batch, fractions):
        last = None
        for budget, rm in _answers(model, batch, sorted(fractions)):
            if rm["fits"]:
                assert rm["arena"] <= budget and rm["status"] in ("optimal", "feasible")
                if last is not None:
                    assert rm["added_flops"] <= last, (model, budget)
                last = rm["added_flops"]
            else:
                assert rm["reachable"] > budget, (model, budget, rm)
                assert (rm["status"] == "infeasible") == ("proof" in rm), rm
                assert rm["status"] in ("infeasible", "none_found")
                assert last is None  # a smaller budget never fits where a larger one does not
            _wording(model, batch, budget, rm)

    @settings(max_examples=4, deadline=None, derandomize=True)
    @given(st.sampled_from(models), st.lists(st.floats(-0.2, 1.0), min_size=3, max_size=6, unique=True))
    def prop(m, fractions):
        check(m[0], m[1], fractions)

    prop()
