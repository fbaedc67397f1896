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
    assert q.exit_code == 3 and f"nothing fits, smallest found {rm['reachable']} B" in q.stdout


def test_a_budget_the_plain_plan_meets_recomputes_nothing():
    r = run(MNIST, "-b", "4", "-f", "json", "--budget", "1GiB")
    assert r.exit_code == 0
    rm = json.loads(r.stdout)["remat"]
    assert rm["fits"] and rm["recomputed_ops"] == [] and rm["added_flops"] == 0 and rm["status"] == "optimal"


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


def test_claims_are_about_the_step_memplan_runs():
    """memplan's own plan runs cheap recompute (passes/cheap_recompute.py); the remat problem models
    the step without it. A budget that plan already meets recomputes nothing; below it, the solver's
    proofs (least added FLOPs) are about another step, so none is printed, and the figures are the
    plan's as it runs."""
    import pathlib

    from memplan_cli.analysis import analyze_graph
    from memplan_cli.api import analyze, config_from_flags
    from memplan_cli.loaders import load_model
    from tests.remat.plain import plain_plan

    model = str(pathlib.Path(__file__).parents[1] / "corpus" / "keras_mobile_block.tflite")
    plain = plain_plan(model, 16)
    g = load_model(model, batch_size=16)
    without = analyze_graph(g, config_from_flags(g.metadata, batch_size=16, optimizer="adam"),
                            profile_options={"cheap_recompute": False}).planned_total
    assert plain < without  # the pass changes this model's plan
    r = analyze(model, batch_size=16, optimizer="adam", budget=(plain + without) // 2)
    rm = r.report["remat"]
    assert rm["fits"] and rm["recomputed_ops"] == [] and r.planned == plain
    for frac in (9, 8, 7):
        budget = plain * frac // 10
        r = analyze(model, batch_size=16, optimizer="adam", budget=budget)
        rm = r.report["remat"]
        if not rm["fits"]:
            assert "added_flops_lower_bound" not in rm and "reachable_lower_bound" not in rm
            continue
        # the figures are the plan's as it runs, within the budget
        assert rm["recomputed_ops"] and rm["arena"] == r.planned <= budget
        # a proof only where the plan runs without cheap recompute (exactly the solver's step)
        ran_cheap = bool(r.analysis.buffers.training_graph.info.get("cheap_recompute"))
        assert not (ran_cheap and ("added_flops_lower_bound" in rm or rm["status"] == "optimal"))
