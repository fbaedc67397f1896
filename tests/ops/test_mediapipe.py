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
