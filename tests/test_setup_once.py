"""One setup per command: the model is loaded once and its file opened twice at most (the format
sniff, which also hashes it for the report, and the loader's one read), whatever the command
builds from it: `verify` analyses and runs the step, `verify --budget` also solves the remat problem
and runs the step without remat to compare."""
import builtins
import io
import json
import os
import pathlib

import pytest
from click.testing import CliRunner

from memplan_cli import loaders
from memplan_cli.cli import main

ROOT = pathlib.Path(__file__).parents[1]
MNIST = ROOT / "sample_models" / "mnist.circle"
MNIST_ONNX = ROOT / "sample_models" / "mnist.onnx"


@pytest.fixture
def counted(monkeypatch):
    """Counts load_model calls and opens of a file named `counted.model`."""
    seen = {"loads": 0, "opens": 0, "model": None}
    load = loaders.load_model

    def counting_load(*a, **kw):
        seen["loads"] += 1
        return load(*a, **kw)

    real_open, real_os_open = builtins.open, os.open

    def is_model(path) -> bool:
        try:
            return seen["model"] is not None and os.path.realpath(os.fspath(path)) == seen["model"]
        except TypeError:
            return False  # a file descriptor

    def counting_open(path, *a, **kw):
        seen["opens"] += is_model(path)
        return real_open(path, *a, **kw)

    def counting_os_open(path, *a, **kw):
        seen["opens"] += is_model(path)
        return real_os_open(path, *a, **kw)

    monkeypatch.setattr(loaders, "load_model", counting_load)
    monkeypatch.setattr(builtins, "open", counting_open)
    monkeypatch.setattr(io, "open", counting_open)
    monkeypatch.setattr(os, "open", counting_os_open)
    return seen


@pytest.mark.parametrize("model, args", [
    (MNIST, []),
    (MNIST_ONNX, ["-b", "2"]),
    (MNIST, ["--budget", "3.5MiB"]),  # fits by recomputing one op: the plain step runs too
    (MNIST, ["--budget", "3MiB"]),  # below the floor: nothing runs
])
def test_verify_loads_the_model_once(counted, model, args):
    counted["model"] = os.path.realpath(model)
    r = CliRunner().invoke(main, ["verify", str(model), "-f", "json", *args])
    assert r.exit_code in (0, 3), r.output
    doc = json.loads(r.stdout)
    if "--budget" in args and doc["remat"]["fits"]:
        assert doc["remat"]["recomputed_ops"] and doc["remat"]["compared_to_plain_step"]
        assert doc["passed"] and doc["remat"]["equal_to_plain_step"]
    assert counted["loads"] == 1
    assert counted["opens"] <= 2


def test_analyze_with_a_budget_loads_the_model_once(counted):
    counted["model"] = os.path.realpath(MNIST)
    r = CliRunner().invoke(main, ["analyze", str(MNIST), "-f", "json", "--budget", "3.5MiB"])
    assert r.exit_code == 0, r.output
    assert counted["loads"] == 1 and counted["opens"] <= 2


def test_the_counter_sees_a_second_load(counted):
    counted["model"] = os.path.realpath(MNIST)
    loaders.load_model(str(MNIST))
    loaders.load_model(str(MNIST), sha256=True)
    assert counted["loads"] == 2 and counted["opens"] == 4


