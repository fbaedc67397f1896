"""`memplan sweep`: totals per batch and profile, and the largest batch under a budget."""
import json
import pathlib

from click.testing import CliRunner

import tests.report.fake_profiles as fp
from memplan_cli.cli import main
from tests.report.conftest import fake_profiles  # noqa: F401  (fixture)

ROOT = pathlib.Path(__file__).parents[1]
MNIST = str(ROOT / "sample_models" / "mnist.circle")


def cli(*args):
    return CliRunner().invoke(main, ["sweep", *args], env={"NO_COLOR": None})


def planned(batch, profile="memplan", *flags):
    r = CliRunner().invoke(main, ["analyze", MNIST, "-b", str(batch), "-p", profile, "-f", "json", *flags])
    return json.loads(r.stdout)["totals"]["planned"]


def test_sweep_prints_each_batch_for_each_profile(fake_profiles):
    r = cli(MNIST, "--batch-sizes", "1,2,4")
    assert r.exit_code == 0, r.output
    assert "memplan planned" in r.stdout and "onert planned" in r.stdout
    for b in (1, 2, 4):
        assert f"{planned(b):,d}" in r.stdout


def test_json_rows_equal_single_analyses(fake_profiles):
    r = cli(MNIST, "--batch-sizes", "1,3", "-p", "memplan", "-f", "json", "-O", "adam")
    doc = json.loads(r.stdout)
    assert [(x["batch_size"], x["planned"]) for x in doc["rows"]] == [
        (1, planned(1, "memplan", "-O", "adam")), (3, planned(3, "memplan", "-O", "adam"))]
    assert doc["status"] == "ok" and doc["budget"] is None


def test_budget_answers_the_largest_listed_batch_that_fits(fake_profiles):
    budget = planned(4)
    r = cli(MNIST, "--batch-sizes", "1,2,4,8", "--budget", str(budget), "-f", "json")
    doc = json.loads(r.stdout)
    assert r.exit_code == 0 and doc["largest_fitting"]["memplan"] == 4
    assert [x["fits"] for x in doc["rows"] if x["profile"] == "memplan"] == [True, True, True, False]


def test_budget_without_a_list_searches_the_exact_answer(fake_profiles):
    budget = planned(23) + 1
    r = cli(MNIST, "--budget", str(budget), "-p", "memplan")
    assert r.exit_code == 0
    assert "memplan: largest batch that fits" in r.stdout and r.stdout.rstrip().split("\n")[-2].endswith(": 23")


def test_no_batch_fits_exit_3(fake_profiles):
    r = cli(MNIST, "--budget", "1KiB", "--batch-sizes", "1,2")
    assert r.exit_code == 3 and "memplan: no batch fits 1.00 KiB" in r.stdout


def test_a_second_profile_that_cannot_train_shows_na(fake_profiles, monkeypatch):
    def refuse(self, graph, config, **options):
        from memplan_cli.errors import UnsupportedOpError
        raise UnsupportedOpError("onert cannot train Softmax here")
    monkeypatch.setattr(fp.FakeOnert, "build", refuse)
    r = cli(MNIST, "--batch-sizes", "1,2")
    assert r.exit_code == 0 and "n/a" in r.stdout and "onert: n/a (onert cannot train Softmax here)" in r.stdout


def test_bad_flags_exit_2(fake_profiles):
    assert cli(MNIST, "--budget", "lots").exit_code == 2
    assert cli(MNIST, "--batch-sizes", "0,1").exit_code == 2
    assert cli(MNIST, "--budget", "5.5").exit_code == 2


def test_b_is_the_short_option_of_batch_sizes(fake_profiles):
    # `sweep --help` lists -b: it means --batch-sizes here (a list; --batch-size is the same flag)
    out = {cli(MNIST, flag, "2,4", "-f", "json").stdout for flag in ("-b", "--batch-size", "--batch-sizes")}
    assert len(out) == 1 and json.loads(out.pop())["config"]["batch_sizes"] == [2, 4]


def test_a_file_that_fixes_its_batch_sweeps_at_the_batches_asked_for(tmp_path):
    # a constant of the batch's shape added to the input (a TorchScript export at batch 4): the file
    # cannot re-batch to 1; `sweep -b 4` read the file at batch 1 for its metadata and was refused
    import numpy as np
    from onnx import helper

    from tests.ops.gradcheck import onnx_model, save

    rng = np.random.default_rng(0)
    # choices folded into the batch (a multiple-choice head: (4, 2, 8) -> (8, 8)), then a constant of
    # that shape added: at batch 1 the sum's inputs no longer broadcast
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"]), helper.make_node("Add", ["r", "c"], ["h"]),
             helper.make_node("MatMul", ["h", "w"], ["y"])]
    inits = {"shape": np.array([8, 8], np.int64), "c": rng.normal(size=(8, 8)).astype(np.float32),
             "w": rng.normal(size=(8, 3)).astype(np.float32)}
    path = save(tmp_path, onnx_model(nodes, [("x", (4, 2, 8))], [("y", (8, 3))], inits))
    r = cli(path, "-b", "4", "-p", "memplan", "-f", "json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    one = CliRunner().invoke(main, ["analyze", path, "-b", "4", "-f", "json"])
    assert [(x["batch_size"], x["planned"]) for x in doc["rows"]] == [(4, json.loads(one.stdout)["totals"]["planned"])]
    # a batch the file cannot take is still refused, naming the file and the batch
    r = cli(path, "-b", "1,4", "-p", "memplan")
    assert r.exit_code == 2 and "cannot re-batch to batch 1" in r.stderr and path in r.stderr
