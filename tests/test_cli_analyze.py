"""`memplan analyze` end to end on the mnist sample, with the stand-in profiles of tests/report."""
import json
import os
import pathlib
import xml.etree.ElementTree as ET

import jsonschema
from click.testing import CliRunner

from memplan_cli.cli import main
from tests.report.conftest import fake_profiles  # noqa: F401  (fixture)
from tests.report.fake_profiles import FakeOnert
from memplan_cli.schemas import load_schema

ROOT = pathlib.Path(__file__).parents[1]
MNIST = str(ROOT / "sample_models" / "mnist.circle")
MOBILENET = str(ROOT / "sample_models" / "mobilenetv2.circle")
SCHEMA = load_schema("analysis")


def run(*args, env=None):
    return CliRunner().invoke(main, ["analyze", *args], env=env or {"NO_COLOR": None})


def test_table_has_the_categories_totals_and_the_onert_column(fake_profiles):
    r = run(MNIST, "-b", "4", "-O", "adam")
    assert r.exit_code == 0, r.output
    out = r.stdout
    assert "mnist.circle (circle, 10 ops) · profile memplan · batch 4 · adam" in out
    for word in ("non-const", "opt variable", "disposable", "onert", "memplan planned", "live at peak", "total",
                 "lower bound", "arena / lower bound", "peak:", "live over"):
        assert word in out, word
    assert "\x1b[" not in out


def test_json_validates_is_deterministic_and_agrees_with_the_table(fake_profiles, monkeypatch):
    one, two = run(MNIST, "-b", "2", "-f", "json"), run(MNIST, "-b", "2", "-f", "json")
    assert one.exit_code == 0 and one.stdout == two.stdout
    doc = json.loads(one.stdout)
    jsonschema.validate(doc, SCHEMA)
    assert doc["config"]["batch_size"] == 2 and doc["config"]["sources"]["batch_size"] == "flag"
    assert doc["totals"]["onert"] > 0
    monkeypatch.setenv("COLUMNS", "140")  # room for the exact bytes beside the units
    table = run(MNIST, "-b", "2").stdout
    assert f"{doc['totals']['planned']:,d}" in table and f"{doc['totals']['lower_bound']:,d}" in table


def test_output_file_is_written_and_an_error_leaves_it_untouched(fake_profiles, tmp_path):
    out = tmp_path / "report.json"
    r = run(MNIST, "-f", "json", "-o", str(out))
    assert r.exit_code == 0 and r.stdout == ""
    jsonschema.validate(json.loads(out.read_text()), SCHEMA)
    before = out.read_text()
    bad = tmp_path / "bad.circle"
    bad.write_bytes(b"\x00" * 64)
    r = run(str(bad), "-f", "json", "-o", str(out))
    assert r.exit_code == 2 and str(bad) in r.stderr and r.stderr.count("\n") == 1
    assert out.read_text() == before
    assert sorted(os.listdir(tmp_path)) == ["bad.circle", "report.json"]  # no temporary file left


def test_onert_profile_prints_alloc_lines_and_json_carries_them(fake_profiles):
    r = run(MNIST, "-p", "onert")
    assert r.exit_code == 0, r.output
    assert "onert ALLOC lines, in onert's order" in r.stdout and "grouped as ONE publishes them" in r.stdout
    doc = json.loads(run(MNIST, "-p", "onert", "-f", "json", "--onert-threads", "3").stdout)
    assert doc["profile"] == "onert" and sum(doc["alloc_lines"]) == doc["totals"]["planned"]
    assert doc["config"]["profile_options"] == {"simd_width": 4, "threads": 3}
    assert "onert" not in doc["totals"]  # no self-comparison
    # for onert, --planner is onert's own planner: it goes to the profile, not to the pools
    assert run(MNIST, "-p", "onert", "--planner", "bump", "-q").exit_code == 0
    assert FakeOnert.last_options == {"planner": "bump", "threads": 4, "simd_width": 4}


