import pytest

from memplan_cli.errors import ConfigError
from memplan_cli.report.sweep import parse_batch_sizes, search_largest, sweep_document


def test_batch_size_lists():
    assert parse_batch_sizes("8,1,2,2,4") == [1, 2, 4, 8]
    assert parse_batch_sizes("1-3,16") == [1, 2, 3, 16]
    for bad in ("", "a,b", "0,1"):
        with pytest.raises(ConfigError):
            parse_batch_sizes(bad)


@pytest.mark.parametrize("answer", [1, 2, 3, 23, 64, 1000])
def test_search_finds_the_largest_fitting_batch(answer):
    best, tried = search_largest(lambda b: b <= answer)
    assert best == answer
    assert len(tried) <= 2 * answer.bit_length() + 2


def test_search_reports_none_when_batch_one_does_not_fit():
    assert search_largest(lambda b: False) == (None, [1])


def test_search_stops_at_its_limit():
    assert search_largest(lambda b: True, limit=64)[0] == 64


def test_sweep_document_answers_per_profile_and_the_first_decides_the_status():
    rows = [{"profile": p, "batch_size": b, "naive": 0, "planned": b * k, "lower_bound": 0, "error": ""}
            for p, k in (("memplan", 10), ("onert", 30)) for b in (1, 2, 4, 8)]
    doc = sweep_document({"file": "m"}, {}, ["memplan", "onert"], rows, 45)
    assert doc["largest_fitting"] == {"memplan": 4, "onert": 1} and doc["status"] == "ok"
    doc = sweep_document({"file": "m"}, {}, ["memplan", "onert"], rows, 9)
    assert doc["largest_fitting"] == {"memplan": None, "onert": None} and doc["status"] == "over_budget"
