"""Max/average pooling 1/2/3-D from ONNX (strides, dilation, asymmetric pads, ceil_mode,
count_include_pad) and GlobalMaxPool: gradients by finite differences, verify, and refusals."""
import numpy as np
import pytest
from click.testing import CliRunner
from onnx import helper

from memplan_cli.cli import main
from memplan_cli.loaders import load_model
from tests.ops.gradcheck import check_gradients, check_verify, onnx_model, save


def _model(op_type, x_shape, y_shape, outputs=("y",), **attrs):
    # x -> Add(p) -> Pool -> y: p's gradient flows through the pool's input gradient
    nodes = [helper.make_node("Add", ["x", "p"], ["a"]), helper.make_node(op_type, ["a"], list(outputs), **attrs)]
    rng = np.random.default_rng(0)
    # distinct values: no ties for a max to break
    inits = {"p": (rng.permutation(int(np.prod(x_shape[1:]))).reshape(x_shape[1:]) / 7).astype(np.float32)}
    return onnx_model(nodes, [("x", x_shape)], [("y", y_shape)], inits)


CASES = {
    "max1d_dilated_padded": ("MaxPool", (2, 3, 9), (2, 3, 4),
                             dict(kernel_shape=[3], strides=[2], dilations=[2], pads=[1, 1])),
    "max2d_ceil": ("MaxPool", (1, 2, 6, 5), (1, 2, 3, 3), dict(kernel_shape=[3, 2], strides=[2, 2], ceil_mode=1)),
    "max3d_padded": ("MaxPool", (1, 2, 4, 5, 4), (1, 2, 2, 3, 2),
                     dict(kernel_shape=[2, 3, 2], strides=[2, 2, 2], pads=[1, 1, 0, 0, 1, 1])),
    "avg1d_include_pad": ("AveragePool", (2, 2, 7), (2, 2, 4),
                          dict(kernel_shape=[3], strides=[2], pads=[1, 1], count_include_pad=1)),
    "avg2d_ceil_exclude_pad": ("AveragePool", (1, 2, 6, 6), (1, 2, 4, 4),
                               dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1)),
    "avg2d_ceil_include_pad": ("AveragePool", (1, 2, 6, 6), (1, 2, 4, 4),
                               dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1,
                                    count_include_pad=1)),
    "avg3d": ("AveragePool", (1, 2, 4, 4, 4), (1, 2, 2, 2, 2), dict(kernel_shape=[2, 2, 2], strides=[2, 2, 2])),
    "global_max3d": ("GlobalMaxPool", (2, 2, 3, 2, 3), (2, 2, 1, 1, 1), dict()),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradients_and_verify(tmp_path, name):
    op_type, xs, ys, attrs = CASES[name]
    p = save(tmp_path, _model(op_type, xs, ys, **attrs))
    g = load_model(p)
    pool = g.operations[-1]
    assert pool.type.endswith(f"Pool{len(xs) - 2}D") and g.operands[pool.outputs[0]].shape == ys
    assert check_gradients(p, min_checked=12) >= 12
    check_verify(p, "-b", str(xs[0]))


def test_canonical_attributes(tmp_path):
    op_type, xs, ys, attrs = CASES["avg2d_ceil_include_pad"]
    a = load_model(save(tmp_path, _model(op_type, xs, ys, **attrs))).operations[-1]
    assert (a.type, a.attrs["kernel"], a.attrs["stride"], a.attrs["pads"], a.attrs["ceil_mode"],
            a.attrs["count_include_pad"], a.attrs["layout"]) == ("AvgPool2D", (3, 3), (2, 2), (1, 1, 1, 1),
                                                                 True, True, "NCHW")


def test_max_pool_indices_output_is_refused_when_training_needs_it(tmp_path):
    m = _model("MaxPool", (1, 2, 4, 4), (1, 2, 2, 2), outputs=("y", "idx"), kernel_shape=[2, 2], strides=[2, 2])
    p = save(tmp_path, m)
    assert load_model(p).operations[-1].type == "MaxPool"
    r = CliRunner().invoke(main, ["analyze", p], env={"NO_COLOR": "1"})
    assert r.exit_code == 2 and "MaxPool" in r.output and "Traceback" not in r.output
