"""What the onert profile refuses (memplan_cli/profiles/onert/support.py), each refusal checked against
the real onert 0.1.0: a model that memplan refuses fails in onert (its loader, its compile, its first
training steps, or a crash), or trains wrongly; the same op where onert accepts it (outside the
backward region, other attributes) gets a figure from memplan and trains in onert, and memplan's
ALLOC lines equal onert's.

ONNX-only attributes (1-D / 3-D windows, explicit pads, ceil_mode, pool dilation, reflect padding,
Softmax over another axis) have no circle form, so onert cannot load such a model at all: those are
checked through the CLI without the runtime.
"""
from __future__ import annotations

import math
import os

import numpy as np
import pytest

from memplan_cli.config import TrainConfig
from memplan_cli.errors import UnsupportedOpError
from memplan_cli.loaders import load_model
from memplan_cli.profiles.onert import predict_alloc_lines
from devtools.onert_runtime import available, run_onert
from devtools.modelgen import ACT, ModelBuilder

no_runtime = pytest.mark.skipif(not available(), reason="onert 0.1.0 is not installed (pip install -e "
                                                       "'.[onert]', cp311 x86-64 only): no runtime")


# ---- model pieces the builder does not have ---------------------------------------------------

def _bo():
    from circle_schema.v0_10.circle.BuiltinOptions import BuiltinOptions

    return BuiltinOptions


