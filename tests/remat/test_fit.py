"""`memplan fit MODEL --budget SIZE`: the options, each checked against its own analysis; JSON under
schemas/fit.schema.json; exit 3 when nothing fits."""
import json
import pathlib

import jsonschema
from click.testing import CliRunner

from memplan_cli.cli import main
from tests.remat.test_rematerialize import chain_file

ROOT = pathlib.Path(__file__).parents[2]
MNIST = str(ROOT / "sample_models" / "mnist.circle")
SCHEMA = json.loads((ROOT / "schemas" / "fit.schema.json").read_text())


def run(cmd, *args):
    return CliRunner().invoke(main, [cmd, *args], env={"NO_COLOR": "1"})


def test_fit_lists_the_options_and_each_matches_its_analysis(tmp_path):
    model = chain_file(tmp_path)
    plain = json.loads(run("analyze", model, "-O", "adam", "-f", "json").stdout)["totals"]["planned"]
    budget = plain * 9 // 10
    r = run("fit", model, "-O", "adam", "--budget", str(budget), "-f", "json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    jsonschema.validate(doc, SCHEMA)
    opts = {o["option"]: o for o in doc["options"]}
    assert opts["as asked"]["planned"] == plain and not opts["as asked"]["fits"]
    lb = opts["largest batch"]
    assert lb["fits"] and lb["batch_size"] < 8
    for b, fits in ((lb["batch_size"], True), (lb["batch_size"] + 1, False)):
        a = json.loads(run("analyze", model, "-O", "adam", "-b", str(b), "-f", "json").stdout)["totals"]["planned"]
        assert (a <= budget) == fits
    rm = opts["remat"]
    assert rm["fits"] and rm["planned"] <= budget and rm["flops_ratio"] > 1 and rm["recomputed_ops"] > 0
    fz = opts["frozen prefix"]
    a = json.loads(run("analyze", model, "-O", "adam", "-t", str(fz["trainable_ops"]), "-f", "json").stdout)
    assert a["totals"]["planned"] == fz["planned"] <= budget
    sgd = opts["sgd"]
    a = json.loads(run("analyze", model, "-O", "sgd", "-f", "json").stdout)["totals"]["planned"]
    assert sgd["planned"] == a
    front = [o for o in doc["options"] if o["pareto"]]
    assert front and all(o["batch_size"] == 8 and o["trainable_ops"] == "all" for o in front)
    t = run("fit", model, "-O", "adam", "--budget", str(budget))
    assert t.exit_code == 0 and "largest batch" in t.stdout and "option(s) fit" in t.stdout


def test_nothing_fits_exit_3():
    r = run("fit", MNIST, "--budget", "64KiB", "-f", "json")
    assert r.exit_code == 3, r.output
    doc = json.loads(r.stdout)
    jsonschema.validate(doc, SCHEMA)
    assert not doc["fits"] and not any(o["fits"] for o in doc["options"])
    assert run("fit", MNIST, "--budget", "64KiB").exit_code == 3
    assert run("fit", MNIST, "--budget", "big").exit_code == 2