@pytest.mark.parametrize("args, loads, opens", [
    (["analyze", "{m}", "-b", "4", "-O", "adam", "-p", "torch", "-f", "json"], 1, 2),
    (["compare", "{m}", "-b", "4", "-O", "adam"], 1, 2),
    (["compare", "{m}", "-b", "4", "-f", "json"], 1, 2),
    # a sweep loads once and re-batches that load (loaders.Rebatchable), every profile analysing each
    # batch's graph; the file hashed once
    (["sweep", "{m}", "-b", "1,4", "-f", "json"], 1, 2),
    (["sweep", "{m}", "-b", "1,4", "-p", "memplan", "-p", "torch", "-p", "singa", "-f", "json"], 1, 2),
    (["sweep", "{m}", "-b", "4,1", "-p", "torch", "-p", "singa", "-f", "json"], 1, 2),
    (["sweep", "{m}", "--budget", "64MiB", "-f", "json"], 1, 2),
    # fit analyses every batch its search tries (16 on mnist.onnx: it loaded 16 times)
    (["fit", "{m}", "--budget", "50MiB", "-O", "adam", "-f", "json"], 1, 2),
    (["fit", "{m}", "--budget", "50MiB", "-b", "8", "-f", "json"], 1, 2),
    (["inspect", "{m}"], 1, 2),
    # inspect's JSON names the file by its hash, taken in the format sniff's open (the table needs none)
    (["inspect", "{m}", "-f", "json"], 1, 2),
    # diff reads the target's first bytes to tell a saved report from a model, in the open the load
    # then sniffs and hashes (it opened the target three times)
    (["diff", "--baseline", "{base}", "{m}", "-b", "8", "-f", "json"], 1, 2),
])
def test_every_command_loads_the_model_once(counted, tmp_path, args, loads, opens):
    # compare loaded the model twice (once for its setup, once more to compare), and sweep once per
    # profile and batch
    base = tmp_path / "base.json"
    r = CliRunner().invoke(main, ["analyze", str(MNIST_ONNX), "-b", "4", "-f", "json", "-o", str(base)])
    assert r.exit_code == 0, r.output
    counted["model"] = os.path.realpath(MNIST_ONNX)
    counted["loads"] = counted["opens"] = 0
    r = CliRunner().invoke(main, [a.format(m=MNIST_ONNX, base=base) for a in args])
    assert r.exit_code in (0, 3), r.output
    assert (counted["loads"], counted["opens"]) == (loads, opens)


def _symbolic_batch_cnn(tmp_path) -> str:
    from tests.loaders.onnxmodels import save, tiny_cnn

    return save(tmp_path, "symbolic.onnx", tiny_cnn(batch="N", flatten=True))


@pytest.mark.parametrize("args", [["fit", "{m}", "-b", "2", "--budget", "1MiB", "-f", "json"],
                                  ["sweep", "{m}", "-b", "2,3,5", "-f", "json"]])
def test_a_symbolic_onnx_batch_loads_once_per_batch(counted, tmp_path, monkeypatch, args):
    # onnx's shape inference runs with the batch bound (loaders/onnx_loader.py _fix_inputs): one load
    # per batch analysed
    path = _symbolic_batch_cnn(tmp_path)
    counted["model"] = os.path.realpath(path)
    batches = []
    load = loaders.load_model

    def noting(*a, **kw):
        batches.append(kw.get("batch_size"))
        return load(*a, **kw)

    monkeypatch.setattr(loaders, "load_model", noting)
    r = CliRunner().invoke(main, [a.format(m=path) for a in args])
    assert r.exit_code in (0, 3), r.output
    assert len(batches) == len(set(batches)) > 2 and counted["loads"] == len(batches)
    assert counted["opens"] == 2 * len(batches)


def _graph_facts(g) -> tuple:
    return ([(o.name, tuple(o.shape), o.dtype, o.is_const) for o in g.operands],
            [(op.type, list(op.inputs), list(op.outputs), repr(sorted(op.attrs.items()))) for op in g.operations],
            repr(sorted(g.metadata.items())), list(g.warnings))


@pytest.mark.parametrize("name", ["mnist.circle", "mnist.tflite", "mnist.onnx", "mobilenetv2.tflite", "symbolic"])
def test_a_rebatched_load_is_the_graph_a_load_at_that_batch_gives(tmp_path, name):
    path = _symbolic_batch_cnn(tmp_path) if name == "symbolic" else str(ROOT / "sample_models" / name)
    first = 2 if name == "symbolic" else None  # a symbolic batch loads only with one
    loaded = loaders.load_model(path, batch_size=first, sha256=True, rebatchable=True)
    for b in (3, 1, 7, 2):
        alone = loaders.load_model(path, batch_size=b, sha256=True)
        assert _graph_facts(loaded.at(b)) == _graph_facts(alone), b
    assert _graph_facts(loaded.graph) == _graph_facts(loaders.load_model(path, batch_size=first, sha256=True))


