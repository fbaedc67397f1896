"""The JSON report of every sample validates against schemas/analysis.schema.json, with the real
profiles (memplan must handle every sample; onert may refuse a model with one line, exit 2)."""
import json
import pathlib

import jsonschema
import pytest
from click.testing import CliRunner

from memplan_cli.cli import main
from memplan_cli.profiles import available_profiles
from memplan_cli.schemas import load_schema

ROOT = pathlib.Path(__file__).parents[2]
SCHEMA = load_schema("analysis")
SAMPLES = sorted(p.name for p in (ROOT / "sample_models").iterdir() if p.suffix in (".circle", ".tflite", ".onnx"))


def _analyze(sample, profile, *flags):
    return CliRunner().invoke(main, ["analyze", str(ROOT / "sample_models" / sample), "-p", profile, "-f", "json",
                                     "-O", "adam", *flags])


@pytest.mark.parametrize("sample", [s for s in SAMPLES if s.startswith("mnist")])
@pytest.mark.parametrize("profile", ["memplan", "onert"])
def test_mnist_reports_validate(sample, profile):
    _check(sample, profile, "-b", "4")


@pytest.mark.slow
@pytest.mark.parametrize("sample", [s for s in SAMPLES if not s.startswith("mnist")])
@pytest.mark.parametrize("profile", ["memplan", "onert"])
def test_larger_sample_reports_validate(sample, profile):
    _check(sample, profile, "-b", "2")


def _check(sample, profile, *flags):
    if profile not in available_profiles():
        pytest.skip(f"the {profile} profile is not on main yet")
    r = _analyze(sample, profile, *flags)
    if profile == "onert" and r.exit_code == 2:
        assert r.stderr.count("\n") == 1 and r.stderr.startswith("memplan: error:")  # a refusal in one line
        return
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    jsonschema.validate(doc, SCHEMA)
    assert doc["profile"] == profile and doc["model"]["file"] == sample
    assert sum(v["planned"] for v in doc["categories"].values()) == doc["totals"]["planned"]
    assert doc["totals"]["lower_bound"] <= doc["totals"]["planned"] <= doc["totals"]["naive"]
    if profile == "onert":
        assert sum(doc["alloc_lines"]) == doc["totals"]["planned"]
