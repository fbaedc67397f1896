"""The torch profile's convolution scratch (memplan_cli/ops/conv.py), torch-free: oneDNN's gemm
weight-gradient kernel for kernels wider than 14 (ViT's patch embedding), the strided input-gradient
kernel (brgconv_strided), the blocked copies the weight-gradient kernel reads, the strided 1x1 rtus
buffer, and the kernels refused. Every expected figure was measured with torch 2.14 / oneDNN 3.12 on
one thread: `python devtools/torch_conv_sweep.py --one "<the config named in the test>" --events`."""
import numpy as np
import pytest

from memplan_cli.analysis import analyze
from memplan_cli.config import TrainConfig
from memplan_cli.ir.graph import Operand, Operation
from memplan_cli.ops import conv

onnx = pytest.importorskip("onnx")
from onnx import helper  # noqa: E402

from tests.profiles.test_torch_vision import _save  # noqa: E402


def _op(n, c, h, o, k, s=1, p=0):
    oh = (h + 2 * p - k) // s + 1
    opd = [Operand(0, "x", (n, c, h, h)), Operand(1, "w", (o, c, k, k), is_const=True), Operand(2, "b", (o,), is_const=True),
           Operand(3, "y", (n, o, oh, oh))]
    op = Operation(0, "Conv2D", [0, 1, 2], [3], {"kernel": (k, k), "stride": (s, s), "dilation": (1, 1), "group": 1,
                                                 "layout": "NCHW", "pads": (p, p, p, p)})
    return op, opd


def _best(alts, opd, op, xgrad):
    """The largest alternative in bytes, as profiles/torch/replay.py counts it."""
    def size(spec):
        if isinstance(spec, int):
            return spec
        spec, _, cond = spec.partition("?")
        if cond and not xgrad:
            return 0
        v = op.inputs[int(spec[2:])] if spec.startswith("in") else op.outputs[int(spec[3:])]
        return opd[v].nbytes
    return max(sum(size(x) for x in alt) for alt in alts)


def _bwd_peak(op, opd, xgrad):
    """Backward's allocations above the incoming gradient: max(dX + dX scratch, dX + dW + db + dW scratch)."""
    dx = opd[0].nbytes if xgrad else 0
    sdx = _best(conv._torch_bwd_dx(op, opd), opd, op, xgrad) if xgrad else 0
    return max(dx + sdx, dx + opd[1].nbytes + opd[2].nbytes + _best(conv._torch_bwd_dw(op, opd), opd, op, xgrad))


def test_patchify_weight_gradient_takes_the_gemm_kernel():
    # n=2,c=3,h=64,o=192,k=16,s=16,xgrad=0 (timm vit_tiny's patch embedding at 64 x 64): dW in the
    # plain layout (589,824), gemm's scratchpad (4 x the weight + the im2col columns, 2,408,704), db
    op, opd = _op(2, 3, 64, 192, 16, 16)
    assert conv._gemm_weights_scratch(op, opd) == 2_408_704
    assert _bwd_peak(op, opd, False) == 2_999_296


@pytest.mark.parametrize("cfg,peak", [
    # n, c, h, o, k (stride = kernel): kernels up to 14 wide keep the jit kernel (no gemm scratch)
    ((2, 3, 224, 768, 32), 47_791_360), ((2, 64, 32, 64, 16), 21_234_176), ((1, 3, 64, 96, 16), 1_524_352)])
def test_gemm_weight_gradient_scratch_follows_weight_and_columns(cfg, peak):
    n, c, h, o, k = cfg
    op, opd = _op(n, c, h, o, k, k)
    assert _bwd_peak(op, opd, False) == peak


def test_kernels_up_to_14_wide_keep_the_jit_weight_gradient():
    # n=2,c=3,h=224,o=768,k=14,s=14,xgrad=0: 3,618,816 measured, 3,072 of it the bias's copies
    op, opd = _op(2, 3, 224, 768, 14, 14)
    assert not conv._gemm_weights(op, opd)
    assert _bwd_peak(op, opd, False) == 3_618_816 - 3_072


def test_strided_input_gradient_is_unrounded_beside_its_scratchpad():
    # n=2,c=2,h=32,o=4,k=3,s=2,p=1 (LeViT's stem): dY as it is (8,192), W with 16 input channels
    # (2,304), dX unrounded (16,384), the scratchpad (36,888)
    op, opd = _op(2, 2, 32, 4, 3, 2, 1)
    assert conv._brgconv_scratch(op, opd) == 36_888
    assert _bwd_peak(op, opd, True) == 63_768
    # n=4,c=3,h=64,o=16,k=3,s=2,p=1: the gradient's copy and clone (3 x dX) is the peak
    op, opd = _op(4, 3, 64, 16, 3, 2, 1)
    assert _bwd_peak(op, opd, True) == 589_824


@pytest.mark.parametrize("cfg,scratch", [((2, 3, 32, 16, 3, 2, 1), 53_272), ((4, 3, 64, 16, 3, 2, 1), 102_424),
                                         ((2, 16, 32, 64, 2, 2, 0), 86_040), ((2, 64, 16, 128, 1, 2, 0), 53_272)])
def test_strided_input_gradient_scratchpad_grows_with_the_padded_gradient(cfg, scratch):
    assert conv._brgconv_scratch(*_op(*cfg)) == scratch


def test_weight_gradient_copies_a_blocked_input_that_needs_no_gradient():
    # n=2,c=16,h=32,o=64,k=2,s=2,xgrad=0: dY and X copied (131,072 each), then dW (16,384), db
    op, opd = _op(2, 16, 32, 64, 2, 2)
    assert _bwd_peak(op, opd, False) == 278_784
    # n=2,c=3,...: a 3-channel input is read as it is; dY with its 2 channels rounded to 16
    op, opd = _op(2, 3, 64, 2, 3, 2, 1)
    assert _bwd_peak(op, opd, False) == 133_000  # with the padded bias gradient (2 -> 16 channels)


def test_avx2_weight_gradient_blocks_by_8():
    # n=2,c=4,h=16,o=8,k=3,s=2,p=1: 4 to 15 input channels take the AVX2 kernel, blocks of 8
    op, opd = _op(2, 4, 16, 8, 3, 2, 1)
    gy, gx, gw = conv._weights_layout(op, opd)
    assert (gy, gx, gw) == (4_096, 16_384, 2_304)


def test_strided_1x1_gathers_its_input():
    # n=2,c=24,h=16,o=32,k=1,s=2,p=0: forward scratch 77,952 (rtus 8,320, X blocked to 32 channels
    # 65,536, W 4,096)
    op, opd = _op(2, 24, 16, 32, 1, 2)
    assert conv._rtus(op, opd) == 8_320
    assert _best(conv._torch_fwd(op, opd), opd, op, True) == 77_952


def test_input_channels_not_a_multiple_of_16_round_the_weight_copy():
    # n=2,c=24,h=16,o=24,k=3,s=1,p=1: W copied as 32 x 32 x 3 x 3 (36,864), the bias padded to 32
    # channels (256), forward scratch 119,040
    op, opd = _op(2, 24, 16, 24, 3, 1, 1)
    assert _best(conv._torch_fwd(op, opd), opd, op, True) == 119_040
    assert conv._padded_bias(op, opd) == 256


def test_padded_strided_1x1_runs_gemm_forward_and_weight_gradient():
    # n=2,c=16,h=8,o=16,k=1,s=2,p=1 (it was refused): x64:gemm:jit forward, its columns (1,728 B) beside
    # the output, then the output once more (3,200 B measured beside it); brgconv_strided's input gradient
    # and gemm's weight gradient (49,304 B backward peak)
    op, opd = _op(2, 16, 8, 16, 1, 2, 1)
    assert conv._torch_refuse(op, opd) is None
    assert _best(conv._torch_fwd(op, opd), opd, op, True) == 3_200
    assert _bwd_peak(op, opd, True) == 49_304
    op.attrs["group"] = 2  # grouped: not measured, refused as before
    op.attrs.pop("depth_multiplier", None)
    opd[1] = Operand(1, "w", (16, 8, 1, 1), is_const=True)
    assert "padded, strided 1x1" in conv._torch_refuse(op, opd)


def test_patchify_conv_scratch_reaches_the_report(tmp_path):
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], strides=[16, 16]),
             helper.make_node("Transpose", ["c"], ["y"], perm=[0, 2, 3, 1])]
    path = _save(tmp_path, nodes, (2, 3, 64, 64), (2, 4, 4, 192), [("w", (192, 3, 16, 16)), ("b", (192,))],
                 "patch.onnx")
    a = analyze(path, TrainConfig(loss="cce"), profile="torch")
    col = next(v for k, v in a.extras["per_layer_extra"].items() if k.split()[1] == "Conv2D")
    assert col["bwd_mem_tmp"] == 2_408_704


