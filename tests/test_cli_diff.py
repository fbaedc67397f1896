"""`memplan diff --baseline`: pass, fail and bad input, against a model or another report."""
import json
import pathlib

import pytest
from click.testing import CliRunner

from memplan_cli.cli import main
from tests.report.conftest import fake_profiles  # noqa: F401  (fixture)

ROOT = pathlib.Path(__file__).parents[1]
MNIST = str(ROOT / "sample_models" / "mnist.circle")


def cli(*args):
    return CliRunner().invoke(main, list(args), env={"NO_COLOR": None})


def baseline(tmp_path, *flags, name="base.json"):
    path = tmp_path / name
    r = cli("analyze", MNIST, "-f", "json", "-o", str(path), *flags)
    assert r.exit_code == 0, r.output
    return path


def test_same_model_same_configuration_passes_with_zero_deltas(fake_profiles, tmp_path):
    base = baseline(tmp_path, "-b", "4", "-O", "adam")
    r = cli("diff", "--baseline", str(base), MNIST, "--fail-on", "total:+0%")
    assert r.exit_code == 0, r.output
    assert "status: ok" in r.stdout and "threshold total:+0%: pass" in r.stdout
    assert "note:" not in r.stdout  # the baseline's batch 4 and adam were reused


def test_growth_over_a_threshold_is_a_regression_exit_1(fake_profiles, tmp_path):
    base = baseline(tmp_path, "-b", "4")
    r = cli("diff", "--baseline", str(base), MNIST, "-b", "8", "--fail-on", "total:+5%",
            "--fail-on", "trainable:+1MiB")
    assert r.exit_code == 1, r.output
    assert "threshold total:+5%: FAIL" in r.stdout and "threshold trainable:+1MiB: pass" in r.stdout
    assert "note: batch_size differs: 4 vs 8" in r.stdout


def test_a_setting_left_to_its_default_is_named_in_words_not_none(fake_profiles, tmp_path):
    base = baseline(tmp_path)  # no -b: the report's batch_size is null (the model's own)
    r = cli("diff", "--baseline", str(base), MNIST, "-b", "8")
    assert r.exit_code == 0, r.output
    assert "note: batch_size differs: not set (the default) vs 8" in r.stdout
    assert "None" not in r.stdout


def test_growth_within_a_size_threshold_passes(fake_profiles, tmp_path):
    base = baseline(tmp_path, "-b", "4")
    new = baseline(tmp_path, "-b", "5", name="new.json")
    old_total = json.loads(base.read_text())["totals"]["planned"]
    new_total = json.loads(new.read_text())["totals"]["planned"]
    grow = new_total - old_total
    assert grow > 0
    assert cli("diff", "--baseline", str(base), str(new), "--fail-on", f"planned:+{grow}").exit_code == 0
    assert cli("diff", "--baseline", str(base), str(new), "--fail-on", f"planned:+{grow - 1}").exit_code == 1


def test_json_diff_of_two_reports(fake_profiles, tmp_path):
    base = baseline(tmp_path, "-b", "2")
    new = baseline(tmp_path, "-b", "3", name="new.json")
    r = cli("diff", "--baseline", str(base), str(new), "-f", "json", "--fail-on", "back-prop:+1%")
    assert r.exit_code == 1
    doc = json.loads(r.stdout)
    old_doc, new_doc = json.loads(base.read_text()), json.loads(new.read_text())
    rows = {(x["section"], x["name"]): x for x in doc["rows"]}
    planned = rows[("total", "planned")]
    assert (planned["old"], planned["new"]) == (old_doc["totals"]["planned"], new_doc["totals"]["planned"])
    assert planned["delta"] == planned["new"] - planned["old"]
    assert rows[("category", "back-prop")]["status"] == "regression"
    bp = rows[("category", "back-prop")]
    assert doc["status"] == "regression" and doc["thresholds"] == [
        {"threshold": "back-prop:+1%", "section": "category", "name": "back-prop", "old": bp["old"],
         "new": bp["new"], "passed": False}]
    # the reason reaches the log although stdout is JSON: one line per exceeded threshold
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "back-prop" in lines[0] and "back-prop:+1%" in lines[0]
    assert f"{bp['old']:,d} B" in lines[0] and f"{bp['new']:,d} B" in lines[0]


