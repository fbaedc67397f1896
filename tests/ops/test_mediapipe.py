"""mediapipe's custom ops (ops/mediapipe.py) and verify's seeded sources (execute/ops.py):
Convolution2DTransposeBias becomes a ConvTranspose2D (kernel checked against mediapipe's loop,
gradients by finite differences, verify); a custom op outside the backward region runs in verify
as a seeded source; inside it, training is refused in one line."""
import struct

import numpy as np
import pytest
from click.testing import CliRunner

from memplan_cli.cli import main
from memplan_cli.loaders import load_model
from tests.loaders.fbmodels import BO, OPS, build, conv_opts, op, tensor, write
from tests.ops.gradcheck import check_gradients, check_verify, run_forward


def _tcb_model(padding=1, stride=2, x_hw=(3, 4), k=3):
    """input [1,H,W,2] -> CONV_2D 1x1 (2 -> 3) -> Convolution2DTransposeBias (3 -> 2, k x k, stride)."""
    h, w = x_hw
    pad = [max(0, k - (n - 1) % stride - 1) if padding == 1 else 0 for n in (h, w)]
    oh, ow = (stride * (n - 1) + k - p for n, p in zip((h, w), pad))
    t = [tensor("x", [1, h, w, 2]), tensor("c/w", [3, 1, 1, 2], data="fill"), tensor("c/b", [3], data="fill"),
         tensor("c", [1, h, w, 3]), tensor("t/w", [2, k, k, 3], data="fill"), tensor("t/b", [2], data="fill"),
         tensor("y", [1, oh, ow, 2])]
    ops = [op(OPS.CONV_2D, [0, 1, 2], [3], conv_opts(act=0), BO.Conv2DOptions),
           op("Convolution2DTransposeBias", [3, 4, 5], [6], struct.pack("<3i", padding, stride, stride))]
    return build(t, ops, [0], [6], fmt="tflite"), (oh, ow)


def _mediapipe_reference(x, w, b, stride, pad_total):
    """mediapipe's transpose_conv_bias.cc loop, in numpy: bias, then every input pixel scattered."""
    n, h, wd, _ = x.shape
    o, kh, kw, _ = w.shape
    oh = stride * (h - 1) + kh - pad_total[0]
    ow = stride * (wd - 1) + kw - pad_total[1]
    y = np.broadcast_to(b, (n, oh, ow, o)).copy()
    pt, pl = pad_total[0] // 2, pad_total[1] // 2
    for iy in range(h):
        for ix in range(wd):
            for fy in range(kh):
                for fx in range(kw):
                    oy, ox = iy * stride - pt + fy, ix * stride - pl + fx
                    if 0 <= oy < oh and 0 <= ox < ow:
                        y[:, oy, ox, :] += x[:, iy, ix, :] @ w[:, fy, fx, :].T
    return y


@pytest.mark.parametrize("padding,stride,hw,k", [(1, 2, (3, 4), 3), (2, 2, (3, 3), 3), (1, 1, (4, 3), 3),
                                                 (1, 2, (4, 4), 4)])
def test_transpose_conv_bias_matches_mediapipe(tmp_path, padding, stride, hw, k):
    data, (oh, ow) = _tcb_model(padding, stride, hw, k)
    g = load_model(write(tmp_path, "m.tflite", data))
    t = g.operations[-1]
    assert t.type == "ConvTranspose2D" and t.source_type == "Convolution2DTransposeBias"
    rng = np.random.default_rng(0)
    x = rng.normal(size=(1,) + hw + (3,))
    w = rng.normal(size=(2, k, k, 3))
    b = rng.normal(size=(2,))
    (y,) = run_forward(t, [x, w, b], [(1, oh, ow, 2)])
    pad = [max(0, k - (n - 1) % stride - 1) if padding == 1 else 0 for n in hw]
    assert np.allclose(y, _mediapipe_reference(x, w, b, stride, pad), atol=1e-12)


def test_transpose_conv_bias_trains_and_verifies(tmp_path):
    p = write(tmp_path, "m.tflite", _tcb_model()[0])
    assert check_gradients(p) >= 12
    check_verify(p, "-b", "3")


def test_transpose_conv_bias_with_unknown_padding_stays_custom(tmp_path):
    data, _ = _tcb_model(padding=1)
    data = data.replace(struct.pack("<3i", 1, 2, 2), struct.pack("<3i", 0, 2, 2))
    p = write(tmp_path, "m.tflite", data)
    assert load_model(p).operations[-1].type == "Convolution2DTransposeBias"
    r = CliRunner().invoke(main, ["analyze", p], env={"NO_COLOR": "1"})
    assert r.exit_code == 2 and "Convolution2DTransposeBias" in r.output and "Traceback" not in r.output


