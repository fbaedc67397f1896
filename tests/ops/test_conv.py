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


# ---- torch profile: kernels 14 wide and more (oneDNN's gemm and jit limits) ----------------------
# Every figure below was measured with torch 2.14.1 / oneDNN 3.12 on one thread of an AVX-512 CPU:
# `python devtools/torch_conv_sweep.py --one "n=..,c=..,h=..,o=..,k=..,s=..,p=..[,g=..][,xgrad=0][,wgrad=0]"
# --verbose` (the forward's scratch beside its output, the backward's allocator peak).
def _torch_op(n, c, h, o, k, s=1, p=0, g=1, d=1, bias=True):
    from memplan_cli.ir.graph import Operand, Operation

    oh = (h + 2 * p - d * (k - 1) - 1) // s + 1
    opd = [Operand(0, "x", (n, c, h, h)), Operand(1, "w", (o, c // g, k, k), is_const=True),
           Operand(2, "b", (o,), is_const=True), Operand(3, "y", (n, o, oh, oh))]
    typ = "DepthwiseConv2D" if g == c and g > 1 else "Conv2D"
    attrs = {"kernel": (k, k), "stride": (s, s), "dilation": (d, d), "group": g, "layout": "NCHW", "pads": (p,) * 4}
    if typ == "DepthwiseConv2D":
        attrs["depth_multiplier"] = o // c
    return Operation(0, typ, [0, 1, 2] if bias else [0, 1], [3], attrs), opd


def _largest(alts, op, opd):
    def size(x):
        if isinstance(x, int):
            return x
        return opd[op.inputs[int(x[2])] if x.startswith("in") else op.outputs[int(x[3])]].nbytes
    return max((sum(size(x) for x in alt) for alt in alts), default=0)


def _torch_phases(op, opd, xgrad=True, wgrad=True):
    """(forward scratch, backward peak) as profiles/torch/replay.py counts them for one convolution."""
    from memplan_cli.ops import conv

    f = conv.TORCH
    assert f["refuse"](op, opd) is None
    fwd = _largest(f["fwd_scratch"](op, opd), op, opd)
    dx = opd[0].nbytes if xgrad else 0
    sdx = _largest(f["bwd_scratch_dx"](op, opd), op, opd) if xgrad else 0
    if not wgrad:
        return fwd, dx + sdx
    dw = opd[1].nbytes + opd[2].nbytes + _largest(f["bwd_scratch_dw"](op, opd), op, opd)
    return fwd, max(dx + sdx, dx + dw)


@pytest.mark.parametrize("cfg,kernel,fwd", [
    # (n, c, h, o, k, s, p) -> oneDNN's forward kernel, its scratch beside the output
    ((2, 3, 32, 32, 14, 7, 7), "gemm", 58_928),      # the left pad (7) wider than the 5 output columns
    ((2, 3, 32, 32, 15, 1, 7), "jit", 262_144),      # a first convolution: 3 channels fit the code bound
    ((2, 16, 32, 32, 15, 1, 7), "gemm", 1_843_328),  # 3 x 15 x 16 x 28 x 15 B of code > 256 KiB: im2col
    ((2, 16, 40, 32, 19, 1, 9), "jit", 944_128),     # no right pad in the unrolled block: it fits
    ((2, 16, 40, 32, 31, 1, 15), "gemm", 922_688),   # im2col in blocks of 16 x 961 x 15 output pixels
    ((2, 3, 32, 32, 16, 8, 0), "jit", 98_304)])      # PiT's overlapping patch embedding (16, stride 8)
def test_torch_wide_forward_kernel(cfg, kernel, fwd):
    from memplan_cli.ops import conv

    op, opd = _torch_op(*cfg)
    assert conv._wide_fwd_kernel(op, opd) == kernel
    assert _torch_phases(op, opd, xgrad=False)[0] == fwd


@pytest.mark.parametrize("cfg,kernel,fwd,peak", [
    # (n, c, h, k, s): depthwise, p = k // 2; jit_dw unrolls 6 output columns, so a pad over 6 takes gemm
    ((2, 16, 32, 31, 1), "gemm", 2_029_760, 4_375_168),  # im2col of 961 x 528 of the 1,024 pixels
    ((2, 16, 32, 13, 1), "jit", 141_888, 877_696),
    ((2, 64, 14, 31, 2), "gemm", 188_484, 1_519_300)])
def test_torch_wide_depthwise(cfg, kernel, fwd, peak):
    from memplan_cli.ops import conv

    n, c, h, k, s = cfg
    op, opd = _torch_op(n, c, h, c, k, s, k // 2, g=c)
    assert conv._wide_fwd_kernel(op, opd) == kernel
    assert _torch_phases(op, opd) == (fwd, peak)


@pytest.mark.parametrize("cfg,kernel,peak", [
    # (n, c, h, o, k, p), unstrided, a frozen weight (wgrad=0): dX beside the input-gradient kernel's scratch
    ((2, 16, 32, 32, 14, 0), "gemm", 4_659_584),    # AVX-512's code bound and AVX2's overflow both refuse
    ((2, 16, 32, 32, 15, 7), "jit_avx2", 854_016),  # copies blocked by 8
    ((2, 24, 32, 40, 15, 7), "jit_avx2", 1_388_288),
    ((2, 24, 40, 40, 19, 9), "jit", 3_241_984),
    ((2, 64, 40, 64, 31, 15), "gemm", 26_651_008)])  # im2col cut to 105 pixels by the scratchpad limit
def test_torch_wide_input_gradient(cfg, kernel, peak):
    from memplan_cli.ops import conv

    n, c, h, o, k, p = cfg
    op, opd = _torch_op(n, c, h, o, k, 1, p)
    assert conv._wide_dx_kernel(op, opd) == kernel
    assert _torch_phases(op, opd, wgrad=False)[1] == peak


@pytest.mark.parametrize("cfg,xgrad,fwd,peak", [
    # maps of networks fed 96 to 224 pixels (devtools/torch_conv_sweep.py --set large, 36 of its 40 shapes
    # exact; the other four differ by 256 B): (n, c, h, o, k, s, p, g), measured forward scratch, backward peak
    ((1, 64, 112, 16, 3, 1, 1, 1), True, 3_248_128, 7_262_272),     # one sample, mkldnn (> 20,480 elements)
    ((1, 32, 80, 96, 3, 2, 1, 1), True, 929_792, 2_457_600),
    ((2, 16, 224, 32, 7, 1, 3, 1), True, 12_845_056, 25_790_592),
    ((2, 16, 160, 64, 5, 2, 2, 1), True, 3_379_200, 9_933_056),
    ((4, 96, 80, 32, 1, 2, 0, 1), True, 10_457_216, 29_491_200),    # a strided 1x1 gathers its input
    ((2, 96, 80, 96, 3, 2, 1, 96), True, 4_918_656, 11_063_040),    # depthwise
    ((4, 48, 56, 48, 7, 1, 3, 48), True, 2_417_856, 4_826_304),
    ((4, 3, 224, 64, 3, 1, 1, 1), False, 51_380_224, 51_387_392)])  # an image stem, no input gradient
def test_torch_large_maps(cfg, xgrad, fwd, peak):
    n, c, h, o, k, s, p, g = cfg
    op, opd = _torch_op(n, c, h, o, k, s, p, g=g)
    assert _torch_phases(op, opd, xgrad=xgrad) == (fwd, peak)


def test_torch_gemm_weight_gradient_under_the_scratchpad_limit():
    # n=2,c=3,h=40,o=32,k=31,s=1,p=15,xgrad=0: the im2col columns (18.4 MB) exceed what 15 x the tensors
    # leave, so oneDNN takes 5 % of what fits (46 of 1,600 pixels)
    op, opd = _torch_op(2, 3, 40, 32, 31, 1, 15)
    assert _torch_phases(op, opd, xgrad=False) == (409_600, 2_375_976)
    # n=2,c=16,h=40,o=32,k=31,s=1,p=15: gemm in all three phases
    op, opd = _torch_op(2, 16, 40, 32, 31, 1, 15)
    assert _torch_phases(op, opd) == (922_688, 11_583_424)


def test_torch_channels_last_depth_multiplier():
    # PiT's pooling: a depthwise 3x3 stride-2 convolution with 2 outputs per channel on a channels-last
    # tensor (n=4, 96 -> 192 channels, 27 x 27): oneDNN's grouped jit kernel blocks the weight 16 x 16 per
    # group (884,736 B) in forward, for the input's gradient, and for the weight's (with the bias's
    # reduction); measured: forward 884,736 beside the output, backward peak 2,019,840
    op, opd = _torch_op(4, 96, 27, 192, 3, 2, 1, g=96)
    op.attrs["memory_format"] = "channels_last"
    assert _torch_phases(op, opd) == (884_736, 2_019_840)


@pytest.mark.parametrize("cfg,kernels,fwd,peak", [
    # (n, c, h, o, k, s, p), dilation 2: a strided one's input gradient takes gemm (brgconv_strided takes
    # no dilation, the jit kernels no dilation with a stride), and its weight gradient too (jit's needs
    # stride 1 where dilated), 14 wide as it is
    ((2, 16, 48, 32, 14, 2, 13), ("gemm", True), 696_320, 9_527_680),
    ((2, 16, 48, 32, 14, 1, 13), ("jit", False), None, 1_581_184)])
def test_torch_dilated_wide_kernels(cfg, kernels, fwd, peak):
    from memplan_cli.ops import conv

    op, opd = _torch_op(*cfg, d=2)
    assert (conv._wide_dx_kernel(op, opd), conv._gemm_weights(op, opd)) == kernels
    got = _torch_phases(op, opd)
    assert got[1] == peak and fwd in (None, got[0])


@pytest.mark.parametrize("cfg,fwd,peak", [
    # Wav2Vec2's positional convolution: Conv1d (n, c, L) -> c, kernel k, pad k // 2, g groups, run as the
    # 2-D convolution of its (n, c, 1, L) view; measured with F.conv1d on one thread (allocator events)
    ((2, 64, 99, 16, 4), 116_224, 481_280),  # 16 per group: jit forward and input gradient, gemm weight's
    ((2, 64, 99, 128, 16), 204_928, 911_360),  # 4 per group, 128 wide: gemm in every phase
    ((1, 768, 49, 128, 16), 589_952, 95_754_496)])  # base size: im2col in blocks of 24 of the 50 positions
def test_torch_grouped_wide_conv1d(cfg, fwd, peak):
    from memplan_cli.ir.graph import Operand, Operation
    from memplan_cli.ops import conv

    n, c, length, k, g = cfg
    opd = [Operand(0, "x", (n, c, length)), Operand(1, "w", (c, c // g, k), is_const=True),
           Operand(2, "b", (c,), is_const=True), Operand(3, "y", (n, c, length + 1))]
    op = Operation(0, "Conv1D", [0, 1, 2], [3], {"kernel": (k,), "stride": (1,), "dilation": (1,), "group": g,
                                                  "layout": "NCHW", "pads": (k // 2, k // 2)})
    assert not conv.TORCH["estimated"](op, opd)  # the 2-D facts count it: not named as estimated
    assert _torch_phases(op, opd) == (fwd, peak)


@pytest.mark.parametrize("cfg,why", [
    (dict(n=2, c=16, h=32, o=32, k=15, p=7, tall=True), "at most 3 columns"),
    (dict(n=2, c=16, h=40, o=16, k=15, p=14, d=2, g=16), "dilated")])
def test_torch_wide_kernels_not_worked_out_are_refused(cfg, why):
    from memplan_cli.ir.graph import Operand
    from memplan_cli.ops import conv

    tall = cfg.pop("tall", False)
    op, opd = _torch_op(**cfg)
    if tall:  # a 15 x 3 kernel, pad (7, 1): the same output
        op.attrs.update(kernel=(15, 3), pads=(7, 1, 7, 1))
        opd[1] = Operand(1, "w", (32, 16, 15, 3), is_const=True)
    assert why in conv._torch_refuse(op, opd)


@pytest.mark.parametrize("cfg,peak,estimated", [
    # (n, c, h, o, k, s, p), the input's gradient alone (a frozen weight), torch 2.14 measured peak:
    # kernels up to 10 x 10 book one page of brgemm batch whatever the blocking search picks: counted
    ((2, 16, 32, 32, 8, 8, 0), 393_216, False), ((2, 24, 32, 40, 8, 2, 4), 702_808, False),
    # wider: the batch of KH x KW elements (KH the search's usual pick), 8 to 24 B from torch's
    ((2, 16, 32, 32, 11, 2, 0), 499_976 + 16, True), ((2, 16, 40, 32, 19, 9, 9), 1_036_560 + 8, True),
    # an input width the stride does not divide: the row buffer at the width rounded up to the stride
    ((2, 16, 32, 32, 14, 14, 0), 627_720 + 16, True),
    # the search picked a batch of stride x KW elements here: 9 pages over, named as estimated
    ((2, 24, 40, 40, 31, 2, 0), 5_452_632 + 36_864, True)])
def test_torch_strided_wide_input_gradient(cfg, peak, estimated):
    # brgconv_strided (jit_brgemm_conv_bwd_utils init_conf / init_scratchpad): the brgemm batch books
    # kh_block x KW elements of brgemm_batch_element_t (40 B) rounded up to 4 KB, kh_block being KH or
    # the stride as its efficiency estimate picks; the row buffer of an uneven width iw_block x stride x C
    # floats. Where that pick decides the size the op is named as estimated
    from memplan_cli.ops import conv

    op, opd = _torch_op(*cfg)
    assert _torch_phases(op, opd, wgrad=False)[1] == peak
    assert conv.TORCH["estimated_dx"](op, opd) is estimated


@pytest.mark.parametrize("n, c, h, o, k, s, scratch", [
    (4, 64, 16, 192, 8, 8, 36888), (4, 64, 20, 192, 8, 8, 90136), (4, 64, 16, 128, 8, 2, 86040),
    (4, 48, 16, 96, 8, 8, 36888), (4, 64, 18, 128, 9, 3, 53272), (4, 64, 20, 128, 10, 5, 36888)])
def test_torch_strided_input_gradient_of_kernels_8_to_10(n, c, h, o, k, s, scratch):
    # brgconv_strided as for smaller kernels: the incoming gradient, the weight with its input channels
    # rounded up to 16, the scratchpad (allocator events, torch 2.14.1, one thread); then the input's
    # gradient copied out and cloned (a hybrid ViT's patch embedding on a backbone's features)
    from memplan_cli.ops import conv

    op, opd = _torch_op(n, c, h, o, k, s, bias=False)
    assert conv._torch_refuse(op, opd) is None
    assert conv._brgconv_scratch(op, opd) == scratch
    x, w, y = (opd[i].nbytes for i in (0, 1, 3))
    assert conv._torch_bwd_dx(op, opd) == ((y, w * -(-c // 16) * 16 // c, scratch), (x, x))


def test_wide_padded_conv_gradients_and_verify(tmp_path):
    # a 15 x 15 kernel, pad 7 (a large-kernel stem): the memplan rule and `memplan verify`
    p = save(tmp_path, _model("Conv", (1, 2, 16, 16), (3, 2, 15, 15), (1, 3, 16, 16), pads=[7, 7, 7, 7]))
    assert check_gradients(p) >= 24
    check_verify(p, "-b", "1")


@pytest.mark.parametrize("cfg,brg,fwd,peak", [
    # (n, c, h, o, k, s, p, g), whether brgconv_strided runs the input's gradient, measured forward scratch
    # and backward peak (torch_conv_sweep.py --one ... --verbose, torch 2.14.1 / oneDNN 3.12, one thread).
    # More than 16 outputs per group, strided: brgconv_strided:avx512_core, the input's gradient channels
    # last beside its scratchpad, then copied out and cloned (3 x the input at the peak)
    ((2, 72, 32, 72, 3, 2, 1, 3), True, 652_032, 1_769_472),      # RegNetX's 24 per group
    ((2, 72, 112, 72, 3, 2, 1, 3), True, 7_287_552, 21_676_032),
    ((2, 72, 32, 72, 1, 2, 0, 3), True, 596_736, 1_769_472),
    ((2, 72, 32, 72, 5, 3, 2, 3), True, 762_624, 1_769_472),
    ((2, 72, 32, 72, 7, 2, 3, 3), True, 928_512, 1_769_472),
    ((2, 72, 33, 72, 3, 2, 1, 3), True, 689_472, 1_881_792),      # an odd width
    ((1, 120, 56, 120, 3, 2, 1, 5), True, 1_608_960, 4_515_840),
    ((4, 96, 28, 96, 3, 2, 1, 2), True, 1_370_112, 3_612_672),
    ((2, 24, 32, 72, 3, 2, 1, 3), True, 217_344, 589_824),        # 8 in, 24 out per group: the outputs count
    ((2, 51, 32, 51, 3, 2, 1, 3), True, 156_800, 1_253_376),      # 17 per group: gemm forward, brgemm here
    # 9 to 16 outputs per group where jit_avx512_common declines: brgconv_strided's AVX2 variant
    ((2, 48, 32, 48, 3, 3, 1, 3), True, 420_864, 1_179_648),      # 28 unrolled columns, no multiple of 3
    ((2, 30, 32, 30, 3, 2, 1, 3), True, 92_288, 737_280),         # 10 per group: no jit block divides it
    ((2, 36, 32, 36, 3, 3, 1, 3), True, 310_464, 884_736),
    # jit kernels: 16 per group at stride 2, 24 inputs over 8 outputs, 8 per group at stride 3, unstrided
    ((2, 48, 32, 48, 3, 2, 1, 3), False, 420_864, 912_576),
    ((2, 72, 32, 24, 3, 2, 1, 3), False, 610_560, 1_249_632),
    ((2, 36, 32, 36, 3, 2, 1, 3), False, 310_464, 589_824),
    ((2, 24, 32, 24, 3, 3, 1, 3), False, 203_520, 423_456),
    ((2, 72, 32, 72, 3, 1, 1, 3), False, 652_032, 1_831_968)])
def test_torch_grouped_strided_input_gradient(cfg, brg, fwd, peak):
    # jit_brgemm_conv_utils.cpp: brgemm's backward data (its forward with the roles swapped) refuses a
    # group of at most 16 (AVX-512) or 8 (AVX2) of the forward's outputs (`is_grouped_small_ic`)
    from memplan_cli.ops import conv

    n, c, h, o, k, s, p, g = cfg
    op, opd = _torch_op(n, c, h, o, k, s, p, g=g)
    assert conv._brg_grouped_dx(op, opd) is brg
    assert _torch_phases(op, opd) == (fwd, peak)
