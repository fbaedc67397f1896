"""`memplan compare`: one column per system, checked against `memplan analyze` for the same
configuration on both circle samples at two batch sizes; the JSON validates against
schemas/compare.schema.json; table and CSV carry the same figures; n/a columns; bad input."""
import csv
import io
import json
import pathlib

import jsonschema
import pytest
from click.testing import CliRunner

from memplan_cli.cli import main
from memplan_cli.comparison import PROFILES, compare_graph
from memplan_cli.config import TrainConfig
from memplan_cli.ir.graph import Graph, Operand, Operation
from memplan_cli.report import get_reporter
from memplan_cli.report.compare import compare_document
from memplan_cli.report.output import RenderOptions
from memplan_cli.report.units import human
from memplan_cli.schemas import load_schema

ROOT = pathlib.Path(__file__).parents[2]
SCHEMA = load_schema("compare")
SAMPLES = ROOT / "sample_models"
CASES = [("mnist.circle", "2"), ("mnist.circle", "8"), ("mobilenetv2.circle", "1"), ("mobilenetv2.circle", "4")]


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _json(*args):
    r = cli(*args, "-f", "json")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


@pytest.fixture(scope="module", params=CASES, ids=[f"{m}-b{b}" for m, b in CASES])
def case(request):
    model, batch = request.param
    flags = ["-b", batch, "-O", "adam", "-l", "cce"]
    path = SAMPLES / model
    return {
        "model": model,
        "compare": _json("compare", path, *flags),
        "memplan": _json("analyze", path, "-p", "memplan", *flags),
        "onert": cli("analyze", path, "-p", "onert", "-f", "json", *flags),
    }


def test_compare_validates_and_matches_analyze(case):
    doc = case["compare"]
    jsonschema.validate(doc, SCHEMA)
    assert doc["kind"] == "compare" and doc["model"]["file"] == case["model"]
    assert doc["profiles"] == list(PROFILES) and list(doc["columns"]) == list(PROFILES)
    cols = doc["columns"]
    mem = case["memplan"]
    # memplan's column is `analyze`'s plan, naive is `analyze`'s naive, the lower bound is analyze's
    assert cols["memplan"]["total"] == mem["totals"]["planned"]
    assert cols["memplan"]["categories"] == {c: v["planned"] for c, v in mem["categories"].items()}
    assert cols["naive"]["total"] == mem["totals"]["naive"]
    assert cols["naive"]["categories"] == {c: v["naive"] for c, v in mem["categories"].items()}
    assert doc["lower_bound"] == mem["totals"]["lower_bound"] == cols["memplan"]["lower_bound"]
    assert doc["config"]["batch_size"] == mem["config"]["batch_size"] and doc["config"]["optimizer"] == "adam"
    # onert's column is `analyze --profile onert`'s total, or n/a with the same refusal
    r = case["onert"]
    if r.exit_code == 0:
        o = json.loads(r.stdout)
        assert cols["onert"]["available"] and cols["onert"]["total"] == o["totals"]["planned"] == sum(o["alloc_lines"])
        assert cols["onert"]["categories"] == {c: v["planned"] for c, v in o["categories"].items()}
    else:
        assert r.exit_code == 2 and not cols["onert"]["available"]
        assert cols["onert"]["reason"] in r.stderr
    for p in PROFILES:
        c = cols[p]
        if not c["available"]:
            continue
        assert sum(c["categories"].values()) == c["total"]
        assert c["ratio_to_memplan"] == round(c["total"] / cols["memplan"]["total"], 6)
        assert c["ratio_to_lower_bound"] == round(c["total"] / doc["lower_bound"], 6)
        assert c["total"] >= doc["lower_bound"]  # memplan's lifetimes are the shortest
        if c["lower_bound"] is not None:
            assert c["lower_bound"] <= c["total"]  # each pool's arena is at least its own peak
    assert cols["memplan"]["ratio_to_memplan"] == 1.0
    s = cols["singa"]["figures"]["singa"]
    assert s["high_water"] == cols["singa"]["total"] and s["lower_bound"] == cols["singa"]["lower_bound"]


def test_nntrainer_and_singa_columns_match_their_profiles():
    path = SAMPLES / "mnist.circle"
    doc = _json("compare", path, "-b", "3", "-O", "adam")
    for p in ("nntrainer", "singa"):
        a = _json("analyze", path, "-p", p, "-b", "3", "-O", "adam")
        assert doc["columns"][p]["total"] == a["totals"]["planned"]
        assert doc["columns"][p]["lower_bound"] == sum(x["lower_bound"] for x in a["pools"])
        assert doc["columns"][p]["planners"] == sorted({x["planner"] for x in a["pools"]})