def test_wide_padded_kernel_reaches_the_report(tmp_path):
    # n=2,c=16,h=32,o=32,k=15,s=1,p=7: oneDNN's gemm forward, its im2col buffer (1,843,328 measured)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[7, 7, 7, 7]),
             helper.make_node("Transpose", ["c"], ["y"], perm=[0, 2, 3, 1])]
    path = _save(tmp_path, nodes, (2, 16, 32, 32), (2, 32, 32, 32), [("w", (32, 16, 15, 15))], "wide.onnx")
    a = analyze(path, TrainConfig(loss="cce"), profile="torch")
    col = next(v for k, v in a.extras["per_layer_extra"].items() if k.split()[1] == "Conv2D")
    assert col["fwd_mem_tmp"] == 1_843_328


def _tconv(n, c, h, o, k, s=1, p=0, op=0, bias=True):
    oh = (h - 1) * s - 2 * p + k + op
    opd = [Operand(0, "x", (n, c, h, h)), Operand(1, "w", (c, o, k, k), is_const=True), Operand(2, "b", (o,), is_const=True),
           Operand(3, "y", (n, o, oh, oh))]
    t = Operation(0, "ConvTranspose2D", [0, 1, 2] if bias else [0, 1], [3],
                  {"kernel": (k, k), "stride": (s, s), "dilation": (1, 1), "group": 1, "layout": "NCHW",
                   "pads": (p, p, p, p), "output_padding": (op, op)})
    return t, opd


@pytest.mark.parametrize("cfg,fwd,bwd", [
    # (n, c, h, o, k, s, p, op) -> forward scratch beside the output, backward peak (xgrad=1), measured:
    # `python devtools/torch_conv_sweep.py --one "n=..,c=..,h=..,o=..,k=..,s=..,p=..,op=..,t=1"`
    ((2, 32, 8, 32, 2, 2, 0, 0), 131_072, 114_816),   # U-Net's 2x2 stride-2 up-convolution
    ((2, 64, 8, 3, 4, 2, 1, 0), 151_704, 77_836),     # DCGAN's last layer (3 channels)
    ((2, 100, 1, 64, 4, 1, 0, 0), 467_968, 869_664),  # DCGAN's first, from a 1x1 latent (db's copy counted)
    ((2, 8, 8, 8, 3, 2, 0, 0), 84_824, 29_024),  # an odd output width (17): oneDNN's generic wrapper
    ((2, 40, 7, 20, 3, 2, 1, 1), 98_776, 140_048)])
def test_transposed_conv_scratch(cfg, fwd, bwd):
    t, opd = _tconv(*cfg)
    assert conv._torch_refuse(t, opd) is None
    assert _best(conv._torch_fwd(t, opd), opd, t, True) == fwd
    if bwd is not None:
        assert _bwd_peak(t, opd, True) == bwd


def test_stride_1_transposed_conv_bias_buffer():
    # n=2,c=16,h=8,o=8,k=3,s=1,p=1,t=1: 8,320 B more with a bias than without (21,504 measured)
    with_b, opd = _tconv(2, 16, 8, 8, 3, 1, 1)
    without, opd2 = _tconv(2, 16, 8, 8, 3, 1, 1, bias=False)
    assert _best(conv._torch_fwd(without, opd2), opd2, without, True) == 21_504
    assert _best(conv._torch_fwd(with_b, opd), opd, with_b, True) == 21_504 + 8_320


def test_transposed_conv_reaches_the_report(tmp_path):
    nodes = [helper.make_node("ConvTranspose", ["x", "w", "b"], ["c"], strides=[2, 2], kernel_shape=[2, 2]),
             helper.make_node("Transpose", ["c"], ["y"], perm=[0, 2, 3, 1])]
    path = _save(tmp_path, nodes, (2, 32, 8, 8), (2, 16, 16, 32), [("w", (32, 32, 2, 2)), ("b", (32,))], "up.onnx")
    a = analyze(path, TrainConfig(loss="cce"), profile="torch")
    col = next(v for k, v in a.extras["per_layer_extra"].items() if k.split()[1] == "ConvTranspose2D")
    assert col["fwd_mem_tmp"] == 131_072  # the output's copy and clone (measured)


def _dw(n, c, h, k, s=1):
    p = k // 2
    oh = (h + 2 * p - k) // s + 1
    opd = [Operand(0, "x", (n, c, h, h)), Operand(1, "w", (c, 1, k, k), is_const=True), Operand(2, "b", (c,), is_const=True),
           Operand(3, "y", (n, c, oh, oh))]
    op = Operation(0, "DepthwiseConv2D", [0, 1, 2], [3], {"kernel": (k, k), "stride": (s, s), "dilation": (1, 1),
                                                          "group": c, "layout": "NCHW", "pads": (p, p, p, p)})
    return op, opd


@pytest.mark.parametrize("cfg,peak", [
    # n, c, h, k, s -> backward peak (xgrad=1), measured: `--one "n=..,c=..,h=..,o=<c>,k=..,s=..,p=<k//2>,g=<c>"`
    ((2, 16, 32, 5, 1), 263_744), ((2, 96, 8, 7, 2), 147_008), ((2, 96, 32, 3, 1), 2_363_136),
    ((2, 24, 32, 3, 1), 722_144), ((2, 24, 32, 7, 2), 458_752)])
def test_depthwise_scratch(cfg, peak):
    # 5x5 and 7x7 take the gemm weight gradient (jit_dw's is 3x3 only); 24 channels are blocked as 32
    op, opd = _dw(*cfg)
    assert _bwd_peak(op, opd, True) == peak


def test_depthwise_5x5_weight_gradient_is_gemm():
    # n=2,c=16,h=32,k=5: 4 x the weight (6,400) + one channel's im2col (25 x 1,024 floats), 128 B each
    op, opd = _dw(2, 16, 32, 5)
    assert conv._gemm_weights(op, opd) and conv._gemm_weights_scratch(op, opd) == 109_056


@pytest.mark.parametrize("cfg,peak,gemm", [
    # n, c, h, groups, stride -> backward peak (xgrad=1), measured: `--one "n=..,c=..,h=..,o=<c>,k=3,s=..,p=1,g=.."`
    ((2, 64, 8, 16, 1), 88_576, True), ((2, 128, 8, 32, 1), 167_680, True),   # 4 channels per group
    ((2, 48, 8, 2, 1), 115_392, False), ((2, 96, 8, 12, 1), 175_488, False)])  # 24 and 8 per group