def test_the_one_load_is_the_load_analyze_v_times(monkeypatch):
    # the load happens in the setup, before analysis.analyze (handed the graph, it timed no load: 0 ms)
    import time

    from memplan_cli import api

    load = loaders.load_model

    def slow(*a, **kw):
        time.sleep(0.05)
        return load(*a, **kw)

    monkeypatch.setattr(loaders, "load_model", slow)
    a = api.analyze(str(MNIST_ONNX), batch_size=2).analysis
    assert list(a.timings)[0] == "load" and a.timings["load"] >= 0.05


def test_diff_reads_a_report_target_in_one_open(counted, tmp_path):
    # the target's first bytes and the report itself come from one open (there were two)
    base, target = tmp_path / "base.json", tmp_path / "target.json"
    for path, b in ((base, "4"), (target, "8")):
        r = CliRunner().invoke(main, ["analyze", str(MNIST_ONNX), "-b", b, "-f", "json", "-o", str(path)])
        assert r.exit_code == 0, r.output
    counted["model"] = os.path.realpath(target)
    counted["loads"] = counted["opens"] = 0
    r = CliRunner().invoke(main, ["diff", "--baseline", str(base), str(target), "-f", "json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["rows"] and counted["opens"] == 1 and counted["loads"] == 0


@pytest.fixture
def builds(monkeypatch):
    """Counts the training graphs the pass pipeline builds (all its passes run), whoever asks."""
    from memplan_cli.passes.infra import Pipeline

    seen = []
    run = Pipeline.run

    def counting(self, tg, stages=None):
        if stages is None:
            seen.append(tg)
        return run(self, tg, stages)

    monkeypatch.setattr(Pipeline, "run", counting)
    return seen


@pytest.mark.parametrize("model", [MNIST, MNIST_ONNX])
def test_compare_builds_memplans_training_graph_once(builds, model):
    # memplan's column and the torch profile (the file records no dynamo rewrite: eager's graph is
    # the file's) build the same step: once; singa's rules make its own (3 builds before)
    r = CliRunner().invoke(main, ["compare", str(model), "-b", "4", "-O", "adam", "-f", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert all(doc["columns"][p]["available"] for p in ("memplan", "singa", "torch"))
    assert len(builds) == 2


def test_shared_builds_last_as_long_as_their_block(builds):
    from memplan_cli import api
    from memplan_cli.passes.pipeline import build_training_graph, shared_builds
    from memplan_cli.passes.policy import Policy
    from memplan_cli.passes.rules import default_rules

    setup = api.build_setup(str(MNIST), {"batch_size": 2})
    g, cfg = setup.graph, setup.config
    with shared_builds():
        first = build_training_graph(g, cfg)
        assert build_training_graph(g, cfg, policy=Policy()) is first
        # another setup, another policy, other rules: each its own build
        build_training_graph(g, cfg.with_(optimizer="adam"))
        build_training_graph(g, cfg, policy=Policy(inplace=False))
        build_training_graph(g, cfg, rules=default_rules())
        assert len(builds) == 4
    assert build_training_graph(g, cfg) is not first and len(builds) == 5


def test_verify_with_a_budget_runs_the_step_the_solver_planned(builds):
    # the solver's analysis of its remat plan is the step verify runs (it built and planned the same
    # step a second time), then the step without remat to compare: two builds, three before
    r = CliRunner().invoke(main, ["verify", str(MNIST), "-f", "json", "--budget", "3.5MiB"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["passed"] and doc["remat"]["recomputed_ops"] and doc["remat"]["compared_to_plain_step"]
    assert len(builds) == 2


def test_sweep_builds_memplans_step_once_per_batch_for_memplan_and_torch(builds):
    # batch by batch, memplan's and the torch profile's step at each batch are one build; singa's its
    # own (6 builds before for two batches)
    r = CliRunner().invoke(main, ["sweep", str(MNIST_ONNX), "-b", "1,2", "-p", "memplan", "-p", "torch", "-p", "singa",
                                  "-f", "json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)["rows"]
    assert [(x["profile"], x["batch_size"]) for x in rows] == [(p, b) for p in ("memplan", "torch", "singa")
                                                               for b in (1, 2)]
    assert all(x["planned"] for x in rows) and len(builds) == 4