def _custom_then_conv(custom_first=True):
    """x -> CUSTOM 'SomeCustomOp' -> CONV_2D (trained); or CONV_2D -> CUSTOM -> CONV_2D (inside)."""
    t = [tensor("x", [1, 4, 4, 2]), tensor("u", [1, 4, 4, 2]), tensor("c/w", [3, 1, 1, 2], data="fill"),
         tensor("c/b", [3], data="fill"), tensor("y", [1, 4, 4, 3]),
         tensor("c0/w", [2, 1, 1, 2], data="fill"), tensor("c0", [1, 4, 4, 2])]
    if custom_first:
        ops = [op("SomeCustomOp", [0], [1], b"\x01\x02"),
               op(OPS.CONV_2D, [1, 2, 3], [4], conv_opts(act=0), BO.Conv2DOptions)]
    else:
        ops = [op(OPS.CONV_2D, [0, 5, -1], [6], conv_opts(act=0), BO.Conv2DOptions),
               op("SomeCustomOp", [6], [1], b"\x01\x02"),
               op(OPS.CONV_2D, [1, 2, 3], [4], conv_opts(act=0), BO.Conv2DOptions)]
    return build(t, ops, [0], [4], fmt="tflite")


def test_custom_op_outside_the_backward_region_is_a_seeded_source(tmp_path):
    p = write(tmp_path, "m.tflite", _custom_then_conv())
    doc = check_verify(p, "-b", "2")
    assert doc["seeded_sources"] == ["#0 SomeCustomOp"]
    again = check_verify(p, "-b", "2")
    assert again["loss"] == doc["loss"]  # seeded: the same values every run
    r = CliRunner().invoke(main, ["verify", p, "-b", "2"], env={"NO_COLOR": "1"})
    assert r.exit_code == 0 and "seeded values" in r.output


def test_custom_op_inside_the_backward_region_is_refused(tmp_path):
    p = write(tmp_path, "m.tflite", _custom_then_conv(custom_first=False))
    r = CliRunner().invoke(main, ["analyze", p], env={"NO_COLOR": "1"})
    assert r.exit_code == 2 and "SomeCustomOp" in r.output and "Traceback" not in r.output
    assert len(r.output.strip().splitlines()) == 1


# ---- MaxPoolingWithArgmax2D and MaxUnpooling2D ------------------------------------------------------
def _pool_opts(padding, stride, filt):
    return struct.pack("<6i", padding, stride, stride, filt, filt, 0) + bytes(16)  # + TfLitePaddingValues


def _segnet(padding=2, stride=2, filt=2, hw=4):
    """x -> CONV 1x1 -> MaxPoolingWithArgmax2D -> CONV 1x1 -> MaxUnpooling2D (the indices) -> CONV 1x1."""
    o = (hw + stride - 1) // stride if padding == 1 else (hw - filt + stride) // stride
    t = [tensor("x", [1, hw, hw, 2]), tensor("c0/w", [3, 1, 1, 2], data="fill"), tensor("c0", [1, hw, hw, 3]),
         tensor("p", [1, o, o, 3]), tensor("i", [1, o, o, 3]), tensor("c1/w", [3, 1, 1, 3], data="fill"),
         tensor("q", [1, o, o, 3]), tensor("u", [1, o * filt, o * filt, 3]), tensor("c2/w", [2, 1, 1, 3], data="fill"),
         tensor("y", [1, o * filt, o * filt, 2])]
    opts = _pool_opts(padding, stride, filt)
    ops = [op(OPS.CONV_2D, [0, 1, -1], [2], conv_opts(act=0), BO.Conv2DOptions),
           op("MaxPoolingWithArgmax2D", [2], [3, 4], opts),
           op(OPS.CONV_2D, [3, 5, -1], [6], conv_opts(act=0), BO.Conv2DOptions),
           op("MaxUnpooling2D", [6, 4], [7], opts),
           op(OPS.CONV_2D, [7, 8, -1], [9], conv_opts(act=0), BO.Conv2DOptions)]
    return build(t, ops, [0], [9], fmt="tflite")


