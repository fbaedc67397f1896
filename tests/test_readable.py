"""Issue 42's small findings: help that is true for each command, flags only where they act, one line
per profile from `sweep -q`, n/a for a profile that cannot train, `-v` saying why the Python kernels
ran, `plan` pointing a model to `analyze`, verify naming the model's batch as analyze does."""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest
from click.testing import CliRunner

from memplan_cli.cli import main

ROOT = pathlib.Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_models"
MNIST = str(SAMPLES / "mnist.circle")
MOBILENET_ONNX = str(SAMPLES / "mobilenetv2.onnx")  # depthwise: nntrainer 0.6.0 cannot train it


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args], env={"NO_COLOR": "1"})


def test_top_level_help_shows_every_summary_whole():
    out = cli("--help").stdout
    commands = out.split("Commands:")[1].strip().splitlines()
    assert len(commands) == 8 and not any(line.rstrip().endswith("...") for line in commands), out
    assert all(len(line) <= 80 for line in out.splitlines())


@pytest.mark.parametrize("command", ["analyze", "compare", "diff", "sweep", "fit"])
def test_learning_rate_is_offered_only_where_a_step_runs(command):
    assert "--learning-rate" not in cli(command, "--help").stdout
    r = cli(command, MNIST, "--learning-rate", "0.1")
    assert r.exit_code == 2 and "No such option" in r.stderr


def test_verify_takes_the_learning_rate():
    assert "--learning-rate" in cli("verify", "--help").stdout
    r = cli("verify", MNIST, "--learning-rate", "0.01", "-q")
    assert r.exit_code == 0, r.output


def test_diff_help_gives_the_baseline_s_setup_as_the_default():
    text = " ".join(cli("diff", "--help").stdout.split())
    assert "Default sgd" not in text and "else the model's own" not in text and "Default mse" not in text
    for flag, after in (("-b, --batch-size", "-O,"), ("-O, --optimizer", "-l,"), ("-t, --trainable-ops", "--train "),
                        ("-p, --profile", "--planner")):
        part = text.split(flag, 1)[1].split(after, 1)[0]
        assert "Default: the baseline's." in part, (flag, part)


def test_sweep_quiet_is_one_line_per_profile_and_never_none():
    r = cli("sweep", MOBILENET_ONNX, "-b", "1,2", "-p", "memplan", "-p", "nntrainer", "-q")
    assert r.exit_code == 0, r.output
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 2 and "None" not in r.stdout
    assert lines[0].startswith("memplan: batch 1 ") and ", batch 2 " in lines[0]
    assert lines[1] == "nntrainer: n/a"


def test_sweep_budget_says_na_for_a_profile_that_cannot_train_the_model():
    r = cli("sweep", MOBILENET_ONNX, "-p", "memplan", "-p", "nntrainer", "--budget", "64MiB")
    assert r.exit_code == 0, r.output
    assert "nntrainer: no batch fits" not in r.stdout and "nntrainer: n/a (" in r.stdout
    q = cli("sweep", MOBILENET_ONNX, "-p", "memplan", "-p", "nntrainer", "--budget", "64MiB", "-q").stdout
    assert q.strip().splitlines()[1] == "nntrainer: n/a"


def test_verbose_says_the_variable_bypassed_the_c_kernels():
    env = {**os.environ, "MEMPLAN_PURE_PYTHON": "1", "COLUMNS": "300"}
    out = subprocess.run([sys.executable, "-m", "memplan_cli", "analyze", MNIST, "-v"], env=env,
                         capture_output=True, text=True, timeout=300).stdout
    assert "planner kernels: python (MEMPLAN_PURE_PYTHON is set: the C kernels were bypassed" in out
    assert "not built" not in out


@pytest.mark.parametrize("name, fmt", [("mnist.onnx", "an ONNX"), ("mnist.circle", "a circle"),
                                       ("mnist.tflite", "a TF Lite")])
def test_plan_points_a_model_to_analyze(name, fmt):
    r = cli("plan", SAMPLES / name)
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1
    assert f"{fmt} model, not a buffer list" in r.stderr and f"`memplan analyze {SAMPLES / name}`" in r.stderr


def test_plan_s_pointer_to_analyze_runs_as_printed(tmp_path):
    # `memplan analyze /tmp/my model.onnx` (unquoted) analysed '/tmp/my' and 'model.onnx'
    import shlex
    import shutil

    model = tmp_path / "my model's.onnx"
    shutil.copy(SAMPLES / "mnist.onnx", model)
    r = cli("plan", model)
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    words = shlex.split(r.stderr.split("`")[-2])
    assert words[:2] == ["memplan", "analyze"] and words[2:] == [str(model)], words
    assert cli(*words[1:], "-q").exit_code == 0


def test_verify_names_the_model_s_batch_as_analyze_does():
    out = " ".join(cli("verify", MNIST).stdout.split())
    assert "batch 1 (the model's)" in out and "batch model" not in out
