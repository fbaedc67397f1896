"""Conv 1/2/3-D (groups, dilation, asymmetric pads, depthwise) and ConvTranspose from ONNX: canonical
attributes at load, gradients by finite differences under memplan's policy and the all-off baseline,
verify, and refusals."""
import numpy as np
import pytest
from onnx import helper

from memplan_cli.loaders import load_model
from tests.ops.gradcheck import analyze_json, check_gradients, check_verify, onnx_model, run_forward, save


def _model(op_type, x_shape, w_shape, y_shape, bias=True, **attrs):
    # x -> Add(p) -> Conv(w, b) -> y: p's gradient flows through the conv's input gradient
    ins = ["a", "w"] + (["b"] if bias else [])
    nodes = [helper.make_node("Add", ["x", "p"], ["a"]), helper.make_node(op_type, ins, ["y"], **attrs)]
    rng = np.random.default_rng(0)
    inits = {"p": rng.uniform(-1, 1, x_shape[1:]).astype(np.float32),
             "w": rng.uniform(-1, 1, w_shape).astype(np.float32)}
    if bias:
        out_c = w_shape[0] if op_type == "Conv" else w_shape[1] * attrs.get("group", 1)
        inits["b"] = rng.uniform(-1, 1, (out_c,)).astype(np.float32)
    return onnx_model(nodes, [("x", x_shape)], [("y", y_shape)], inits)


