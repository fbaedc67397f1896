"""`memplan fit MODEL --budget SIZE`: the options, each checked against its own analysis; JSON under
schemas/fit.schema.json; exit 3 when nothing fits."""
import json
import pathlib
import re
import shlex

import jsonschema
import pytest
from click.testing import CliRunner

from memplan_cli.cli import main
from tests.remat.test_rematerialize import chain_file
from memplan_cli.schemas import load_schema

ROOT = pathlib.Path(__file__).parents[2]
MNIST = str(ROOT / "sample_models" / "mnist.circle")
SCHEMA = load_schema("fit")


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


def test_fit_lists_the_fine_tuning_modes_beside_full_training():
    """bias-only and LoRA (default targets) rows, each equal to its own analysis, never on the front."""
    bert = str(ROOT / "tests" / "corpus" / "bert_tiny_dynamo.onnx")
    r = run("fit", bert, "-b", "8", "-O", "adam", "--budget", "200KiB", "-f", "json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    jsonschema.validate(doc, SCHEMA)
    opts = {o["option"]: o for o in doc["options"]}
    for name, flags in (("bias-only", ["--train", "biases"]), ("lora", ["--lora", "8"])):
        o = opts[name]
        a = json.loads(run("analyze", bert, "-b", "8", "-O", "adam", *flags, "-f", "json").stdout)
        assert o["planned"] == a["totals"]["planned"] and not o["pareto"] and o["fine_tuning"]
    # a model without biases or attention projections lists neither
    names = {o["option"] for o in json.loads(run("fit", MNIST, "-O", "adam", "--budget", "1GiB", "-f",
                                                 "json").stdout)["options"]}
    assert "lora" not in names and "bias-only" in names


def test_fits_header_names_the_fine_tuning_setup_it_plans():
    out = run("fit", MNIST, "-b", "8", "--budget", "1GiB", "--train", "biases").output
    assert out.splitlines()[0].startswith("mnist.circle · batch 8 · sgd · mse · trainable all · train biases · budget ")


def _figure(cmd: list[str]) -> int:
    """What `memplan analyze ...` (a command fit printed) reports: the remat plan's arena under
    --budget, else the planned total."""
    assert cmd[:2] == ["memplan", "analyze"], cmd
    r = run("analyze", *cmd[2:], "-f", "json")
    assert r.exit_code == 0, (cmd, r.output)
    doc = json.loads(r.stdout)
    return doc["remat"]["arena"] if doc.get("remat") else doc["totals"]["planned"]


def _printed_commands(text: str) -> list[list[str]]:
    """The commands under the table, read as a shell reads them: each backslash-newline dropped
    (` \\` between words, `\\` inside a word cut across lines), then each line split."""
    lines = text.split("\n")
    k = next(i for i, line in enumerate(lines) if line.startswith("the command that applies each option"))
    joined = "\n".join(lines[k + 1:]).replace("\\\n", "")
    return [shlex.split(re.sub(r"^\s*\d+  (?=memplan )", "", line)) for line in joined.split("\n") if line.strip()]


@pytest.mark.parametrize("model, flags", [
    (MNIST, ["-b", "32", "-O", "adam", "-l", "cce", "--budget", "12MiB"]),
    (str(ROOT / "tests" / "corpus" / "bert_tiny_dynamo.onnx"), ["-b", "8", "-O", "adam", "--budget", "200KiB"]),
    ("chain", ["-O", "momentum", "--budget", "0.85x"]),
])
def test_every_printed_command_gives_the_figure_fit_promised(model, flags, tmp_path):
    if model == "chain":
        model = chain_file(tmp_path)
        plain = json.loads(run("analyze", model, "-O", "momentum", "-f", "json").stdout)["totals"]["planned"]
        flags = [f if f != "0.85x" else str(plain * 85 // 100) for f in flags]
    doc = json.loads(run("fit", model, *flags, "-f", "json").stdout)
    with_command = [o for o in doc["options"] if o["command"]]
    assert len(with_command) >= 4
    for o in doc["options"]:
        # only a remat that found no plan has no command: there is nothing to apply (nor has an option
        # that does not fit and changes nothing the user asked: test_an_option_that_changes_nothing...)
        assert o["command"] or (o["option"].endswith("remat") and not o["fits"])
    for o in with_command:
        cmd = shlex.split(o["command"])
        assert _figure(cmd) == o["planned"], o
    table = run("fit", model, *flags)
    assert table.exit_code in (0, 3)
    assert _printed_commands(table.stdout) == [shlex.split(o["command"]) for o in with_command]


def test_a_batch_the_model_cannot_take_does_not_fit_it_is_not_an_error():
    # litert-torch fixes batch 2 inside the graph (a LayerNorm's Mean over the batch axis): the
    # largest-batch search meets batches that do not load, as --max-dim meets sizes that do not
    model = str(ROOT / "tests" / "corpus" / "litert_embed_ln_tiny.tflite")
    r = run("fit", model, "--budget", "1MiB", "-f", "json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    jsonschema.validate(doc, SCHEMA)
    largest = next(o for o in doc["options"] if o["option"] == "largest batch")
    assert largest["batch_size"] == 2 and largest["fits"]
    assert largest["change"] == "batch 2 without remat (batch 3 does not load)"
    assert largest["note"].startswith("at batch 3: cannot re-batch to batch 3")


@pytest.mark.parametrize("model, flags", [
    (str(ROOT / "tests" / "corpus" / "bert_tiny_dynamo.onnx"), ["-b", "96", "-O", "adam"]),
    (MNIST, ["-b", "32", "-O", "adam", "-l", "cce"]),
])
def test_remat_recomputing_nothing_plans_the_step_as_asked(model, flags):
    # the remat problem plans the memplan profile's own step (its pass list, its planner): with
    # nothing recomputed its arena is "as asked"'s, at any budget above it
    asked = json.loads(run("analyze", model, *flags, "-f", "json").stdout)["totals"]["planned"]
    for budget in (asked, asked * 5 // 4):
        doc = json.loads(run("fit", model, *flags, "--budget", str(budget), "-f", "json").stdout)
        o = {x["option"]: x for x in doc["options"]}
        assert o["remat"]["recomputed_ops"] == 0 and o["remat"]["planned"] == o["as asked"]["planned"] == asked
        assert o["remat"]["change"] == "nothing to recompute: the step as asked fits"


@pytest.mark.parametrize("name", ["d" * 54 + "/mnist.circle", "-mnist.circle",
                                  "d" * 40 + "/" + "e" * 50 + "/mnist.circle", "a b/" + "it's " * 20 + "mnist.circle"])
def test_printed_commands_fit_80_columns_and_run_as_printed(name, tmp_path, monkeypatch):
    # a 67-character path beside `  1  memplan analyze` ran to 90 columns (the path was not a place to
    # break the line); a path starting with a dash read as a flag when pasted; a path longer than a
    # line (an onnx2tf output folder's file: 90 characters) ran to 101 columns: it is cut into pieces
    monkeypatch.chdir(tmp_path)
    model = tmp_path / name
    model.parent.mkdir(parents=True, exist_ok=True)
    model.write_bytes(pathlib.Path(MNIST).read_bytes())
    r = CliRunner().invoke(main, ["fit", "-b", "32", "-O", "adam", "-l", "cce", "--budget", "12MiB", "--", name],
                           env={"NO_COLOR": "1", "COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    assert max(map(len, r.stdout.split("\n"))) <= 80, r.stdout
    printed = _printed_commands(r.stdout)
    assert len(printed) >= 4
    doc = json.loads(run("fit", "-b", "32", "-O", "adam", "-l", "cce", "--budget", "12MiB", "-f", "json",
                         "--", name).stdout)
    for cmd, o in zip(printed, [o for o in doc["options"] if o["command"]]):
        assert _figure(cmd) == o["planned"], cmd


def test_an_option_that_changes_nothing_asked_prints_no_second_command(tmp_path, monkeypatch):
    # a file that fixes its batch inside loads at no other batch (a multiple-choice head's choices
    # folded into the batch): the largest batch is the batch asked, which does not fit; its command
    # was printed again under the option's number, the same words as "as asked"'s
    import numpy as np
    from onnx import helper

    from tests.ops.gradcheck import onnx_model, save

    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"]), helper.make_node("Add", ["r", "c"], ["h"]),
             helper.make_node("MatMul", ["h", "w"], ["y"])]
    inits = {"shape": np.array([8, 64], np.int64), "c": rng.normal(size=(8, 64)).astype(np.float32),
             "w": rng.normal(size=(64, 64)).astype(np.float32)}
    save(tmp_path, onnx_model(nodes, [("x", (4, 2, 64))], [("y", (8, 64))], inits))
    monkeypatch.chdir(tmp_path)  # a short path: printed commands on one line each
    path = "m.onnx"
    r = run("fit", path, "-b", "4", "-O", "adam", "--budget", "1KiB", "-f", "json")
    assert r.exit_code == 3, r.output
    doc = json.loads(r.stdout)
    jsonschema.validate(doc, SCHEMA)
    o = {x["option"]: x for x in doc["options"]}
    assert not o["largest batch"]["fits"] and o["largest batch"]["batch_size"] == 4
    assert o["as asked"]["command"] and o["largest batch"]["command"] is None
    commands = [x["command"] for x in doc["options"] if x["command"]]
    assert len(commands) == len(set(commands))
    table = run("fit", path, "-b", "4", "-O", "adam", "--budget", "1KiB")
    assert _printed_commands(table.stdout) == [shlex.split(c) for c in commands]
