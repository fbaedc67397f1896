"""`memplan plan BUFFERS.csv` end to end (click's CliRunner): exact offsets on a hand-computed
instance, the --output round trip, MiniMalloc's column aliases, alignment, and one line + exit 2 on
every bad input, with nothing written."""
from __future__ import annotations

import csv
import io
import json
import os
import pathlib

import pytest
from click.testing import CliRunner

from memplan_cli.cli import main
from memplan_cli.plancsv import read_buffers_csv

ROOT = pathlib.Path(__file__).parents[1]
# the shared reference folder beside the repository (absent in a plain clone: the test skips)
CHALLENGE_A = pathlib.Path(__file__).resolve().parents[1] / ".." / "shared" / "benchmarks" / "minimalloc" / "A.1048576.csv"

# Hand-computed. Half-open lifetimes: a steps 0-1, b 1-2, c 2-3, d (zero size) step 3.
# Live bytes per step: 4, 6, 6, 4, so the lower bound is 6 and naive is 10.
# greedy's first combination (size descending, first fit) places a (4) at 0; c (4) at 0, since
# a ended before c starts; b (2) above both at 4; d (0 bytes) at 0. Arena 6 = LB.
# bump stacks in claim order (first step, then file order): a 0, b 4, c 6, d 10; arena 10. `plan`
# gives every zero-size buffer offset 0 (it occupies nothing), so d is written at 0.
TINY = "id,lower,upper,size\na,0,2,4\nb,1,3,2\nc,2,4,4\nd,3,4,0\n"
TINY_GREEDY = {"a": 0, "b": 4, "c": 0, "d": 0}
TINY_BUMP = {"a": 0, "b": 4, "c": 6, "d": 0}


