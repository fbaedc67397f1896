"""The Python API (`from memplan_cli import analyze, compare, plan`): docs/api.md's example runs, the
results carry the commands' own JSON, errors are the CLI's as exceptions, and importing stays light."""
import json
import pathlib
import re
import subprocess
import sys

import pytest
from click.testing import CliRunner

from memplan_cli import ConfigError, MemplanError, ModelError, analyze, compare, diff, fit, inspect, plan, sweep
from memplan_cli.cli import main

ROOT = pathlib.Path(__file__).parents[1]
MNIST = "sample_models/mnist.circle"
GPT2_SEQ = "tests/corpus/gpt2_tiny_seq_dynamo.onnx"  # a symbolic seq dimension beside the batch


def readme_api_example() -> str:
    text = (ROOT / "docs" / "api.md").read_text()
    section = text.split("\n## Python API\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 1, "docs/api.md's Python API section has one python block"
    return blocks[0]


def test_the_readme_example_runs(monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    exec(compile(readme_api_example(), "docs/api.md (Python API)", "exec"), {})
    out = capsys.readouterr().out
    r = analyze(MNIST, batch_size=32, optimizer="adam", loss="cce")
    assert f"planned {r.planned:,} B" in out and "refused: unknown optimizer 'adagrad'" in out


def _cli(*args) -> str:
    res = CliRunner().invoke(main, list(args))
    assert res.exit_code == 0, res.output
    return res.output


def test_analyze_is_the_command_s_json(monkeypatch):
    monkeypatch.chdir(ROOT)
    for profile in ("memplan", "onert"):
        r = analyze(MNIST, batch_size=8, optimizer="adam", loss="cce", trainable_ops=[7, 8, 9], profile=profile)
        assert r.to_json() == _cli("analyze", MNIST, "-b", "8", "-O", "adam", "-l", "cce", "-t", "7-9",
                                   "-p", profile, "-f", "json")
        t = r.report["totals"]
        assert (r.planned, r.naive, r.lower_bound, r.folded) == (t["planned"], t["naive"], t["lower_bound"], t["folded"])
        assert sum(c.planned for c in r.categories.values()) == r.planned
        assert sum(p.arena for p in r.pools) == r.planned
        assert r.peak.bytes == r.report["peak"]["bytes"] and r.report["config"]["trainable_ops"] == [7, 8, 9]
    assert r.onert is None  # onert's own profile: no second onert column


def test_compare_is_the_command_s_json(monkeypatch):
    monkeypatch.chdir(ROOT)
    c = compare(MNIST, batch_size=4, optimizer="momentum")
    assert c.to_json() == _cli("compare", MNIST, "-b", "4", "-O", "momentum", "-f", "json")
    assert list(c.columns) == c.report["profiles"]
    assert c.columns["memplan"].total == analyze(MNIST, batch_size=4, optimizer="momentum").planned


def test_fit_is_the_command_s_json(monkeypatch):
    monkeypatch.chdir(ROOT)
    r = fit(MNIST, budget="3MiB", optimizer="sgd", trainable_ops=3)
    assert r.to_json() == _cli("fit", MNIST, "--budget", "3MiB", "-O", "sgd", "-t", "3", "-f", "json")
    assert r.fits == r.report["fits"]
    # the printed commands carry the setup arguments given, as flags
    assert all(o["command"] is None or " -O sgd -t 3" in o["command"] for o in r.report["options"])


def test_fit_max_dim_is_the_command_s_json(monkeypatch):
    monkeypatch.chdir(ROOT)
    r = fit(GPT2_SEQ, budget="4MiB", batch_size=1, dim={"seq": 8}, max_dim="seq")
    assert r.to_json() == _cli("fit", GPT2_SEQ, "--budget", "4MiB", "-b", "1", "--dim", "seq=8", "--max-dim", "seq",
                               "-f", "json")
    assert "longest dim" in [o["option"] for o in r.report["options"]]


def test_sweep_is_the_command_s_json(monkeypatch):
    monkeypatch.chdir(ROOT)
    s = sweep(MNIST, batch_sizes="1,4", optimizer="sgd")
    assert s.to_json() == _cli("sweep", MNIST, "-b", "1,4", "-O", "sgd", "-f", "json")
    assert not s.over_budget and s.report["config"]["batch_sizes"] == [1, 4]
    # a list of one dimension's sizes sweeps it at one batch
    d = sweep(GPT2_SEQ, batch_sizes="1", dim={"seq": (4, 8)}, profiles=("memplan",))
    assert d.to_json() == _cli("sweep", GPT2_SEQ, "-b", "1", "--dim", "seq=4,8", "-p", "memplan", "-f", "json")
    assert d.report["config"]["swept_dim"] == "seq" and d.report["config"]["dim_sizes"] == [4, 8]


def test_diff_is_the_command_s_json(monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT)
    base = tmp_path / "base.json"
    base.write_text(analyze(MNIST, batch_size=2, optimizer="adam").to_json())
    # a model TARGET is analysed with the baseline's setup, an argument given replacing its value
    d = diff(base, MNIST, optimizer="sgd", fail_on=["total:+0%"])
    r = CliRunner().invoke(main, ["diff", "--baseline", str(base), MNIST, "-O", "sgd", "--fail-on", "total:+0%",
                                  "-f", "json"])
    assert r.exit_code == 0 and d.to_json() == r.stdout
    assert not d.regression and d.failure_lines() == []
    assert d.report["target"]["config"]["optimizer"] == "sgd" and d.report["target"]["config"]["batch_size"] == 2
    # a report TARGET; a threshold exceeded is a regression, worded as the command's stderr
    bigger = tmp_path / "bigger.json"
    bigger.write_text(analyze(MNIST, batch_size=4, optimizer="adam").to_json())
    d = diff(base, bigger, fail_on="total:+1%")
    r = CliRunner().invoke(main, ["diff", "--baseline", str(base), str(bigger), "--fail-on", "total:+1%",
                                  "-f", "json"])
    assert r.exit_code == 1 and d.to_json() == r.stdout and d.regression
    assert d.failure_lines() == r.stderr.strip().splitlines()


def test_diff_checks_a_baseline_s_values_outside_click(monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT)
    doc = json.loads(analyze(MNIST).to_json())
    for key, value, words in (("batch_size", -3, "config.batch_size -3 is not >= 1"),
                              ("optimizer", "adagrad", "config.optimizer 'adagrad' is not one of sgd, momentum, adam"),
                              ("optimizer", [1], "config.optimizer [1] is not a valid --optimizer")):
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps({**doc, "config": {**doc["config"], key: value}}))
        with pytest.raises(MemplanError, match=re.escape(words)) as e:
            diff(bad, MNIST)
        assert str(bad) in str(e.value)
    bad.write_text(json.dumps({**doc, "config": {**doc["config"], "profile_options": {"simd_width": 5}}}))
    with pytest.raises(MemplanError, match=re.escape("config.profile_options.simd_width 5 is not one of 4, 8, 16")):
        diff(bad, MNIST)


def test_inspect_is_the_command_s_output(monkeypatch):
    monkeypatch.chdir(ROOT)
    r = inspect(GPT2_SEQ, batch_size=2, dim={"seq": 8})
    assert r.to_json() == _cli("inspect", GPT2_SEQ, "-b", "2", "--dim", "seq=8", "-f", "json")
    assert r.report["batch"]["size"] == 2 and r.report["dims"][0]["size"] == 8
    monkeypatch.setenv("COLUMNS", "1000")
    assert "\n".join(r.lines()) + "\n" == _cli("inspect", GPT2_SEQ, "-b", "2", "--dim", "seq=8")


def test_plan_matches_the_command(tmp_path):
    csv = tmp_path / "b.csv"
    csv.write_text("id,lower,upper,size\na,0,4,1024\nb,2,6,2048\nc,4,8,512\n")
    p = plan(csv)
    got = json.loads(_cli("plan", str(csv), "-f", "json"))
    assert {k: v for k, v in p.report.items() if k != "seconds"} == {k: v for k, v in got.items() if k != "seconds"}
    # the same buffers as (size, first, last inclusive) triples
    q = plan([(1024, 0, 3), (2048, 2, 5), (512, 4, 7)])
    assert (q.arena, q.lower_bound, q.offsets) == (p.arena, p.lower_bound, p.offsets)
    assert p.offsets_csv().splitlines()[0] == "id,lower,upper,size,offset"


@pytest.mark.parametrize("call, error, text", [
    (lambda: analyze("no/such.circle"), ModelError, "no/such.circle"),
    (lambda: analyze(MNIST, optimizer="adagrad"), ConfigError, "unknown optimizer"),
    (lambda: analyze(MNIST, batch_size=0), ConfigError, "batch_size"),
    (lambda: analyze(MNIST, trainable_ops=[1, -2]), ConfigError, "trainable_ops"),
    (lambda: analyze(MNIST, trainable_ops=99), ConfigError, "more than the model's"),
    (lambda: analyze(MNIST, planner="nope"), ConfigError, "unknown planner"),
    (lambda: analyze(MNIST, onert_simd_width=5), ConfigError, "onert_simd_width"),
    (lambda: compare(MNIST, loss="hinge"), ConfigError, "unknown loss"),
    (lambda: sweep(MNIST, batch_size=4), ConfigError, "batch_sizes"),
    (lambda: fit(MNIST, budget="3MiB", batch_size=0), ConfigError, "batch_size"),
    (lambda: diff("no/such.json", MNIST), MemplanError, "no/such.json: no such file"),
    (lambda: diff(MNIST, MNIST), MemplanError, "mnist.circle: not a JSON report"),
    (lambda: inspect(MNIST, batch_size=0), ConfigError, "batch_size"),
    (lambda: inspect(MNIST, dim="seq=8"), ConfigError, "dim must be a mapping"),
    (lambda: plan([(8, 3, 1)]), ConfigError, "first <= last"),
    # the API names its keywords where the command line names its flags
    (lambda: fit(GPT2_SEQ, budget="1MiB", batch_size=1, dim={"seq": 8}, max_dim="len"), ConfigError,
     "max_dim 'len': give the setup's own size too (dim={'len': N})"),
    (lambda: sweep(GPT2_SEQ, batch_sizes="1,2", dim={"seq": (4, 8)}), ConfigError, "give one in batch_sizes"),
    (lambda: sweep(MNIST, batch_sizes="1-x"), ConfigError, "batch_sizes '1-x': expected a list"),
    (lambda: analyze(MNIST, budget=0), ConfigError, "budget must be > 0 bytes"),
    (lambda: plan([(8, 0, 1)], rounds=2, time_limit=1.0), ConfigError, "rounds and time_limit: give one budget"),
    (lambda: plan([(8, 0, 1)], planner="nope"), ConfigError, "unknown planner"),
])
def test_bad_input_raises_the_cli_s_errors(monkeypatch, call, error, text):
    monkeypatch.chdir(ROOT)
    with pytest.raises(error, match=re.escape(text)):
        call()


@pytest.mark.parametrize("args, text", [
    (["fit", GPT2_SEQ, "--budget", "1MiB", "-b", "1", "--dim", "seq=8", "--max-dim", "len"],
     "--max-dim len: give the setup's own size too (--dim len=N)"),
    (["sweep", GPT2_SEQ, "-b", "1,2", "--dim", "seq=4,8"], "--dim seq=4,8 sweeps seq: give one batch size (-b N)"),
    (["sweep", MNIST, "-b", "1-x"], "--batch-sizes '1-x': expected a list"),
    (["analyze", MNIST, "--budget", "0"], "--budget must be > 0 bytes"),
])
def test_the_command_line_names_the_flags(monkeypatch, args, text):
    monkeypatch.chdir(ROOT)
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 2 and r.stderr.startswith("memplan: error: ") and text in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_docs_list_every_result_attribute():
    """docs/api.md's Results section names every public attribute of every result type."""
    import dataclasses

    from memplan_cli import api

    text = (ROOT / "docs" / "api.md").read_text().split("\n## Results\n", 1)[1]
    entries = {m.group(1): m.group(2) for m in re.finditer(r"^- `(\w+)`(.*?)(?=^- |\Z)", text, flags=re.M | re.S)}
    for name in ("AnalysisResult", "CategoryFigures", "Peak", "PoolFigures", "ComparisonResult", "SystemColumn",
                 "PlanSummary", "VerificationResult", "FitResult", "SweepResult", "DiffResult",
                 "InspectResult"):
        cls = getattr(api, name)
        public = {f.name for f in dataclasses.fields(cls)} | {
            k for k, v in vars(cls).items() if not k.startswith("_") and (isinstance(v, property) or callable(v))}
        named = set(re.findall(r"`(\w+)(?:\(\))?`", entries[name]))
        assert public <= named, f"docs/api.md's {name} misses {sorted(public - named)}"


def test_importing_the_api_stays_light():
    code = ("import sys; from memplan_cli import analyze, compare, plan; "
            "print(' '.join(sorted(m for m in ('numpy', 'rich', 'click', 'onnx', 'jsonschema', 'numba') "
            "if m in sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == ""


def test_a_json_report_never_loads_rich():
    # the reporter registry imports a reporter's module on first use: rich only for tables
    code = ("import sys\nfrom memplan_cli.cli import main\n"
            "sys.argv = ['memplan', 'analyze', 'sample_models/mnist.circle', '-f', 'json']\n"
            "try:\n    main()\nfinally:\n    print('rich' in sys.modules, file=sys.stderr)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 0 and json.loads(p.stdout)["kind"] == "analysis"
    assert p.stderr.strip().splitlines()[-1] == "False"