def test_a_report_saved_with_a_byte_order_mark_is_a_report_on_either_side(fake_profiles, tmp_path):
    # read_report reads UTF-8 with a BOM (Windows editors, PowerShell's Out-File); as TARGET such a
    # report was taken for a model: "not a circle, tflite or ONNX model"
    base = baseline(tmp_path, "-b", "2")
    new = baseline(tmp_path, "-b", "3", name="new.json")
    bom = tmp_path / "bom.json"
    bom.write_bytes(b"\xef\xbb\xbf" + new.read_bytes())
    plain = cli("diff", "--baseline", str(base), str(new), "-f", "json")
    r = cli("diff", "--baseline", str(base), str(bom), "-f", "json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["rows"] == json.loads(plain.stdout)["rows"]
    r = cli("diff", "--baseline", str(bom), str(bom), "-f", "json")
    assert r.exit_code == 0, r.output
    assert all(x["delta"] == 0 for x in json.loads(r.stdout)["rows"])


@pytest.mark.parametrize("encoding, bom", [("utf-16-le", b"\xff\xfe"), ("utf-16-be", b"\xfe\xff")])
def test_a_report_a_shell_re_encoded_as_utf16_says_so_on_either_side(fake_profiles, tmp_path, encoding, bom):
    # Windows PowerShell 5's `memplan analyze ... -f json > new.json` writes UTF-16: as TARGET it was
    # "not a circle, tflite or ONNX model", as the baseline "not UTF-8 text"
    base = baseline(tmp_path, "-b", "2")
    new = baseline(tmp_path, "-b", "3", name="new.json")
    wide = tmp_path / "wide.json"
    wide.write_bytes(bom + new.read_text(encoding="utf-8").encode(encoding))
    for b, t in ((base, wide), (wide, new)):
        r = cli("diff", "--baseline", str(b), str(t))
        assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1, r.output
        assert f"{wide}: " in r.stderr and "UTF-16 text" in r.stderr and "-o FILE" in r.stderr, r.stderr


def test_the_reason_for_a_failure_reaches_stderr_when_the_report_goes_to_a_file(fake_profiles, tmp_path):
    base = baseline(tmp_path, "-b", "2")
    new = baseline(tmp_path, "-b", "3", name="new.json")
    out = tmp_path / "diff.json"
    r = cli("diff", "--baseline", str(base), str(new), "-f", "json", "-o", str(out), "--fail-on", "total:+1%",
            "--fail-on", "naive:+1%", "--fail-on", "gradient:+1000%")
    assert r.exit_code == 1 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert [ln.split(" over the limit ")[1] for ln in lines] == ["total:+1%", "naive:+1%"]
    assert json.loads(out.read_text())["status"] == "regression"


@pytest.mark.parametrize("key", ["opt variable", "Opt Variable", "opt-variable", "opt_variable", "total planned"])
def test_the_table_s_labels_are_keys(fake_profiles, tmp_path, key):
    base = baseline(tmp_path)
    assert cli("diff", "--baseline", str(base), str(base), "--fail-on", f"{key}:+0%").exit_code == 0


def test_an_unknown_key_is_named_as_such(fake_profiles, tmp_path):
    base = baseline(tmp_path)
    r = cli("diff", "--baseline", str(base), str(base), "--fail-on", "opt varable:+1%")
    assert r.exit_code == 2 and "unknown key 'opt varable'" in r.stderr


def test_bad_input_exits_2(fake_profiles, tmp_path):
    base = baseline(tmp_path)
    broken = tmp_path / "broken.json"
    broken.write_text('{"schema_version": 1,')
    r = cli("diff", "--baseline", str(broken), MNIST)
    assert r.exit_code == 2 and "broken.json: not valid JSON" in r.stderr
    r = cli("diff", "--baseline", str(base), MNIST, "--fail-on", "total:+5 percent")
    assert r.exit_code == 2 and "--fail-on" in r.stderr
    r = cli("diff", "--baseline", str(base), MNIST, "--fail-on", "nonsense:+1%")
    assert r.exit_code == 2 and "unknown key 'nonsense'" in r.stderr
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({"schema_version": 1, "hello": 1}))
    r = cli("diff", "--baseline", str(wrong), MNIST)
    assert r.exit_code == 2 and "wrong.json: not a memplan report" in r.stderr
    r = cli("diff", "--baseline", str(tmp_path / "none.json"), MNIST)
    assert r.exit_code == 2 and "no such file" in r.stderr
    r = cli("diff", MNIST)
    assert r.exit_code == 2 and "--baseline" in r.stderr