def _mediapipe_argmax_pool(x, stride, filt, pad, out):
    """mediapipe's max_pool_argmax.cc loop in numpy: window clamped to the input, first strict max."""
    n, h, w, c = x.shape
    y, idx = np.zeros((n, out, out, c)), np.zeros((n, out, out, c))
    for b in range(n):
        for oy in range(out):
            for ox in range(out):
                for ch in range(c):
                    y0, x0 = oy * stride - pad, ox * stride - pad
                    best, by, bx = -np.inf, 0, 0
                    for fy in range(max(0, -y0), min(filt, h - y0)):
                        for fx in range(max(0, -x0), min(filt, w - x0)):
                            if x[b, y0 + fy, x0 + fx, ch] > best:
                                best, by, bx = x[b, y0 + fy, x0 + fx, ch], fy, fx
                    y[b, oy, ox, ch], idx[b, oy, ox, ch] = best, by * filt + bx + 0.1
    return y, idx


@pytest.mark.parametrize("padding,stride,filt,hw", [(2, 2, 2, 4), (1, 2, 3, 5), (1, 2, 2, 5), (2, 1, 2, 4)])
def test_argmax_pool_matches_mediapipe(tmp_path, padding, stride, filt, hw):
    o = (hw + stride - 1) // stride if padding == 1 else (hw - filt + stride) // stride
    t = [tensor("x", [1, hw, hw, 3]), tensor("p", [1, o, o, 3]), tensor("i", [1, o, o, 3])]
    g = load_model(write(tmp_path, "m.tflite", build(t, [op("MaxPoolingWithArgmax2D", [0], [1, 2],
                                                            _pool_opts(padding, stride, filt))], [0], [1, 2],
                                                     fmt="tflite")))
    pool = g.operations[0]
    assert pool.type == "MaxPoolArgmax2D"
    x = np.random.default_rng(3).normal(size=(1, hw, hw, 3))
    y, idx = run_forward(pool, [x], [(1, o, o, 3), (1, o, o, 3)])
    pad = max(0, ((o - 1) * stride + filt - hw) // 2)
    want_y, want_idx = _mediapipe_argmax_pool(x, stride, filt, pad, o)
    assert np.array_equal(y, want_y) and np.allclose(idx, want_idx)


def test_unpool_puts_values_back_where_the_pool_found_them(tmp_path):
    g = load_model(write(tmp_path, "m.tflite", _segnet()))
    pool, unpool = g.operations[1], g.operations[3]
    assert (pool.type, unpool.type) == ("MaxPoolArgmax2D", "MaxUnpool2D")
    x = np.random.default_rng(4).normal(size=(1, 4, 4, 3))
    p, i = run_forward(pool, [x], [(1, 2, 2, 3), (1, 2, 2, 3)])
    (u,) = run_forward(unpool, [p, i], [(1, 4, 4, 3)])
    # each 2x2 window of u holds its maximum where it was, zeros elsewhere
    want = np.where(x == np.repeat(np.repeat(p, 2, 1), 2, 2), x, 0)
    assert np.array_equal(u, want)


def test_argmax_pool_and_unpool_train_and_verify(tmp_path):
    p = write(tmp_path, "m.tflite", _segnet())
    assert check_gradients(p) >= 12
    check_verify(p, "-b", "3")


def test_overlapping_unpool_windows_stay_custom(tmp_path):
    g = load_model(write(tmp_path, "m.tflite", _segnet(padding=2, stride=1, filt=2, hw=4)))
    assert g.operations[3].type == "MaxUnpooling2D"


@pytest.mark.parametrize("act", ["silu", "swish"])
def test_a_seeded_sources_activation_attribute_is_its_own(tmp_path, act):
    """An op memplan has no kernel for (onnx's CausalConvWithState, opset 27, activation="silu") runs
    seeded in verify; its `activation` attribute is not a fused activation memplan applies (verify
    stopped with an internal error on "silu")."""
    from onnx import helper

    from tests.ops.gradcheck import onnx_model, save

    nodes = [helper.make_node("CausalConvWithState", ["x", "k"], ["u", "s"], activation=act),
             helper.make_node("Mul", ["u", "w"], ["y"])]
    m = onnx_model(nodes, [("x", (2, 4, 8)), ("k", (4, 1, 4))], [("y", (2, 4, 8)), ("u", (2, 4, 8)), ("s", (2, 4, 3))],
                   {"w": np.full((1, 4, 8), 0.5, np.float32)}, opset=27)
    m.ir_version = 13
    p = save(tmp_path, m)
    for args in ((), ("-O", "adam", "-b", "3")):
        doc = check_verify(p, *args)
        assert doc["seeded_sources"] == ["#0 CausalConvWithState"]
