"""Every command's table view fits 80 columns (the tested minimum; README: "every table fits an
80-column terminal"): on the sample models and on a 300-op model with long op names, no line is
wider than 80 characters and no cell is cut (rich's "…"), so no number is shown as one digit and
an ellipsis and no category name is shortened."""
from __future__ import annotations

import json
import pathlib
import re

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from memplan_cli.cli import main

ROOT = pathlib.Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_models"
WIDTH = 80


def cli(*args, columns: int | None = WIDTH):
    env = {"NO_COLOR": "1", "COLUMNS": None if columns is None else str(columns)}
    return CliRunner().invoke(main, [str(a) for a in args], env=env)


def check_fits(text: str, what: str) -> None:
    assert text.strip(), f"{what}: printed nothing"
    for line in text.split("\n"):
        assert len(line) <= WIDTH, f"{what}: a line of {len(line)} characters:\n{line}\n\n{text}"
    assert "…" not in text, f"{what}: a cut cell:\n{text}"


def long_chain(path: pathlib.Path, blocks: int = 150, width: int = 16) -> str:
    """MatMul, Add, Relu repeated `blocks` times (450 ONNX nodes; memplan fuses MatMul + Add, so 300
    ops), named as a transformer export names its ops (/encoder/layer.N/...), batch 2."""
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    x = "input"
    for i in range(blocks):
        scope = f"/encoder/layer.{i}/attention/output/dense"
        w, b = f"encoder.layer.{i}.attention.output.dense.weight", f"encoder.layer.{i}.attention.output.dense.bias"
        inits += [numpy_helper.from_array(rng.standard_normal((width, width)).astype(np.float32), w),
                  numpy_helper.from_array(rng.standard_normal(width).astype(np.float32), b)]
        nodes += [helper.make_node("MatMul", [x, w], [f"{scope}/MatMul_output_0"], name=f"{scope}/MatMul"),
                  helper.make_node("Add", [f"{scope}/MatMul_output_0", b], [f"{scope}/Add_output_0"],
                                   name=f"{scope}/Add"),
                  helper.make_node("Relu", [f"{scope}/Add_output_0"], [f"{scope}/Relu_output_0"],
                                   name=f"{scope}/Relu")]
        x = f"{scope}/Relu_output_0"
    nodes[-1].output[0] = "logits"
    graph = helper.make_graph(nodes, "chain300", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [2, width])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [2, width])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    out = path / "chain300.onnx"
    onnx.save(model, str(out))
    return str(out)


@pytest.fixture(scope="module")
def chain300(tmp_path_factory):
    return long_chain(tmp_path_factory.mktemp("wide"))


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    out = tmp_path_factory.mktemp("base") / "base.json"
    r = cli("analyze", SAMPLES / "mnist.circle", "-b", "32", "-O", "adam", "-f", "json", "-o", out)
    assert r.exit_code == 0, r.output
    return out


SAMPLE_FILES = sorted(p.name for p in SAMPLES.iterdir() if p.suffix in (".circle", ".tflite", ".onnx"))


@pytest.mark.parametrize("name", SAMPLE_FILES)
def test_analyze_and_its_views_fit_80_columns_on_the_samples(name):
    model = SAMPLES / name
    for args in (("-b", "4", "-O", "adam"), ("-b", "4", "-O", "adam", "--by-layer", "-v"), ("-p", "onert", "-b", "2")):
        r = cli("analyze", model, *args)
        assert r.exit_code == 0, r.output
        check_fits(r.stdout, f"analyze {name} {' '.join(args)}")


@pytest.mark.parametrize("name", ["mnist.circle", "mnist.onnx", "mobilenetv2.tflite"])
def test_compare_sweep_verify_inspect_fit_80_columns_on_the_samples(name):
    model = SAMPLES / name
    runs = [("compare", model, "-b", "2"), ("compare", model, "-b", "2", "-v"),
            ("sweep", model, "-b", "1,1000", "-p", "memplan", "-p", "onert", "-p", "nntrainer", "-p", "singa",
             "-p", "torch"),
            ("sweep", model, "--budget", "64MiB"),
            ("inspect", model)]
    if name.startswith("mnist"):
        runs.append(("verify", model, "-b", "2"))
    for args in runs:
        r = cli(*args)
        assert r.exit_code in (0, 3), r.output
        check_fits(r.stdout, " ".join(map(str, args)))


def test_fit_diff_and_plan_fit_80_columns(baseline, tmp_path):
    mnist = SAMPLES / "mnist.circle"
    r = cli("fit", mnist, "-b", "32", "-O", "adam", "--budget", "12MiB")
    assert r.exit_code == 0, r.output
    check_fits(r.stdout, "fit")
    assert "memplan analyze" in r.stdout
    r = cli("diff", "--baseline", baseline, mnist, "-b", "40", "--fail-on", "total:+5%")
    assert r.exit_code == 1
    check_fits(r.stdout, "diff")
    r = cli("diff", "--baseline", baseline, mnist, "-b", "40", "-v")
    check_fits(r.stdout, "diff -v")
    csv = tmp_path / "b.csv"
    csv.write_text("id,lower,upper,size\n" + "".join(f"{i},{i},{i + 3},{1000 * (i + 1)}\n" for i in range(40)))
    for args in ((), ("--time-limit", "5"), ("-v",)):
        r = cli("plan", csv, *args)
        assert r.exit_code == 0, r.output
        check_fits(r.stdout, f"plan {' '.join(args)}")


def test_every_view_fits_80_columns_on_a_300_op_model(chain300, tmp_path):
    assert "300 ops" in cli("inspect", chain300, "-q").stdout
    base = tmp_path / "base.json"
    assert cli("analyze", chain300, "-O", "adam", "-f", "json", "-o", base).exit_code == 0
    runs = [("analyze", chain300, "-O", "adam", "--by-layer", "-v"), ("compare", chain300, "-v"),
            ("sweep", chain300, "-b", "1,2,4000", "-p", "memplan", "-p", "onert", "-p", "singa", "-p", "torch"),
            ("diff", "--baseline", base, chain300, "-b", "3"), ("verify", chain300), ("inspect", chain300),
            ("fit", chain300, "-O", "adam", "--budget", "100KiB")]
    for args in runs:
        r = cli(*args)
        assert r.exit_code in (0, 3), r.output
        check_fits(r.stdout, " ".join(map(str, args[:1])))


def test_wide_terminals_get_the_exact_bytes_back():
    r = cli("analyze", SAMPLES / "mnist.circle", "-b", "32", "-O", "adam", columns=200)
    doc = json.loads(cli("analyze", SAMPLES / "mnist.circle", "-b", "32", "-O", "adam", "-f", "json").stdout)
    assert f"{doc['categories']['non-const']['naive']:,d}" in r.stdout
    narrow = cli("analyze", SAMPLES / "mnist.circle", "-b", "32", "-O", "adam").stdout
    need = int(re.search(r"COLUMNS=(\d+)", narrow).group(1))
    assert f"{doc['categories']['non-const']['naive']:,d}" in cli(
        "analyze", SAMPLES / "mnist.circle", "-b", "32", "-O", "adam", columns=need).stdout


def test_the_width_never_depends_on_the_terminal_when_writing_a_file(tmp_path, monkeypatch):
    out = tmp_path / "r.txt"
    r = cli("analyze", SAMPLES / "mnist.circle", "-o", out, columns=None)
    assert r.exit_code == 0
    assert max(len(line) for line in out.read_text().split("\n")) <= WIDTH