def test_quiet_diff_is_one_line(fake_profiles, tmp_path):
    base = baseline(tmp_path, "-b", "4")
    r = cli("diff", "--baseline", str(base), MNIST, "-b", "8", "--fail-on", "total:+5%", "-q")
    assert r.exit_code == 1 and r.stdout.count("\n") == 1 and r.stdout.startswith("regression: planned ")


def test_a_model_target_is_analysed_with_the_baseline_profile_and_options(fake_profiles, tmp_path):
    from tests.report.fake_profiles import FakeOnert

    base = baseline(tmp_path, "-p", "onert", "--planner", "bump", "--onert-threads", "3", "-O", "adam")
    FakeOnert.last_options = {}
    r = cli("diff", "--baseline", str(base), MNIST, "-f", "json", "--fail-on", "total:+0%")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["target"]["profile"] == "onert" and doc["notes"] == []
    assert FakeOnert.last_options == {"planner": "bump", "threads": 3, "simd_width": 4}
    assert all(row["delta"] == 0 for row in doc["rows"])


ONNX_MNIST = str(ROOT / "sample_models" / "mnist.onnx")


@pytest.mark.parametrize("flags", [("--train", "ops:Gemm", "--freeze", "ops:#1"),
                                   ("--train", "biases"),
                                   ("--lora", "4", "--lora-targets", "Gemm")],
                         ids=["train-freeze", "biases", "lora"])
def test_a_model_target_is_analysed_with_the_baseline_s_fine_tuning(tmp_path, flags):
    """What trains is part of the configuration: a fine-tuning baseline is compared with the same
    fine-tuning of the target, not with full training (which plans more and would fail the gate)."""
    path = tmp_path / "base.json"
    r = cli("analyze", ONNX_MNIST, "-b", "2", "-f", "json", "-o", str(path), *flags)
    assert r.exit_code == 0, r.output
    full = cli("analyze", ONNX_MNIST, "-b", "2", "-f", "json")
    assert json.loads(full.stdout)["totals"]["planned"] != json.loads(path.read_text())["totals"]["planned"]
    r = cli("diff", "--baseline", str(path), ONNX_MNIST, "-f", "json", "--fail-on", "total:+0%")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["notes"] == [] and all(row["delta"] == 0 for row in doc["rows"])


def test_a_flag_given_to_diff_wins_over_the_baseline_s_fine_tuning(tmp_path):
    path = tmp_path / "base.json"
    assert cli("analyze", ONNX_MNIST, "-b", "2", "-f", "json", "-o", str(path), "--train", "biases").exit_code == 0
    r = cli("diff", "--baseline", str(path), ONNX_MNIST, "-f", "json", "--train", "ops:Gemm")
    assert r.exit_code == 0, r.output
    assert any(n.startswith("train differs") for n in json.loads(r.stdout)["notes"])


@pytest.mark.parametrize("key,value", [("train", "biases"), ("train", [3]), ("lora", {"rank": "4"}),
                                       ("lora", {"rank": 0}), ("freeze", ["nonsense-spec"])])
def test_a_baseline_s_bad_fine_tuning_is_refused_in_one_line(tmp_path, key, value):
    path = tmp_path / "base.json"
    assert cli("analyze", ONNX_MNIST, "-b", "2", "-f", "json", "-o", str(path)).exit_code == 0
    doc = json.loads(path.read_text())
    doc["config"][key] = value
    path.write_text(json.dumps(doc))
    r = cli("diff", "--baseline", str(path), ONNX_MNIST)
    assert r.exit_code == 2, r.output
    assert str(path) in r.output and "Traceback" not in r.output and r.output.count("\n") == 1
