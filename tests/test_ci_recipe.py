"""docs/ci.md's CI step, run as GitHub Actions runs it (`bash -e`): its shell lines (the install line
left out: memplan is installed here already) for each outcome of `memplan diff`, each mapped to the
job's status the doc's table gives."""
from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_models"


def recipe() -> str:
    text = (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
    block = text.split("## The CI step", 1)[1].split("```yaml", 1)[1].split("```", 1)[0]
    body = block.split("run: |", 1)[1].split("\n")
    lines = [line[4:] for line in body if line.strip()]
    assert any(line.startswith("python -m pip install") for line in lines)
    return "\n".join(line for line in lines if not line.startswith(("python -m pip install", "#")))


def run(tmp: pathlib.Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")}
    env = {k: v for k, v in env.items() if not k.startswith("MEMPLAN_")}
    return subprocess.run(["bash", "-e", "-c", recipe()], cwd=tmp, env=env, capture_output=True, text=True,
                          timeout=600)


@pytest.fixture
def job(tmp_path):
    base = subprocess.run([os.path.join(os.path.dirname(sys.executable), "memplan"), "analyze",
                           str(SAMPLES / "mnist.circle"), "-b", "4", "-O", "adam", "-f", "json", "-o",
                           str(tmp_path / "memplan-baseline.json")], capture_output=True, text=True)
    assert base.returncode == 0, base.stderr
    return tmp_path


def test_within_the_thresholds_the_step_passes(job):
    shutil.copy(SAMPLES / "mnist.circle", job / "model.circle")
    r = run(job)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "training memory within the thresholds" in r.stdout and (job / "memplan-diff.json").is_file()


def test_a_regression_fails_the_step_with_1_and_says_why(job):
    shutil.copy(SAMPLES / "mobilenetv2.circle", job / "model.circle")  # more memory at the baseline's setup
    r = run(job)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "training memory regressed" in r.stdout and "over the limit total:+5%" in r.stderr


def test_bad_input_fails_the_step_with_memplan_s_status(job):
    (job / "model.circle").write_bytes(b"not a model")
    r = run(job)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "memplan could not check the model (exit 2)" in r.stdout
