"""`memplan diff --baseline` on hostile JSON: every input ends with exit 0, 1 or 2 and, on 2, one line
naming the file; never an internal error (70) or a traceback. Hand-picked cases from the issue plus
hypothesis over arbitrary JSON values and over a real report with parts replaced."""
from __future__ import annotations

import copy
import json
import os

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memplan_cli.cli import main
from tests.loaders import onnxmodels as om

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(args):
    r = CliRunner().invoke(main, args, catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    d = tmp_path_factory.mktemp("hostile")
    model = om.save(d, "m.onnx", om.tiny_cnn())
    code, _, err = run(["analyze", model, "-f", "json", "-o", str(d / "base.json")])
    assert code == 0, err
    return d, model, json.loads((d / "base.json").read_text())


def check(path, target, allowed=(0, 1, 2)):
    for args in (["diff", "--baseline", str(path), str(target)], ["diff", "--baseline", str(target), str(path)]):
        code, out, err = run(args)
        assert code in allowed, (args, code, err)
        assert "Traceback" not in out + err and "internal error" not in err, err
        if code == 2:
            lines = err.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("memplan: error:"), err


@pytest.mark.parametrize("text, words", [
    ("[" * 200_000 + "]" * 200_000, "nested deeper"),
    ('{"a":' * 100_000 + "1" + "}" * 100_000, "nested deeper"),
    ("[" * 70 + "]" * 70, "nested deeper"),
    ("9" * 5001, "5001 digits"),
    ('{"schema_version": 1, "x": -' + "1" * 5001 + "}", "5001 digits"),
    ('{"schema_version": NaN}', "NaN"),
    ('{"schema_version": 1e999}', "out of range"),
    ('{"schema_version": Infinity}', "Infinity"),
])
def test_issue_cases_are_one_line_exit_2(workdir, text, words):
    d, model, _ = workdir
    p = d / "bad.json"
    p.write_text(text)
    for target in (model, d / "base.json"):
        code, out, err = run(["diff", "--baseline", str(p), str(target)])
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert words in err and str(p) in err


@pytest.mark.parametrize("path, value, words", [
    (("model",), [1], "'model' is not an object"), (("config",), "x", "'config' is not an object"),
    (("config", "time_limit"), "soon", "time_limit"), (("config", "profile_options"), [1], "profile_options"),
    (("profile",), ["memplan"], "profile must be a string"), (("schema_version",), True, "schema_version"),
    (("totals", "planned"), 2**63, "totals.planned"), (("categories", "gradient", "naive"), -1, "categories"),
    (("config", "batch_size"), "abc", "config.batch_size"), (("config", "batch_size"), -3, "config.batch_size"),
    (("config", "batch_size"), 2.5, "config.batch_size"), (("config", "optimizer"), [1], "config.optimizer"),
    (("config", "trainable_ops"), {"a": 1}, "trainable_ops"), (("profile",), "nope", "profile"),
    (("config", "profile_options"), {"threads": "x"}, "threads"),
])
def test_bad_fields_name_the_field(workdir, path, value, words):
    d, model, base = workdir
    doc = copy.deepcopy(base)
    node = doc
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    p = d / "field.json"
    p.write_text(json.dumps(doc))
    code, out, err = run(["diff", "--baseline", str(p), model])
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert words in err and str(p) in err, err


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-2**70, max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=20)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=json_values)
def test_any_json_value_as_a_report(workdir, value):
    d, _, _ = workdir
    p = d / "any.json"
    p.write_text(json.dumps(value))
    check(p, d / "base.json")


def _paths(doc, prefix=()):
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, prefix + (k,))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_real_report_with_a_part_replaced(workdir, data):
    d, _, base = workdir
    doc = copy.deepcopy(base)
    paths = [p for p in _paths(doc) if p]
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(paths))
        node = doc
        try:
            for k in path[:-1]:
                node = node[k]
            node[path[-1]] = data.draw(json_values)
        except (KeyError, TypeError):
            pass  # an earlier replacement removed this path
    p = d / "mutated.json"
    p.write_text(json.dumps(doc))
    check(p, d / "base.json")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=st.sampled_from(["batch_size", "optimizer", "loss", "learning_rate", "trainable_ops", "planner",
                            "batchnorm", "dropout", "profile_options"]), value=json_values)
def test_a_baseline_config_value_drives_a_real_analysis_safely(workdir, key, value):
    # the baseline's configuration becomes the flags TARGET is analysed with: each value is checked
    d, model, base = workdir
    doc = copy.deepcopy(base)
    doc["config"][key] = value
    p = d / "cfg.json"
    p.write_text(json.dumps(doc))
    code, out, err = run(["diff", "--baseline", str(p), model])
    assert code in (0, 1, 2), err
    assert "internal error" not in err and "Traceback" not in err
    if code == 2:
        assert len(err.strip().splitlines()) == 1, err
