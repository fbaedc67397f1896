"""The nntrainer and singa profiles refuse ops they do not model (one line, exit 2 under `--profile`;
n/a with the reason in `memplan compare`), instead of laying them out with default rules; a registry op
that declares its facts for a profile (`OpDef.profiles`) is accepted by it."""
from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from onnx import helper

from memplan_cli import ops
from memplan_cli.cli import main
from memplan_cli.config import TrainConfig
from memplan_cli.errors import UnsupportedOpError
from memplan_cli.loaders import load_model
from memplan_cli.profiles import get_profile
from devtools.modelgen import ModelBuilder
from tests.ops.gradcheck import onnx_model, save


def _transpose_model():
    """Gemm -> Transpose -> Gemm: a registry op (Transpose) neither runtime profile models."""
    nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["a"], transB=1),
             helper.make_node("Transpose", ["a"], ["t"], perm=[1, 0]),
             helper.make_node("Gemm", ["t", "w2", "b2"], ["y"], transB=1)]
    inits = {"w1": np.ones((4, 3), np.float32), "b1": np.ones(4, np.float32),
             "w2": np.ones((5, 2), np.float32), "b2": np.ones(5, np.float32)}
    return onnx_model(nodes, [("x", (2, 3))], [("y", (4, 5))], inits)


def run(*args):
    r = CliRunner().invoke(main, list(args), catch_exceptions=False, env={"NO_COLOR": "1"})
    return r.exit_code, r.stdout, r.stderr


@pytest.mark.parametrize("profile", ["nntrainer", "singa"])
def test_unknown_op_one_line_exit_2(tmp_path, profile):
    p = save(tmp_path, _transpose_model())
    code, out, err = run("analyze", p, "--profile", profile)
    lines = err.strip().splitlines()
    assert code == 2 and not out and len(lines) == 1, (code, out, err)
    assert p in lines[0] and f"{profile} profile: op #1 Transpose (Transpose) has no" in lines[0]


def test_compare_shows_na_with_the_reasons(tmp_path):
    p = save(tmp_path, _transpose_model())
    code, out, err = run("compare", p, "-f", "json")
    assert code == 0, err
    cols = json.loads(out)["columns"]
    for prof in ("nntrainer", "singa", "onert"):
        assert cols[prof]["available"] is False and "Transpose" in cols[prof]["reason"], cols[prof]
    assert cols["memplan"]["available"] is True
    code, out, err = run("compare", p)
    assert code == 0 and "nntrainer: n/a (nntrainer profile: op #1 Transpose" in out.replace("\n", " ")


@pytest.mark.parametrize("profile,facts", [("nntrainer", {"layer": "permute"}),
                                           ("singa", {"operator": "Transpose"})])
def test_registry_facts_make_an_op_known(tmp_path, monkeypatch, profile, facts):
    g = load_model(save(tmp_path, _transpose_model()))
    prof = get_profile(profile)
    with pytest.raises(UnsupportedOpError):
        prof.build(g, TrainConfig())
    monkeypatch.setitem(ops.get("Transpose").profiles, profile, facts)
    assert prof.build(g, TrainConfig()).buffers


def test_nntrainer_refuses_grouped_conv_and_fused_relu_n1_to_1(tmp_path):
    from tests.onert.test_refusals import conv, head

    m = ModelBuilder()
    x = m.input([1, 6, 6, 4])
    g = load_model(head(m, conv(m, x, 4, 3, groups=2)).save(str(tmp_path / "g.circle")))
    with pytest.raises(UnsupportedOpError, match="grouped \\(2 groups\\) convolution: nntrainer 0.6.0 cannot train it"):
        get_profile("nntrainer").build(g, TrainConfig())
    m = ModelBuilder()
    x = m.input([1, 8])
    m.output(m.fully_connected(m.fully_connected(x, 6, activation="RELU_N1_TO_1"), 3))
    g = load_model(m.save(str(tmp_path / "r.circle")))
    with pytest.raises(UnsupportedOpError, match="fused activation RELU_N1_TO_1 nntrainer does not have"):
        get_profile("nntrainer").build(g, TrainConfig())
    assert get_profile("singa").build(g, TrainConfig()).buffers  # SINGA: Clip(-1, 1)
