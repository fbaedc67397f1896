"""The torch profile's bfloat16 convolution facts (memplan_cli/ops/conv.py, `--precision bf16-*`),
torch-free. Every expected figure was measured with torch 2.14.1 / oneDNN on one thread of an AMX
CPU: `python devtools/torch_conv_sweep.py --precision bf16-true --one "<the config named>" --events`
(`--set zoo` runs them all). The forward's figure is its scratch beside the output; the backward's
the allocator's peak from the incoming gradient, as the profile counts them."""
import pytest

from memplan_cli import analyze
from memplan_cli.ir.graph import Operand, Operation
from memplan_cli.ops import conv

onnx = pytest.importorskip("onnx")
from onnx import helper  # noqa: E402

from tests.profiles.test_torch_vision import _save  # noqa: E402


def _op(n, c, h, o, k, s=1, p=0, g=1, bias=True, dtype="bfloat16"):
    oh = (h + 2 * p - k) // s + 1
    opd = [Operand(0, "x", (n, c, h, h), dtype), Operand(1, "w", (o, c // g, k, k), dtype, is_const=True),
           Operand(2, "b", (o,), dtype, is_const=True), Operand(3, "y", (n, o, oh, oh), dtype)]
    t = "DepthwiseConv2D" if g > 1 and g == c else "Conv2D"
    op = Operation(0, t, [0, 1, 2] if bias else [0, 1], [3], {
        "kernel": (k, k), "stride": (s, s), "dilation": (1, 1), "group": g, "layout": "NCHW", "pads": (p,) * 4})
    return op, opd


def _best(alts):
    return max(sum(alt) for alt in alts)


def _bwd_peak(op, opd, xgrad=True):
    """max(dx + its scratch, dx + dW + db + the weight gradient's scratch)."""
    f = conv.TORCH
    dx = opd[0].nbytes if xgrad else 0
    sdx = _best(f["bwd_scratch_dx"](op, opd)) if xgrad else 0
    dw = opd[1].nbytes + (opd[2].nbytes if len(op.inputs) > 2 else 0)
    return max(dx + sdx, dx + dw + _best(f["bwd_scratch_dw"](op, opd)))


# (config, forward scratch, backward peak), measured
BRGCONV = [
    (dict(n=4, c=3, h=32, o=16, k=3, p=1), False, 262144, 303864),  # cnn_bn's first convolution
    (dict(n=4, c=16, h=16, o=32, k=3, p=1), True, 131072, 231256),
    (dict(n=16, c=16, h=16, o=16, k=3, p=1, bias=False), True, 262144, 466584),
    (dict(n=16, c=3, h=32, o=16, k=3, s=2, p=1, bias=False), False, 262144, 352920),  # brgconv_strided
]


@pytest.mark.parametrize("cfg, xgrad, fwd, bwd", BRGCONV)
def test_brgemm_convolution_copies_and_weight_gradient_scratchpad(cfg, xgrad, fwd, bwd):
    op, opd = _op(**cfg)
    assert conv.TORCH["refuse"](op, opd) is None
    assert _best(conv.TORCH["fwd_scratch"](op, opd)) == fwd
    assert _bwd_peak(op, opd, xgrad) == bwd


@pytest.mark.parametrize("cfg, bwd", [
    (dict(n=4, c=96, h=8, o=24, k=1, bias=False), 176792),  # 1x1 on rows up to 28 wide: one row (make_1d)
    (dict(n=16, c=16, h=16, o=64, k=1, bias=False), 873112),
    (dict(n=4, c=16, h=16, o=32, k=1, s=2, bias=False), 154200),  # the stride skips the last column
    (dict(n=16, c=32, h=8, o=64, k=3, s=2, p=1, bias=False), 340632),
])
def test_weight_gradient_scratchpad_follows_onednns_transposition_buffers(cfg, bwd):
    op, opd = _op(**cfg)
    assert _bwd_peak(op, opd) == bwd


def test_the_forward_scratchpad_is_at_least_brgemms_batch_and_tile_buffer():
    # measured 65,560 B beside the copies (`--one "n=4,c=16,h=16,o=32,k=3,s=2,p=1,bias=0"`): the
    # blocking-dependent pieces are not reproduced, the two that every brgemm convolution books are
    op, opd = _op(4, 16, 16, 32, 3, s=2, p=1, bias=False)
    assert _best(conv.TORCH["fwd_scratch"](op, opd)) == 107544 - 65560 + conv.BRG_SCRATCH_FLOOR


def test_the_forward_keeps_three_outputs_at_once():
    # the nhwc output, mkldnn_to_dense's nhwc-strided one and its .contiguous() copy
    op, opd = _op(4, 16, 16, 32, 3, p=1)
    assert (2 * opd[3].nbytes,) in conv.TORCH["fwd_scratch"](op, opd)


@pytest.mark.parametrize("cfg, fwd, bwd", [
    (dict(n=4, c=16, h=16, o=16, k=3, p=1, g=16, bias=False), 33056, 99296),
    (dict(n=16, c=96, h=8, o=96, k=3, p=1, g=96, bias=False), 198336, 595136),
])
def test_depthwise_blocks_by_16_beside_a_float32_reduction_buffer(cfg, fwd, bwd):
    op, opd = _op(**cfg)
    assert _best(conv.TORCH["fwd_scratch"](op, opd)) == fwd
    assert _bwd_peak(op, opd) == bwd


def test_brgemm_on_one_pixel_reorders_nothing():
    # DenseNet-121's last block at 32 x 32 (`--one "n=2,c=512,h=1,o=128,k=1,bias=0"`): measured backward
    op, opd = _op(2, 512, 1, 128, 1, bias=False)
    assert _bwd_peak(op, opd) == 458904


def test_a_float32_weight_under_autocast_counts_its_bfloat16_copy():
    # bf16-mixed: the weight and a first input are held in float32, the kernel reads bfloat16 copies
    op, opd = _op(4, 16, 16, 32, 3, p=1)
    mixed = list(opd)
    mixed[0] = Operand(0, "x", opd[0].shape, "float32")
    mixed[1] = Operand(1, "w", opd[1].shape, "float32", is_const=True)
    for key in ("fwd_scratch", "bwd_scratch_dx", "bwd_scratch_dw"):
        assert conv.TORCH[key](op, mixed) == conv.TORCH[key](op, opd)


@pytest.mark.parametrize("cfg, fwd, bwd", [
    (dict(n=4, c=16, h=1, o=4, k=1), 1088, 33696),
    (dict(n=4, c=96, h=1, o=6, k=1), 4272, 46628),
    (dict(n=16, c=6, h=1, o=96, k=1), 4096, 44824),
])
def test_a_squeeze_excite_1x1_on_one_pixel_takes_the_jit_kernels(cfg, fwd, bwd):
    # brgemm hands these small shapes to jit_bf16_1x1 (forward) and the jit AMX backward-data kernel
    op, opd = _op(**cfg)
    assert conv.TORCH["refuse"](op, opd) is None
    assert _best(conv.TORCH["fwd_scratch"](op, opd)) == fwd
    assert _bwd_peak(op, opd) == bwd


@pytest.mark.parametrize("cfg, fwd, bwd", [
    (dict(n=2, c=128, h=2, o=32, k=3, p=1), 75776, 272984),  # DenseNet's last block at 32 x 32
    (dict(n=4, c=64, h=4, o=24, k=3, s=2, p=1), 45504, 192328),
    (dict(n=2, c=96, h=2, o=96, k=1, bias=False), 21632, 97176),
    (dict(n=2, c=128, h=1, o=32, k=3, p=1), 74240, 260568),  # one pixel: jit AMX backward-data
])
def test_a_small_shapes_forward_takes_the_jit_kernels_blocked_by_16(cfg, fwd, bwd):
    # at most 4 output pixels: jit_bf16 / jit_bf16_1x1 forward, brgemm's backward
    op, opd = _op(**cfg)
    assert _best(conv.TORCH["fwd_scratch"](op, opd)) == fwd
    assert _bwd_peak(op, opd) == bwd


@pytest.mark.parametrize("cfg", [
    dict(n=2, c=3, h=4, o=16, k=3, s=2, p=1),  # a small shape of 3 channels: the AMX jit kernel
    dict(n=4, c=32, h=8, o=32, k=3, p=1, g=4),  # grouped
    dict(n=2, c=32, h=16, o=32, k=5, p=2, g=32),  # a 5x5 depthwise kernel: its weight gradient is gemm
])
def test_bfloat16_kernels_not_measured_are_refused(cfg):
    op, opd = _op(**cfg)
    assert "bfloat16 convolution" in conv.TORCH["refuse"](op, opd)


def test_float32_facts_are_unchanged():
    op, opd = _op(4, 16, 32, 32, 3, p=1, dtype="float32")
    assert conv.TORCH["refuse"](op, opd) is None
    # measured: `--one "n=4,c=16,h=32,o=32,k=3,p=1"` at 32-true
    assert _best(conv.TORCH["fwd_scratch"](op, opd)) == 524288


def test_a_bn_cnn_is_analysed_under_bf16(tmp_path):
    inits = [("w", (16, 3, 3, 3)), ("g", (16,)), ("be", (16,)), ("m", (16,)), ("v", (16,)), ("fw", (10, 16)),
             ("fb", (10,))]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
             helper.make_node("BatchNormalization", ["c", "g", "be", "m", "v"], ["n"], training_mode=0),
             helper.make_node("Relu", ["n"], ["r"]), helper.make_node("GlobalAveragePool", ["r"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]), helper.make_node("Gemm", ["f", "fw", "fb"], ["y"], transB=1)]
    path = _save(tmp_path, nodes, (4, 3, 32, 32), (4, 10), inits)
    fp = analyze(path, batch_size=4, optimizer="adam", profile="torch").report
    for precision in ("bf16-mixed", "bf16-true"):
        bf = analyze(path, batch_size=4, optimizer="adam", profile="torch", precision=precision).report
        assert bf["totals"]["planned"] < fp["totals"]["planned"]