def test_grouped_weight_gradient_kernel(cfg, peak, gemm):
    n, c, h, g, s = cfg
    opd = [Operand(0, "x", (n, c, h, h)), Operand(1, "w", (c, c // g, 3, 3), is_const=True),
           Operand(2, "b", (c,), is_const=True), Operand(3, "y", (n, c, (h - 1) // s + 1, (h - 1) // s + 1))]
    op = Operation(0, "Conv2D", [0, 1, 2], [3], {"kernel": (3, 3), "stride": (s, s), "dilation": (1, 1), "group": g,
                                                 "layout": "NCHW", "pads": (1, 1, 1, 1)})
    assert conv._gemm_weights(op, opd) == gemm
    assert _bwd_peak(op, opd, True) == peak


@pytest.mark.parametrize("cfg,fwd,peak", [
    # n, c, h, o, k, s, groups, bias -> forward scratch beside the output, backward peak (xgrad=1), measured:
    # `--one "n=..,c=..,h=..,o=..,k=..,s=..,p=<k//2>,g=..,bias=.."`: gemm in all three phases
    ((4, 48, 16, 96, 5, 2, 48, 1), 98_304, 393_216),   # EdgeNeXt's multiplier 2, channels first
    ((2, 24, 8, 72, 3, 1, 24, 0), 36_864, 27_808),     # multiplier 3, 3x3 (no jit_dw), no bias
    ((2, 32, 8, 64, 3, 1, 16, 1), 32_768, 44_544),     # 2 inputs per group
    ((2, 36, 8, 36, 3, 2, 6, 1), 4_608, 61_168),       # 6 per group, strided: im2col larger than the output
    ((1, 32, 28, 128, 3, 1, 32, 1), 401_408, 200_704),
    ((4, 20, 12, 60, 3, 1, 10, 1), 138_240, 92_160)])
def test_grouped_convolution_no_jit_kernel_blocks_runs_gemm(cfg, fwd, peak):
    # jit_avx512_common needs both channel counts per group in blocks of 16, 8 or 4, jit_dw one input and
    # one output per group: gemm_convolution's im2col buffer beside the output and the input's gradient,
    # each then made once more
    n, c, h, o, k, s, g, bias = cfg
    oh = (h + 2 * (k // 2) - k) // s + 1
    opd = [Operand(0, "x", (n, c, h, h)), Operand(1, "w", (o, c // g, k, k), is_const=True),
           Operand(2, "b", (o,), is_const=True), Operand(3, "y", (n, o, oh, oh))]
    typ, attrs = "Conv2D", {"kernel": (k, k), "stride": (s, s), "dilation": (1, 1), "group": g, "layout": "NCHW",
                            "pads": (k // 2,) * 4}
    if g == c:
        typ, attrs["depth_multiplier"] = "DepthwiseConv2D", o // c
    op = Operation(0, typ, [0, 1, 2] if bias else [0, 1], [3], attrs)
    if not bias:
        opd[2] = Operand(2, "b", (0,), is_const=True)
    assert conv._gemm_grouped(op, opd) and conv._gemm_weights(op, opd)
    assert _best(conv._torch_fwd(op, opd), opd, op, True) == fwd
    assert _bwd_peak(op, opd, True) == peak


@pytest.mark.parametrize("cfg,peak,gemm", [
    # n, c, h, k, groups -> backward peak (xgrad=1), measured: `--one "n=..,c=..,h=..,o=<c>,k=..,s=1,
    # p=<k//2>,g=.." --verbose`; AVX2's weight-gradient kernel (8 or 24 channels per group; 4 to 15
    # input channels ungrouped) refuses a kernel taller than the input, and gemm runs
    ((4, 672, 4, 5, 84), 2_875_776, True),   # EfficientNet-B0 g8's last stage at 64 x 64
    ((4, 64, 2, 3, 8), 97_920, True), ((4, 64, 6, 7, 8), 595_584, True), ((4, 96, 4, 5, 4), 1_215_616, True),
    ((4, 672, 8, 5, 84), 2_604_672, False),  # 8 rows: AVX2's
    ((4, 64, 5, 5, 8), 128_512, False)])  # as tall as the input: AVX2's (with db's copy)
def test_avx2_weight_gradient_of_a_kernel_taller_than_its_input_runs_gemm(cfg, peak, gemm):
    n, c, h, k, g = cfg
    opd = [Operand(0, "x", (n, c, h, h)), Operand(1, "w", (c, c // g, k, k), is_const=True),
           Operand(2, "b", (c,), is_const=True), Operand(3, "y", (n, c, h, h))]
    op = Operation(0, "Conv2D", [0, 1, 2], [3], {"kernel": (k, k), "stride": (1, 1), "dilation": (1, 1), "group": g,
                                                 "layout": "NCHW", "pads": (k // 2,) * 4})
    assert conv._gemm_weights(op, opd) == gemm
    assert _bwd_peak(op, opd, True) == peak


def test_avx2_weight_gradient_ungrouped_kernel_taller_than_its_input_runs_gemm():
    # n=4,c=8,h=4,o=32,k=5,s=1,p=2: 8 input channels take AVX2's kernel, which refuses 5 rows over 4
    op, opd = _op(4, 8, 4, 32, 5, 1, 2)
    assert conv._gemm_weights(op, opd)
    assert _bwd_peak(op, opd, True) == 143_232


def test_grouped_convolution_in_blocks_of_4_keeps_the_jit_kernels():
    opd = [Operand(0, "x", (2, 64, 8, 8)), Operand(1, "w", (64, 4, 3, 3), is_const=True),
           Operand(2, "b", (64,), is_const=True), Operand(3, "y", (2, 64, 8, 8))]
    op = Operation(0, "Conv2D", [0, 1, 2], [3], {"kernel": (3, 3), "stride": (1, 1), "dilation": (1, 1), "group": 16,
                                                 "layout": "NCHW", "pads": (1, 1, 1, 1)})
    assert not conv._gemm_grouped(op, opd)


def _op1d(n, c, length, o, k, s=1):
    ol = (length - k) // s + 1
    opd = [Operand(0, "x", (n, c, length)), Operand(1, "w", (o, c, k), is_const=True), Operand(2, "y", (n, o, ol))]
    op = Operation(0, "Conv1D", [0, 1, -1], [2], {"kernel": (k,), "stride": (s,), "dilation": (1,), "group": 1,
                                                   "layout": "NCHW", "pads": (0, 0)})
    return op, opd


def test_conv1d_runs_as_the_2d_convolution_of_its_unsqueezed_view():
    # eager runs conv1d as conv2d on (N, C, 1, L) (ATen's view1d_as_2d); measured with torch 2.14 on one
    # thread, the profiler's allocator events of the op alone:
    # n=4,c=32,l=79,o=32,k=3,s=2, input needing its gradient: backward peaks at 146,456 B: dY (19,968),
    # W (12,288) and brgconv_strided's scratchpad (73,752) beside dX (40,448)
    op, opd = _op1d(4, 32, 79, 32, 3, 2)
    assert _best(conv.TORCH["bwd_scratch_dx"](op, opd), opd, op, True) + opd[0].nbytes == 146_456
    # n=4,c=32,l=79,o=32,k=3,s=1: 132,608 B, in the weight's phase: blocked dY and X copies, dW, beside dX
    op, opd = _op1d(4, 32, 79, 32, 3, 1)
    dw = _best(conv.TORCH["bwd_scratch_dw"](op, opd), opd, op, True) + opd[1].nbytes
    assert opd[0].nbytes + dw == 132_608
    # n=4,c=1,l=400,o=32,k=10,s=5 (Wav2Vec2's first feature conv): forward 80,896 B, a blocked output
    # beside the output
    op, opd = _op1d(4, 1, 400, 32, 10, 5)
    assert _best(conv.TORCH["fwd_scratch"](op, opd), opd, op, False) + opd[2].nbytes == 80_896


def _conv_relu_head(tmp_path, transposed):
    """Conv1d (4, 32, 79) -> (4, 32, 39), ReLU, then a head over the channels: read through a transpose
    (Wav2Vec2's `x.transpose(1, 2)`), or after a reshape that copies nothing."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[3], strides=[2]),
             helper.make_node("Relu", ["c"], ["g"])]
    if transposed:
        nodes += [helper.make_node("Transpose", ["g"], ["t"], perm=[0, 2, 1]),
                  helper.make_node("MatMul", ["t", "h"], ["y"])]
        return _save(tmp_path, nodes, (4, 32, 79), (4, 39, 10), [("w", (32, 32, 3)), ("h", (32, 10))], "t.onnx")
    nodes += [helper.make_node("MatMul", ["g", "h"], ["y"])]
    return _save(tmp_path, nodes, (4, 32, 79), (4, 32, 10), [("w", (32, 32, 3)), ("h", (39, 10))], "c.onnx")


def test_a_permuted_incoming_gradient_is_copied_contiguous_for_the_convolution(tmp_path):
    # ReLU's backward (threshold_backward) lays dX out like its incoming gradient, the transposed view's;
    # the convolution's backward copies it contiguous first (measured: +19,968 B, the output's size,
    # through both phases)
    a = analyze(_conv_relu_head(tmp_path, True), TrainConfig(loss="mse"), profile="torch")
    copies = [b for b in a.buffers.buffers if b.name.endswith(":grad_contiguous")]
    assert [b.size for b in copies] == [4 * 32 * 39 * 4] and copies[0].last > copies[0].first
    a = analyze(_conv_relu_head(tmp_path, False), TrainConfig(loss="mse"), profile="torch")
    assert not [b for b in a.buffers.buffers if b.name.endswith(":grad_contiguous")]


def test_a_conv1d_whose_2d_view_was_not_measured_is_estimated_not_refused():
    # a positional convolution as Wav2Vec2's, kernel 16, padding 16, 16 groups, dilated by 2: its 2-D
    # view (1 x 16) runs oneDNN kernels whose memory was not measured (a 2-D one is refused): the 1-D
    # facts count it and the report names it as estimated (undilated ones are measured:
    # tests/ops/test_conv.py)
    op, opd = _op1d(4, 64, 100, 64, 16)
    op.attrs.update({"pads": (16, 16), "group": 16, "dilation": (2,)})
    opd[1] = Operand(1, "w", (64, 4, 16), is_const=True)
    opd[2] = Operand(2, "y", (4, 64, 102))
    assert conv.TORCH["refuse"](op, opd) is None and conv.TORCH["estimated"](op, opd)
    assert conv.TORCH["fwd_scratch"](op, opd) == conv._torch_fwd(op, opd)
    op, opd = _op1d(4, 32, 79, 32, 3, 2)
    assert not conv.TORCH["estimated"](op, opd)


def _wide_strided(tmp_path, after_a_conv):
    """An 11 x 11 stride-2 convolution (16 -> 32 channels, 32 x 32), on the batch or on a 1 x 1
    convolution's output (whose gradient it then computes)."""
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a"], kernel_shape=[1, 1])] if after_a_conv else []
    nodes += [helper.make_node("Conv", ["a" if after_a_conv else "x", "w"], ["y"], kernel_shape=[11, 11],
                               strides=[2, 2])]
    inits = [("w", (32, 16, 11, 11))] + ([("w0", (16, 16, 1, 1))] if after_a_conv else [])
    return _save(tmp_path, nodes, (2, 16, 32, 32), (2, 32, 11, 11), inits, f"w{int(after_a_conv)}.onnx")


def test_a_strided_wide_input_gradient_is_named_as_estimated_where_it_runs(tmp_path):
    # brgconv_strided's batch for a kernel over 10 x 10 is its blocking search's pick: analysed (it was
    # refused) and named as estimated, but only where the input's gradient is computed
    for after, named in ((True, True), (False, False)):
        a = analyze(_wide_strided(tmp_path, after), TrainConfig(loss="mse"), profile="torch")
        est = a.extras["torch"]["coverage"]["estimated"]
        assert any(e["type"] == "Conv2D" for e in est) is named


# Grouped, strided Conv1d kernels 15 to 128 wide (SEW's positional convolution: 128 wide, 16 groups,
# stride 2), (N, C, L, O, K, stride, pad, groups) -> the peak of the input's gradient phase (dY, the
# weight's copy, dX and the kernel's buffers beside it), read off torch 2.14's allocator events (one
# thread, F.conv1d with a bias) and the kernel oneDNN named. They were refused.
GROUPED_STRIDED_WIDE = [
    ((4, 192, 12, 192, 128, 2, 64, 16), 1_721_352),  # brgconv_strided:avx2 (12 per group; 16 B less)
    ((4, 192, 25, 192, 128, 2, 64, 16), 1_832_968),  # brgconv_strided:avx2 (16 B less)
    ((4, 96, 12, 96, 64, 2, 32, 8), 459_288),        # brgconv_strided:avx2, the weight's 12 per group as 16
    ((2, 128, 20, 128, 31, 2, 15, 8), 321_560),      # brgconv_strided:avx2, 16 per group
    ((2, 64, 16, 64, 15, 3, 7, 2), 191_512),         # brgconv_strided:avx512_core, 32 per group
    ((4, 64, 12, 64, 16, 2, 8, 4), 84_992),          # jit:avx512_core: dY, W and dX blocked as they are
    ((4, 48, 40, 48, 20, 2, 10, 4), 92_928),         # jit:avx512_core
]


@pytest.mark.parametrize("cfg,peak", GROUPED_STRIDED_WIDE)
def test_grouped_strided_wide_input_gradient(cfg, peak):
    n, c, length, o, k, s, p, g = cfg
    ol = (length + 2 * p - k) // s + 1
    opd = [Operand(0, "x", (n, c, length)), Operand(1, "w", (o, c // g, k), is_const=True),
           Operand(2, "y", (n, o, ol))]
    op = Operation(0, "Conv1D", [0, 1, -1], [2], {"kernel": (k,), "stride": (s,), "dilation": (1,), "group": g,
                                                   "layout": "NCHW", "pads": (p, p)})
    assert conv.TORCH["refuse"](op, opd) is None
    got = opd[0].nbytes + _best(conv.TORCH["bwd_scratch_dx"](op, opd), opd, op, True)
    assert 0 <= got - peak <= 16


def _dilated(n, c, h, o, k, s, d, bias=False):
    p = d * (k // 2)
    oh = (h + 2 * p - d * (k - 1) - 1) // s + 1
    opd = [Operand(0, "x", (n, c, h, h)), Operand(1, "w", (o, c, k, k), is_const=True),
           Operand(2, "b", (o,), is_const=True), Operand(3, "y", (n, o, oh, oh))]
    op = Operation(0, "Conv2D", [0, 1, 2] if bias else [0, 1, -1], [3],
                   {"kernel": (k, k), "stride": (s, s), "dilation": (d, d), "group": 1, "layout": "NCHW",
                    "pads": (p, p, p, p)})
    return op, opd


@pytest.mark.parametrize("cfg,dw", [
    # (n, c, h, o, k, s, d) -> the weight phase's gemm scratch (4 x the weight + one image's columns +
    # alignment), measured in the profiler's events of a training step (torch 2.14, one thread):
    ((4, 960, 4, 256, 3, 1, 12), 35_942_656),  # DeepLabV3's ASPP branch: extent 25 over 4 rows
    ((4, 32, 32, 64, 3, 2, 2), 590_080),       # a dilated kernel with a stride
    ((4, 64, 8, 48, 3, 1, 6), None),           # extent 13 over 8 rows: gemm (no figure of its own here)
    ((4, 64, 8, 48, 3, 1, 2), 0)])             # extent 5 within 8 rows: the jit kernel, no gemm
def test_dilated_weight_gradient_takes_gemm(cfg, dw):
    # jit_avx512_common bwd_weights init_conf: a dilated height needs stride 1 and its extent within
    # the input, at any kernel width (AVX2's takes no dilation)
    op, opd = _dilated(*cfg)
    assert conv._gemm_weights(op, opd) == (dw != 0)
    if dw:
        assert conv._gemm_weights_scratch(op, opd) == dw


def test_dilated_strided_input_gradient_takes_gemm():
    # brgconv_strided takes no dilation: gemm_convolution_bwd_data's columns (one image, 32 x 9 x 16 x 16
    # floats + 128 B, measured 295,040 B) beside the input's gradient, then the gradient copied out
    op, opd = _dilated(4, 32, 32, 64, 3, 2, 2)
    assert conv._torch_bwd_dx(op, opd) == ((295_040,), ("in0",))


def _conv_of_transposed(tmp_path, transposed):
    """A Linear over tokens (4, 100, 64), its result transposed to (4, 64, 100) (or made contiguous by a
    Reshape of a copy), ReLU, then a Conv1d of 64 channels, kernel 3."""
    nodes = [helper.make_node("MatMul", ["x", "wl"], ["l"]),
             helper.make_node("Transpose", ["l"], ["t"], perm=[0, 2, 1]),
             helper.make_node("Relu", ["t"], ["r"]),
             helper.make_node("Conv", ["r", "w"], ["y"], kernel_shape=[3])]
    if not transposed:
        nodes[1] = helper.make_node("Reshape", ["l", "shape"], ["t"])
    inits = [("wl", (64, 64)), ("w", (64, 64, 3))]
    path = _save(tmp_path, nodes, (4, 100, 64), (4, 64, 98), inits, f"nc{int(transposed)}.onnx")
    if not transposed:
        m = onnx.load(path)
        m.graph.initializer.append(onnx.numpy_helper.from_array(np.array([4, 64, 100]), "shape"))
        onnx.save(m, path)
    return path


def test_a_non_contiguous_input_is_copied_in_forward_and_again_in_backward(tmp_path):
    # mkldnn_convolution and its backward take the input contiguous: ReLU of a transposed view keeps the
    # view's layout (TensorIterator), so the convolution copies it in forward (freed in the op) and copies
    # the saved input again in backward, through both phases (measured, torch 2.14: one input size more
    # in each; Conv1d (4, 64, 100) and (4, 128, 799) stride 2, Data2VecAudio's feature extractor)
    a = analyze(_conv_of_transposed(tmp_path, True), TrainConfig(loss="mse"), profile="torch")
    copies = sorted((b for b in a.buffers.buffers if ":contiguous" in b.name and "Conv" in b.name),
                    key=lambda b: b.first)
    assert [b.size for b in copies] == [4 * 64 * 100 * 4] * 2
    assert copies[0].last == copies[0].first and copies[1].last > copies[1].first
    a = analyze(_conv_of_transposed(tmp_path, False), TrainConfig(loss="mse"), profile="torch")
    assert not [b for b in a.buffers.buffers if ":contiguous" in b.name and "Conv" in b.name]


def test_grouped_slow_path_convolution_concatenates_its_groups():
    # CondConv's 1x1 pointwise conv with the batch folded into groups (timm efficientnet_cc_b0_4e's
    # last block at batch 4): (1, 4 x 1152, 7, 7) -> 4 x 320 outputs, no bias, one thread. ATen's slow
    # path has no grouped kernel: per group, then at::cat. Measured with torch 2.14's profiler: forward
    # peaks at 501,760 (the groups' outputs and their cat), backward at 13,602,816 (the groups' input
    # and weight gradients beside both cats: 2 x (903,168 + 5,898,240))
    opd = [Operand(0, "x", (1, 4608, 7, 7)), Operand(1, "w", (1280, 1152, 1, 1)), Operand(2, "y", (1, 1280, 7, 7))]
    op = Operation(0, "Conv2D", [0, 1], [2], {"kernel": (1, 1), "stride": (1, 1), "dilation": (1, 1), "group": 4,
                                             "layout": "NCHW", "pads": (0, 0, 0, 0)})
    assert conv.torch_backend(op, opd) == "slow"
    assert opd[2].nbytes + _best(conv._torch_fwd(op, opd), opd, op, True) == 501_760
    dx, dw = opd[0].nbytes, opd[1].nbytes
    assert dx + _best(conv._torch_bwd_dx(op, opd), opd, op, True) <= 13_602_816
    assert dx + dw + _best(conv._torch_bwd_dw(op, opd), opd, op, True) == 13_602_816
    # ungrouped, the same kernel makes each gradient once
    op.attrs["group"] = 1
    opd[1] = Operand(1, "w", (1280, 4608, 1, 1))
    assert _best(conv._torch_bwd_dw(op, opd), opd, op, True) == 0


@pytest.mark.parametrize("n,c,o,g,bias,xgrad,fwd,bwd", [
    # devtools/torch_conv_sweep.py --one "n=..,c=..,h=8 (7),o=..,k=1,g=..[,bias=0][,xgrad=0]", torch 2.14,
    # one thread: forward scratch beside the output, backward's allocator peak
    (2, 64, 64, 4, True, True, 32_768, 74_240),    # the groups' bias gradients beside their cat (+256)
    (2, 64, 64, 4, False, True, 32_768, 73_728),
    (4, 48, 96, 3, True, True, 75_264, 88_320),    # h=7
    (2, 64, 64, 4, True, False, 32_768, 20_736),   # a group's incoming gradient and input copied: the peak
])
def test_grouped_slow_path_counts_bias_pieces_and_group_copies(n, c, o, g, bias, xgrad, fwd, bwd):
    # an unstrided grouped 1x1 kernel on a batch under 16 runs ATen's slow path once per group; over
    # more than one sample a group's channels are no contiguous slice, so slow_conv2d copies them
    h = 7 if c == 48 else 8
    opd = [Operand(0, "x", (n, c, h, h)), Operand(1, "w", (o, c // g, 1, 1), is_const=True),
           Operand(2, "b", (o,), is_const=True), Operand(3, "y", (n, o, h, h))]
    op = Operation(0, "Conv2D", [0, 1, 2] if bias else [0, 1], [3], {
        "kernel": (1, 1), "stride": (1, 1), "dilation": (1, 1), "group": g, "layout": "NCHW", "pads": (0, 0, 0, 0)})
    assert conv.torch_backend(op, opd) == "slow"
    assert _best(conv._torch_fwd(op, opd), opd, op, xgrad) == fwd
    dx = opd[0].nbytes if xgrad else 0
    sdx = _best(conv._torch_bwd_dx(op, opd), opd, op, xgrad) if xgrad else 0
    dwb = opd[1].nbytes + (opd[2].nbytes if bias else 0)
    assert max(dx + sdx, dx + dwb + _best(conv._torch_bwd_dw(op, opd), opd, op, xgrad)) == bwd


@pytest.mark.parametrize("cfg,fwd,bwd", [
    # depthwise Conv1d (N, C, L, K, stride, pad), a bias, the input needing its gradient: a depthwise 2-D
    # kernel to oneDNN (jit_dw: channels blocked by 16), whose weight gradient takes gemm beyond 3 wide.
    # devtools/torch_conv_sweep.py --one "n=..,c=..,h=L,o=C,k=K,s=..,p=..,g=C,d1=1" --verbose, torch 2.14
    ((4, 64, 32, 4, 1, 3), 35_840, 69_632),    # Mamba's causal kernel 4: gemm weight gradient
    ((2, 48, 50, 3, 1, 1), 19_776, 58_368),    # jit_dw in every phase, 48 channels as they are
    ((2, 96, 32, 7, 1, 3), 27_264, 51_840),
    ((2, 40, 33, 3, 2, 1), 14_656, 30_496),    # 40 channels blocked as 48
    ((1, 64, 40, 4, 1, 3), 11_264, 22_272),
])
def test_depthwise_conv1d_is_a_depthwise_kernel_to_onednn(cfg, fwd, bwd):
    n, c, length, k, s, p = cfg
    ol = (length + 2 * p - k) // s + 1
    opd = [Operand(0, "x", (n, c, length)), Operand(1, "w", (c, 1, k), is_const=True),
           Operand(2, "b", (c,), is_const=True), Operand(3, "y", (n, c, ol))]
    op = Operation(0, "Conv1D", [0, 1, 2], [3], {"kernel": (k,), "stride": (s,), "dilation": (1,), "group": c,
                                                  "layout": "NCHW", "pads": (p, p)})
    assert conv.TORCH["refuse"](op, opd) is None and not conv.TORCH["estimated"](op, opd)
    assert _best(conv.TORCH["fwd_scratch"](op, opd), opd, op, True) == fwd
    dx = opd[0].nbytes + _best(conv.TORCH["bwd_scratch_dx"](op, opd), opd, op, True)
    dw = opd[0].nbytes + opd[1].nbytes + opd[2].nbytes + _best(conv.TORCH["bwd_scratch_dw"](op, opd), opd, op, True)
    assert max(dx, dw) == bwd


@pytest.mark.parametrize("cfg,gemm,bwd", [
    # oneDNN's jit_dw weight-gradient limits (init_conf), 2-D depthwise with a bias, measured as above:
    ((4, 96, 2, 3, 1, 1), True, 24_208),     # 3x3 over 2 x 2 rows: the input cannot hold the kernel
    ((4, 64, 8, 2, 2, 0), False, 148_736),   # 2x2 stride 2: jit_dw
    ((16, 64, 8, 1, 1, 0), False, 786_944),  # 1x1 at batch 16 (oneDNN, not the slow path): jit_dw
])
def test_depthwise_weight_gradient_follows_jit_dw_limits(cfg, gemm, bwd):
    n, c, h, k, s, p = cfg
    oh = (h + 2 * p - k) // s + 1
    opd = [Operand(0, "x", (n, c, h, h)), Operand(1, "w", (c, 1, k, k), is_const=True),
           Operand(2, "b", (c,), is_const=True), Operand(3, "y", (n, c, oh, oh))]
    op = Operation(0, "DepthwiseConv2D", [0, 1, 2], [3], {
        "kernel": (k, k), "stride": (s, s), "dilation": (1, 1), "group": c, "depth_multiplier": 1,
        "layout": "NCHW", "pads": (p, p, p, p)})
    assert conv._gemm_weights(op, opd) is gemm
    assert _bwd_peak(op, opd, True) == bwd


@pytest.mark.parametrize("cfg,bwd", [
    # grouped jit weight gradient of a frozen input (xgrad=0, no bias): the input is copied all the same
    # (devtools/torch_conv_sweep.py --one "n=..,c=..,h=8,o=..,k=3,p=1,g=..,xgrad=0,bias=0", torch 2.14)
    ((2, 64, 64, 4), 102_400),
    ((4, 96, 96, 3), 307_200),
])
def test_grouped_weight_gradient_copies_a_frozen_input(cfg, bwd):
    n, c, o, g = cfg
    opd = [Operand(0, "x", (n, c, 8, 8)), Operand(1, "w", (o, c // g, 3, 3), is_const=True),
           Operand(2, "y", (n, o, 8, 8))]
    op = Operation(0, "Conv2D", [0, 1], [2], {"kernel": (3, 3), "stride": (1, 1), "dilation": (1, 1), "group": g,
                                             "layout": "NCHW", "pads": (1, 1, 1, 1)})
    assert opd[1].nbytes + _best(conv._torch_bwd_dw(op, opd), opd, op, False) == bwd


def _tconv_grouped(n, c, h, o, k, p, g, bias=True, s=1):
    oh = (h - 1) * s - 2 * p + k
    opd = [Operand(0, "x", (n, c, h, h)), Operand(1, "w", (c, o // g, k, k), is_const=True),
           Operand(2, "b", (o,), is_const=True), Operand(3, "y", (n, o, oh, oh))]
    t = Operation(0, "ConvTranspose2D", [0, 1, 2] if bias else [0, 1], [3],
                  {"kernel": (k, k), "stride": (s, s), "dilation": (1, 1), "group": g, "layout": "NCHW",
                   "pads": (p, p, p, p), "output_padding": (0, 0)})
    return t, opd


@pytest.mark.parametrize("cfg,fwd,bwd", [
    # unstrided grouped ConvTranspose2d, 8 and 16 channels per group (oneDNN's conv:any over the grouped
    # jit kernels), measured: devtools/torch_conv_sweep.py --one "n=..,c=..,h=8,o=..,k=3,p=1,g=..,t=1"
    ((2, 32, 8, 32, 3, 1, 2, True), 51_328, 67_712),
    ((2, 32, 8, 32, 3, 1, 2, False), 34_816, 67_584),
    ((2, 64, 8, 64, 3, 1, 8, True), 84_096, 116_992),
    # an expansion without a bias (h=16, k=4, p=2): the output made twice outweighs input and weight
    ((1, 32, 16, 96, 4, 2, 4, False), 86_400, 201_088),
])
def test_grouped_transposed_conv_scratch(cfg, fwd, bwd):
    t, opd = _tconv_grouped(*cfg)
    assert conv._torch_refuse(t, opd) is None
    assert _best(conv._torch_fwd(t, opd), opd, t, True) == fwd
    dwb = opd[1].nbytes + (opd[2].nbytes if cfg[-1] else 0)
    dx = opd[0].nbytes
    assert max(dx + _best(conv._torch_bwd_dx(t, opd), opd, t, True),
               dx + dwb + _best(conv._torch_bwd_dw(t, opd), opd, t, True)) == bwd


@pytest.mark.parametrize("cfg,fwd,bwd", [
    # (n, c, h, o, k, p, g, bias, s), measured: devtools/torch_conv_sweep.py --set transposed_grouped
    # depthwise: jit_dw forward and input gradient (channels blocked by 16: 24 copied as 32), gemm's weight
    # gradient for a 4 x 4 kernel (+128 B, the deconvolution's nested scratchpad), jit_dw's for 2 x 2
    ((2, 64, 8, 64, 4, 1, 64, True, 2), 168_064, 167_936),
    ((2, 64, 8, 64, 4, 1, 64, False, 2), 131_072, 167_936),
    ((2, 24, 8, 24, 4, 1, 24, True, 2), 100_480, 83_968),
    ((2, 64, 8, 64, 2, 0, 64, True, 2), 164_992, 197_888),
    # 4 channels per group: the grouped jit kernels forward, gemm's weight gradient
    ((2, 64, 8, 64, 3, 1, 16, True, 1), 74_880, 88_704),
    # strided: brg_deconv over brgconv_strided, AVX2's (16 per group) and AVX-512's (32), then 8 per
    # group (the jit wrapper), then an odd output width brg_deconv declines (the wrapper's jit kernel)
    ((2, 32, 8, 32, 4, 1, 2, True, 2), 131_072, 131_200),
    ((2, 64, 8, 32, 4, 1, 2, True, 2), 151_704, 196_736),
    ((4, 48, 8, 48, 3, 1, 6, True, 2), 235_904, 285_120),
    ((2, 32, 16, 16, 3, 0, 2, False, 2), 139_392, 279_680),
])
def test_strided_depthwise_and_4_per_group_transposed_convs(cfg, fwd, bwd):
    t, opd = _tconv_grouped(*cfg)
    assert conv._torch_refuse(t, opd) is None
    assert _best(conv._torch_fwd(t, opd), opd, t, True) == fwd
    dwb = opd[1].nbytes + (opd[2].nbytes if cfg[7] else 0)
    dx = opd[0].nbytes
    assert max(dx + _best(conv._torch_bwd_dx(t, opd), opd, t, True),
               dx + dwb + _best(conv._torch_bwd_dw(t, opd), opd, t, True)) == bwd


def test_bias_gradient_copy_and_padded_bias_gradient():
    # n=2,c=16,h=8,o=24,k=3,s=1,p=1: jit's weight gradient books a padded bias gradient (4 x 32 + 128 B),
    # then the bias's gradient (96 B) is copied out beside the weight's (measured 51,552 B)
    op, opd = _op(2, 16, 8, 24, 3, 1, 1)
    assert _bwd_peak(op, opd, True) == 51_552
    # n=16,c=32,h=8,o=24,k=1: jit_1x1 the same (397,664 B); the copy only where the bias needs its gradient
    op, opd = _op(16, 32, 8, 24, 1)
    assert _bwd_peak(op, opd, True) == 397_664
    dw = conv._torch_bwd_dw(op, opd)
    assert "in2?g2" in dw[-1]


def test_strided_transposed_conv_odd_width_without_bias_books_no_output_buffer():
    # conv:any's output-sized buffer comes with a bias only (measured: 150,296 B with, 106,904 B without)
    with_b, opd = _tconv(2, 32, 7, 32, 3, 2, 1)
    without, opd2 = _tconv(2, 32, 7, 32, 3, 2, 1, bias=False)
    assert _best(conv._torch_fwd(with_b, opd), opd, with_b, True) == 150_296
    assert _best(conv._torch_fwd(without, opd2), opd2, without, True) == 106_904


@pytest.mark.parametrize("cfg,fwd,bwd", [
    # groups no jit kernel blocks: gemm in every phase (its columns + 128 B nested; the wrapper's output-sized
    # buffer with a bias), measured: `--one "n=2,c=..,h=8,o=..,k=..,s=..,p=1,g=..,t=1"`
    ((2, 48, 8, 48, 3, 1, 8, True, 1), 38_784, 90_816),    # 6 channels per group
    ((2, 48, 8, 48, 4, 1, 8, True, 2), 123_264, 141_888),  # strided, 6 per group: no brg (6 inputs per group)
    ((2, 64, 8, 32, 3, 1, 32, True, 1), 19_072, 65_536),   # 2 inputs over 1 output per group
])
def test_grouped_transposed_convs_no_jit_kernel_blocks_run_gemm(cfg, fwd, bwd):
    t, opd = _tconv_grouped(*cfg)
    assert conv._torch_refuse(t, opd) is None and conv._tconv_gemm(t, opd)
    assert _best(conv._torch_fwd(t, opd), opd, t, True) == fwd
    dwb = opd[1].nbytes + opd[2].nbytes
    dx = opd[0].nbytes
    assert max(dx + _best(conv._torch_bwd_dx(t, opd), opd, t, True),
               dx + dwb + _best(conv._torch_bwd_dw(t, opd), opd, t, True)) == bwd


def test_dilated_grouped_transposed_conv_stays_refused():
    t, opd = _tconv_grouped(2, 32, 8, 32, 3, 1, 2)
    t.attrs["dilation"] = (2, 2)
    why = conv._torch_refuse(t, opd)
    assert "dilated" in why and "\n" not in why


def _tconv_g(n, c, h, o, k, s=1, p=0, op=0, g=1, d=1, bias=True):
    oh = (h - 1) * s - 2 * p + d * (k - 1) + op + 1
    opd = [Operand(0, "x", (n, c, h, h)), Operand(1, "w", (c, o // g, k, k), is_const=True),
           Operand(2, "b", (o,), is_const=True), Operand(3, "y", (n, o, oh, oh))]
    t = Operation(0, "ConvTranspose2D", [0, 1, 2] if bias else [0, 1], [3],
                  {"kernel": (k, k), "stride": (s, s), "dilation": (d, d), "group": g, "layout": "NCHW",
                   "pads": (p, p, p, p), "output_padding": (op, op)})
    return t, opd


def _assert_slow_kernel(op, opd, backend, xgrad, fwd, bwd):
    """An eager slow kernel's convolution: chosen, counted (not refused), its forward scratch and backward peak."""
    assert conv.torch_backend(op, opd) == backend
    assert conv._torch_refuse(op, opd) is None
    assert _best(conv._torch_fwd(op, opd), opd, op, xgrad) == fwd
    assert _bwd_peak(op, opd, xgrad) == bwd


@pytest.mark.parametrize("cfg,xgrad,fwd,bwd", [
    # eager's slow transposed kernel (slow_conv_transpose2d), measured with
    # `python devtools/torch_conv_sweep.py --one "t=1,n=..,c=..,h=..,o=..,k=..[,s=..,p=..,op=..,g=..,d=..]"`:
    (dict(n=2, c=16, h=8, o=32, k=1), True, 16_384, 10_368),  # the forward's columns even for a 1x1 kernel
    (dict(n=2, c=16, h=8, o=32, k=1), False, 16_384, 2_176),
    (dict(n=2, c=16, h=8, o=32, k=1, p=1), True, 16_384, 18_560),  # padded: one sample's columns in backward
    (dict(n=4, c=16, h=8, o=32, k=1, g=2), True, 32_768, 42_112),  # per group: copies, then the cats
    (dict(n=1, c=16, h=8, o=32, k=1, g=4), True, 8_192, 9_472),  # one sample: no group copies
    (dict(n=1, c=8, h=8, o=16, k=3, s=2, p=1, op=1), True, 36_864, 43_584),  # one small sample, strided
    (dict(n=1, c=32, h=7, o=48, k=2, s=2, d=2, op=1), True, 37_632, 68_672)])  # dilated
def test_slow_transposed_kernel_columns(cfg, xgrad, fwd, bwd):
    _assert_slow_kernel(*_tconv_g(**cfg), "slow_transposed", xgrad, fwd, bwd)


def test_transposed_kernels_off_the_slow_path_keep_their_refusals():
    # a 5 x 5 transposed kernel on two samples runs on oneDNN, whose memory for it was not measured
    t, opd = _tconv_g(n=2, c=8, h=8, o=16, k=5)
    assert conv.torch_backend(t, opd) == "mkldnn" and "unstrided ungrouped ones up to 4" in conv._torch_refuse(t, opd)


@pytest.mark.parametrize("c,named", [(48, True), (40, True), (112, True), (176, True), (24, False), (32, False),
                                     (64, False), (96, False), (16, False)])
def test_brgconv_strided_block_its_cost_model_picks_is_named(c, named):
    # brgconv_strided's weight copy rounds the input channels to its block; `fast_check_ic_block` keeps 64
    # and 48 only where they divide the channels rounded to 16, so only a pick of 32 over an odd number of
    # 16-blocks (3 or more) rounds further: n=2,c=48,h=13,o=32,k=3,s=2,p=1 took 32 (10,776 B over the
    # profile's backward), n=4,c=48,h=28,o=16,k=3,s=2,p=1 took 16 (exact)
    op, opd = _op(2, c, 13, 32, 3, 2, 1)
    assert conv._torch_estimated_dx(op, opd) is named
    assert not conv._torch_estimated_dx(*_op(2, c, 13, 32, 3, 1, 1))  # unstrided: the jit kernel


def test_strided_transposed_forward_on_brgconv_names_its_output_block():
    # n=8,c=96,h=4,o=176,k=3,s=2,p=1,t=1: the forward's weight copy took 176 output channels as 192
    # (55,296 B over the profile); 32 outputs are exact
    t, opd = _tconv_g(n=8, c=96, h=4, o=176, k=3, s=2, p=1)
    assert conv._torch_estimated(t, opd)
    t, opd = _tconv_g(n=8, c=96, h=4, o=32, k=3, s=2, p=1)
    assert not conv._torch_estimated(t, opd)


def test_gemm_forward_scratch_names_the_cpu_its_cache_model_assumes(tmp_path):
    # n=2,c=16,h=32,o=32,k=15,s=1,p=7: gemm_convolution_fwd, whose im2col blocks its cache model sizes from
    # the L2 (1,843,328 B on a 2 MiB L2 per core; the `wide` sweep's gemm rows were each exact on a 1 MiB
    # L2 with GEMM_L2 at 1 MiB): the report names the CPU the facts assume, and the convolution
    import json

    import jsonschema
    from click.testing import CliRunner

    from memplan_cli.cli import main
    from memplan_cli.schemas import load_schema

    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[7, 7, 7, 7]),
             helper.make_node("Transpose", ["c"], ["y"], perm=[0, 2, 3, 1])]
    path = _save(tmp_path, nodes, (2, 16, 32, 32), (2, 32, 32, 32), [("w", (32, 16, 15, 15))], "wide.onnx")
    a = analyze(path, TrainConfig(loss="cce"), profile="torch")
    assert a.extras["torch"]["cpu"] == conv.CPU_NAME and "2 MiB L2 per core" in conv.CPU_NAME
    cs = a.extras["torch"]["coverage"]["cache_sized"]
    assert [o["type"] for o in cs["ops"]] == ["Conv2D"] and cs["says_so"]
    assert cs["bytes"] >= 1_843_328 and conv.CPU_NAME in cs["note"]
    run = CliRunner().invoke(main, ["analyze", str(path), "-p", "torch", "-l", "cce", "-f", "json"])
    jsonschema.validate(json.loads(run.output), load_schema("analysis"))
    run = CliRunner().invoke(main, ["analyze", str(path), "-p", "torch", "-l", "cce"], env={"COLUMNS": "80"})
    assert "cache model" in run.output and "coverage.cache_sized" in run.output
    # a 3 x 3 kernel runs oneDNN's jit kernel: no cache-sized scratch, the CPU still named
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Transpose", ["c"], ["y"], perm=[0, 2, 3, 1])]
    path = _save(tmp_path, nodes, (2, 16, 32, 32), (2, 32, 32, 32), [("w", (32, 16, 3, 3))], "small.onnx")
    a = analyze(path, TrainConfig(loss="cce"), profile="torch")
    assert "cache_sized" not in a.extras["torch"]["coverage"] and a.extras["torch"]["cpu"] == conv.CPU_NAME
    # a padded strided 1x1 kernel runs gemm_convolution_fwd too (its blocking search over the L2): listed
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Transpose", ["c"], ["y"], perm=[0, 2, 3, 1])]
    path = _save(tmp_path, nodes, (2, 16, 32, 32), (2, 17, 17, 32), [("w", (32, 16, 1, 1))], "p1x1.onnx")
    a = analyze(path, TrainConfig(loss="cce"), profile="torch")
    assert [o["type"] for o in a.extras["torch"]["coverage"]["cache_sized"]["ops"]] == ["Conv2D"]


def _dil(n, c, h, o, k, s=1, p=0, d=2, bias=True):
    oh = (h + 2 * p - d * (k - 1) - 1) // s + 1
    opd = [Operand(0, "x", (n, c, h, h)), Operand(1, "w", (o, c, k, k), is_const=True),
           Operand(2, "b", (o,), is_const=True), Operand(3, "y", (n, o, oh, oh))]
    op = Operation(0, "Conv2D", [0, 1, 2] if bias else [0, 1], [3],
                   {"kernel": (k, k), "stride": (s, s), "dilation": (d, d), "group": 1, "layout": "NCHW",
                    "pads": (p, p, p, p)})
    return op, opd


@pytest.mark.parametrize("cfg,xgrad,fwd,bwd", [
    # eager's slow dilated kernel (slow_conv_dilated2d) on one small sample, measured with
    # `python devtools/torch_conv_sweep.py --one "n=1,c=..,h=..,o=..,k=..,s=..,p=..,d=..[,bias=0][,xgrad=0]"`:
    # the columns (C x KH x KW, OH x OW) beside the output, then after the three gradients (and the bias's sum)
    (dict(n=1, c=8, h=8, o=16, k=3, p=2), True, 18_432, 25_216),
    (dict(n=1, c=16, h=16, o=16, k=3, s=2, p=2), True, 36_864, 62_592),
    (dict(n=1, c=8, h=8, o=16, k=2, p=1, d=3), True, 6_272, 10_496)])
def test_slow_dilated_kernel_columns(cfg, xgrad, fwd, bwd):
    _assert_slow_kernel(*_dil(**cfg), "slow_dilated", xgrad, fwd, bwd)


@pytest.mark.parametrize("cfg,fwd,bwd", [
    # ConvTranspose1d as ATen runs it, the 2-D transposed convolution of its unsqueezed view, measured with
    # `python devtools/torch_conv_sweep.py --one "n=..,c=..,h=..,o=..,k=..,s=..,g=..,t=1,d1=1"`:
    (dict(n=8, c=16, h=8, o=16, k=3, s=2, g=1), 73_496, 20_032),  # brgconv_strided forward
    (dict(n=2, c=24, h=8, o=8, k=1, s=2, g=2), 3_008, 4_000),  # grouped, strided 1x1
    (dict(n=4, c=64, h=16, o=64, k=4, s=1, g=64, p=2), 32_896, 32_768)])  # depthwise
def test_conv_transpose_1d_runs_as_its_2d_view(cfg, fwd, bwd):
    n, c, h, o, k, s, g, p = (cfg.get(a, 0 if a == "p" else None) for a in "n c h o k s g p".split())
    oh = (h - 1) * s - 2 * p + k
    opd = [Operand(0, "x", (n, c, h)), Operand(1, "w", (c, o // g, k), is_const=True),
           Operand(2, "b", (o,), is_const=True), Operand(3, "y", (n, o, oh))]
    t = Operation(0, "ConvTranspose1D", [0, 1, 2], [3], {"kernel": (k,), "stride": (s,), "dilation": (1,), "group": g,
                                                         "layout": "NCHW", "pads": (p, p), "output_padding": (0,)})
    f = conv.TORCH
    assert f["refuse"](t, opd) is None
    assert _best(f["fwd_scratch"](t, opd), opd, t, True) == fwd
    dx, dw = opd[0].nbytes, opd[1].nbytes + opd[2].nbytes
    assert max(dx + _best(f["bwd_scratch_dx"](t, opd), opd, t, True),
               dx + dw + _best(f["bwd_scratch_dw"](t, opd), opd, t, True)) == bwd


def test_conv_transpose_1d_whose_2d_view_is_refused_is_refused():
    opd = [Operand(0, "x", (2, 8, 16)), Operand(1, "w", (8, 4, 16), is_const=True), Operand(3, "y", (2, 8, 128))]
    t = Operation(0, "ConvTranspose1D", [0, 1], [2], {"kernel": (16,), "stride": (8,), "dilation": (1,), "group": 2,
                                                      "layout": "NCHW", "pads": (4, 4), "output_padding": (0,)})
    assert "up to 13 wide when grouped" in conv.TORCH["refuse"](t, opd)


@pytest.mark.parametrize("cfg,fwd,bwd,named", [
    # transposed kernels over 4 or strides over 2 (refused before), measured with
    # `python devtools/torch_conv_sweep.py --one "n=..,c=..,h=..,o=..,k=..,s=..,p=..[,g=..],t=1"`:
    (dict(n=8, c=24, h=13, o=8, k=5, s=3, p=1), 778_752, 668_192, False),  # brgconv_strided forward
    (dict(n=2, c=24, h=13, o=16, k=8, s=8), 2_768_896, 1_591_296, True),  # its blocking search's pick: named
    (dict(n=4, c=8, h=4, o=16, k=11, s=3, p=5, g=4), 56_960, 110_912, True)])  # grouped jit past 4 and 2: named
def test_transposed_kernels_past_4_and_strides_past_2(cfg, fwd, bwd, named):
    t, opd = _tconv_g(**cfg)
    if not cfg.get("p"):
        t.attrs["pads"] = (0, 0, 0, 0)
    assert conv._torch_refuse(t, opd) is None
    assert _best(conv._torch_fwd(t, opd), opd, t, True) == fwd
    assert _bwd_peak(t, opd, True) == bwd
    assert conv._torch_estimated(t, opd) is named


def test_unstrided_ungrouped_transposed_kernels_past_4_stay_refused():
    # n=2,c=32,h=4,o=48,k=11,s=1,p=5,t=1: the jit kernels' limits were not worked out (375,552 B over)
    t, opd = _tconv_g(n=2, c=32, h=4, o=48, k=11, p=5)
    assert "unstrided ungrouped ones up to 4" in conv._torch_refuse(t, opd)
    t, opd = _tconv_g(n=2, c=32, h=4, o=48, k=15, s=2, p=7, g=2)  # grouped, 15 wide
    assert "up to 13 wide when grouped" in conv._torch_refuse(t, opd)
    t, opd = _tconv_g(n=2, c=32, h=4, o=48, k=14, s=2, p=6)  # 14 wide: the weight gradient's boundary
    assert "not 14 wide" in conv._torch_refuse(t, opd)


@pytest.mark.parametrize("cfg,fwd,bwd", [
    # ungrouped, strided transposed kernels 15 wide and more (refused before): brgconv_strided forward,
    # gemm's weight gradient on the convolution view, named as estimated; measured with
    # `python devtools/torch_conv_sweep.py --one "n=..,c=..,h=..,o=..,k=..,s=..,p=..,t=1"`:
    (dict(n=2, c=16, h=4, o=16, k=20, s=10, p=5), 460_952, 2_460_096),  # within 8 B of 460,944 forward
    (dict(n=1, c=16, h=8, o=8, k=16, s=10), 585_112, 1_184_160)])
def test_ungrouped_strided_transposed_kernels_15_wide_and_more(cfg, fwd, bwd):
    t, opd = _tconv_g(**cfg)
    if not cfg.get("p"):
        t.attrs["pads"] = (0, 0, 0, 0)
    assert conv._torch_refuse(t, opd) is None and conv._torch_estimated(t, opd)
    assert _best(conv._torch_fwd(t, opd), opd, t, True) == fwd
    assert _bwd_peak(t, opd, True) == bwd


def test_a_dilated_grouped_wide_conv1d_falls_back_on_the_plain_facts(tmp_path):
    # its 2-D view (1 x 15, dilation 3, 4 groups) is refused by the wide rules; the 1-D fallback read the
    # wide rules too and raised ValueError (an internal error, exit 70) where its input needed a gradient
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a"], kernel_shape=[1]),
             helper.make_node("Conv", ["a", "w"], ["y"], kernel_shape=[15], dilations=[3], group=4)]
    path = _save(tmp_path, nodes, (1, 4, 50), (1, 16, 8), [("w", (16, 1, 15)), ("w0", (4, 4, 1))], "dil1d.onnx")
    a = analyze(path, TrainConfig(loss="mse"), profile="torch")
    assert [e["type"] for e in a.extras["torch"]["coverage"]["estimated"]] == ["Conv1D"]


def _op3d(n, c, dhw, o, k, s=1, p=0, g=1, d=1):
    """A Conv3D with a bias; `k` an int (cubic) or (KD, KH, KW)."""
    ks = (k,) * 3 if isinstance(k, int) else tuple(k)
    out = tuple((v + 2 * p - d * (kk - 1) - 1) // s + 1 for v, kk in zip(dhw, ks))
    opd = [Operand(0, "x", (n, c, *dhw)), Operand(1, "w", (o, c // g, *ks), is_const=True),
           Operand(2, "b", (o,), is_const=True), Operand(3, "y", (n, o, *out))]
    op = Operation(0, "Conv3D", [0, 1, 2], [3], {"kernel": ks, "stride": (s,) * 3, "dilation": (d,) * 3, "group": g,
                                                 "layout": "NCHW", "pads": (p,) * 6})
    return op, opd


@pytest.mark.parametrize("shape, backend", [
    (((1, 3, (4, 6, 2000), 4, 3), {}), "slow3d"),  # N x C x D x H, not W, against 20,480
    (((1, 3, (64, 112, 112), 4, 3), {}), "mkldnn"),
    (((1, 3, (4, 6, 6), 4, (3, 5, 3)), {}), "slow3d"),  # over 3 in both height and width, not depth
    (((1, 3, (4, 6, 6), 4, (3, 5, 5)), {}), "mkldnn"),
    (((15, 8, (6, 6, 6), 8, (5, 1, 1)), {}), "slow3d"),  # 1 x 1 in height and width: the depth not read
    (((16, 8, (6, 6, 6), 8, (5, 1, 1)), {}), "mkldnn"),
    (((1, 8, (4, 6, 6), 8, 3), dict(g=2, p=1)), "mkldnn"),
    (((2, 8, (4, 6, 6), 8, (3, 1, 1)), dict(g=8)), "slow3d"),
    (((1, 8, (4, 6, 6), 8, 3), dict(d=2, p=2)), "slow_dilated"),
])
def test_conv3d_backend_is_atens_choice(shape, backend):
    # torch 2.14.1, one thread: torch._C._select_conv_backend on these shapes
    args, kw = shape
    op, opd = _op3d(*args, **kw)
    assert conv.torch_backend(op, opd) == backend


@pytest.mark.parametrize("cfg, fwd, bwd", [
    # (n, c, dhw, o, k), options: slow_conv3d's columns over the batch, forward extra and backward peak,
    # measured with torch 2.14.1's profiler (one thread) on F.conv3d with a bias, the input trained
    (((1, 3, (4, 6, 6), 4, 3), dict(p=1)), 46656, 49696),
    (((1, 3, (4, 6, 6), 4, 1), {}), 0, 3456),  # 1x1x1: no columns forward, the input's gradient makes them
    (((4, 3, (4, 6, 6), 4, 1), {}), 0, 13824),
    (((1, 8, (4, 6, 6), 8, 1), dict(p=1)), 12288, 17184),
    (((1, 8, (4, 6, 6), 8, 1), dict(s=2)), 576, 5472),
    (((1, 8, (4, 6, 6), 8, 3), dict(s=2, p=1)), 15552, 27104),
    (((1, 8, (4, 6, 6), 8, 1), dict(g=2)), 4608, 9376),  # grouped: one call, the batch's columns
    (((4, 8, (4, 6, 6), 8, 1), dict(g=2)), 18432, 37024),
    (((1, 8, (4, 6, 6), 8, (3, 1, 1)), {}), 6912, 12320),
    (((4, 8, (4, 6, 6), 8, (3, 1, 1)), {}), 27648, 46880),
    (((4, 8, (4, 6, 6), 8, (3, 1, 1)), dict(p=1)), 98304, 117536),
    (((1, 8, (4, 6, 6), 8, 3), dict(d=2, p=2)), 124416, 136000),  # slow_conv_dilated3d
])
def test_conv3d_slow_kernels_columns(cfg, fwd, bwd):
    args, kw = cfg
    op, opd = _op3d(*args, **kw)
    assert _best(conv._torch_fwd(op, opd), opd, op, True) == fwd
    assert _bwd_peak(op, opd, True) == bwd


def test_the_sweep_tool_predicts_a_conv3d_volume():
    # devtools/torch_conv_sweep.py --set conv3d_slow's first row (d3: a (hd, h, h) volume, a (kd, k, k) kernel)
    from devtools.torch_conv_sweep import SETS, predict
    p = predict(dict(d3=1, n=1, c=3, hd=4, h=6, o=4, k=3, p=1), (1, 4, 4, 6, 6))
    assert (p["type"], p["fwd_scratch"], p["bwd_peak"]) == ("Conv3D", 46656, 49696)
    q = predict(dict(d3=1, n=4, c=8, hd=4, h=6, o=8, k=1, kd=3, p=1), (4, 8, 4, 8, 8))
    assert (q["fwd_scratch"], q["bwd_peak"]) == (98304, 117536)
    assert len(SETS["conv3d_slow_random"]) == 40


@pytest.mark.parametrize("shape, estimated", [
    (((4, 32, (4, 8, 8), 32, 3), dict(g=4, p=1)), True),  # oneDNN, grouped: not measured (named)
    (((4, 24, (4, 8, 8), 24, 3), dict(g=24, p=1)), True),  # depthwise
    (((4, 512, (1, 2, 2), 512, 3), dict(p=1)), True),  # oneDNN, ungrouped: its weight gradient on gemm
    (((4, 16, (4, 8, 8), 32, 3), dict(p=1)), True),  # oneDNN, ungrouped (exact here, but no 3-D rule)
    (((4, 8, (4, 6, 6), 8, 1), dict(g=2)), False),  # slow_conv3d's grouped 1x1x1: counted
    (((1, 3, (4, 6, 6), 4, 3), dict(p=1)), False),  # slow_conv3d
    (((1, 8, (4, 6, 6), 8, 3), dict(d=2, p=2)), False),  # slow_conv_dilated3d
])
def test_conv3d_on_onednn_is_named_as_estimated(shape, estimated):
    # devtools/torch_conv_sweep.py --one "d3=1,n=4,c=32,hd=4,h=8,o=32,k=3,p=1,g=4" (and g=24 on 24
    # channels): the 2-D grouped facts were 96,000 and 100,992 B over in backward; "d3=1,n=4,c=512,hd=1,
    # h=2,o=512,k=3,p=1": 85,154,048 B under (torch 2.14.1)
    args, kw = shape
    op, opd = _op3d(*args, **kw)
    assert conv._torch_estimated(op, opd) is estimated
