from click.testing import CliRunner

from memplan_cli.cli import main
from devtools.traininfo_write import add_training_metadata
from tests.loaders import fbmodels as fb


def test_inspect_lists_ops_operands_values_and_metadata(tmp_path):
    data = add_training_metadata(fb.tiny_cnn("circle"), optimizer="adam", learning_rate=0.001, trainable=[3, 4])
    p = fb.write(tmp_path, "m.circle", data)
    r = CliRunner().invoke(main, ["inspect", p, "-b", "4"], env={"COLUMNS": "300"})  # one line each
    assert r.exit_code == 0, r.output
    out = r.stdout
    assert "circle, 5 ops, 11 operands, 762 float parameters" in out
    assert "batch size 4 (the file has 1)" in out
    assert "optimizer=adam learning_rate=0.001 " in out and "trainable=[3, 4]" in out
    assert "Conv2D           (%0, %1, %2) -> (%3) [CONV_2D] activation=RELU" in out
    assert "[4, 8, 8, 4]" in out and "shape = [1, 64]" in out


def test_inspect_never_says_parameters_by_none():
    import pathlib

    onnx_sample = pathlib.Path(__file__).parents[2] / "sample_models" / "mnist.onnx"
    out = CliRunner().invoke(main, ["inspect", str(onnx_sample)], env={"COLUMNS": "300"}).stdout
    assert "parameters by none" not in out
    assert "parameters by weight slots (no naming rule for producer 'memplan sample_models/generate.py')" in out


def test_inspect_takes_the_report_flags(tmp_path):
    import json
    import pathlib

    model = str(pathlib.Path(__file__).parents[2] / "sample_models" / "mnist.circle")
    quiet = CliRunner().invoke(main, ["inspect", model, "-q"]).stdout
    assert len(quiet.strip().splitlines()) <= 2 and "10 ops" in quiet  # one line, wrapped at 80 columns
    assert CliRunner().invoke(main, ["inspect", model, "-qq"]).stdout == ""
    out = tmp_path / "m.json"
    r = CliRunner().invoke(main, ["inspect", model, "-f", "json", "-o", str(out)])
    assert r.exit_code == 0 and r.stdout == ""
    doc = json.loads(out.read_text())
    assert doc["kind"] == "inspect" and len(doc["operations"]) == 10
    assert "-v" in CliRunner().invoke(main, ["inspect", "--help"]).stdout