def conv(m, x, filters, k, stride=(1, 1), dilation=(1, 1), groups=1, bias=True):
    from circle_schema.v0_10.circle.Conv2DOptions import Conv2DOptionsT

    n, h, w, c = m.shape(x)
    wt = m.const([filters, k, k, c // groups])
    b = m.const([filters]) if bias else -1
    o = Conv2DOptionsT()
    o.padding = 1  # VALID
    o.strideH, o.strideW = stride
    o.dilationHFactor, o.dilationWFactor = dilation
    oh = (h - (k - 1) * dilation[0] - 1) // stride[0] + 1
    ow = (w - (k - 1) * dilation[1] - 1) // stride[1] + 1
    return m._op(3, [x, wt, b], [n, oh, ow, filters], _bo().Conv2DOptions, o)


def depthwise(m, x, k, stride=(1, 1), dilation=(1, 1), bias=True):
    from circle_schema.v0_10.circle.DepthwiseConv2DOptions import DepthwiseConv2DOptionsT

    n, h, w, c = m.shape(x)
    wt = m.const([1, k, k, c])
    b = m.const([c]) if bias else -1
    o = DepthwiseConv2DOptionsT()
    o.padding = 1
    o.strideH, o.strideW = stride
    o.dilationHFactor, o.dilationWFactor = dilation
    o.depthMultiplier = 1
    oh = (h - (k - 1) * dilation[0] - 1) // stride[0] + 1
    ow = (w - (k - 1) * dilation[1] - 1) // stride[1] + 1
    return m._op(4, [x, wt, b], [n, oh, ow, c], _bo().DepthwiseConv2DOptions, o)


def fc_keep_dims(m, x, units):
    from circle_schema.v0_10.circle.FullyConnectedOptions import FullyConnectedOptionsT

    s = m.shape(x)
    o = FullyConnectedOptionsT()
    o.keepNumDims = True
    o.fusedActivationFunction = ACT["NONE"]
    return m._op(9, [x, m.const([units, s[-1]]), m.const([units])], s[:-1] + [units],
                 _bo().FullyConnectedOptions, o)


def head(m, y, units=3, relu=False):
    """Flatten, then a FullyConnected: the model's output. `relu` puts a Relu first, so that training
    only the last op leaves everything before it outside onert's backward order."""
    if relu:
        y = m.relu(y)
    if len(m.shape(y)) != 2:
        y = m.reshape(y, [-1, math.prod(m.shape(y)[1:])])
    m.output(m.fully_connected(y, units))
    return m


def _act(m, shape):
    """A non-constant tensor of `shape` ([1, 4, 4, 3] or reduced from it) computed from the input."""
    x = m.input([1, 4, 4, 3])
    a = m.conv2d(x, 3, 1)
    if shape == [1, 1, 1, 3]:
        return a, m.mean(a, [1, 2], keep_dims=True)
    return a, a


# ---- models onert cannot train, with what onert does ---------------------------------------------

def conv_dilated():
    m = ModelBuilder()
    x = m.input([1, 8, 8, 2])
    return head(m, conv(m, m.conv2d(x, 3, 1), 4, 3, dilation=(2, 2)))


def conv_grouped():
    m = ModelBuilder()
    x = m.input([1, 6, 6, 4])
    return head(m, conv(m, m.conv2d(x, 4, 1), 4, 3, groups=2))


def conv_no_bias():
    m = ModelBuilder()
    x = m.input([1, 6, 6, 2])
    return head(m, conv(m, x, 4, 3, bias=False), relu=True)


def depthwise_no_bias():
    m = ModelBuilder()
    x = m.input([1, 8, 8, 2])
    return head(m, depthwise(m, x, 3, bias=False), relu=True)


def depthwise_dilated():
    m = ModelBuilder()
    x = m.input([1, 8, 8, 2])
    return head(m, depthwise(m, m.conv2d(x, 3, 1), 3, dilation=(2, 2)))


def depthwise_strides():
    m = ModelBuilder()
    x = m.input([1, 9, 9, 2])
    return head(m, depthwise(m, m.conv2d(x, 3, 1), 3, stride=(2, 1)))


def fc_rank3():
    m = ModelBuilder()
    x = m.input([1, 4, 8])
    return head(m, fc_keep_dims(m, x, 6))


def add_const():
    m = ModelBuilder()
    a, _ = _act(m, [1, 4, 4, 3])
    return head(m, m.add(a, m.const([3])))


def mul_const_first():
    m = ModelBuilder()
    a, _ = _act(m, [1, 4, 4, 3])
    return head(m, m.mul(m.const([1, 4, 4, 3]), a))


def sub_broadcast():
    m = ModelBuilder()
    a, b = _act(m, [1, 1, 1, 3])
    return head(m, m.sub(a, b))


def div_tensors():
    m = ModelBuilder()
    x = m.input([1, 4, 4, 3])
    a = m.conv2d(x, 3, 1, activation="RELU")
    b = m.conv2d(x, 3, 1, activation="RELU6")
    return head(m, m.div(a, m.add(b, a)))


def relu_n1_to_1():
    m = ModelBuilder()
    x = m.input([1, 8])
    y = m._op(20, [m.fully_connected(x, 6)], [1, 6])  # RELU_N1_TO_1
    m.output(m.fully_connected(y, 3))
    return m


def reshape_rows(new_shape):
    """[1, 4, 8] -> Reshape(new_shape) -> FullyConnected -> Reshape(-1, 24) -> FullyConnected."""
    def model():
        m = ModelBuilder()
        y = m.reshape(m.input([1, 4, 8]), new_shape)
        y = m.reshape(m.fully_connected(y, 6, activation="RELU"), [-1, 24])
        m.output(m.fully_connected(y, 3))
        return m
    return model


# name -> (model, trainable ops (-1 all), words of memplan's reason, what onert does:
#          ("fails", words of its error) or ("crashes", None))
REFUSED = {
    "conv_dilated": (conv_dilated, -1, "dilated Conv2D", ("fails", "train ConvolutionLayer: Unsupported dilation yet")),
    "conv_no_bias": (conv_no_bias, 1, "Conv2D without a bias input",
                     ("fails", "loader doesn't support optional input tensor yet for CONV_2D")),
    "depthwise_no_bias": (depthwise_no_bias, 1, "DepthwiseConv2D without a bias input",
                          ("fails", "loader doesn't support optional input tensor yet for DEPTHWISE_CONV_2D")),
    "depthwise_dilated": (depthwise_dilated, -1, "dilated DepthwiseConv2D",
                          ("fails", "train DepthwiseConvolutionLayer: Unsupported dilation yet")),
    "depthwise_strides": (depthwise_strides, -1, "DepthwiseConv2D with strides (2, 1)",
                          ("fails", "Not support different length strides")),
    "fc_rank3": (fc_rank3, -1, "FullyConnected with a rank-3 input",
                 ("fails", "Input other ranks than 2 are not supported")),
    "add_const": (add_const, -1, "Add with a constant input", ("crashes", None)),
    "mul_const_first": (mul_const_first, -1, "Mul with a constant input", ("crashes", None)),
    "sub_broadcast": (sub_broadcast, -1, "Sub broadcasting",
                      ("fails", "Shape of lhs, rhs, incoming, lhs_grad, and rhs_grad must match")),
    "div_tensors": (div_tensors, -1, "Div: ", ("fails", "Unsupported Binary Arithmetic Operation")),
    "reshape_fixed_rows": (reshape_rows([4, 8]), -1, "Reshape to the constant shape (4, 8)",
                           ("fails", "Reshape: 2nd param is not compatible with the shape of input")),
    "relu_n1_to_1": (relu_n1_to_1, -1, "Clip has no kernel",  # memplan trains RELU_N1_TO_1 as Clip(-1, 1)
                     ("fails", "This layer suppports only ReLU(0-inf) and ReLU6(0-6)")),
}


# ---- the same ops where onert trains them: memplan gives a figure, equal to onert's --------------

def conv_dilated_frozen():
    m = ModelBuilder()
    return head(m, conv(m, m.input([1, 8, 8, 2]), 4, 3, dilation=(2, 2)), relu=True)


def depthwise_frozen():
    m = ModelBuilder()
    y = depthwise(m, m.input([1, 13, 13, 2]), 3, stride=(2, 1))
    return head(m, depthwise(m, y, 3, dilation=(2, 2)), relu=True)


def add_const_frozen():
    m = ModelBuilder()
    a, _ = _act(m, [1, 4, 4, 3])
    return head(m, m.add(a, m.const([3])), relu=True)


def mul_const_before_weights():
    """Mul(x, c) before the first weighted op: outside onert's essential backward order."""
    m = ModelBuilder()
    x = m.input([1, 4, 4, 3])
    return head(m, m.conv2d(m.mul(x, m.const([3])), 3, 1))


def conv_strides():
    m = ModelBuilder()
    x = m.input([1, 9, 9, 2])
    return head(m, conv(m, m.conv2d(x, 2, 1), 4, 3, stride=(2, 1)))


def fc_no_bias_softmax_rank4():
    m = ModelBuilder()
    x = m.input([1, 4, 4, 3])
    y = m.softmax(m.conv2d(x, 3, 1))
    y = m.mean(y, [-1], keep_dims=True)
    y = m.reshape(y, [-1, 16])
    m.output(m.fully_connected(m.fully_connected(y, 6, activation="RELU"), 3, bias=False))
    return m


def fc_rank3_frozen():
    m = ModelBuilder()
    y = m.relu(fc_keep_dims(m, m.input([1, 4, 8]), 6))
    m.output(m.relu(m.reshape(y, [-1, 24])))
    return m


ACCEPTED = {
    "conv_dilated_frozen": (conv_dilated_frozen, 1), "depthwise_frozen": (depthwise_frozen, 1),
    "add_const_frozen": (add_const_frozen, 1), "mul_const_before_weights": (mul_const_before_weights, -1),
    "conv_strides": (conv_strides, -1), "fc_no_bias_softmax_rank4": (fc_no_bias_softmax_rank4, -1),
    "fc_rank3_frozen": (fc_rank3_frozen, 2), "reshape_rows": (reshape_rows([-1, 8]), -1),
}


def _config(trainable, batch=2):
    return TrainConfig(batch_size=batch, trainable=trainable if trainable >= 0 else "all")


def _load(tmp_path, name, mb):
    return load_model(mb.save(str(tmp_path / f"{name}.circle")), batch_size=2)


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_memplan_refuses(tmp_path, name):
    fn, trainable, words, _ = REFUSED[name]
    with pytest.raises(UnsupportedOpError, match="onert cannot train op #") as e:
        predict_alloc_lines(_load(tmp_path, name, fn()), _config(trainable))
    assert words in str(e.value)


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_memplan_accepts(tmp_path, name):
    fn, trainable = ACCEPTED[name]
    assert predict_alloc_lines(_load(tmp_path, name, fn()), _config(trainable))


@pytest.mark.onert
@no_runtime
@pytest.mark.parametrize("name", sorted(REFUSED))
def test_onert_fails_too(tmp_path, name):
    fn, trainable, _, (kind, words) = REFUSED[name]
    path = fn().save(str(tmp_path / f"{name}.circle"))
    got = run_onert(path, batch=2, trainable_ops=trainable, steps=2)
    assert not got["ok"], f"onert trained {name}"
    if kind == "crashes":
        assert got["returncode"] < 0, got  # killed by a signal (SIGSEGV), not a Python error
    else:
        said = (got["error"] or "") + "\n".join(got["tail"])
        assert words in said, said


@pytest.mark.onert
@no_runtime
@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_onert_trains_what_memplan_accepts(tmp_path, name):
    fn, trainable = ACCEPTED[name]
    mb = fn()
    path = mb.save(str(tmp_path / f"{name}.circle"))
    got = run_onert(path, batch=2, trainable_ops=trainable, steps=2, planner="firstfit")
    assert got["ok"], got["error"] or got["tail"]
    assert predict_alloc_lines(load_model(path, batch_size=2), _config(trainable), planner="firstfit",
                               threads=os.cpu_count()) == got["alloc_lines"]


# ---- what compiles and runs but trains wrongly ---------------------------------------------------

def _grouped_net(groups):
    """x [1, 6, 6, 4] -> Conv2D 3x3 VALID (4 filters, `groups` groups) -> FullyConnected 3, with handles."""
    m = ModelBuilder(seed=1)
    x = m.input([1, 6, 6, 4])
    y = conv(m, x, 4, 3, groups=groups)
    conv_op = m.ops[-1]
    y = m.reshape(y, [-1, 64])
    m.output(m.fully_connected(y, 3))
    fc_op = m.ops[-1]
    return m, conv_op.inputs[1:3], fc_op.inputs[1:3]


def _const(m, t):
    return np.frombuffer(bytes(m.buffers[m.tensors[t].buffer].data), np.float32).reshape(m.shape(t))


def _reference_loss(m, conv_w, fc_w, groups, x, y_true):
    """The model's MSE loss in NumPy: a grouped VALID 3x3 convolution (NHWC, filters OHWI), then FC."""
    w, b = (_const(m, t) for t in conv_w)
    n, h, wd, c = x.shape
    cg, og = c // groups, w.shape[0] // groups
    out = np.zeros((n, h - 2, wd - 2, w.shape[0]), np.float64)
    for o in range(w.shape[0]):
        g = o // og
        for i in range(h - 2):
            for j in range(wd - 2):
                out[:, i, j, o] = np.einsum("nhwc,hwc->n", x[:, i:i + 3, j:j + 3, g * cg:(g + 1) * cg], w[o]) + b[o]
    fw, fb = (_const(m, t) for t in fc_w)
    pred = out.reshape(n, -1) @ fw.T.astype(np.float64) + fb
    return float(np.mean(np.mean((pred - y_true) ** 2, axis=1)))


@pytest.mark.onert
@no_runtime
def test_grouped_conv_trains_wrongly_in_onert(tmp_path):
    """onert compiles and runs a grouped Conv2D, but its loss is not the grouped model's; the same net
    without groups gets exactly the reference loss (so the reference is right)."""
    from devtools.onert_check import run_onert_steps

    rng = np.random.default_rng(0)
    x = rng.random((2, 6, 6, 4), dtype=np.float32)
    y = rng.random((2, 3), dtype=np.float32)
    gaps = {}
    for groups in (1, 2):
        m, conv_w, fc_w = _grouped_net(groups)
        path = m.save(str(tmp_path / f"g{groups}.circle"))
        onert_loss = run_onert_steps(path, [x], [y], loss="mse")["losses"][0][0]
        gaps[groups] = abs(onert_loss - _reference_loss(m, conv_w, fc_w, groups, x.astype(np.float64), y))
    # onert's grouped kernel reads memory it never wrote, so its loss depends on the process's memory
    # layout: inf / NaN in most runs, 1e-3 off in a checkout at another path (measured). What holds
    # in every run: it never reaches the reference within the tolerance the ungrouped net meets.
    assert gaps[1] < 1e-5 and not gaps[2] < 1e-5, gaps
    m, _, _ = _grouped_net(2)
    with pytest.raises(UnsupportedOpError, match="grouped Conv2D"):
        predict_alloc_lines(_load(tmp_path, "grouped", m), _config(-1))


def _softmax_net(beta):
    m = ModelBuilder(seed=2)
    x = m.input([1, 8])
    y = m.softmax(m.fully_connected(x, 6), beta=beta)
    m.output(m.fully_connected(y, 3))
    return m


@pytest.mark.onert
@no_runtime
def test_softmax_beta_trains_wrongly_in_onert(tmp_path):
    """With beta != 1 onert's Softmax gradient is not the model's (its backward ignores beta): the weights
    before the Softmax get another update than memplan's reference kernels give; with beta 1 they agree."""
    from devtools.onert_check import compare_with_onert

    rel = {}
    for beta in (1.0, 2.0):
        path = _softmax_net(beta).save(str(tmp_path / f"beta{beta:g}.circle"))
        r = compare_with_onert(path, batch=2, optimizer="sgd", learning_rate=0.1, loss="mse")
        assert r["export_error"] is None and r["loss"][0] == pytest.approx(r["loss"][1], rel=1e-5)
        rel[beta] = r["max_update_diff_rel"]
    assert rel[1.0] < 1e-3 and rel[2.0] > 0.1, rel
    with pytest.raises(UnsupportedOpError, match="Softmax with beta 2"):
        predict_alloc_lines(_load(tmp_path, "beta", _softmax_net(2.0)), _config(-1))