CASES = {
    "conv1d_groups_dilated": ("Conv", (2, 4, 9), (6, 2, 3), (2, 6, 6),
                              dict(group=2, dilations=[2], strides=[1], pads=[0, 1])),
    "conv2d_grouped_strided": ("Conv", (1, 6, 7, 6), (4, 3, 3, 2), (1, 4, 3, 3),
                               dict(group=2, strides=[2, 2], pads=[1, 0, 0, 1])),
    "conv2d_depthwise_multiplier": ("Conv", (2, 3, 5, 5), (6, 1, 3, 3), (2, 6, 5, 5),
                                    dict(group=3, pads=[1, 1, 1, 1])),
    "conv3d_strided_padded": ("Conv", (1, 2, 4, 5, 4), (3, 2, 2, 3, 2), (1, 3, 4, 2, 4),
                              dict(strides=[1, 2, 1], pads=[0, 0, 0, 1, 0, 1])),
    "conv_transpose1d": ("ConvTranspose", (2, 3, 4), (3, 2, 3), (2, 2, 10),
                         dict(strides=[2], pads=[0, 0], output_padding=[1])),
    "conv_transpose2d_groups_dilated": ("ConvTranspose", (1, 4, 3, 3), (4, 1, 3, 2), (1, 2, 7, 7),
                                        dict(group=2, strides=[2, 2], dilations=[1, 2], pads=[1, 0, 0, 0],
                                             output_padding=[1, 0])),
    "conv_transpose3d": ("ConvTranspose", (1, 2, 2, 3, 2), (2, 2, 2, 2, 2), (1, 2, 3, 4, 3), dict()),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradients_and_verify(tmp_path, name):
    op_type, xs, ws, ys, attrs = CASES[name]
    p = save(tmp_path, _model(op_type, xs, ws, ys, **attrs))
    g = load_model(p)
    conv = g.operations[-1]
    assert g.operands[conv.outputs[0]].shape == ys  # onnx shape inference agrees with the test's shapes
    assert check_gradients(p) >= 24
    check_verify(p, "-b", str(xs[0]))


def test_canonical_attributes(tmp_path):
    op_type, xs, ws, ys, attrs = CASES["conv1d_groups_dilated"]
    g = load_model(save(tmp_path, _model(op_type, xs, ws, ys, **attrs)))
    c = g.operations[-1]
    assert c.type == "Conv1D" and c.source_type == "Conv"
    assert (c.attrs["layout"], c.attrs["group"], c.attrs["kernel"], c.attrs["dilation"], c.attrs["pads"]) == \
        ("NCHW", 2, (3,), (2,), (0, 1))
    dw = load_model(save(tmp_path, _model(*CASES["conv2d_depthwise_multiplier"][:4],
                                          **CASES["conv2d_depthwise_multiplier"][4]), "d.onnx")).operations[-1]
    assert dw.type == "DepthwiseConv2D" and dw.attrs["depth_multiplier"] == 2 and dw.attrs["padding"] == "SAME"


def test_auto_pad_same_lower_puts_the_odd_pixel_first(tmp_path):
    m = _model("Conv", (1, 1, 6, 6), (1, 1, 2, 2), (1, 1, 6, 6), auto_pad="SAME_LOWER")
    c = load_model(save(tmp_path, m)).operations[-1]
    assert c.attrs["pads"] == (1, 1, 0, 0)
    assert check_gradients(save(tmp_path, m, "s.onnx")) >= 12


def test_no_bias_and_flops(tmp_path):
    p = save(tmp_path, _model("Conv", (2, 4, 9), (6, 2, 3), (2, 6, 6), bias=False, group=2, dilations=[2],
                              pads=[0, 1]))
    check_verify(p, "-b", "2")
    from memplan_cli import ops
    g = load_model(p)
    c = g.operations[-1]
    fwd, bwd = ops.get(c.type).flops(c, g.operands)
    assert fwd == 2 * (2 * 6 * 6) * (2 * 3) and bwd == 2 * fwd


def test_conv_transpose_with_output_shape_is_refused_when_training_needs_it(tmp_path):
    m = _model("ConvTranspose", (2, 3, 4), (3, 2, 3), (2, 2, 10), strides=[2], output_shape=[10])
    p = save(tmp_path, m)
    assert load_model(p).operations[-1].type == "ConvTranspose"  # not converted: no rule, no kernel
    from click.testing import CliRunner
    from memplan_cli.cli import main
    r = CliRunner().invoke(main, ["analyze", p], env={"NO_COLOR": "1"})
    assert r.exit_code == 2 and "ConvTranspose" in r.output and "Traceback" not in r.output


def test_weights_and_gradients_are_counted(tmp_path):
    op_type, xs, ws, ys, attrs = CASES["conv3d_strided_padded"]
    doc = analyze_json(save(tmp_path, _model(op_type, xs, ws, ys, **attrs)))
    assert doc["totals"]["planned"] > 0


# ---- TFLite TRANSPOSE_CONV (Keras Conv2DTranspose) ------------------------------------------------
def _tf_transpose_conv(x, w, b, out_hw, stride, pads_tl):
    """TF's conv2d_transpose by its definition: every input pixel scatters w x x into the output."""
    n, h, wd, c = x.shape
    co, kh, kw, _ = w.shape
    y = np.zeros((n, *out_hw, co))
    for i in range(h):
        for j in range(wd):
            for a in range(kh):
                for bb in range(kw):
                    r, q = i * stride + a - pads_tl[0], j * stride + bb - pads_tl[1]
                    if 0 <= r < out_hw[0] and 0 <= q < out_hw[1]:
                        y[:, r, q, :] += x[:, i, j, :] @ w[:, a, bb, :].T
    return y + (b if b is not None else 0)


@pytest.mark.parametrize("padding,out_hw,bias", [("SAME", (8, 8), True), ("VALID", (9, 9), True),
                                                 ("SAME", (7, 8), False)])
def test_tflite_transpose_conv(tmp_path, padding, out_hw, bias):
    from circle_schema.v0_10.circle.BuiltinOptions import BuiltinOptions
    from circle_schema.v0_10.circle.TransposeConvOptions import TransposeConvOptionsT

    from devtools.modelgen import ModelBuilder

    m = ModelBuilder(seed=6)
    x = m.input([2, 4, 4, 3])
    h = m.conv2d(x, 4, 3)
    shape = m.const([4], "int32", np.array([2, *out_hw, 5], np.int32))
    wt = m.const([5, 3, 3, 4])
    ins = [shape, wt, h] + ([m.const([5])] if bias else [])
    o = TransposeConvOptionsT()
    o.padding = 0 if padding == "SAME" else 1
    o.strideH = o.strideW = 2
    y = m._op(67, ins, [2, *out_hw, 5], BuiltinOptions.TransposeConvOptions, o)
    m.output(m.fully_connected(m.reshape(y, [2, out_hw[0] * out_hw[1] * 5]), 3))
    p = m.save(str(tmp_path / "tc.tflite"))
    op = next(o for o in load_model(p).operations if o.type == "ConvTranspose2D")
    rng = np.random.default_rng(0)
    xv, wv = rng.normal(size=(2, 4, 4, 4)), rng.normal(size=(5, 3, 3, 4))
    bv = rng.normal(size=(5,)) if bias else None
    tot = [max((4 - 1) * 2 + 3 - d, 0) for d in out_hw] if padding == "SAME" else [0, 0]

    out = run_forward(op, [xv, wv, bv], [(2, *out_hw, 5)])[0]
    np.testing.assert_allclose(out, _tf_transpose_conv(xv, wv, bv, out_hw, 2, [t // 2 for t in tot]),
                               rtol=1e-10, atol=1e-10)
    assert check_gradients(p) >= 30
    check_verify(p, "-b", "2")
