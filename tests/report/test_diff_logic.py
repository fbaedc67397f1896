"""Diff rows and thresholds on hand-written report documents."""
import copy

import pytest

from memplan_cli.buffers import CATEGORIES
from memplan_cli.errors import ConfigError, MemplanError
from memplan_cli.report.diff import check_report, diff_documents, parse_threshold


def _doc(planned=1000, **cats):
    c = {k: {"planned": cats.get(k.replace("-", "_"), 0), "naive": 0} for k in CATEGORIES}
    return {"schema_version": 1, "kind": "analysis", "profile": "memplan", "categories": c,
            "totals": {"naive": 2000, "planned": planned, "lower_bound": 900}, "config": {"batch_size": 1}}


@pytest.mark.parametrize("text, section, name, limit, rel", [
    ("total:+5%", "total", "planned", 5.0, True), ("planned:+1MiB", "total", "planned", 2**20, False),
    ("back-prop:+0%", "category", "back-prop", 0.0, True), ("gradient:4096", "category", "gradient", 4096, False),
    ("onert:+2.5%", "total", "onert", 2.5, True), ("lower_bound:+1kB", "total", "lower_bound", 1000, False)])
def test_threshold_syntax(text, section, name, limit, rel):
    t = parse_threshold(text)
    assert (t.section, t.name, t.limit, t.relative) == (section, name, limit, rel)


@pytest.mark.parametrize("text, msg", [("total", "expected KEY:.LIMIT"), ("total:+5x", "not a size"),
                                       ("peak:+5%", "unknown key 'peak'"), ("total:-5%", "must not be negative"),
                                       (":+5%", "expected KEY:.LIMIT")])
def test_bad_thresholds_are_usage_errors(text, msg):
    with pytest.raises(ConfigError, match=msg):
        parse_threshold(text)


def test_limits_are_inclusive_and_percent_from_zero_fails_on_any_growth():
    t = parse_threshold("total:+5%")
    assert not t.exceeded(1000, 1050) and t.exceeded(1000, 1051)
    assert not parse_threshold("planned:+100").exceeded(1000, 1100)
    assert parse_threshold("gradient:+0%").exceeded(0, 1)


def test_diff_rows_and_verdicts():
    old, new = _doc(1000, gradient=100), _doc(1100, gradient=100)
    doc = diff_documents(old, new, [parse_threshold("total:+5%"), parse_threshold("gradient:+0%")],
                         old_label="a", new_label="b")
    rows = {(r["section"], r["name"]): r for r in doc["rows"]}
    assert rows[("total", "planned")] == {"section": "total", "name": "planned", "old": 1000, "new": 1100,
                                          "delta": 100, "percent": 10.0, "status": "regression"}
    assert rows[("category", "gradient")]["status"] == "ok"
    assert doc["status"] == "regression"
    assert [v["passed"] for v in doc["thresholds"]] == [False, True]


def test_a_threshold_on_a_missing_figure_is_an_input_error():
    with pytest.raises(MemplanError, match="no onert figure"):
        diff_documents(_doc(), _doc(), [parse_threshold("onert:+1%")], old_label="a", new_label="b")


def test_check_report_names_what_is_wrong():
    bad = copy.deepcopy(_doc())
    bad["totals"]["planned"] = "12"
    with pytest.raises(MemplanError, match="base.json: totals.planned must be an integer"):
        check_report(bad, "base.json")
    with pytest.raises(MemplanError, match="schema_version 7"):
        check_report({**_doc(), "schema_version": 7}, "x")
    with pytest.raises(MemplanError, match=r"^x: not an analyze report \(kind: sweep\)$"):
        check_report({**_doc(), "kind": "sweep"}, "x")
    with pytest.raises(MemplanError, match=r"^x: not an analyze report \(kind: null\)$"):
        check_report({**_doc(), "kind": None}, "x")
    with pytest.raises(MemplanError) as e:  # a kind is input: cut and escaped
        check_report({**_doc(), "kind": "\x1b[2J" + "k" * 100_000}, "x")
    assert len(str(e.value)) < 120 and "\x1b" not in str(e.value)