def test_table_csv_and_quiet_carry_the_json_figures(tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "140")  # the boxed table with units (80 columns: tests/test_width.py)
    path = SAMPLES / "mnist.circle"
    doc = _json("compare", path, "-b", "2")
    table = cli("compare", path, "-b", "2", "--color", "never").stdout
    header = next(line for line in table.splitlines() if "category" in line)
    assert [w for w in header.replace("┃", " ").split()] == ["category", *PROFILES]
    total = next(line for line in table.splitlines() if line.startswith("│ total"))
    cells = [c.strip() for c in total.strip("│ ").split("│")][1:]
    assert cells == [human(doc["columns"][p]["total"]) for p in PROFILES]
    ratios = next(line for line in table.splitlines() if "× memplan plan" in line)
    assert ratios.rstrip(" │").endswith("1.000 x")
    assert f"lower bound: {doc['lower_bound']:,d} B" in table
    assert "singa pool: high-water" in table
    verbose = cli("compare", path, "-b", "2", "--color", "never", "-v").stdout
    assert f"{doc['columns']['memplan']['total']:,d}" in verbose and "[planner singa]" in verbose

    out = tmp_path / "c.csv"
    r = cli("compare", path, "-b", "2", "-f", "csv", "-o", out)
    assert r.exit_code == 0 and r.stdout == ""
    rows = list(csv.reader(io.StringIO(out.read_text())))
    assert rows[0] == ["section", "name", "profile", "value"]
    got = {(s, n, p): v for s, n, p, v in rows[1:]}
    for p in PROFILES:
        c = doc["columns"][p]
        assert int(got[("total", "total", p)]) == c["total"]
        assert all(int(got[("category", k, p)]) == v for k, v in c["categories"].items())
        assert float(got[("ratio", "to_memplan", p)]) == pytest.approx(c["ratio_to_memplan"])
    assert got[("total", "own_lower_bound", "naive")] == ""
    assert int(got[("total", "lower_bound", "memplan")]) == doc["lower_bound"]

    q = cli("compare", path, "-b", "2", "-q").stdout
    assert q.count("\n") == 1 and f"memplan {doc['columns']['memplan']['total']} B" in q
    assert cli("compare", path, "-b", "2", "-qq").stdout == ""


def _tanh_graph():
    """x -> FC(w, fused TANH) -> y: onert's train backend has no fused TANH (it refuses the model)."""
    g = Graph([Operand(0, "x", (2, 4), is_input=True), Operand(1, "w", (3, 4), is_const=True),
               Operand(2, "y", (2, 3), is_output=True)],
              [Operation(0, "FullyConnected", [0, 1], [2], {"activation": "TANH"}, name="fc")], [0], [2],
              name="tanh", source_format="circle")
    g.verify()
    return g


def test_a_system_that_cannot_train_the_model_is_na_with_its_reason():
    cmp = compare_graph(_tanh_graph(), TrainConfig())
    doc = compare_document(cmp)
    jsonschema.validate(doc, SCHEMA)
    on = doc["columns"]["onert"]
    assert not on["available"] and on["total"] is None and on["categories"] is None
    assert "onert cannot train op" in on["reason"] and "TANH" in on["reason"]
    assert on["ratio_to_memplan"] is None and on["ratio_to_lower_bound"] is None
    assert all(doc["columns"][p]["available"] for p in PROFILES if p != "onert")
    table = get_reporter("table").compare(doc, RenderOptions())
    assert "onert: n/a (onert cannot train op #0 FullyConnected (fc)" in table
    total = next(line for line in table.splitlines() if line.startswith("│ total"))
    assert [c.strip() for c in total.split("│")][3] == "n/a"  # ["", total, naive, onert, ...]
    rows = list(csv.reader(io.StringIO(get_reporter("csv").compare(doc, RenderOptions()))))
    assert ["total", "total", "onert", ""] in rows
    assert any(r[0] == "unavailable" and r[2] == "onert" and "TANH" in r[1] for r in rows)
    assert json.loads(get_reporter("json").compare(doc, RenderOptions())) == doc


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    bad = tmp_path / "model.circle"
    bad.write_bytes(b"not a model at all")
    for args in (["compare", tmp_path / "missing.circle"], ["compare", bad],
                 ["compare", SAMPLES / "mnist.circle", "-t", "99"]):
        r = cli(*args)
        assert r.exit_code == 2, (args, r.output)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("memplan: error:") and "Traceback" not in r.output
    out = tmp_path / "keep.json"
    out.write_text("old")
    assert cli("compare", bad, "-f", "json", "-o", out).exit_code == 2
    assert out.read_text() == "old"
    r = cli("compare", SAMPLES / "mnist.circle", "-b", "0")
    assert r.exit_code == 2


def test_each_column_says_how_it_was_checked():
    # a profile named after a real system says whether it matches that system or is only modelled
    doc = _json("compare", SAMPLES / "mnist.circle", "-b", "2")
    checked = {p: doc["columns"][p]["checked"] for p in PROFILES}
    assert "byte-exact" in checked["onert"] and "onert 0.1.0" in checked["onert"]
    assert checked["nntrainer"].startswith("byte-exact against nntrainer 0.6.0 fixtures (48 configurations)")
    assert checked["singa"].startswith("modelled from SINGA's design")
    table = " ".join(cli("compare", SAMPLES / "mnist.circle", "-b", "2", "--color", "never").stdout.split())
    for p in ("onert", "nntrainer", "singa", "memplan"):  # every column says how it was checked
        assert f"{p}: {checked[p]}" in table
