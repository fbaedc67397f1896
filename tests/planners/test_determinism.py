"""Plans do not depend on timing: without --time-limit every planner budget counts work, so a run
whose planners are slowed down (a clock that races ahead, a sleep in every kernel call) gives
byte-identical JSON; with --time-limit the report says the plan may depend on it."""
from __future__ import annotations

import json
import pathlib
import time

import jsonschema
from click.testing import CliRunner

from memplan_cli.cli import main
from memplan_cli.schemas import load_schema

ROOT = pathlib.Path(__file__).parents[2]
MOBILENET = str(ROOT / "sample_models" / "mobilenetv2.circle")
ARGS = ["analyze", MOBILENET, "-b", "10", "-O", "adam", "-f", "json"]


def analyze(*extra):
    r = CliRunner().invoke(main, [*ARGS, *extra], catch_exceptions=False)
    assert r.exit_code == 0, r.stderr
    return r.stdout


def slow_planners(monkeypatch):
    """Every clock read 100 s later than the last, and a sleep in every compiled-kernel call:
    a wall-clock budget anywhere on the default path would now cut greedy to one combination
    and skip the search (as the former 2 s budget of `best` did on a loaded machine)."""
    import memplan_cli.planners.exact as exact
    import memplan_cli.planners.greedy as greedy

    real = time.perf_counter
    state = {"skew": 0.0}

    def racing():
        state["skew"] += 100.0
        return real() + state["skew"]

    monkeypatch.setattr(time, "perf_counter", racing)
    place, search = greedy.place, exact._search

    def slow_place(*a):
        time.sleep(0.002)
        return place(*a)

    def slow_search(*a):
        time.sleep(0.002)
        return search(*a)

    monkeypatch.setattr(greedy, "place", slow_place)
    monkeypatch.setattr(exact, "_search", slow_search)
    return state


def test_slowed_planners_give_byte_identical_json(monkeypatch):
    normal = analyze()
    state = slow_planners(monkeypatch)
    slowed = analyze()
    assert state["skew"] > 0          # the planners did read the racing clock
    assert slowed == normal
    doc = json.loads(normal)
    assert doc["config"]["time_limit"] is None
    # the 562-buffer arena: greedy's 12 combinations reach the lower bound, so it is proven optimal
    assert [p["status"] for p in doc["pools"]] == ["optimal"]
    assert doc["totals"]["planned"] == doc["totals"]["lower_bound"]


def test_a_time_limit_is_reported(monkeypatch):
    slow_planners(monkeypatch)
    out = analyze("--time-limit", "0.5")
    doc = json.loads(out)
    assert doc["config"]["time_limit"] == 0.5
    schema = load_schema("analysis")
    jsonschema.validate(doc, schema)
    # the racing clock leaves greedy one combination and no search: a worse plan than the default
    assert doc["totals"]["planned"] > doc["totals"]["lower_bound"]
    table = CliRunner().invoke(main, [*ARGS[:-2], "--time-limit", "0.5"], catch_exceptions=False).stdout
    assert "planned under a 0.5 s time limit" in table


def test_plan_command_reports_a_time_limit(tmp_path):
    p = tmp_path / "b.csv"
    p.write_text("id,lower,upper,size\na,0,2,4\nb,1,3,2\nc,2,4,4\n")
    r = CliRunner().invoke(main, ["plan", str(p), "-f", "json"], catch_exceptions=False)
    assert json.loads(r.stdout)["time_limit"] is None
    r = CliRunner().invoke(main, ["plan", str(p), "-f", "json", "--time-limit", "3"], catch_exceptions=False)
    assert json.loads(r.stdout)["time_limit"] == 3
    r = CliRunner().invoke(main, ["plan", str(p), "--time-limit", "3"], catch_exceptions=False)
    assert "planned under a 3 s time limit" in r.stdout
    r = CliRunner().invoke(main, ["plan", str(p), "--time-limit", "3", "--rounds", "5"])
    assert r.exit_code == 2 and "give one budget" in r.stderr