def test_by_layer_and_the_hook_columns(fake_profiles):
    r = run(MNIST, "--by-layer")
    assert "per layer" in r.stdout and "#7 FullyConnected" in r.stdout and "fwd tmp" in r.stdout and "ColossalAI" in r.stdout
    doc = json.loads(run(MNIST, "--by-layer", "-f", "json").stdout)
    rows = doc["by_layer"]["rows"]
    assert rows[0]["op"].startswith("#0 Conv2D") and rows[0]["fwd_mem_tmp"] == 123
    assert doc["by_layer"]["largest_at_peak"] in {row["op"] for row in rows}


def test_timeline_svg_is_written(fake_profiles, tmp_path):
    svg = tmp_path / "t.svg"
    r = run(MNIST, "-O", "adam", "--timeline", str(svg), "-q")
    assert r.exit_code == 0
    root = ET.parse(svg).getroot()
    assert root.tag.endswith("svg") and len(list(root.iter("{http://www.w3.org/2000/svg}polygon"))) >= 4


def test_colour_flag_and_no_color(fake_profiles):
    assert "\x1b[" in run(MNIST, "--color", "always").stdout
    assert "\x1b[" not in run(MNIST, env={"NO_COLOR": "1"}).stdout
    assert "\x1b[" not in run(MNIST, "--color", "never").stdout


def test_quiet_levels(fake_profiles):
    assert run(MNIST, "-q").stdout.count("\n") == 1
    r = run(MNIST, "-qq")
    assert r.exit_code == 0 and r.stdout == ""


def test_csv(fake_profiles):
    lines = run(MNIST, "-f", "csv").stdout.splitlines()
    assert lines[0] == "section,name,field,bytes" and any(x.startswith("total,planned,bytes,") for x in lines)


def test_usage_errors_exit_2_with_one_line(fake_profiles, tmp_path):
    r = run(MNIST, "--planner", "nosuch")
    assert r.exit_code == 2 and "unknown planner 'nosuch'" in r.stderr
    r = run(str(tmp_path / "missing.circle"))
    assert r.exit_code == 2 and "no such file" in r.stderr
    r = run(MNIST, "-o", str(tmp_path / "nodir" / "x.json"), "-f", "json")
    assert r.exit_code == 2 and "no such folder" in r.stderr
    r = run(MNIST, "-f", "xml")
    assert r.exit_code == 2


def test_real_profiles_give_byte_identical_json_across_processes(tmp_path):
    """Same input and flags, two interpreters with different hash seeds: the same bytes (the
    determinism CI relies on when it diffs reports)."""
    import subprocess
    import sys

    outs = []
    for seed in ("1", "2"):
        for profile in ("memplan", "onert"):
            p = tmp_path / f"{profile}-{seed}.json"
            env = {**os.environ, "PYTHONHASHSEED": seed}
            r = subprocess.run([sys.executable, "-m", "memplan_cli", "analyze", MNIST, "-b", "8", "-O", "adam",
                                "-p", profile, "-f", "json", "-o", str(p)], env=env, capture_output=True, text=True)
            assert r.returncode == 0, r.stderr
            outs.append(p.read_bytes())
    assert outs[0] == outs[2] and outs[1] == outs[3]
    assert json.loads(outs[0])["totals"]["planned"] < json.loads(outs[1])["totals"]["planned"]


def test_the_onert_path_on_a_circle_model_never_loads_numpy():
    """flatbuffers and circle-schema import NumPy at module level; the CLI defers it to first use and
    nothing from loading to the JSON report uses it (~85 ms of a ~300 ms run). A regression that
    touches NumPy on this path loads it again and fails here."""
    import subprocess
    import sys

    code = ("import sys\nsys.argv = ['memplan', 'analyze', %r, '-b', '10', '-O', 'adam', '-p', 'onert', '-f', 'json']\n"
            "from memplan_cli.cli import main\n"
            "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
            "print('NUMPY', 'numpy._core' in sys.modules, file=sys.stderr)\n") % MOBILENET
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "NUMPY False" in r.stderr
    doc = json.loads(r.stdout)
    assert doc["profile"] == "onert" and doc["totals"]["planned"] > 0
