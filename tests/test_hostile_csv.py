"""`memplan plan` on hostile buffer CSVs: exit 0 with a verified plan or exit 2 with one line naming the
file; never an internal error. The issue's cases (a size of 2^80, an alignment of 2^62) plus hypothesis
over rows of arbitrary fields."""
from __future__ import annotations

import csv
import io

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memplan_cli import api
from memplan_cli.cli import main
from memplan_cli.errors import MemplanError


def run(args):
    r = CliRunner().invoke(main, args, catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


@pytest.mark.parametrize("rows, words", [
    ("a,0,2,%d\nb,1,3,4\n" % 2**80, "out of range"),
    ("a,0,2,%d\nb,1,3,4\n" % 2**62, "out of range"),
    ("a,0,2,%s\n" % ("9" * 5001), "5001 digits"),
    ("a,-%d,2,8\nb,1,3,4\n" % 2**70, "out of range"),
    ("a,0,%d,8\n" % 2**63, "out of range"),
    ("".join(f"b{i},0,2,{2**48}\n" for i in range(16_385)), "in all"),
])
def test_sizes_and_steps_beyond_int64_planning_are_refused(tmp_path, rows, words):
    p = tmp_path / "b.csv"
    p.write_text("id,lower,upper,size\n" + rows)
    for planner in ("greedy", "naive", "best"):
        code, out, err = run(["plan", str(p), "--planner", planner])
        assert code == 2 and len(err.strip().splitlines()) == 1 and words in err and str(p) in err, err


@pytest.mark.parametrize("alignments, words", [((2**62, 1), "out of range"),
                                                ((2**47 + 1, 2**47 - 1), "least common multiple")])
def test_alignments_beyond_planning_are_refused(tmp_path, alignments, words):
    p = tmp_path / "b.csv"
    p.write_text("id,lower,upper,size,alignment\n" + "".join(f"b{i},0,2,8,{a}\n" for i, a in enumerate(alignments)))
    code, out, err = run(["plan", str(p), "--planner", "greedy"])
    assert code == 2 and len(err.strip().splitlines()) == 1 and words in err, err


def test_the_api_refuses_the_same_sizes():
    with pytest.raises(MemplanError, match="at most"):
        api.plan([(2**80, 0, 1)])
    with pytest.raises(MemplanError, match="in all"):
        api.plan([(2**48, 0, 1)] * 16_385)


field = st.one_of(st.integers(-2**64, 2**64).map(str), st.integers(-3, 40).map(str), st.text(max_size=6),
                  st.sampled_from(["", " ", "1e3", "0x10", "NaN", "inf", "+5", "-0", "٣", "1_000", '"', "\x00"]))
header = st.permutations(["id", "lower", "upper", "size"]).map(list) | st.lists(
    st.sampled_from(["id", "lower", "upper", "end", "size", "alignment", "offset", "start", "x", ""]),
    min_size=1, max_size=6)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(head=header, rows=st.lists(st.lists(field, min_size=0, max_size=7), max_size=6),
       planner=st.sampled_from(["greedy", "best", "naive"]))
def test_any_rows(tmp_path, head, rows, planner):
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(head)
    w.writerows(rows)
    p = tmp_path / "h.csv"
    p.write_text(out.getvalue())
    code, stdout, err = run(["plan", str(p), "--planner", planner, "--rounds", "1"])
    assert code in (0, 2), err
    assert "internal error" not in err and "Traceback" not in err, err
    if code == 2:
        assert len(err.strip().splitlines()) == 1 and str(p) in err, err


@pytest.mark.parametrize("encoding, bom", [("utf-16-le", b"\xff\xfe"), ("utf-16-be", b"\xfe\xff")])
def test_a_utf16_csv_is_named_as_such(tmp_path, encoding, bom):
    # a spreadsheet's "Unicode text" export: it said "byte 0 is not UTF-8"
    p = tmp_path / "b.csv"
    p.write_bytes(bom + "id,lower,upper,size\na,0,2,8\n".encode(encoding))
    r = CliRunner().invoke(main, ["plan", str(p)])
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1
    assert f"{p}: a UTF-16 text file" in r.stderr and "save it as UTF-8" in r.stderr, r.stderr
