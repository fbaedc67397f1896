"""The report document from an analysis (fake profiles on a hand-built graph): figures, schema, determinism."""
import json
import pathlib

import jsonschema
import pytest

from memplan_cli.analysis import analyze_graph, compare_with_onert
from memplan_cli.buffers import CATEGORIES
from memplan_cli.config import TrainConfig
from memplan_cli.report.document import build_document, normalise_alloc_lines
from memplan_cli.report.jsonfmt import dumps
from tests.report.conftest import tiny_graph
from memplan_cli.schemas import load_schema

SCHEMA = load_schema("analysis")


def _analysis(profile="memplan", **cfg):
    a = analyze_graph(tiny_graph(), TrainConfig(**{"optimizer": "adam", **cfg}), profile=profile)
    a.model_path, a.model_sha256 = "some/dir/tiny.circle", "0" * 64
    return a


def test_document_figures_are_the_analysis_figures(fake_profiles):
    a = _analysis()
    doc = build_document(a)
    assert doc["profile"] == "memplan" and doc["model"]["file"] == "tiny.circle"
    assert doc["totals"] == {"naive": a.naive_total, "folded": 0, "planned": a.planned_total,
                             "lower_bound": a.lower_bound}
    assert doc["naive_means"] == "every buffer its own bytes"  # the fake profile gives no tensors
    assert {c: v["naive"] for c, v in doc["categories"].items()} == a.naive_by_category
    # the single arena is split by category and the rows add up to the planned total
    assert sum(v["planned"] for v in doc["categories"].values()) == a.planned_total
    assert doc["peak"]["bytes"] == a.lower_bound == sum(doc["peak"]["categories"].values())
    assert doc["config"]["optimizer"] == "adam" and doc["config"]["trainable_ops"] == "all"
    assert doc["figures"] == {"note": "fake"}


def test_document_validates_against_the_schema_with_every_optional_part(fake_profiles):
    a = _analysis(trainable=(0, 2))
    a.onert = compare_with_onert(a.graph, a.config)
    doc = build_document(a, by_layer=True, planner="naive", profile_options={"threads": 4})
    jsonschema.validate(doc, SCHEMA)
    assert doc["totals"]["onert"] == a.onert.total
    assert doc["config"]["trainable_ops"] == [0, 2]
    onert_doc = build_document(_analysis(profile="onert"))
    jsonschema.validate(onert_doc, SCHEMA)
    assert len(onert_doc["alloc_lines"]) == 7 and sum(onert_doc["alloc_lines"]) == onert_doc["totals"]["planned"]
    assert list(onert_doc["one_style"])[-1] == "extra tensors"


def test_the_schema_rejects_a_figure_that_is_not_an_integer(fake_profiles):
    doc = build_document(_analysis())
    doc["categories"]["gradient"]["planned"] = 1.5
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, SCHEMA)
    del doc["categories"]["gradient"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, SCHEMA)


def test_json_is_byte_identical_for_the_same_input(fake_profiles):
    one = dumps(build_document(_analysis(), by_layer=True))
    two = dumps(build_document(_analysis(), by_layer=True))
    assert one == two
    assert "time" not in json.loads(one)


def test_onert_comparison_says_why_onert_cannot_train_the_model(fake_profiles):
    g = tiny_graph(concat=True)
    on = compare_with_onert(g, TrainConfig())
    assert not on.available and "Concat" in on.reason
    a = analyze_graph(g, TrainConfig(), profile="memplan")
    a.onert = on
    doc = build_document(a)
    assert doc["onert"] == {"available": False, "reason": on.reason} and "onert" not in doc["totals"]


def test_alloc_lines_are_accepted_as_ints_pairs_or_dicts():
    assert normalise_alloc_lines([5, ("gradient", 6), {"label": "fc W^T", "capacity": 7}]) == (
        ["line 1", "gradient", "fc W^T"], [5, 6, 7])


def test_categories_cover_exactly_the_seven_rows(fake_profiles):
    assert list(build_document(_analysis())["categories"]) == list(CATEGORIES)
