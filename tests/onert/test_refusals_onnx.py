"""ONNX models the onert profile refuses: attributes circle cannot write (1-D / 3-D windows, explicit
pads other than SAME, ceil_mode, pool dilation, reflect padding, Softmax over another axis) and what
onert 0.1.0 cannot train in any format (a Conv without bias, a grouped Conv). onert cannot load ONNX,
so these go through the CLI only: one line and exit 2 under `--profile onert`, `onert: n/a (reason)`
in the default report, and an n/a onert column with the reason in `memplan compare`."""
from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from onnx import helper

from memplan_cli.cli import main
from tests.ops.gradcheck import onnx_model, save

RNG = np.random.default_rng(0)


def w(*shape):
    return (RNG.random(shape, dtype=np.float32) - 0.5) * 0.2


def net(in_shape, op_nodes, mid_shape, inits, opset=17):
    """input -> the nodes under test (reading "x", writing "m") -> Flatten -> Gemm(3) -> output."""
    flat = int(np.prod(mid_shape[1:]))
    nodes = op_nodes + [helper.make_node("Flatten", ["m"], ["f"], axis=1),
                        helper.make_node("Gemm", ["f", "fw", "fb"], ["y"], transB=1)]
    inits = {**inits, "fw": w(3, flat), "fb": w(3)}
    return onnx_model(nodes, [("x", in_shape)], [("y", [1, 3])], inits, opset=opset)


def conv_then(node, c_in=3, size=8):
    """A 1x1 Conv with bias first (so the op under test has a trained op before it)."""
    return [helper.make_node("Conv", ["x", "cw", "cb"], ["c"], kernel_shape=[1, 1]), node], \
        {"cw": w(c_in, c_in, 1, 1), "cb": w(c_in)}


def _conv1d():
    return net([1, 3, 8], [helper.make_node("Conv", ["x", "k", "b"], ["m"], kernel_shape=[3], pads=[1, 1])],
               [1, 4, 8], {"k": w(4, 3, 3), "b": w(4)})


def _conv3d():
    return net([1, 2, 4, 4, 4], [helper.make_node("Conv", ["x", "k", "b"], ["m"], kernel_shape=[3, 3, 3],
                                                  pads=[1] * 6)], [1, 2, 4, 4, 4], {"k": w(2, 2, 3, 3, 3), "b": w(2)})


def _conv_explicit_pads():
    nodes, inits = conv_then(helper.make_node("Conv", ["c", "k", "b"], ["m"], kernel_shape=[3, 3], strides=[2, 2],
                                              pads=[1, 1, 1, 1]))
    return net([1, 3, 8, 8], nodes, [1, 4, 4, 4], {**inits, "k": w(4, 3, 3, 3), "b": w(4)})


def _conv_no_bias():
    nodes, inits = conv_then(helper.make_node("Conv", ["c", "k"], ["m"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]))
    return net([1, 3, 8, 8], nodes, [1, 4, 8, 8], {**inits, "k": w(4, 3, 3, 3)})


def _conv_grouped():
    nodes, inits = conv_then(helper.make_node("Conv", ["c", "k", "b"], ["m"], kernel_shape=[3, 3], group=2,
                                              pads=[1, 1, 1, 1]), c_in=4)
    return net([1, 4, 8, 8], nodes, [1, 4, 8, 8], {**inits, "k": w(4, 2, 3, 3), "b": w(4)})


def _maxpool_ceil():
    nodes, inits = conv_then(helper.make_node("MaxPool", ["c"], ["m"], kernel_shape=[2, 2], strides=[2, 2],
                                              ceil_mode=1), size=7)
    return net([1, 3, 7, 7], nodes, [1, 3, 4, 4], inits)


def _maxpool_dilated():
    nodes, inits = conv_then(helper.make_node("MaxPool", ["c"], ["m"], kernel_shape=[2, 2], dilations=[2, 2]))
    return net([1, 3, 8, 8], nodes, [1, 3, 6, 6], inits)


def _maxpool_1d():
    return net([1, 3, 8], [helper.make_node("MaxPool", ["x"], ["m"], kernel_shape=[2], strides=[2])], [1, 3, 4], {})


def _pad_reflect():
    nodes, inits = conv_then(helper.make_node("Pad", ["c", "p"], ["m"], mode="reflect"))
    return net([1, 3, 8, 8], nodes, [1, 3, 10, 10], {**inits, "p": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64)})


def _softmax_channels():
    nodes, inits = conv_then(helper.make_node("Softmax", ["c"], ["m"], axis=1))
    return net([1, 3, 8, 8], nodes, [1, 3, 8, 8], inits)


# model -> words of the reason
CASES = {
    "conv1d": (_conv1d, "over 1 spatial dimension"),
    "conv3d": (_conv3d, "over 3 spatial dimension"),
    "conv_explicit_pads": (_conv_explicit_pads, "explicit pads (1, 1, 1, 1)"),
    "conv_no_bias": (_conv_no_bias, "Conv2D without a bias input"),
    "conv_grouped": (_conv_grouped, "grouped Conv2D (2 groups)"),
    "maxpool_ceil": (_maxpool_ceil, "ceil_mode"),
    "maxpool_dilated": (_maxpool_dilated, "dilation"),
    "maxpool_1d": (_maxpool_1d, "over 1 spatial dimension"),
    "pad_reflect": (_pad_reflect, "Pad in reflect mode"),
    "softmax_channels": (_softmax_channels, "Softmax over axes (1,) of a rank-4 tensor"),
}


def run(*args):
    r = CliRunner().invoke(main, list(args), catch_exceptions=False, env={"NO_COLOR": "1"})
    return r.exit_code, r.stdout, r.stderr


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("onnx_refused")
    return {name: save(d, fn(), f"{name}.onnx") for name, (fn, _) in CASES.items()}


@pytest.mark.parametrize("name", sorted(CASES))
def test_onert_profile_one_line_exit_2(models, name):
    code, out, err = run("analyze", models[name], "--profile", "onert")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and not out, (code, out, err)
    assert models[name] in lines[0] and "onert cannot train op #" in lines[0] and CASES[name][1] in lines[0], lines


@pytest.mark.parametrize("name", sorted(CASES))
def test_compare_shows_onert_na_with_the_reason(models, name):
    code, out, err = run("compare", models[name], "-f", "json")
    assert code == 0, err
    doc = json.loads(out)
    col = doc["columns"]["onert"]
    assert col["available"] is False and CASES[name][1] in col["reason"], col