def run(*args):
    r = CliRunner().invoke(main, ["plan", *args], catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


def run_csv_and_json(src, out, *args):
    """The plan's CSV to `out` (-o) and the JSON summary on stdout (a second run: the same plan)."""
    code, _, err = run(src, *args, "-o", str(out))
    if code:
        return code, "", err
    return run(src, *args, "-f", "json")


def write(tmp_path, text, name="in.csv"):
    p = tmp_path / name
    p.write_text(text)
    return p


def pairwise_errors(text: str) -> list[str]:
    """Independent O(n^2) check of a plan CSV as written: half-open [lower, upper) (or inclusive
    `end`), bytes [offset, offset + size); returns every clash."""
    rows = list(csv.DictReader(io.StringIO(text)))
    bufs = []
    for r in rows:
        lo = int(r.get("lower", r.get("start", r.get("begin"))))
        hi = int(r["upper"]) if "upper" in r else int(r["end"]) + 1
        bufs.append((r.get("id", r.get("buffer", r.get("buffer_id"))), lo, hi, int(r["size"]), int(r["offset"])))
    errs = []
    for k, (i, lo1, hi1, s1, o1) in enumerate(bufs):
        if o1 < 0:
            errs.append(f"{i} negative offset")
        for j, lo2, hi2, s2, o2 in bufs[k + 1:]:
            if s1 and s2 and lo1 < hi2 and lo2 < hi1 and o1 < o2 + s2 and o2 < o1 + s1:
                errs.append(f"{i} and {j} overlap")
    return errs


def offsets_of(text: str, key="id") -> dict[str, int]:
    return {r[key]: int(r["offset"]) for r in csv.DictReader(io.StringIO(text))}


# ---- the hand-computed instance ------------------------------------------------------------------
def test_tiny_greedy_offsets_exactly(tmp_path):
    src, out = write(tmp_path, TINY), tmp_path / "out.csv"
    code, stdout, err = run_csv_and_json(str(src), out, "--planner", "greedy")
    assert code == 0, err
    doc = json.loads(stdout)
    assert doc["buffers"] == 4 and doc["naive"] == 10 and doc["lower_bound"] == 6 and doc["arena"] == 6
    assert doc["arena_over_lower_bound"] == 1.0 and doc["status"] == "optimal" and doc["planner"] == "greedy"
    assert doc["verified"] is True
    text = out.read_text()
    assert text.splitlines()[0] == "id,lower,upper,size,offset"
    assert offsets_of(text) == TINY_GREEDY
    assert pairwise_errors(text) == []


def test_tiny_bump_offsets_exactly(tmp_path):
    src, out = write(tmp_path, TINY), tmp_path / "out.csv"
    code, stdout, err = run_csv_and_json(str(src), out, "--planner", "bump")
    assert code == 0, err
    doc = json.loads(stdout)
    assert doc["arena"] == 10 and doc["status"] == "feasible"
    assert offsets_of(out.read_text()) == TINY_BUMP


def test_default_planner_reaches_the_bound_on_tiny(tmp_path):
    from memplan_cli.planrun import default_planner

    code, stdout, err = run(str(write(tmp_path, TINY)), "-f", "json")
    assert code == 0, err
    doc = json.loads(stdout)
    assert doc["arena"] == 6 and doc["planner"].startswith(default_planner())


def test_table_summary_names_every_figure(tmp_path):
    code, stdout, err = run(str(write(tmp_path, TINY)), "--planner", "greedy")
    assert code == 0 and err == ""
    for word in ("buffers", "naive", "lower bound", "arena", "arena/LB", "1.0000", "planner", "greedy",
                 "status", "optimal"):
        assert word in stdout, word
    # seconds change from run to run: only with -v, so the same file prints the same bytes
    assert "seconds" not in stdout
    code, again, _ = run(str(write(tmp_path, TINY)), "--planner", "greedy")
    assert again == stdout
    code, verbose, _ = run(str(write(tmp_path, TINY)), "--planner", "greedy", "-v")
    assert "seconds" in verbose and "kernels" in verbose


def test_quiet_plan_is_one_line(tmp_path):
    code, stdout, err = run(str(write(tmp_path, TINY)), "--planner", "greedy", "-q")
    assert code == 0 and stdout.count("\n") == 1 and "arena 6 B" in stdout
    assert run(str(write(tmp_path, TINY)), "--planner", "greedy", "-qq")[1] == ""


# ---- --output --------------------------------------------------------------------------------------
@pytest.mark.skipif(not CHALLENGE_A.exists(), reason="shared benchmarks not present")
def test_output_round_trip_on_minimalloc_a(tmp_path):
    out, again = tmp_path / "a.csv", tmp_path / "again.csv"
    code, stdout, err = run_csv_and_json(str(CHALLENGE_A), out, "--planner", "greedy")
    assert code == 0, err
    arena = json.loads(stdout)["arena"]
    src_lines = CHALLENGE_A.read_text().splitlines()
    out_lines = out.read_text().splitlines()
    # the same rows, in the same order, with one more column
    assert len(out_lines) == len(src_lines)
    for a, b in zip(src_lines, out_lines):
        assert b.rsplit(",", 1)[0] == a
    text = out.read_text()
    assert pairwise_errors(text) == []
    assert max(int(r["offset"]) + int(r["size"]) for r in csv.DictReader(io.StringIO(text))) == arena
    # a plan memplan wrote can be planned again: the offset column is replaced, not duplicated
    code, stdout, err = run_csv_and_json(str(out), again, "--planner", "greedy")
    assert code == 0, err
    assert again.read_text() == text
    t = read_buffers_csv(str(again))
    assert len(t.ids) == len(src_lines) - 1 and t.offset_column == 4


def test_json_output_holds_every_buffer_s_offset(tmp_path):
    out = tmp_path / "plan.json"
    code, stdout, err = run(str(write(tmp_path, TINY)), "--planner", "greedy", "-f", "json", "-o", str(out))
    assert code == 0, err
    doc = json.loads(out.read_text())
    assert doc["kind"] == "plan" and doc["arena"] == 6
    assert {b["id"]: b["offset"] for b in doc["offsets"]} == TINY_GREEDY
    # half-open [lower, upper) as in the CSV; the summary is the same without the offsets, and with
    # -o nothing is printed (as with every command's -o)
    assert [(b["lower"], b["upper"], b["size"]) for b in doc["offsets"]] == [(0, 2, 4), (1, 3, 2), (2, 4, 4), (3, 4, 0)]
    assert stdout == ""
    code, summary, err = run(str(write(tmp_path, TINY)), "--planner", "greedy", "-f", "json")
    assert json.loads(summary) == {k: v for k, v in doc.items() if k != "offsets"}


def test_output_to_stdout_puts_the_summary_on_stderr(tmp_path):
    code, stdout, err = run(str(write(tmp_path, TINY)), "--planner", "greedy", "-o", "-")
    assert code == 0
    assert offsets_of(stdout) == TINY_GREEDY
    assert "arena" in err


def test_extra_columns_are_copied_and_file_order_kept(tmp_path):
    src = write(tmp_path, "hint,id,lower,upper,size,note\n7,z,5,9,8,x y\n,y,0,5,8,\n3,x,4,6,1,\"q,r\"\n")
    out = tmp_path / "o.csv"
    code, _, err = run(str(src), "--planner", "greedy", "-o", str(out))
    assert code == 0, err
    rows = list(csv.reader(io.StringIO(out.read_text())))
    assert rows[0] == ["hint", "id", "lower", "upper", "size", "note", "offset"]
    assert [r[:6] for r in rows[1:]] == [["7", "z", "5", "9", "8", "x y"], ["", "y", "0", "5", "8", ""],
                                         ["3", "x", "4", "6", "1", "q,r"]]
    assert pairwise_errors(out.read_text()) == []


# ---- MiniMalloc's aliases ---------------------------------------------------------------------------
@pytest.mark.parametrize("header,rows", [
    ("buffer,start,upper,size", TINY.split("\n", 1)[1]),
    ("buffer_id,begin,upper,size", TINY.split("\n", 1)[1]),
    # `end` is inclusive: the last live step
    ("id,lower,end,size", "a,0,1,4\nb,1,2,2\nc,2,3,4\nd,3,3,0\n"),
    (" ID , Lower , Upper , Size ", TINY.split("\n", 1)[1]),
])
def test_aliases_give_the_same_plan(tmp_path, header, rows):
    src, out = write(tmp_path, header + "\n" + rows), tmp_path / "out.csv"
    code, stdout, err = run_csv_and_json(str(src), out, "--planner", "greedy")
    assert code == 0, err
    assert json.loads(stdout)["lower_bound"] == 6
    key = next(csv.reader(io.StringIO(header)))[0]
    got = {r[key].strip(): int(r["offset"]) for r in csv.DictReader(io.StringIO(out.read_text()))}
    assert got == TINY_GREEDY


def test_alignment_is_honoured(tmp_path):
    src = write(tmp_path, "id,lower,upper,size,alignment\na,0,2,3,4\nb,1,3,5,4\nc,2,4,1,\n")
    out = tmp_path / "o.csv"
    code, stdout, err = run_csv_and_json(str(src), out, "--planner", "greedy")
    assert code == 0, err
    doc = json.loads(stdout)
    assert doc["alignment"] == 4
    offs = offsets_of(out.read_text())
    assert offs["a"] % 4 == 0 and offs["b"] % 4 == 0
    assert pairwise_errors(out.read_text()) == []


def test_zero_size_buffers_get_offset_zero(tmp_path):
    src = write(tmp_path, "id,lower,upper,size\nz1,0,10,0\nbig,0,10,100\nz2,5,6,0\n")
    out = tmp_path / "o.csv"
    for planner in ("greedy", "naive", "bump", "wic", "firstfit"):
        code, _, err = run(str(src), "--planner", planner, "-o", str(out))
        assert code == 0, (planner, err)
        offs = offsets_of(out.read_text())
        assert offs["z1"] == 0 and offs["z2"] == 0, planner
        assert pairwise_errors(out.read_text()) == []


# ---- bad input: one line naming the file and the problem, exit 2, nothing written ------------------
BAD = {
    "missing_column": ("id,lower,size\na,0,4\n", "missing column upper"),
    "missing_columns": ("name,lower\na,0\n", "missing columns id, upper, size"),
    "non_integer_size": ("id,lower,upper,size\na,0,2,4\nb,1,3,4.5\n", "line 3: size '4.5' is not an integer"),
    "non_integer_lower": ("id,lower,upper,size\na,x,2,4\n", "line 2: lower 'x' is not an integer"),
    "negative_size": ("id,lower,upper,size\na,0,2,-4\n", "line 2: negative size -4"),
    "upper_equals_lower": ("id,lower,upper,size\na,0,2,4\nb,3,3,4\n", "line 3: upper 3 <= lower 3"),
    "upper_below_lower": ("id,lower,upper,size\na,5,2,4\n", "line 2: upper 2 <= lower 5"),
    "end_below_lower": ("id,lower,end,size\na,5,4,4\n", "line 2: end 4 is before lower 5"),
    "duplicate_id": ("id,lower,upper,size\na,0,2,4\nb,0,2,4\na,1,2,4\n",
                     "line 4: duplicate id 'a' (first on line 2)"),
    "empty_id": ("id,lower,upper,size\n,0,2,4\n", "line 2: empty id"),
    "wrong_field_count": ("id,lower,upper,size\na,0,2,4\nb,0,2\n", "line 3: 3 fields, the header has 4"),
    "empty_file": ("", "empty file"),
    "blank_file": ("\n  \n", "empty file"),
    "header_only": ("id,lower,upper,size\n", "no buffers"),
    "both_upper_and_end": ("id,lower,upper,end,size\na,0,2,1,4\n", "'upper' (exclusive) and 'end'"),
    "two_id_columns": ("id,buffer,lower,upper,size\na,a,0,2,4\n", "both give the buffer's id"),
    "bad_alignment": ("id,lower,upper,size,alignment\na,0,2,4,0\n", "line 2: alignment 0"),
}


def assert_one_line(code, stdout, err, path, match):
    lines = err.strip().splitlines()
    assert code == 2, (code, stdout, err)
    assert len(lines) == 1, err
    assert "Traceback" not in err + stdout
    assert str(path) in lines[0]
    assert match in lines[0], lines[0]


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_csv(tmp_path, case):
    text, match = BAD[case]
    src = write(tmp_path, text, f"{case}.csv")
    out = tmp_path / "out.csv"
    out.write_text("earlier\n")
    assert_one_line(*run(str(src), "-o", str(out)), src, match)
    assert out.read_text() == "earlier\n"
    assert sorted(os.listdir(tmp_path)) == sorted([f"{case}.csv", "out.csv"])  # no temporary left


def test_binary_file(tmp_path):
    src = tmp_path / "bin.csv"
    src.write_bytes(b"id,lower\xff\xfe\x00\x01")
    assert_one_line(*run(str(src)), src, "not a text CSV file")


def test_missing_file(tmp_path):
    src = tmp_path / "nope.csv"
    assert_one_line(*run(str(src)), src, "no such file")


def test_directory(tmp_path):
    d = tmp_path / "a_dir.csv"
    d.mkdir()
    assert_one_line(*run(str(d)), d, "is a directory")


def test_unknown_planner(tmp_path):
    code, stdout, err = run(str(write(tmp_path, TINY)), "--planner", "nosuch")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "unknown planner 'nosuch'" in err


def test_output_into_a_missing_folder(tmp_path):
    code, stdout, err = run(str(write(tmp_path, TINY)), "-o", str(tmp_path / "no" / "out.csv"))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "no such folder" in err


def test_invalid_plan_is_an_internal_error_and_writes_nothing(tmp_path, monkeypatch):
    from memplan_cli.planners import base
    from memplan_cli.planners.base import Plan

    base.get_planner("greedy")  # make sure the registry is filled
    monkeypatch.setitem(base._REGISTRY, "broken", lambda s, f, l, *, time_limit=None: Plan((0,) * len(s), 4, "broken"))
    out = tmp_path / "out.csv"
    code, stdout, err = run(str(write(tmp_path, TINY)), "--planner", "broken", "-o", str(out))
    assert code == 70 and "invalid plan" in err and "Traceback" not in err
    assert not out.exists()
