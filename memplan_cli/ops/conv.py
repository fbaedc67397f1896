"""Convolution in 1-D, 2-D and 3-D (ONNX Conv, TFLite CONV_2D / DEPTHWISE_CONV_2D) and transposed
convolution (ONNX ConvTranspose, TFLite TRANSPOSE_CONV: Keras Conv2DTranspose), with dilation and
groups.

Canonical types: `Conv1D`, `Conv2D`, `Conv3D` (any `group`, grouped non-depthwise included),
`DepthwiseConv2D` (group == input channels: TFLite's op, and an ONNX Conv with group == C_in),
`ConvTranspose1D/2D/3D`. Attributes (one set for every format, see `ops._window`): `layout` ("NCHW"
for ONNX: weights [O, C/group, *K], depthwise [C*M, 1, KH, KW], transposed [C_in, C_out/group, *K];
"NHWC" for TFLite: weights OHWI, depthwise [1, KH, KW, C*M], transposed [C_out, KH, KW, C_in]), `kernel`, `stride`, `dilation`,
`pads` (begin..., end...), `padding` ("SAME" / "VALID" / "EXPLICIT": how the pads came about, for
profiles that can express only SAME or VALID), `group`, `depth_multiplier` (depthwise),
`output_padding` (transposed), `activation` (fused, TFLite).

Training rule (PyTorch derivatives.yaml `convolution`: input, weight, bias:
convolution_backward(grad, input, weight, ...): the input is saved for the weight gradient, the
weight for the input gradient):
- calcGradient (the op trains): dW = corr(X, dY) reads X and dY; db = sum of dY (reads dY only).
- calcDerivative (X needs a back-prop): dX = conv_transpose(dY, W) reads W and dY.
- Kept for backward: X only when W trains, Y only when an activation is fused.
- Extras: none in memplan (kernels index W and dW in their stored layout). With
  `policy.transpose_extras` (onert) a Conv2D asks for W^T (|W|, calcDerivative) and dW^T (|W|,
  calcGradient), BACKWARD. onert's depthwise buffers are the onert profile's business.
- Transposed convolution: the same rule (its forward is a convolution's input gradient).
FLOPs: forward 2 x |Y| x (C/group x prod(K)); each backward step the same again.
Refused at load: spatial rank other than 1-3, pads that are negative, an output size the
geometry does not give, channels not divisible by the group, ConvTranspose with auto_pad or
output_shape (torch.onnx writes explicit pads and output_padding).
"""
from __future__ import annotations

import copy
import dataclasses
import math

import numpy as np

from memplan_cli.errors import UnsupportedOpError
from memplan_cli.ops._window import Window, _tuple, channels_first, conv_backward_input, \
    conv_backward_weight, conv_forward, to_cf, to_cl
from memplan_cli.ops import _onert as onert
from memplan_cli.ops._onert import VERSION, AfterCompile
from memplan_cli.ops.base import Canon, OpDef
from memplan_cli.ops.kernel_util import tflite_activation
from memplan_cli.ops.rule import BACKWARD, ExtraRequest, OpRule, StepIO, bp_targets, forward_io, \
    fused_activation

CONV = ("Conv1D", "Conv2D", "Conv3D")
TRANSPOSED = ("ConvTranspose1D", "ConvTranspose2D", "ConvTranspose3D")


# ---- rule -------------------------------------------------------------------------------------
def conv_like(op, ctx, *, transposes=True) -> OpRule:
    x, w = op.inputs[0], op.inputs[1]
    y = op.outputs[0]
    weights = [i for i in dict.fromkeys(op.inputs[1:]) if i >= 0 and ctx.is_param(i)]
    rule = OpRule(forward=forward_io(op), weights=weights)
    if ctx.trains(op) and weights:
        reads = [("bp", y)] + ([("fwd", x)] if w in weights else [])
        rule.calc_gradient = StepIO(reads, [("grad", i) for i in weights])
    # a weight or bias the graph computes (torch's weight_norm: g * v / ||v||) gets its back-prop
    computed = bp_targets(op, ctx, [i for i in dict.fromkeys(op.inputs[1:3]) if i >= 0 and i not in weights])
    targets = bp_targets(op, ctx, [x]) + computed
    if targets:
        reads = [("bp", y), ("fwd", w)] + ([("fwd", x)] if w in computed else [])
        rule.calc_derivative = StepIO(reads, [("bp", t) for t in targets])
    if transposes and ctx.policy.transpose_extras:
        wshape = ctx.operand(w).shape
        if rule.calc_derivative is not None:
            k = len(rule.extras)
            rule.extras.append(ExtraRequest("W^T", wshape, "float32", BACKWARD))
            rule.calc_derivative.writes.insert(0, ("extra", k))
            rule.calc_derivative.reads.append(("extra", k))
        if rule.calc_gradient is not None:
            k = len(rule.extras)
            rule.extras.append(ExtraRequest("dW^T", wshape, "float32", BACKWARD))
            rule.calc_gradient.writes.insert(0, ("extra", k))
            rule.calc_gradient.reads.append(("extra", k))
    fused_activation(op, ctx, rule, y)
    return rule


def _conv_rule(op, ctx):
    return conv_like(op, ctx, transposes=op.type == "Conv2D")


def _plain_rule(op, ctx):
    return conv_like(op, ctx, transposes=False)


# ---- weights in the kernels' layout ([O, C/group, *K], channels first) -------------------------
def _depthwise(op) -> bool:
    return op.type == "DepthwiseConv2D"


def _w_cf(op, w):
    if channels_first(op):
        return w
    # depthwise [1, KH, KW, C*M] and TFLite TRANSPOSE_CONV [C_out, KH, KW, C_in] move their last axis first
    return np.moveaxis(w, -1, 0) if _depthwise(op) or op.type in TRANSPOSED else np.moveaxis(w, -1, 1)


def _w_stored(op, w_cf):
    if channels_first(op):
        return w_cf
    return np.moveaxis(w_cf, 0, -1) if _depthwise(op) or op.type in TRANSPOSED else np.moveaxis(w_cf, 1, -1)


def _group(op, x_cf_shape) -> int:
    if _depthwise(op):
        return x_cf_shape[1]
    return int(op.attrs.get("group", 1) or 1)


def _geometry(ctx, x_shape, y_shape, w_cf_shape):
    """Shapes in the op's layout; weights channels first."""
    if ctx.op.type in TRANSPOSED:  # a convolution from Y's space to X's
        return Window.of(ctx.op, None, x_shape=y_shape, y_shape=x_shape, kernel=tuple(w_cf_shape[2:]))
    return Window.of(ctx.op, None, x_shape=x_shape, y_shape=y_shape, kernel=tuple(w_cf_shape[2:]))


def _cf(ctx, a):
    return a if channels_first(ctx.op) else to_cf(a)


def _hwio(w: np.ndarray) -> np.ndarray:
    """onert's transposed conv weights: OHWI -> HWIO (the first axis moved last; OIHW -> IHWO for
    ONNX), written flat into a buffer of |W| elements."""
    return w.transpose(1, 2, 3, 0)


# ---- kernels ----------------------------------------------------------------------------------
def forward(ctx):
    from memplan_cli.kernels import activation

    x, w, b = ctx.x(0), ctx.x(1), ctx.x(2)
    y = ctx.y()
    xc, wc = _cf(ctx, x), _w_cf(ctx.op, w)
    g = _geometry(ctx, x.shape, y.shape, wc.shape)
    grp = _group(ctx.op, xc.shape)
    if ctx.op.type in TRANSPOSED:
        out = conv_backward_input(xc, wc, _cf(ctx, y).shape, g, grp)
        if b is not None:
            out = out + b.reshape((1, -1) + (1,) * g.nd)
    else:
        out = conv_forward(xc, wc, b, g, grp)
    out = out if channels_first(ctx.op) else to_cl(out)
    y[...] = out
    activation.apply(y, ctx.act(), y)


def calc_gradient(ctx):
    _weight_and_bias(ctx, ctx.grad(1), ctx.grad(2), transposed_extra=True)


def _weight_and_bias(ctx, dw, db, transposed_extra=False):
    """dW and dB into `dw` / `db` (a gradient, or the back-prop of a computed weight / bias)."""
    if dw is None and db is None:
        return
    dz = ctx.dz()
    dzc = _cf(ctx, dz)
    if db is not None:
        db[...] = dzc.sum(axis=(0,) + tuple(range(2, dzc.ndim)))
    if dw is None:
        return
    x = ctx.x(0)
    xc = _cf(ctx, x)
    wc_shape = _w_cf(ctx.op, dw).shape
    g = _geometry(ctx, x.shape, dz.shape, wc_shape)
    grp = _group(ctx.op, xc.shape)
    if ctx.op.type in TRANSPOSED:  # X plays the output gradient, dY the input
        gw = conv_backward_weight(xc, dzc, wc_shape, g, grp)
    else:
        gw = conv_backward_weight(dzc, xc, wc_shape, g, grp)
    gw = _w_stored(ctx.op, gw)
    ext = ctx.extra("dW^T") if transposed_extra else None
    if ext is not None:
        # onert computes dW transposed (HWIO) into its own buffer, then transposes it into the gradient
        ext.reshape(-1)[...] = _hwio(gw).reshape(-1)
        dw[...] = ext.reshape(_hwio(gw).shape).transpose(3, 0, 1, 2)
        return
    dw[...] = gw


def calc_derivative(ctx):
    n = len(ctx.op.inputs)
    _weight_and_bias(ctx, ctx.dx(1) if n > 1 else None, ctx.dx(2) if n > 2 else None)
    dx = ctx.dx(0)
    if dx is None:
        return
    dz = ctx.dz()
    w = ctx.x(1)
    ext = ctx.extra("W^T")
    if ext is not None:
        # onert reads the weights through a transposed copy (HWIO)
        ext.reshape(-1)[...] = _hwio(w).reshape(-1)
        w = ext.reshape(_hwio(w).shape).transpose(3, 0, 1, 2)
    dzc, wc = _cf(ctx, dz), _w_cf(ctx.op, w)
    xshape = _cf(ctx, dx).shape
    g = _geometry(ctx, dx.shape, dz.shape, wc.shape)
    grp = _group(ctx.op, xshape)
    if ctx.op.type in TRANSPOSED:
        out = conv_forward(dzc, wc, None, g, grp)
    else:
        out = conv_backward_input(dzc, wc, xshape, g, grp)
    dx[...] = out if channels_first(ctx.op) else to_cl(out)


KERNELS = {"forward": forward, "calcGradient": calc_gradient, "calcDerivative": calc_derivative}


# ---- contract, FLOPs --------------------------------------------------------------------------
def check(op, operands):
    a = op.attrs
    if a.get("padding", "VALID") not in ("SAME", "VALID", "EXPLICIT"):
        return f"has an unknown padding {a.get('padding')!r}"
    xs, ws, ys = (tuple(operands[i].shape) for i in (op.inputs[0], op.inputs[1], op.outputs[0]))
    cf = channels_first(op)
    nd = len(xs) - 2
    want = {"Conv1D": 1, "Conv2D": 2, "Conv3D": 3, "DepthwiseConv2D": 2, "ConvTranspose1D": 1,
            "ConvTranspose2D": 2, "ConvTranspose3D": 3}[op.type]
    if nd != want or len(ws) != nd + 2 or len(ys) != nd + 2:
        return f"has a rank-{len(xs)} input and rank-{len(ws)} weights, not a {want}-D convolution"
    if any(s <= 0 for s in _tuple(a.get("stride"), nd)):
        return f"has a non-positive stride {tuple(a.get('stride'))}"
    if any(d <= 0 for d in _tuple(a.get("dilation"), nd)):
        return f"has a non-positive dilation {tuple(a.get('dilation'))}"
    if any(p < 0 for p in a.get("pads") or ()):
        return f"has negative pads {tuple(a['pads'])}"
    c_in = xs[1] if cf else xs[-1]
    c_out = ys[1] if cf else ys[-1]
    grp = c_in if _depthwise(op) else int(a.get("group", 1) or 1)
    if grp < 1 or c_in % grp or c_out % grp:
        return f"has {c_in} input and {c_out} output channels, not divisible into {grp} groups"
    if cf:
        wc = ws
    elif _depthwise(op) or op.type in TRANSPOSED:  # [1 | C_out, *K, C*M | C_in]
        wc = (ws[-1], ws[0]) + ws[1:-1]
    else:
        wc = (ws[0], ws[-1]) + ws[1:-1]
    if op.type in TRANSPOSED:
        if wc[0] != c_in or wc[1] * grp != c_out:
            return f"has weights {ws} that do not map {c_in} to {c_out} channels in {grp} groups"
        g = Window.of(op, operands, x_shape=ys, y_shape=xs, kernel=wc[2:])
        if g.out_size() != g.outs or any(g.extra):
            return (f"has an output {ys[2:]} its stride, pads and output_padding do not give from the input "
                    f"{xs[2:]}")
        return None
    if wc[0] != c_out or wc[1] * grp != c_in:
        return f"has weights {ws} that do not map {c_in} to {c_out} channels in {grp} groups"
    g = Window.of(op, operands, kernel=wc[2:])
    if g.out_size() != g.outs:
        return f"has an output {g.outs} its kernel, stride, dilation and pads do not give ({g.out_size()})"
    return None


def flops(op, operands):
    ws = operands[op.inputs[1]].shape
    if op.type in TRANSPOSED:  # per input element: C_out/group x prod(K) multiply-adds
        per = math.prod(ws[1:]) if channels_first(op) else math.prod(ws[:-1])  # TFLite [C_out, *K, C_in]
        f = 2 * operands[op.inputs[0]].num_elements * per
    else:  # per output element: C/group x prod(K); TFLite depthwise [1, KH, KW, C*M]: KH x KW
        per = math.prod(ws[1:3]) if _depthwise(op) and not channels_first(op) else math.prod(ws[1:])
        f = 2 * operands[op.outputs[0]].num_elements * per
    return f, 2 * f


# `--profile torch` (profiles/torch/): eager's `convolution` saves its input and weight (derivatives.yaml:
# convolution_backward(grad, input, weight, ...)): a weight computed each step (timm's weight
# standardisation: batch_norm over the weight) is held until the convolution's backward. On CPU it
# runs oneDNN (mkldnn_convolution), whose scratch goes through the allocator (no tensors), measured
# with torch 2.14's profiler on an AVX-512 CPU, where oneDNN's blocked layouts round channels up to
# 16 (_blocked):
# - forward copies the input into the blocked layout (only when it has 16 channels or more), the
#   weight (output channels rounded; input channels too when the input is blocked) and computes into
#   a blocked scratch output, then copies it out;
# - backward first makes the input's gradient: copies of the incoming gradient and of the weight
#   (both blocked), a blocked scratch of the input's gradient, then the result copied out (a strided
#   ungrouped conv clones it once more); then the weight's gradient: copies of the incoming
#   gradient and of the input, and the result copied out (a second weight-sized tensor).
# Grouped (not depthwise) convolutions were measured with channel counts that need no rounding.
# Other kernels (gemm, brgconv_strided, jit_1x1, AVX2, transposed): the functions below, measured with
# devtools/torch_conv_sweep.py (docs/torchprof.md, "Convolution kernels").
BLOCK = 16


def _round(c: int) -> int:
    return -(-c // BLOCK) * BLOCK


def _blocked(op, operands) -> tuple:
    """(input, output, weight forward, weight backward) bytes in oneDNN's blocked layouts, and whether
    the input is blocked."""
    x, y, w = (operands[v] for v in (op.inputs[0], op.outputs[0], op.inputs[1]))
    ch = 1 if op.attrs.get("layout", "NCHW") == "NCHW" else -1
    cx, cy = int(x.shape[ch]), int(y.shape[ch])
    o, i = int(w.shape[0]), int(w.shape[1] if ch == 1 else w.shape[-1])
    grouped = int(op.attrs.get("group", 1)) != 1 or op.type == "DepthwiseConv2D"
    if op.type == "DepthwiseConv2D":
        # jit_dw rounds the channels up to 16 too (measured: 24 channels copied as 32)
        bx, by, bw = x.nbytes * _round(cx) // cx, y.nbytes * _round(cy) // cy, w.nbytes * _round(o) // o
        return bx, by, bw, bw, True
    if grouped:
        return x.nbytes, y.nbytes, w.nbytes, w.nbytes, True
    # jit_1x1 blocks the input whatever its channels (measured: 3, 8 and 12 channels copied as 16)
    blocked_in = cx >= BLOCK or _jit_1x1(op, operands)
    bx = x.nbytes * _round(cx) // cx
    by = y.nbytes * _round(cy) // cy
    bw_f = w.nbytes * _round(o) * (_round(i) if blocked_in else i) // (o * i)
    bw_b = w.nbytes * _round(o) // o * _round(i) // i
    return bx, by, bw_f, bw_b, blocked_in


def torch_backend(op, operands) -> str:
    """The CPU kernel eager picks for this convolution (ATen's ConvParams::use_mkldnn, checked against
    torch 2.14's `torch._C._select_conv_backend` over a grid of shapes on one thread, the oracle's
    setting): "mkldnn" unless a 1x1, unstrided, undilated kernel runs on a batch under 16 (the slow
    path is faster on one thread), or an ungrouped kernel of at most 3x3 on one small sample
    (at most 20,480 input elements); then "slow" (im2col + GEMM), "slow_dilated" when dilated
    (`_sample_columns`), "slow_transposed" for a transposed one (`_tconv_slow`).
    A 3-D one (`Conv3D`, channels first) takes the same test read as ATen writes it for a 5-D input:
    the kernel's last two sizes (height and width, not depth) and N x C x D x H elements (not W);
    then "slow3d" (slow_conv3d: `_slow3d_columns`), or "slow_dilated" (slow_conv_dilated3d, the 2-D
    dilated kernel's pattern). 1-D convolutions and 3-D transposed ones keep the oneDNN facts."""
    if op.type == "Conv3D" and op.attrs.get("layout", "NCHW") == "NCHW":
        return _torch_backend3d(op, operands)
    if op.type not in ("Conv2D", "DepthwiseConv2D", "ConvTranspose2D"):
        return "mkldnn"
    x = operands[op.inputs[0]]
    n = int(x.shape[0])
    kh, kw = (int(v) for v in op.attrs["kernel"])
    strided = any(int(v) > 1 for v in op.attrs.get("stride", (1,)))
    dilated = any(int(v) > 1 for v in op.attrs.get("dilation", (1,)))
    grouped = int(op.attrs.get("group", 1) or 1) > 1 or op.type == "DepthwiseConv2D"
    if (strided or dilated or n >= 16 or (kh, kw) != (1, 1)) and \
            (grouped or (kh > 3 and kw > 3) or n > 1 or x.num_elements > 20480):
        return "mkldnn"
    if op.type == "ConvTranspose2D":
        return "slow_transposed"
    return "slow_dilated" if dilated else "slow"


def _torch_backend3d(op, operands) -> str:
    """ATen's ConvParams::use_mkldnn and select_conv_backend for a 5-D float input (Convolution.cpp):
    mkldnn unless the kernel is 1 x 1 in height and width, unstrided and undilated on a batch under 16,
    or ungrouped, not over 3 in both height and width, on one sample of at most 20,480 elements over
    N x C x D x H; otherwise SlowDilated3d when dilated, else Slow3d (checked against torch 2.14.1's
    `torch._C._select_conv_backend`: a (1, 3, 4, 6, 2000) input runs Slow3d, (1, 3, 64, 112, 112)
    mkldnn; a 3 x 1 x 1 kernel on batch 15 Slow3d, on 16 mkldnn)."""
    x = operands[op.inputs[0]]
    n, c, d, h = (int(v) for v in x.shape[:4])
    kh, kw = (int(v) for v in tuple(op.attrs["kernel"])[-2:])
    strided = any(int(v) > 1 for v in op.attrs.get("stride", (1,)))
    dilated = any(int(v) > 1 for v in op.attrs.get("dilation", (1,)))
    grouped = int(op.attrs.get("group", 1) or 1) > 1
    if (strided or dilated or n >= 16 or (kh, kw) != (1, 1)) and \
            (grouped or (kh > 3 and kw > 3) or n > 1 or n * c * d * h > 20480):
        return "mkldnn"
    return "slow_dilated" if dilated else "slow3d"


# Eager's slow_conv3d (ATen's ConvolutionMM3d.cpp) runs groups itself (no per-group _convolution, no
# cat) and keeps vol2col's columns for the whole batch, (N, C x KD x KH x KW, OD x OH x OW). Measured
# with torch 2.14.1's profiler, one thread (batch 1 and 4; kernels 1x1x1, 3x1x1, 3x3x3; strided, padded,
# grouped): forward makes the columns, then the output, then frees the columns -- none for an
# ungrouped, unstrided, unpadded 1x1x1 kernel; backward makes the input's gradient, then columns of the
# same size (even for that 1x1x1 kernel) and frees them; then the bias's and the weight's gradients, and
# the columns again beside them (none again for that 1x1x1 kernel).
def _slow3d_columns(op, operands, skip_1x1=True) -> int:
    """Bytes of slow_conv3d's columns over the batch; 0 for an ungrouped, unstrided, unpadded 1x1x1
    kernel when `skip_1x1` (forward and the weight's gradient; the input's gradient makes them)."""
    if skip_1x1 and tuple(int(v) for v in op.attrs["kernel"]) == (1, 1, 1) and not _strided(op) and \
            int(op.attrs.get("group", 1) or 1) == 1 and not any(int(p) for p in op.attrs.get("pads") or ()):
        return 0
    return int(operands[op.inputs[0]].shape[0]) * _sample_columns(op, operands)


# _SLOW_GROUPED: the slow path (Slow2d) has no grouped kernel: ATen's `_convolution` runs it once per
# group on `subtensor` views and `at::cat`s the groups' outputs (dim 1); `convolution_backward` runs
# `_convolution_backward_nogroup_backend` per group, keeping each group's input, weight and bias
# gradients, then cats them (dim 1, dim 0, dim 0). Measured (torch 2.14, one thread): a 1x1 conv of
# 4 groups on (1, 4 x 1152, 7, 7) -- CondConv's per-sample weights, the batch folded into groups --
# forward peaks at 2 x the output, backward at 2 x (input + weight) bytes: each gradient twice; with a
# bias, its groups' gradients too. Over a batch of more than one, a group's channels are no contiguous
# slice: slow_conv2d (ConvolutionMM2d.cpp) copies that group's input contiguous in forward, and its
# incoming gradient and input in backward, freed when the group is done (the peak where one group's
# copies outweigh the pieces and cats).
def _slow_groups(op, operands) -> int:
    if _depthwise(op):  # one group per input channel
        x = operands[op.inputs[0]]
        return int(x.shape[1 if op.attrs.get("layout", "NCHW") == "NCHW" else -1])
    return int(op.attrs.get("group", 1) or 1)


def _slow_group_copies(op, operands, which) -> int:
    """Bytes of one group's contiguous copies of `which` ("in0", "out0") on the grouped slow path: none
    on one sample, where a group's channels are a contiguous slice."""
    x = operands[op.inputs[0]]
    if int(x.shape[0]) == 1:
        return 0
    g = _slow_groups(op, operands)
    return sum(operands[op.inputs[0] if w == "in0" else op.outputs[0]].nbytes // g for w in which)


def _columns(op, operands) -> int:
    """Bytes of slow_conv2d's im2col buffer: (N, C x KH x KW, OH x OW), none for an unstrided,
    unpadded 1x1 kernel (a strided one gathers its input: measured)."""
    if tuple(int(v) for v in op.attrs["kernel"]) == (1, 1) and not _strided(op) and \
            not any(int(p) for p in op.attrs.get("pads") or ()):
        return 0
    return int(operands[op.inputs[0]].shape[0]) * _sample_columns(op, operands)


def _sample_columns(op, operands) -> int:
    """Bytes of one sample's im2col columns, (C x KH x KW, OH x OW) (slow_conv2d's are the batch's:
    `_columns`). Eager's slow dilated kernel (ATen's NaiveDilatedConvolution.cpp, slow_conv_dilated2d,
    which `torch_backend` picks for a dilated kernel on one small sample) makes them in forward beside
    the output, and again in backward after the three gradients (measured, torch 2.14.1:
    devtools/torch_conv_sweep.py --set dilated_slow)."""
    x, y = operands[op.inputs[0]], operands[op.outputs[0]]
    k = int(np.prod([int(v) for v in op.attrs["kernel"]]))  # KH x KW, or KD x KH x KW (slow_conv_dilated3d)
    ch = 1 if op.attrs.get("layout", "NCHW") == "NCHW" else -1
    c, cy = int(x.shape[ch]), int(y.shape[ch])
    return c * k * (y.num_elements // (int(y.shape[0]) * cy)) * (x.nbytes // max(x.num_elements, 1))


# A channels-last input (NHWC strides: ConvNeXt's LayerNorm over channels leaves one) makes oneDNN run
# its channels-last kernels, whose output is channels-last too (the profile sets the op's
# attrs["memory_format"]). Measured with torch 2.14's profiler (allocator events per op, one thread,
# AVX-512), over batch 1-16, 2-56 pixels a side, 16-768 channels:
# - ungrouped (1x1, 3x3, 2x2 / 4x4 strided): a weight that is not channels-last already (a kernel
#   larger than 1x1) is first copied channels-last, and that copy lives through the op, forward and
#   backward. Forward: the output, a scratchpad of CL_FWD_PAD bytes and the weight reordered (output
#   channels rounded up to 16, to 32 when strided). Backward, the input's gradient: the weight
#   reordered (input channels rounded to 16, to 32 when strided) and a scratchpad of CL_BWD_PAD bytes;
#   strided, a scratchpad of CL_BWD_STRIDED bytes plus one sample's incoming gradient rounded up to
#   16 KiB (batch-independent). Then the weight's gradient: the weight reordered (both
#   channel counts rounded to 16), the bias's gradient twice, the weight's gradient twice.
# - depthwise (channels-last): forward only reorders the weight (channels rounded to 16), no input or
#   output copy; backward reorders it again for the input's gradient; the weight's gradient of a kernel
#   larger than 3x3 goes through a scratch of CL_DW_SCRATCH x the weight (whatever the batch and image
#   size), beside (16 x channels + 32) floats, the bias's gradient twice and the weight's twice; a 3x3
#   one through a weight-sized buffer instead, unless its input is less high than the kernel (then the
#   256 x scratch too).
# On the slow path (a 1x1 kernel on a batch under 16, a small kernel on one small sample) it makes the
# channels-last weight copy, then im2col's columns (none for 1x1) in forward and again beside the
# weight's gradient, as in NCHW.
# - grouped, other than depthwise with one output per channel (EdgeNeXt's depth multiplier 2, ResNeXt-like
#   groups), per oneDNN's own dispatch and blocking: brgemm takes a group of more than 16 input channels
#   (jit_brgemm_conv_utils.cpp: `is_grouped_small_ic` sends ic per group <= 16 elsewhere; its backward
#   data runs brgemm forward with the roles swapped, so there the output channels per group count) and
#   allocates as the ungrouped kernels do, per group; a smaller group takes jit_avx512_common
#   (jit_avx512_common_conv_kernel.cpp init_conf), which reorders the weight to gOIhw{s}i{s}o, s = 16,
#   or 8 / 4 where both channel counts per group are under 16 and divide by it (`ok_to_try_lower_zmm`),
#   channels per group rounded up to s (128 x the weight for a multiplier of 2), and needs no other
#   scratch forward or for the input's gradient. The weight's gradient is jit_avx512_common's whatever
#   the group (gOIhw16i16o, both counts rounded to 16), with a padded bias of groups x 16-rounded
#   outputs floats (+ 128 B) when the outputs per group are no multiple of 16 (init_scratchpad's
#   key_conv_padded_bias); depthwise kernels larger than 3x3 are its multiplier-1 case (the 256 x).
CL_FWD_PAD, CL_BWD_PAD, CL_BWD_STRIDED, CL_DW_SCRATCH = 8216, 8344, 20504, 256


def _round_to(c: int, b: int) -> int:
    return -(-c // b) * b


def _channels_last(op) -> bool:
    return op.attrs.get("memory_format") == "channels_last"


def _cl_parts(op, operands) -> dict:
    """Byte sizes of the channels-last kernels' buffers (see above)."""
    x, y, w = (operands[v] for v in (op.inputs[0], op.outputs[0], op.inputs[1]))
    o, i = int(w.shape[0]), int(w.shape[1])
    k = w.num_elements // max(o * i, 1)
    e = w.nbytes // max(w.num_elements, 1)
    b = operands[op.inputs[2]].nbytes if _has_bias(op) else 0
    strided = any(int(s) > 1 for s in op.attrs.get("stride", (1,)))
    r = 32 if strided else 16
    per_sample = y.nbytes // max(int(y.shape[0]), 1)
    g = int(op.attrs.get("group", 1) or 1) if op.type == "Conv2D" else 1  # brgemm's groups: per group
    og = o // g
    # brgemm's block of a group's outputs is 16 x up to min(outputs / 16, 4), its heuristic's pick: 16
    # where a group has at most 16 (measured: 12 outputs strided take 16)
    rf, rb = (r, r) if g == 1 else (16 if og <= BLOCK else r, 16 if i <= BLOCK else r)
    return {"w": w.nbytes, "b": b, "k": k, "c": o,
            "w_cl": w.nbytes if k > 1 and i > 1 else 0,  # weight.contiguous(channels_last)
            "fwd_w": g * _round_to(og, rf) * i * k * e, "bwd_w": o * _round_to(i, rb) * k * e,
            "dw_w": g * _round_to(og, BLOCK) * _round_to(i, BLOCK) * k * e,
            "bwd_pad": CL_BWD_STRIDED + _round_to(per_sample, 16384) if strided else CL_BWD_PAD}


def _cl_groups(op, operands) -> tuple | None:
    """(groups, input channels per group, output channels per group) of a grouped channels-last
    convolution other than depthwise with one output per channel (that keeps jit_dw / brdgmm), else None."""
    x, w = operands[op.inputs[0]], operands[op.inputs[1]]
    g = int(x.shape[1]) if op.type == "DepthwiseConv2D" else int(op.attrs.get("group", 1) or 1)
    o = int(w.shape[0])
    if g <= 1 or (op.type == "DepthwiseConv2D" and o == g):
        return None
    return g, int(x.shape[1]) // g, o // g


def _jit_grouped_w(op, operands, lower=True) -> int:
    """Bytes of the weight as jit_avx512_common reorders it for a grouped convolution: gOIhw{s}i{s}o, s =
    16 (always for the weight's gradient, `lower` False), else 8 or 4 where both channel counts per group
    are under 16 and divide by it."""
    g, i, o = _cl_groups(op, operands)
    s = BLOCK
    if lower and i < BLOCK and o < BLOCK and (i % BLOCK or o % BLOCK):
        s = next((v for v in (8, 4) if i % v == 0 and o % v == 0), BLOCK)
    w = operands[op.inputs[1]]
    k = w.num_elements // max(int(w.shape[0]) * int(w.shape[1]), 1)
    return g * _round_to(o, s) * _round_to(i, s) * k * (w.nbytes // max(w.num_elements, 1))


def _jit_fwd_fits(op, operands) -> bool:
    """Whether jit_avx512_common's forward takes the convolution's width (init_conf: unrolled over
    ur_w = min(OW, 28) output columns, the left padding and the right padding of the untailed columns
    must each fit in one unroll); otherwise brgemm's AVX2 kernel runs it (measured: EdgeNeXt's 9x9
    stride-2 kernel at 2 output columns)."""
    q = _wgeom(op, operands)
    return _unroll_fits(q, min(q["ow"], JIT_REGS))


def _cl_fwd(op, operands) -> tuple:
    p = _cl_parts(op, operands)
    if torch_backend(op, operands) == "slow":
        return ((p["w_cl"], _columns(op, operands)),)
    grp = _cl_groups(op, operands)
    if grp and grp[1] <= BLOCK and _jit_fwd_fits(op, operands):  # jit_avx512_common: no scratchpad
        return ((p["w_cl"], _jit_grouped_w(op, operands)),)
    if grp and grp[1] <= BLOCK:
        # brgemm on AVX2 (AVX-512's refuses groups of 16 input channels or fewer): its weight with the
        # outputs per group in blocks of 8 (its heuristic may take 16 to 32 above 8: estimated)
        g, i, o = grp
        return ((p["w_cl"], CL_FWD_PAD, g * _round_to(o, 8) * i * p["k"] * (p["w"] // max(p["c"] * i * p["k"], 1))),)
    if op.type == "DepthwiseConv2D":
        return ((_round_to(p["c"], BLOCK) * p["k"] * (p["w"] // max(p["c"] * p["k"], 1)),),)
    return ((p["w_cl"], CL_FWD_PAD, p["fwd_w"]),)


def _cl_bwd_dx(op, operands) -> tuple:
    p = _cl_parts(op, operands)
    if torch_backend(op, operands) == "slow":
        return ((p["w_cl"],),)
    grp = _cl_groups(op, operands)
    if grp and grp[2] <= BLOCK:  # jit_avx512_common (brgemm's backward data reads the outputs as its inputs)
        return ((p["w_cl"], _jit_grouped_w(op, operands)),)
    if op.type == "DepthwiseConv2D" and not grp:
        return ((_round_to(p["c"], BLOCK) * p["k"] * (p["w"] // max(p["c"] * p["k"], 1)),),)
    return ((p["w_cl"], p["bwd_w"], p["bwd_pad"]),)


def _cl_bwd_dw(op, operands) -> tuple:
    """Beside the weight's and the bias's gradients (the profile counts those)."""
    p = _cl_parts(op, operands)
    if torch_backend(op, operands) == "slow":
        return ((p["w_cl"], _columns(op, operands)),)
    w, b = p["w"], p["b"]
    grp = _cl_groups(op, operands)
    if grp:
        big = _jit_grouped_w(op, operands, lower=False)
        g, _, o = grp
        # the padded bias is booked before the results are made (beside the bias's gradient only)
        padded = g * _round_to(o, BLOCK) * 4 + 128 if b and o % BLOCK else 0
        return ((p["w_cl"], big, b, w), (p["w_cl"], big, max(padded - w, 0)))
    if op.type == "DepthwiseConv2D":
        kh, kw = (int(v) for v in op.attrs["kernel"])
        ih = int(operands[op.inputs[0]].shape[2])
        # a 3x3 kernel takes the weight-sized path only on an input at least as high as the kernel
        # (measured, torch 2.14, batch 4, 64 and 512 channels: heights 1 and 2 make the 256 x scratch,
        # whatever the width; Segformer's Mix-FFN at its last stage's 2 x 2 pixels)
        if max(kh, kw) <= 3 and ih >= kh:
            return ((_round_to(p["c"], BLOCK) * p["k"] * (w // max(p["c"] * p["k"], 1)), b, w),)
        big = CL_DW_SCRATCH * w
        # with a bias: (16 x channels + 32) floats beside the scratch and the bias's gradient, before
        # the results are made
        early = (16 * p["c"] + 32) * 4 - w if b else 0
        return ((big, b, w), (big, max(early, 0)))
    return ((p["w_cl"], p["dw_w"], b, w),)


# ---- kernels 14 wide and more: which oneDNN kernel runs each phase, and gemm's im2col buffers -----
# oneDNN 3.12 tries its implementations in order (cpu_convolution_list.cpp) and takes the first whose
# init_conf accepts the shape. For a wide kernel on AVX-512, one thread, float32, channels first:
# - forward: jit_avx512_common_conv_fwd (ungrouped) or jit_uni_dw (depthwise) unless their unrolling
#   limits refuse it (below), then gemm_convolution_fwd, whose only scratch is its im2col buffer;
# - input's gradient: depthwise jit_uni_dw (no width limit); strided ungrouped brgconv_strided;
# - weight's gradient: gemm beyond 14 wide (_gemm_weights).
# Measured with devtools/torch_conv_sweep.py --set wide / wide_dw --verbose (torch 2.14.1).
JIT_REGS = 28  # jit_avx512_common_conv_fwd_kernel: zmm registers for the output row's unroll
JIT_CODE = 256 * 1024  # its rough code-size bound (default jit generator size)
DW_UR_W = 6  # jit_uni_dw_conv_kernel_utils: avx512_core's unroll over the output row
# The CPU these facts assume: the one they were measured on. oneDNN reads the cache sizes from cpuid
# (platform::get_per_core_cache_size: a data cache's size over the cores sharing it), and its blocking
# searches size some scratch from them (gemm_convolution_fwd's im2col blocks over the L2; brgemm's bfloat16
# blocks over L1 and L2); its ISA picks the kernels. On a CPU with 1 MiB of L2 per core (an AMD EPYC,
# AVX-512) the `wide*` sweep sets' gemm forwards took other blocks, each exact with 1 MiB in place of
# 2 MiB. The report names the CPU, and the convolutions whose scratch the L2 sizes (`_torch_cache_sized`).
CPU_L1D, CPU_L2 = 48 * 1024, 2 * 1024 * 1024  # bytes per core
CPU_NAME = "x86-64 with AVX-512, 48 KiB L1d and 2 MiB L2 per core, one thread (oneDNN 3.12)"
# gemm_convolution_utils init_conf: its L2 share in floats
GEMM_L2 = CPU_L2 // 4
SIMD_W = 16


def _wide(op, operands) -> bool:
    """A kernel 14 or more wide on oneDNN, other than an unpadded patchify (measured before these). 2-D
    only: a Conv1d whose 2-D view is refused falls back on the plain facts, named as estimated (the wide
    rules read a 2-D kernel; a dilated grouped Conv1d 15 wide raised an error in them where its input
    needed a gradient)."""
    k = tuple(int(v) for v in op.attrs["kernel"])
    if len(k) != 2 or max(k) < 14 or torch_backend(op, operands) != "mkldnn":
        return False
    return not (_ungrouped(op) and tuple(int(v) for v in op.attrs.get("stride", (1, 1))) == k
                and not any(int(p) for p in op.attrs.get("pads") or ()))


def _wgeom(op, operands) -> dict:
    """A 2-D convolution's sizes as oneDNN's init_conf names them (per group, channels first)."""
    x, y = operands[op.inputs[0]], operands[op.outputs[0]]
    cl = op.attrs.get("layout", "NCHW") != "NCHW"
    ch = -1 if cl else 1
    xs = x.shape[1:3] if cl else x.shape[2:4]
    ys = y.shape[1:3] if cl else y.shape[2:4]
    g = int(x.shape[ch]) if op.type == "DepthwiseConv2D" else int(op.attrs.get("group", 1) or 1)
    pads = tuple(int(v) for v in (op.attrs.get("pads") or (0, 0, 0, 0)))
    d = tuple(int(v) for v in op.attrs.get("dilation", (1, 1)))
    (kh, kw), (sh, sw) = (tuple(int(v) for v in op.attrs[a]) for a in ("kernel", "stride"))
    ih, iw, oh, ow = (int(v) for v in (*xs, *ys))
    ekh, ekw = (kh - 1) * d[0] + 1, (kw - 1) * d[1] + 1
    return {"n": int(x.shape[0]), "g": g, "ic": int(x.shape[ch]) // g, "oc": int(y.shape[ch]) // g, "ih": ih,
            "iw": iw, "oh": oh, "ow": ow, "kh": kh, "kw": kw, "sh": sh, "sw": sw, "t": pads[0], "l": pads[1],
            "ekh": ekh, "ekw": ekw, "b": (oh - 1) * sh + ekh - (ih + pads[0]),
            "r": (ow - 1) * sw + ekw - (iw + pads[1])}


def _outside(q) -> bool:
    """A kernel that lies wholly in the padding at an edge (the jit kernels' `kernel_outside_src`)."""
    return q["ekw"] <= q["l"] or q["ekw"] <= q["r"] or q["ekh"] <= q["t"] or q["ekh"] <= q["b"]


def _unroll_fits(q, ur_w) -> bool:
    """The left pad and the right pad of the rows before the tail fit in one unrolled block."""
    tail = q["ow"] % ur_w
    r_no_tail = max(0, (q["ow"] - tail - 1) * q["sw"] + q["ekw"] - (q["iw"] + q["l"]))
    return q["l"] <= ur_w and r_no_tail <= ur_w


def _wide_refuse(op, operands) -> str | None:
    """What the wide-kernel facts do not cover (the input's gradient is refused where it runs)."""
    if not _wide(op, operands):
        return None
    k = "x".join(str(int(v)) for v in op.attrs["kernel"])
    if _channels_last(op):
        return f"a {k} kernel on channels-last data: oneDNN's memory for it was not measured"
    if any(int(d) != 1 for d in op.attrs.get("dilation", (1,))) and not _ungrouped(op):
        return f"a dilated {k} kernel, grouped or depthwise: oneDNN's memory for it was not measured"
    if _wide_fwd_kernel(op, operands) is None and not _gemm_grouped(op, operands):
        return (f"a {k} kernel at most 3 columns wide, or with one output column on one sample: oneDNN's "
                f"kernel choice for it was not worked out")
    return None


def _wide_fwd_kernel(op, operands) -> str | None:
    """oneDNN's forward kernel for a 2-D convolution, channels first: "jit", "gemm", or None (not worked
    out here: grouped other than depthwise, a kernel at most 3 columns wide, jit's explicit-broadcast
    case). Measured from 8 columns wide (a strided 11 x 11 kernel whose pad exceeds its 3 output
    columns takes gemm too)."""
    q = _wgeom(op, operands)
    if op.type == "DepthwiseConv2D":
        if int(op.attrs.get("depth_multiplier", 1) or 1) != 1:
            return None
        ok = not _outside(q) and _unroll_fits(q, min(DW_UR_W, q["ow"]))
        return "jit" if ok else "gemm"
    if op.type != "Conv2D" or q["kw"] <= 3:
        return None
    if q["n"] == 1 and q["ow"] == 1 and q["iw"] == q["kw"] and q["oh"] >= 60:
        return None  # the explicit-broadcast kernel for one-pixel-wide outputs
    # jit_avx512_common_conv_fwd_kernel init_conf: a first convolution (under 16 input channels) reads
    # them unblocked; embedded broadcast unrolls min(ow, 28) output columns, and the pads must fit in
    # that block; the code size bound counts the left / right padded variants of the unrolled body
    if _ungrouped(op):
        ic_block = q["ic"] if q["ic"] < BLOCK else BLOCK
    else:  # grouped (measured 14 wide and more only): blocks of 16, 8 or 4 channels per group
        ic_block = _group_block(q) if _wide(op, operands) else None
        if ic_block is None:
            return None
    ur_w = min(q["ow"], JIT_REGS)
    r_pad = (ur_w * (q["ow"] // ur_w) - 1) * q["sw"] + q["ekw"] - (q["iw"] + q["l"])
    mult = 1 + (q["l"] > 0) + (r_pad > 0)
    fits = mult * q["kw"] * ic_block * ur_w * 15 <= JIT_CODE
    return "jit" if fits and not _outside(q) and _unroll_fits(q, ur_w) else "gemm"


def _wide_dx_kernel(op, operands) -> str | None:
    """oneDNN's input-gradient kernel for a wide 2-D convolution: "jit_dw" (depthwise),
    "brgconv_strided" (strided: ungrouped, more than 16 channels per group, or a smaller group the jit
    kernel declines), "jit" (jit_avx512_common_conv_bwd_data; grouped, in blocks of 16, 8 or 4
    channels per group, strided too), "jit_avx2" (its AVX2 kernel, when AVX-512's declines), "gemm";
    None where not worked out (one output column that the whole input row feeds: AVX-512's
    large-filter case)."""
    if op.type == "DepthwiseConv2D":
        return "jit_dw"
    if _strided(op) and _dilated(op):
        return "gemm"  # brgconv_strided takes no dilation, the jit kernels no dilation with a stride
    q = _wgeom(op, operands)
    grouped = not _ungrouped(op)
    if _strided(op) and (not grouped or (q["ic"] > BLOCK and q["oc"] > BLOCK)):
        # brgemm's backward data takes a group of more than 16 channels (is_grouped_small_ic), as it
        # takes an ungrouped kernel
        return "brgconv_strided"
    oc_block = _group_block(q) if grouped else BLOCK
    if oc_block is None:
        return None
    if 14 <= q["kw"] < 20 and q["ow"] == 1 and q["kw"] == q["iw"] and _round(q["ic"]) > BLOCK:
        return None
    if _outside(q):
        return "gemm"
    iw, kw, ekw, r = q["iw"], q["kw"], q["ekw"], q["r"]
    l_over = max(0, ekw - 1 - q["l"])
    # AVX-512 (embedded broadcast, one block of 16 input channels): min(iw, 28) columns unrolled; one
    # block may hold the left overflow, one the right; the code-size bound over its padded variants
    ur_w = min(iw, JIT_REGS)
    tail = iw % ur_w
    r_over = max(0, ekw - 1 - max(0, r + tail))
    mult = 1 + (l_over > 0) + (r_over > 0)
    if l_over <= ur_w and r_over <= ur_w and not (iw > ur_w and r + tail < 0) and \
            mult * kw * oc_block * ur_w * 15 <= JIT_CODE:
        return "jit"
    if _strided(op):
        # a smaller group that the jit kernel declines: brgconv_strided's AVX2 variant, whose buffers
        # are the AVX-512 one's (measured: 12 and 16 channels per group, kernels 31 to 128 wide)
        return "brgconv_strided"
    if grouped and (q["ic"] % 8 or q["oc"] % 8):
        return "gemm"  # AVX2's kernel pads no grouped channels: 8 per group at least
    # AVX2 (blocks of 8): the unroll with the most FMAs in 15 registers whose block holds the left
    # overflow (or is the whole row), then the same right-overflow and tail checks
    nb_ic = _round_to(q["ic"], 8) // 8
    best, ur_w = 0, 1
    for b in range(1, 5):
        if nb_ic % b:
            continue
        u = 1
        while u * b + u <= 15 and u < iw + 1:
            w = min(u, iw)
            if not (l_over > w and w != iw) and (w * b > best or (w * b == best and ur_w < w)):
                best, ur_w = w * b, w
            u += 1
    tail = iw % ur_w
    if best and max(0, ekw - 1 - r - tail) <= ur_w and not (iw > ur_w and r + tail < 0):
        return "jit_avx2"
    return "gemm"


def _group_block(q) -> int | None:
    """The channel block of a grouped jit kernel (jit_avx512_common init_conf's lower zmm): 16, else 8,
    else 4 where both channel counts per group divide by it; None when none does."""
    return next((b for b in (BLOCK, 8, 4) if q["ic"] % b == 0 and q["oc"] % b == 0), None)


def _gemm_grouped(op, operands) -> bool:
    """A grouped channels-first convolution that no jit kernel blocks, so gemm_convolution runs all three
    phases: jit_avx512_common needs both channel counts per group in blocks of 16, or of 8 or 4
    (init_conf's `ok_to_try_lower_zmm`; `oc % oc_block` and `ic % ic_block` must be 0 outside channels
    last), jit_dw one input and one output per group (measured: depth multipliers 2 to 4, 2 and 6
    channels per group, 3x3 to 7x7)."""
    if op.type not in ("Conv2D", "DepthwiseConv2D") or _channels_last(op) or _bf16(op, operands):
        return False
    q = _wgeom(op, operands)
    if q["g"] == 1 or (op.type == "DepthwiseConv2D" and q["oc"] == 1):
        return False
    return q["ic"] % 4 != 0 or q["oc"] % 4 != 0


def _gemm_fwd_col(op, operands) -> int:
    """Floats of gemm_convolution_fwd's im2col buffer on one thread (gemm_convolution_utils init_conf,
    channels first, f32): ic x ks x os, unless its blocking search (a cache model over the L2 share)
    takes blocks of input channels and of output pixels; then ic_block x ks x os_block."""
    q = _wgeom(op, operands)
    ic, oc, ks, os_ = q["ic"], q["oc"], q["kh"] * q["kw"], q["oh"] * q["ow"]
    sh, sw = q["sh"], q["sw"]
    spatial = q["n"] * q["g"] * os_
    k_all = ic * ks
    if not _gemm_fwd_searched(op, operands):
        return ic * ks * os_
    return _gemm_fwd_blocks(ic, oc, ks, os_, sh, sw, spatial, k_all)


def _gemm_fwd_scratch(op, operands, nested: bool = False) -> int:
    """Bytes of gemm_convolution_fwd's scratch beside its output: its im2col buffer (`_gemm_fwd_col`)
    + 128 B, and 128 B more where it runs nested (a transposed convolution's input gradient, under
    oneDNN's deconvolution wrapper) (measured)."""
    return 4 * _gemm_fwd_col(op, operands) + (256 if nested else 128)


def _gemm_fwd_searched(op, operands) -> bool:
    """Whether gemm_convolution_fwd's init_conf runs its blocking search (a cache model over the CPU's L2),
    or takes the whole im2col buffer."""
    q = _wgeom(op, operands)
    os_ = q["oh"] * q["ow"]
    return q["n"] * q["g"] * os_ >= SIMD_W or os_ < q["n"] * q["g"] or \
        (q["sw"] == 1 and q["ic"] * q["kh"] * q["kw"] <= 0.05 * q["oc"])


def _gemm_fwd_blocks(ic, oc, ks, os_, sh, sw, spatial, k_all) -> int:
    """init_conf's search over (oc, os, ic) blocks for one thread, in its float32 arithmetic."""
    f = np.float32
    l2, simd = GEMM_L2, SIMD_W
    min_oc_block, min_os_block = 8, simd
    k_sum = f(8 + 1 + 1 + 1 + 1 + 1 + 0.5 + 1)
    best = {"eff": f(0), "ocb": 1, "osb": 1, "icb": ic}

    def max_icb_of(ocb, osb, oc_thr, os_thr):
        out_blk, inp_row, col_row = ocb * osb, sh * sw * osb, ks * osb
        if osb >= os_thr:
            m = l2 // (inp_row + col_row)
            if ocb < oc_thr:
                m = min(m, (l2 - out_blk) // (col_row + ks * ocb))
        else:
            m = (l2 - out_blk) // (inp_row + col_row + ks * oc_thr)
        if m < ic:
            m = (l2 - out_blk) // (inp_row + col_row + ks * oc_thr)
        return m

    def try_cfg(ocb, osb):
        oc_thr, os_thr = oc, spatial  # one thread: all of oc, all of the spatial work
        ocb = min(oc_thr, max(min_oc_block, min(oc_thr, ocb)))
        osb = max(min_os_block, min(os_thr, osb))
        os_max = min(os_, os_thr)
        osb = min(os_max, osb)
        m = max_icb_of(ocb, osb, oc_thr, os_thr)
        cost = 20 if m < 1 else 1
        icb = max(1, ic // -(-ic // max(1, m)))
        nb_ic = -(-ic // icb)
        kb = icb * ks
        kb_al, osb_al = _round_to(kb, simd), _round_to(osb, simd)
        out_ops = cost * oc_thr * _round_to(os_thr, simd) * (1 if icb == ic else 2 * nb_ic - 1)
        inp_size = ic * _round_to(os_thr * sh * sw, simd)
        inp_ops = cost * ks * inp_size
        koeff = f(osb_al) / f(osb)
        col_ops = int(f(cost) * (f(ks * inp_size) * koeff + f(ks * inp_size) * koeff))
        if sw != 1:
            col_ops *= 8
        wei_ops = cost * oc_thr * _round_to(k_all, simd)
        mem_eff = (f(os_thr) / f(simd)) * f(oc_thr) * f(k_all) / f(inp_ops + col_ops + wei_ops + out_ops)
        gemm_eff = (f(osb) * f(ocb) * f(kb)) / (f(oc_thr) * f(os_thr) * f(k_all))
        calc_eff = ((f(osb) / f(simd)) * f(ocb) * f(kb)) / f(osb_al * kb + ocb * kb_al + ocb * osb_al)
        eff = (f(oc_thr) / f(_round_to(oc_thr, ocb))) * (f(os_max) / f(_round_to(os_max, osb))) * \
            (f(ic) / f(_round_to(ic, icb))) * (f(osb) / f(_round_to(osb, 3 * simd))) * mem_eff * \
            np.power(gemm_eff, f(0.5)) * calc_eff  # thread disbalance 1 on one thread
        eff = np.power(eff, f(1) / k_sum)
        if eff > best["eff"]:
            best.update(eff=eff, ocb=ocb, osb=osb, icb=icb)

    def explore(ocb, osb):
        try_cfg(ocb, osb)
        try_cfg(ocb // 8 * 8, osb // 48 * 48)
        try_cfg(_round_to(ocb, 8), osb // 48 * 48)
        try_cfg(_round_to(ocb, 8), _round_to(osb, min_os_block))
        try_cfg(_round_to(ocb, 8), _round_to(osb, 48))

    try_cfg(oc, spatial)
    if not (best["ocb"] == oc and best["osb"] == spatial and best["icb"] == ic):
        a_k, b_k = sh * sw + ks, ks * oc
        ocb = max(min_oc_block, min(oc, (l2 - a_k * ic * min_os_block - b_k * ic) // min_os_block))
        osb = max(min_os_block, min(spatial, (l2 - b_k * ic) // (a_k * ic + ocb)))
        explore(ocb, osb)
        icb_max = max(1, l2 // (2 * min_oc_block * a_k + 2 * b_k))
        if icb_max < ic:
            icb = ic // max(1, ic // icb_max)
            osb = max(1, (l2 - 2 * b_k * icb) // (2 * icb * a_k))
            ocb = l2 // 2 // osb
            if ocb > oc:
                ocb = oc
                osb = max(min_os_block, min(spatial, (l2 - b_k * icb) // (a_k * icb + ocb)))
            elif osb > spatial:
                osb = spatial
                ocb = max(min_oc_block, min(oc, (l2 - a_k * icb * osb - b_k * icb) // osb))
            explore(ocb, osb)
        osb = max(min_os_block, ((l2 - b_k * ic) // (a_k * ic + oc)) // min_os_block * min_os_block)
        explore(oc, osb)
    return best["icb"] * ks * best["osb"]


def _gemm_fwd(op, operands) -> bool:
    """Whether gemm_convolution_fwd runs this (non-transposed, mkldnn) forward: grouped on gemm, a padded
    strided 1x1 kernel, or a kernel too wide for the jit kernels. One predicate for the forward's scratch
    and for the report's list of cache-sized convolutions, so the two cannot disagree."""
    return _gemm_grouped(op, operands) or _padded_strided_1x1(op, operands) or \
        (op.type in ("Conv2D", "DepthwiseConv2D") and _wide_fwd_kernel(op, operands) == "gemm")


def _torch_fwd(op, operands) -> tuple:
    if _bf16(op, operands):
        return _bf16_fwd(op, operands)
    if _channels_last(op):
        return _cl_fwd(op, operands)
    if op.type in TRANSPOSED:
        return _tconv_fwd(op, operands)
    be = torch_backend(op, operands)
    if be == "slow_dilated":
        return ((_sample_columns(op, operands),),)
    if be == "slow3d":
        return ((_slow3d_columns(op, operands),),)  # the columns, then the output beside them
    if be == "slow" and _slow_groups(op, operands) > 1:
        # one group at a time (its im2col columns, its input copied), then at::cat of the groups'
        # outputs: the pieces live beside the output
        g = _slow_groups(op, operands)
        return ((_columns(op, operands) // g + _slow_group_copies(op, operands, ("in0",)),), ("out0",))
    if be == "slow":
        return ((_columns(op, operands),),)
    if _gemm_fwd(op, operands):
        # gemm_convolution_fwd reads and writes the plain tensors: its im2col buffer (+ 128 B) beside the
        # output, then the output made once more (copied out; measured)
        return ((_gemm_fwd_scratch(op, operands),), ("out0",))
    bx, by, bw, _, blocked_in = _blocked(op, operands)
    y = operands[op.outputs[0]].nbytes
    # the output itself is counted by the profile: scratch beside it, before and after it is made
    return ((bx if blocked_in else 0, bw, by - y, _rtus(op, operands), _padded_bias(op, operands)), (by,))


def _padded_bias(op, operands) -> int:
    """The jit forward kernels' bias padded to the blocked output channels (jit_avx512_common_conv,
    its 1x1 kernel and jit_uni_dw init_scratchpad book it when the output channels are not a multiple
    of 16; measured: 24 and 40 channels, 256 and 320 B): 4 x the rounded channels + 128 B."""
    if len(op.inputs) < 3 or op.inputs[2] < 0 or (op.type != "DepthwiseConv2D" and not _ungrouped_any(op)):
        return 0  # grouped kernels keep their channel counts unpadded
    o = int(operands[op.outputs[0]].shape[1 if op.attrs.get("layout", "NCHW") == "NCHW" else -1])
    return 4 * _round(o) + 128 if o % BLOCK else 0


def _rtus(op, operands) -> int:
    """A strided 1x1 convolution (jit_1x1) first gathers the strided input of one image into a
    unit-stride buffer (oneDNN's rtus): input channels rounded up to 16 x OH x OW floats, plus 128 B
    of alignment (measured, 3 to 64 channels)."""
    if not (_ungrouped(op) and _strided(op) and _jit_1x1(op, operands)):
        return 0
    x, y = operands[op.inputs[0]], operands[op.outputs[0]]
    ch = 1 if op.attrs.get("layout", "NCHW") == "NCHW" else -1
    c, cy = int(x.shape[ch]), int(y.shape[ch])
    return 4 * _round(c) * (y.num_elements // (int(y.shape[0]) * cy)) + 128


def _jit_1x1(op, operands) -> bool:
    """oneDNN's 1x1 kernel: a 1x1 convolution, unless strided over an input the stride does not
    divide (then the general jit kernel runs; measured)."""
    if tuple(int(v) for v in op.attrs["kernel"]) != (1, 1):
        return False
    x = operands[op.inputs[0]]
    sizes = x.shape[2:4] if op.attrs.get("layout", "NCHW") == "NCHW" else x.shape[1:3]
    return not any(int(v) % int(st) for v, st in zip(sizes, op.attrs.get("stride", (1, 1))))


def _ungrouped_any(op) -> bool:
    return int(op.attrs.get("group", 1) or 1) == 1


def _ungrouped(op) -> bool:
    return int(op.attrs.get("group", 1) or 1) == 1 and op.type == "Conv2D"


def _strided(op) -> bool:
    return any(int(s) > 1 for s in op.attrs.get("stride", (1,)))


BRGEMM_BATCH_ELEMENT = 40  # bytes of oneDNN's brgemm_batch_element_t: two pointers, two vpad dims, one dim


def _brgconv_scratch(op, operands, x=None, y=None) -> int:
    """Bytes of the scratchpad oneDNN's strided backward-data kernel (brgconv_strided) books on one
    thread (jit_brgemm_conv_bwd_utils init_scratchpad, each piece plus 4,096 B of alignment): the
    brgemm batch, the incoming gradient's padded copy (ohp x owp x O floats, rounded up to 4,096
    floats), a 4 KB mask, and 24 B (measured, constant). The batch holds kh_block x KW elements of
    40 B rounded up to 4 KB (init_conf's gemm_batch_size; kh_block is KH or the stride, the blocking
    search's pick: KH taken, what it picked on 62 of 64 strided kernels 11 to 31 wide of the
    `wide_dx` sweep), one page for kernels up to 10 x 10 either way."""
    y = y if y is not None else operands[op.outputs[0]]  # a transposed convolution passes its roles
    x = x if x is not None else operands[op.inputs[0]]
    ch = 1 if op.attrs.get("layout", "NCHW") == "NCHW" else -1
    o = int(y.shape[ch])
    oh, ow = (int(v) for v in (y.shape[2:4] if ch == 1 else y.shape[1:3]))
    ih, iw = (int(v) for v in (x.shape[2:4] if ch == 1 else x.shape[1:3]))
    (kh, kw), (sh, sw) = (tuple(int(v) for v in op.attrs[k]) for k in ("kernel", "stride"))
    pads = tuple(int(v) for v in op.attrs.get("pads") or (0, 0, 0, 0))
    # the forward's end padding as oneDNN derives it from the sizes; the padded rows / columns of the
    # incoming gradient: (kernel - 1 - pad) // stride at each end
    b_pad = max(0, (oh - 1) * sh + kh - ih - pads[0])
    r_pad = max(0, (ow - 1) * sw + kw - iw - pads[1])
    ohp = oh + max(0, kh - 1 - pads[0]) // sh + max(0, kh - 1 - b_pad) // sh
    owp = ow + max(0, kw - 1 - pads[1]) // sw + max(0, kw - 1 - r_pad) // sw
    page = 4096
    out = 0
    if iw % sw:  # an input width the stride does not divide: a buffer of output rows (exec_trans)
        c = int(x.shape[ch])
        # iw_block x stride x C floats; beyond 7 wide the block is taken as the whole width rounded up to
        # the stride (init_conf's sp, the largest block its search may pick); up to 7 the width (measured)
        w_ = -(-iw // sw) * sw if max(kh, kw) > 7 else iw
        out = 4 * -(-w_ * sw * c // page) * page + page
    batch = -(-max(kh, sh) * kw * BRGEMM_BATCH_ELEMENT // page) * page
    return (batch + page) + (4 * -(-ohp * owp * o // page) * page + page) + (page + page) + 24 + out


def _brgconv_searched(op, operands) -> bool:
    """Where brgconv_strided's scratchpad depends on its blocking search's pick (not reproduced): a
    brgemm batch over one page (kernels over 10 x 10) or an input width the stride does not divide,
    on a kernel wider than 7 (up to 7 the sizes were measured on the shapes the search reaches)."""
    x, w = operands[op.inputs[0]], operands[op.inputs[1]]
    ch = 1 if op.attrs.get("layout", "NCHW") == "NCHW" else -1
    iw = int(x.shape[3] if ch == 1 else x.shape[2])
    (kh, kw), (sh, sw) = (tuple(int(v) for v in op.attrs[k]) for k in ("kernel", "stride"))
    if max(kh, kw) <= 7:
        return False
    return max(kh, sh) * kw * BRGEMM_BATCH_ELEMENT > 4096 or iw % sw != 0


def _torch_bwd_dx(op, operands) -> tuple:
    if _bf16(op, operands):
        return _bf16_bwd_dx(op, operands)
    if _channels_last(op):
        return _cl_bwd_dx(op, operands)
    if op.type in TRANSPOSED:
        return _tconv_bwd_dx(op, operands)
    if torch_backend(op, operands) == "slow_dilated":
        return ((_sample_columns(op, operands),),)  # col2im's columns beside the input's gradient
    if torch_backend(op, operands) == "slow3d":
        return ((_slow3d_columns(op, operands, skip_1x1=False),),)  # col2vol's columns beside it
    if torch_backend(op, operands) == "slow" and _slow_groups(op, operands) > 1:
        # the groups' input gradients beside their at::cat, or a group's incoming gradient copied
        # (_SLOW_GROUPED)
        return (("in0?g0",), (_slow_group_copies(op, operands, ("out0",)),))
    if torch_backend(op, operands) == "slow":
        return ()  # the input's gradient straight from the GEMM (measured: no other allocation)
    if _gemm_grouped(op, operands) and not _brg_grouped_dx(op, operands):
        # gemm_convolution_bwd_data's im2col buffer beside the input's gradient, then that gradient made
        # once more (copied out)
        q = _wgeom(op, operands)
        k_col, os_ = q["ic"] * q["kh"] * q["kw"], q["oh"] * q["ow"]
        x, y, w = (operands[v] for v in (op.inputs[0], op.outputs[0], op.inputs[1]))
        return ((4 * k_col * _gemm_os_block(k_col, os_, 0, x.nbytes + w.nbytes + y.nbytes, 0.1) + 128,), ("in0",))
    kern = _wide_dx_kernel(op, operands) if _wide(op, operands) else \
        "gemm" if _ungrouped(op) and _strided(op) and _dilated(op) and torch_backend(op, operands) == "mkldnn" \
        else None  # brgconv_strided takes no dilation, the jit kernels no dilation with a stride
    if _wide(op, operands) or kern == "gemm":
        if kern is None:
            label = getattr(op, "label", "") or f"{op.type}"
            raise UnsupportedOpError(
                f"torch profile: op {label} ({op.type}): the input's gradient of a kernel 14 or more wide that is "
                f"grouped and strided, or as wide as its input with one output column: oneDNN's kernel for it was "
                f"not worked out")
        if kern == "gemm":
            # gemm_convolution_bwd_data reads and writes the plain tensors: its im2col buffer beside the
            # input's gradient, then that gradient made once more (copied out; measured)
            q = _wgeom(op, operands)
            k_col, os_ = q["ic"] * q["kh"] * q["kw"], q["oh"] * q["ow"]
            x, y, w = (operands[v] for v in (op.inputs[0], op.outputs[0], op.inputs[1]))
            return ((4 * k_col * _gemm_os_block(k_col, os_, 0, x.nbytes + w.nbytes + y.nbytes, 0.1) + 128,),
                    ("in0",))
        if kern == "jit_avx2":
            # blocked by 8 (nChw8c): the incoming gradient, the weight, the input's gradient; then copied out
            x, y, w = (operands[v] for v in (op.inputs[0], op.outputs[0], op.inputs[1]))
            q = _wgeom(op, operands)
            c, o = q["ic"], q["oc"]
            bx, by = x.nbytes * _round_to(c, 8) // c, y.nbytes * _round_to(o, 8) // o
            return ((by, w.nbytes * _round_to(c, 8) * _round_to(o, 8) // (c * o), bx - x.nbytes), (bx,))
    if _strided(op) and (_ungrouped(op) or _brg_grouped_dx(op, operands) or
                         (_wide(op, operands) and _wide_dx_kernel(op, operands) == "brgconv_strided")):
        # brgconv_strided: the incoming gradient as it is, the weight with its input channels (per
        # group) rounded up to 16, the input's gradient unrounded (channels last) beside the kernel's
        # scratchpad; then the gradient copied out and cloned (measured, torch 2.14 / oneDNN 3.12)
        x, y, w = (operands[v] for v in (op.inputs[0], op.outputs[0], op.inputs[1]))
        i = int(w.shape[1] if op.attrs.get("layout", "NCHW") == "NCHW" else w.shape[-1])
        return ((y.nbytes, w.nbytes * _round(i) // i, _brgconv_scratch(op, operands)), (x.nbytes, x.nbytes))
    bx, by, _, bw, _ = _blocked(op, operands)
    x = operands[op.inputs[0]].nbytes
    strided = any(int(s) > 1 for s in op.attrs.get("stride", (1,))) and int(op.attrs.get("group", 1)) == 1 \
        and op.type != "DepthwiseConv2D"
    # the input's gradient itself is counted by the profile
    return ((by, bw, bx - x), (bx, x) if strided else (bx,))


def _brg_grouped_dx(op, operands) -> bool:
    """Whether brgconv_strided runs the input's gradient of a strided, grouped (not depthwise), channels-first
    kernel under 14 wide; it books and copies as for an ungrouped one. Its backward data is brgemm's forward
    with the roles swapped, so `is_grouped_small_ic` (jit_brgemm_conv_utils.cpp) bounds the forward's
    outputs per group: above 16 the AVX-512 variant runs (before the jit kernels in
    cpu_convolution_list.cpp); above 8 its AVX2 variant runs where jit_avx512_common's bwd_data declines
    the row's unroll (measured: 24 outputs per group over 8 inputs take it, 24 inputs over 8 outputs not;
    16 per group at stride 3 on 32 columns take the AVX2 variant, 8 per group jit:avx2)."""
    if op.type != "Conv2D" or _ungrouped(op) or not _strided(op) or _dilated(op) or _channels_last(op) \
            or _wide(op, operands) or torch_backend(op, operands) != "mkldnn":
        return False
    q = _wgeom(op, operands)
    if q["oc"] > BLOCK:  # whatever the channels per group (measured: 17 per group, which gemm runs forward)
        return True
    # jit_avx512_common blocks both counts per group by 16, 8 or 4, or declines
    return q["oc"] > 8 and (_group_block(q) is None or _jit_dx_declines(q))


def _jit_dx_declines(q) -> bool:
    """jit_avx512_common_conv_bwd_data's init_conf refusals (one block of 16, min(IW, 28) input columns
    unrolled): an overflow past one unrolled block at either end, an unroll that is no multiple of the
    stride, or a right pad beyond the tail."""
    iw, sw = q["iw"], q["sw"]
    ur_w = min(iw, JIT_REGS)
    tail = iw % ur_w
    l_over = max(0, (q["ekw"] - 1 - q["l"]) // sw)
    r_over = max(0, (q["ekw"] - 1 - max(0, q["r"] + tail)) // sw)
    return l_over * sw > ur_w or r_over * sw > ur_w or (iw > ur_w and (ur_w % sw != 0 or q["r"] + tail < 0))


def _dilated(op) -> bool:
    return any(int(d) > 1 for d in op.attrs.get("dilation", (1,)))


def _padded_strided_1x1(op, operands) -> bool:
    """A padded, strided, ungrouped 1x1 kernel on oneDNN: jit_1x1 takes no padding and the jit kernels
    decline a 1x1 kernel strided past its size, so gemm runs the forward (its im2col columns + 128 B
    beside the output, then the output made once more) and the weight's gradient (its scratchpad),
    brgconv_strided the input's gradient (measured: `x64:gemm:jit`, `brgconv_strided`; the `strided`
    sweep set's 36 such rows)."""
    return op.type == "Conv2D" and _ungrouped(op) and tuple(int(v) for v in op.attrs["kernel"]) == (1, 1) \
        and _strided(op) and any(int(p) for p in op.attrs.get("pads") or ()) and not _dilated(op) \
        and not _channels_last(op) and torch_backend(op, operands) == "mkldnn"


def _gemm_weights(op, operands) -> bool:
    """Whether the weight's gradient takes oneDNN's gemm kernel: AVX-512's jit kernel takes kernels up
    to 14 wide (jit_avx512_common bwd_weights init_conf; its `is_hw_transp` case aside), jit_dw 3x3
    only, and grouped kernels need channels per group in blocks of 8 (measured: 15 to 32 wide with 1
    to 64 input channels; depthwise 5x5 and 7x7; 4 channels per group). 2-D only."""
    if op.type not in ("Conv2D", "DepthwiseConv2D"):
        return False
    kw = int(op.attrs["kernel"][1])
    # a depthwise kernel jit_dw's weight gradient declines (`_jit_dw_weights`); a depth multiplier is
    # no jit_dw case (one input per group: gemm, as `_gemm_grouped` says)
    if op.type == "DepthwiseConv2D":
        return not _jit_dw_weights(op, operands) or _gemm_grouped(op, operands)
    grp = int(op.attrs.get("group", 1) or 1)
    if _avx2_weights_refused(op, operands) or _padded_strided_1x1(op, operands):
        return True
    if grp > 1:
        # grouped: the jit kernels need channels per group in blocks of 8 (measured: 4 per group, as
        # ResNeXt's first stage has, takes gemm; 16 and 24 per group do not)
        x, w = operands[op.inputs[0]], operands[op.inputs[1]]
        ch = 1 if op.attrs.get("layout", "NCHW") == "NCHW" else -1
        return (int(x.shape[ch]) // grp) % 8 != 0 or (int(w.shape[0]) // grp) % 8 != 0 or kw > 14
    if _dilated(op) and (_wide(op, operands) or (op.attrs.get("layout", "NCHW") == "NCHW"
                                                  and torch_backend(op, operands) == "mkldnn")):
        # jit_avx512_common bwd_weights init_conf: a dilated height needs stride 1 and its extent within
        # the input, at any width; AVX2's kernel takes no dilation at all (measured: 14 x 14, dilation
        # 2, stride 2 takes gemm; DeepLabV3's ASPP 3x3, dilation 12 to 36, on 4 x 4 rows too)
        q = _wgeom(op, operands)
        if q["sh"] > 1 or q["ekh"] > q["ih"]:
            return True
    return kw > 14


def _jit_dw_weights(op, operands) -> bool:
    """Whether jit_dw runs a depthwise kernel's weight gradient: oneDNN's
    jit_uni_dw_conv_bwd_weights_kernel_t init_conf (jit_uni_dw_conv_kernel_utils.cpp) takes no
    dilation, a kernel at most 3 wide and no narrower than its stride, pads at most half the kernel
    at each end (more than 1 only as a multiple of the stride) and an input at least as high as the
    kernel. Measured (torch 2.14, one thread): 3x3 over 2 x 2 rows takes gemm, 2x2 stride 2 and a 1x1
    kernel (a batch of 16) jit_dw, and a 1-D kernel of 3 (a 1 x 3 view) jit_dw, of 4, 5, 7 gemm."""
    if _dilated(op):
        return False
    q = _wgeom(op, operands)
    kh, kw, sh, sw = q["kh"], q["kw"], q["sh"], q["sw"]
    t, l, b, r = q["t"], q["l"], q["b"], q["r"]
    return (kw <= 3 and sw <= kw and max(t, b) <= kh // 2 and max(l, r) <= kw // 2
            and q["ih"] >= kh + (-t) % sh and (t <= 1 or t % sh == 0) and (b <= 1 or b % sh == 0))


def _avx2_weights_refused(op, operands) -> bool:
    """The weight's gradient of a channels-first Conv2D that AVX-512's jit kernel leaves to AVX2's
    (channels per group in blocks of 8 but not 16, grouped; 4 to 15 input channels, ungrouped) on a
    kernel taller than the input: AVX2's init_conf (jit_avx2_conv_bwd_weights_kernel_f32, its
    `[bwd_w:r2]` kh <= ih) refuses it, and gemm_convolution_bwd_weights runs (measured: 3x3 on 2 rows,
    5x5 on 4, 7x7 on 6, with 8 and 24 channels per group and ungrouped with 8; 5x5 on 5 rows and 16
    per group stay jit)."""
    if op.type != "Conv2D" or op.attrs.get("layout", "NCHW") != "NCHW":
        return False
    q = _wgeom(op, operands)
    if q["g"] > 1:
        avx2 = q["ic"] % 8 == 0 and q["oc"] % 8 == 0 and (q["ic"] % BLOCK or q["oc"] % BLOCK)
    else:
        avx2 = 4 <= q["ic"] < BLOCK
    return bool(avx2) and q["kh"] > q["ih"]


def _gemm_weights_scratch(op, operands) -> int:
    """Bytes of gemm_convolution_bwd_weights' scratchpad on one thread (gemm_convolution_utils
    init_conf, f32, channels first): the weight reduction buffer, booked as float elements of the
    weights' size in bytes, so 4 x the weight; the im2col columns (C x KH x KW x OH x OW floats, per
    image), unless a 1x1 unstrided kernel needs none; 128 B of alignment each."""
    x, y, w = (operands[v] for v in (op.inputs[0], op.outputs[0], op.inputs[1]))
    ch = 1 if op.attrs.get("layout", "NCHW") == "NCHW" else -1
    kh, kw = (int(v) for v in op.attrs["kernel"])
    grp = int(x.shape[ch]) if op.type == "DepthwiseConv2D" else int(op.attrs.get("group", 1) or 1)
    c, n = int(x.shape[ch]) // grp, int(x.shape[0])  # per group
    col = 0
    if (kh, kw) != (1, 1) or _strided(op) or x.num_elements != y.num_elements // int(y.shape[ch]) * c * grp:
        os_ = y.num_elements // (n * int(y.shape[ch]))
        col = 4 * c * kh * kw * _gemm_os_block(c * kh * kw, os_, 4 * w.nbytes + 128, x.nbytes + w.nbytes + y.nbytes,
                                               0.05) + 128
    return 4 * w.nbytes + 128 + col


def _gemm_os_block(k_col: int, os_: int, booked: int, tensors: int, coef: float) -> int:
    """The output pixels gemm's backward im2col buffer holds: all of them, unless k_col x os_ floats
    exceed what init_conf leaves of its scratchpad limit (min(1 GiB, 15 x the source, weight and
    destination bytes) less what is booked already); then coef (0.05 weights, 0.1 data) of what
    would fit, at least 16 (float32 arithmetic as in oneDNN)."""
    available = min(1 << 30, 15 * tensors) - booked
    if available >= 4 * k_col * os_:
        return os_
    most = available // (4 * k_col)
    return max(SIMD_W, int(np.float32(most) * np.float32(coef)))


def _weights_layout(op, operands) -> tuple:
    """(incoming gradient, input, weight) bytes as the weight-gradient kernel reads them: AVX-512's
    blocks of 16 channels; its first-convolution kernel reads an input of 1 to 3 channels as it is;
    4 to 15 input channels take the AVX2 kernel, with blocks of 8 (measured, oneDNN 3.12)."""
    x, y, w = (operands[v] for v in (op.inputs[0], op.outputs[0], op.inputs[1]))
    ch = 1 if op.attrs.get("layout", "NCHW") == "NCHW" else -1
    cx, cy = int(x.shape[ch]), int(y.shape[ch])
    o, i = int(w.shape[0]), int(w.shape[1] if ch == 1 else w.shape[-1])
    if cx <= 3:
        return y.nbytes * _round(cy) // cy, 0, w.nbytes * _round(o) // o
    blk = BLOCK if cx >= BLOCK else 8
    rnd = (lambda v: -(-v // blk) * blk)
    return y.nbytes * rnd(cy) // cy, x.nbytes * rnd(cx) // cx, w.nbytes * rnd(o) // o * rnd(i) // i


def _torch_bwd_dw(op, operands) -> tuple:
    if _bf16(op, operands):
        return _bf16_bwd_dw(op, operands)
    if _channels_last(op):
        return _cl_bwd_dw(op, operands)
    if op.type in TRANSPOSED:
        return _tconv_bwd_dw(op, operands)
    if torch_backend(op, operands) == "slow_dilated":
        # the three gradients made first, then the columns, and with a bias a temporary of its size (the
        # bias's gradient summed over the output)
        return ((_sample_columns(op, operands),) + (("in2?g2",) if _has_bias(op) else ()),)
    if torch_backend(op, operands) == "slow3d":
        return ((_slow3d_columns(op, operands),),)  # vol2col again beside the weight's and bias's gradients
    if torch_backend(op, operands) == "slow" and _slow_groups(op, operands) > 1:
        # the groups' input, weight and bias gradients, all made before the first at::cat, beside
        # the results (_SLOW_GROUPED); one group's im2col columns and copies before that
        g = _slow_groups(op, operands)
        bias = ("in2?g2",) if _has_bias(op) else ()
        return ((_columns(op, operands) // g + _slow_group_copies(op, operands, ("out0", "in0")),),
                ("in0?g0", "in1") + bias)
    if torch_backend(op, operands) == "slow":
        return ((_columns(op, operands),),)  # im2col again beside the weight's gradient
    db = _bias_copy(op)
    if _gemm_weights(op, operands):
        # the weight's gradient made in place of the result beside the scratchpad, then copied out
        return ((_gemm_weights_scratch(op, operands),), ("in1",) + db)
    ch = 1 if op.attrs.get("layout", "NCHW") == "NCHW" else -1
    one = tuple(int(v) for v in op.attrs["kernel"]) == (1, 1)
    if op.type == "DepthwiseConv2D":
        # jit_dw: copies of the incoming gradient and of the input, the result, blocked by 16
        bx, by, _, bw, _ = _blocked(op, operands)
        return ((by, bx, bw - operands[op.inputs[1]].nbytes), (bw,) + db)
    if _ungrouped(op):
        # blocked copies of the incoming gradient and of the input (whether or not it needs a
        # gradient), the blocked result beside the gradient; then the result copied out. jit_1x1
        # blocks by 16 whatever the channels
        gy, gx, gw = _weights_layout(op, operands)
        blk = BLOCK
        if one and _jit_1x1(op, operands):
            gx, gy, _, gw, _ = _blocked(op, operands)
        elif 4 <= int(operands[op.inputs[0]].shape[ch]) < BLOCK:
            blk = 8  # AVX2's kernel
        w = operands[op.inputs[1]].nbytes
        return ((gy, gx, gw - w, _rtus(op, operands), _padded_diff_bias(op, operands, blk)), (gw,) + db)
    # grouped jit: copies of the incoming gradient and of the input, whether or not the input needs a
    # gradient (measured: 4 and 32 channels per group, 1-D and 2-D, a frozen input's copy as a trained
    # one's), beside the weight's gradient; then that gradient copied out
    return (("out0", "in0"), ("in1",) + db)


def _has_bias(op) -> bool:
    """Whether the convolution has a bias (its optional input 2)."""
    return len(op.inputs) > 2 and op.inputs[2] >= 0


def _bias_copy(op) -> tuple:
    """The bias's gradient copied out beside the weight's (ATen's mkldnn_convolution_backward_weights hands
    both back through mkldnn_to_dense, the bias's first: measured, 4 x the output channels in every
    channels-first float32 kernel, jit, jit_1x1, jit_dw, gemm, transposed), where there is a bias."""
    return ("in2?g2",) if _has_bias(op) else ()


def _padded_diff_bias(op, operands, blk) -> int:
    """The jit weight-gradient kernels' padded bias gradient (init_scratchpad's key_conv_padded_bias, as the
    forward's `_padded_bias`): 4 x the output channels rounded up to the kernel's block (16; AVX2's 8) +
    128 B, booked where the channels are no multiple of the block and there is a bias (measured: 24
    channels 256 B on jit and jit_1x1, 20 channels 256 B on the first-convolution kernel, 224 B on AVX2's)."""
    if not _has_bias(op):
        return 0
    o = int(operands[op.outputs[0]].shape[1 if op.attrs.get("layout", "NCHW") == "NCHW" else -1])
    return 4 * _round_to(o, blk) + 128 if o % blk else 0


# A transposed convolution (oneDNN's deconvolution) runs as the convolution whose input gradient it
# is: its forward is that convolution's backward-data kernel, its input's gradient that
# convolution's forward, its weight's gradient that convolution's weight gradient with the roles of
# input and incoming gradient swapped. Weights [C_in, C_out, KH, KW]: the convolution maps C_out to
# C_in. Measured (devtools/torch_conv_sweep.py --set transposed; grouped: transposed_grouped and the
# transposed_strided_dw_random sets).
def _t_roles(op, operands):
    x, y, w = (operands[v] for v in (op.inputs[0], op.outputs[0], op.inputs[1]))
    ch = 1 if op.attrs.get("layout", "NCHW") == "NCHW" else -1
    return x, y, w, int(x.shape[ch]), int(y.shape[ch])


def _tconv_view(op):
    """The convolution whose input gradient this transposed convolution is, as an op over the same operands:
    its input the transposed one's output, its output the transposed one's input, the same weight (a
    transposed weight [C_in, C_out / g, KH, KW] is that convolution's [O, I / g, KH, KW]), kernel, stride,
    pads and groups; depthwise where every group has one channel each way."""
    view = copy.copy(op)
    view.inputs, view.outputs = [op.outputs[0], op.inputs[1]], [op.inputs[0]]
    view.attrs = {k: v for k, v in op.attrs.items() if k != "output_padding"}
    view.type = "Conv2D"
    return view


def _tconv_dw_blocked(op, operands) -> tuple:
    """A depthwise transposed convolution's input, output and weight as jit_dw copies them in every phase:
    their bytes with the channels rounded up to the block of 16."""
    x, y, w, c, o = _t_roles(op, operands)
    return tuple(t.nbytes * _round(c) // c for t in (x, y, w))


def _tconv_depthwise(op, operands) -> bool:
    x, y, w, c, o = _t_roles(op, operands)
    return int(op.attrs.get("group", 1) or 1) == c == o > 1


def _tconv_grouped_view(op, operands):
    """The grouped transposed convolution's convolution view (`_tconv_view`), typed as oneDNN takes it, or
    None where it is dilated or its channels do not split into its groups: jit_dw takes one channel per
    group each way; the grouped jit kernels (and, strided, brgconv_strided) both channel counts per group
    in blocks of 16, 8 or 4 (`_group_block`); gemm the others, as the convolution's `_gemm_grouped` says."""
    if op.type != "ConvTranspose2D" or _dilated(op):
        return None
    x, y, w, c, o = _t_roles(op, operands)
    g = int(op.attrs.get("group", 1) or 1)
    view = _tconv_view(op)
    if _tconv_depthwise(op, operands):
        view.type = "DepthwiseConv2D"
        view.attrs["depth_multiplier"] = 1
        return view
    if c % g or o % g:
        return None
    return view


def _tconv_gemm(op, operands) -> bool:
    """A grouped transposed convolution whose convolution view no jit kernel blocks (channels per group not in
    blocks of 4): gemm runs its input's and weight's gradients, and its forward unless brgconv_strided takes
    it (`_tconv_grouped_brg`, checked first; measured: 10 and 12 input channels per group at stride 2)."""
    view = _tconv_grouped_view(op, operands)
    return view is not None and view.type == "Conv2D" and _gemm_grouped(view, operands)


def _tconv_grouped_brg(op, operands) -> bool:
    """Whether brgconv_strided runs a grouped transposed convolution's forward (`_tconv_fwd` says why)."""
    if _ungrouped_any(op) or not _strided(op) or _tconv_depthwise(op, operands):
        return False
    x, y, w, c, o = _t_roles(op, operands)
    even = int(y.shape[-1]) % int(op.attrs["stride"][1]) == 0
    return (c // int(op.attrs["group"]) > 8 and even) or _brg_grouped_dx(_tconv_grouped_view(op, operands), operands)


# Eager's slow transposed kernel (ATen's NaiveConvolutionTranspose2d.cpp, slow_conv_transpose2d): what
# `torch_backend` sends there (a 1x1 unstrided kernel on a batch under 16, any groups; an ungrouped kernel
# of at most 3 on one side on one small sample, strided or not). Its forward resizes a `columns` buffer
# to (N, O x KH x KW, IH x IW) before the GEMM, whether or not col2im then runs; its backward's input
# gradient and its weight gradient (accGradParameters) each resize one sample's (O x KH x KW, IH x IW)
# columns, and skip them where the kernel is 1x1, unstrided, unpadded and undilated (im2col would be a
# copy). The weight's and the bias's gradients are made once, in place (no copy out). Grouped, ATen's
# `_convolution` and `convolution_backward` run it once per group on `subtensor`s (contiguous copies of
# the group's input and, in backward, of its incoming gradient too, over more than one sample) and
# at::cat the groups' results, as on the slow path of a convolution (_SLOW_GROUPED). Measured with
# devtools/torch_conv_sweep.py (torch 2.14.1, one thread): set `transposed_slow`.
def _tconv_slow(op, operands) -> bool:
    return op.type == "ConvTranspose2D" and torch_backend(op, operands) == "slow_transposed"


def _tconv_columns(op, operands, batch: bool) -> int:
    """Bytes of slow_conv_transpose2d's columns for one group: the forward's over the batch, the
    backward's over one sample (none where the backward skips im2col)."""
    x, y, w, c, o = _t_roles(op, operands)
    k = tuple(int(v) for v in op.attrs["kernel"])
    if not batch and k == (1, 1) and not _strided(op) and not _dilated(op) and \
            not any(int(p) for p in op.attrs.get("pads") or ()):
        return 0
    n = int(x.shape[0])
    g = _slow_groups(op, operands)
    per = x.nbytes // max(x.num_elements, 1)
    return (n if batch else 1) * (o // g) * k[0] * k[1] * (x.num_elements // (n * c)) * per


def _tconv_slow_fwd(op, operands) -> tuple:
    if _slow_groups(op, operands) > 1:  # a group's columns and input copy, then the cat beside the pieces
        return ((_tconv_columns(op, operands, True) + _slow_group_copies(op, operands, ("in0",)),), ("out0",))
    return ((_tconv_columns(op, operands, True),),)


def _tconv_slow_dx(op, operands) -> tuple:
    if _slow_groups(op, operands) > 1:  # a group's copies and columns beside the pieces, then the cat
        return ((_tconv_columns(op, operands, False) + _slow_group_copies(op, operands, ("out0", "in0")),),
                ("in0",))
    return ((_tconv_columns(op, operands, False),),)


def _tconv_slow_dw(op, operands) -> tuple:
    if _slow_groups(op, operands) > 1:  # every group's gradients before the first cat (_SLOW_GROUPED)
        bias = ("in2?g2",) if _has_bias(op) else ()
        return ((_tconv_columns(op, operands, False) + _slow_group_copies(op, operands, ("out0", "in0")),),
                ("in0?g0", "in1") + bias)
    return ((_tconv_columns(op, operands, False),),)


def _tconv_fwd(op, operands) -> tuple:
    x, y, w, c, o = _t_roles(op, operands)
    if _tconv_slow(op, operands):
        return _tconv_slow_fwd(op, operands)
    bias = _has_bias(op)
    if _tconv_depthwise(op, operands):
        # jit_dw's backward data under oneDNN's generic deconvolution wrapper, strided or not: blocked copies of
        # input and weight (channels rounded up to 16), a blocked output, with a bias the wrapper's blocked
        # output-sized buffer (+128 B); then the output copied out (measured: 24, 48 and 64 channels)
        bx, by, bw = _tconv_dw_blocked(op, operands)
        return ((bx, bw, by - y.nbytes, by + 128 if bias else 0), (by,))
    if not _ungrouped_any(op):
        ow, sw = int(y.shape[-1]), int(op.attrs["stride"][1])
        if _tconv_grouped_brg(op, operands):
            # brgconv_strided, as the ungrouped strided rule below. oneDNN's deconvolution list tries
            # brgemm_deconvolution_fwd_t (AVX-512's, then AVX2's) before the generic wrapper (conv:any), and
            # brgemm declines a group of at most one vector of input channels (`is_grouped_small_ic`: 16 on
            # AVX-512, 8 on AVX2) and, as a deconvolution, an output width the stride does not divide;
            # then the wrapper runs the convolution list, where the grouped input-gradient rule
            # (`_brg_grouped_dx`) picks brgconv_strided or jit (measured: 12 and 16 per group AVX2's, 32
            # AVX-512's, 8 the jit wrapper; odd widths the wrapper). The weight's output channels per group
            # rounded up to the variant's vector: 16 floats on AVX-512, 8 on AVX2 (up to 16 input channels
            # per group; measured: 8 outputs per group copied as they are)
            og, vec = int(w.shape[1]), BLOCK if c // int(op.attrs["group"]) > BLOCK else 8
            extra = y.nbytes + 128 if ow % sw and bias else 0
            return ((x.nbytes, w.nbytes * _round_to(og, vec) // og,
                     _brgconv_scratch(op, operands, x=y, y=x) + 128 + extra), (y.nbytes, y.nbytes))
        if _tconv_gemm(op, operands):
            # gemm_convolution_bwd_data on the convolution view: its im2col buffer (+ 128 B, and 128 B of the
            # deconvolution's nested scratchpad), with a bias the wrapper's output-sized buffer + 128 B; then
            # the output made once more (measured: 6 channels per group, 2 over 1, strided or not)
            q = _wgeom(_tconv_grouped_view(op, operands), operands)
            k_col, os_ = q["ic"] * q["kh"] * q["kw"], q["oh"] * q["ow"]
            col = 4 * k_col * _gemm_os_block(k_col, os_, 0, x.nbytes + w.nbytes + y.nbytes, 0.1) + 128
            return ((col + 128 + (y.nbytes + 128 if bias else 0),), (y.nbytes,))
        # the grouped jit backward-data kernel: the input and weight copied as they are (grouped kernels
        # keep their channel counts), the output made in place; with a bias, the wrapper's output-sized
        # buffer (+128 B) beside them (measured: 4 to 32 channels per group, strided or not); without a bias
        # the result is made once more (copied out: the peak where the output outweighs input and weight)
        return ((x.nbytes, w.nbytes, y.nbytes + 128 if bias else 0), (y.nbytes,))
    if _strided(op):
        # brgconv_strided (+128 B: the deconvolution's nested scratchpad): the input copied as it is,
        # the weight with C_out rounded up to 16; then the output copied out and cloned
        # an output width the stride does not divide takes oneDNN's generic wrapper (conv:any), which
        # adds an output-sized buffer (+128 B)
        ch = 1 if op.attrs.get("layout", "NCHW") == "NCHW" else -1
        ow = int(y.shape[-1] if ch == 1 else y.shape[-2])
        extra = y.nbytes + 128 if ow % int(op.attrs["stride"][1]) and bias else 0
        return ((x.nbytes, w.nbytes * _round(o) // o, _brgconv_scratch(op, operands, x=y, y=x) + 128 + extra),
                (y.nbytes, y.nbytes))
    # the jit backward-data kernel: blocked copies of input and weight, a blocked output
    bx, by = x.nbytes * _round(c) // c, y.nbytes * _round(o) // o
    # with a bias, a second blocked output (+128 B of alignment) beside them (measured)
    return ((bx, w.nbytes * _round(c) * _round(o) // (c * o), by - y.nbytes, by + 128 if bias else 0), (by,))


def _tconv_bwd_dx(op, operands) -> tuple:
    # the convolution's forward from the incoming gradient: copied blocked when it has 16 channels or
    # more, the weight blocked (C_in rounded; C_out too when the gradient is blocked), a blocked result
    x, y, w, c, o = _t_roles(op, operands)
    if _tconv_slow(op, operands):
        return _tconv_slow_dx(op, operands)
    if _tconv_depthwise(op, operands):  # jit_dw's forward: blocked copies, a blocked result, copied out
        bx, by, bw = _tconv_dw_blocked(op, operands)
        return ((by, bw, bx - x.nbytes), (bx,))
    if _tconv_gemm(op, operands):
        # gemm_convolution_fwd on the convolution view: its im2col buffer (+ 128 B, + 128 B nested); then the
        # input's gradient made once more (measured)
        return ((_gemm_fwd_scratch(_tconv_grouped_view(op, operands), operands, nested=True),), (x.nbytes,))
    if not _ungrouped_any(op):
        # the grouped jit forward: the incoming gradient and the weight as they are beside the input's
        # gradient; then that gradient made once more (copied out: the peak where it outweighs them;
        # measured: 12 and 20 input channels per group over 4 outputs, 2 x 2 kernels)
        return ((y.nbytes, w.nbytes), (x.nbytes,))
    blocked = o >= BLOCK
    bx = x.nbytes * _round(c) // c
    bw = w.nbytes * _round(c) * (_round(o) if blocked else o) // (c * o)
    return (((y.nbytes * _round(o) // o) if blocked else 0, bw, bx - x.nbytes), (bx,))


def _tconv_bwd_dw(op, operands) -> tuple:
    # the convolution's weight gradient: the input plays its incoming gradient, the incoming gradient
    # its input (blocked as _weights_layout says, by C_out)
    x, y, w, c, o = _t_roles(op, operands)
    if _tconv_slow(op, operands):
        return _tconv_slow_dw(op, operands)
    if not _ungrouped_any(op):
        view = _tconv_grouped_view(op, operands)
        if _gemm_weights(view, operands):
            # gemm_convolution_bwd_weights on the convolution view (a depthwise kernel jit_dw declines, 4
            # channels per group): its scratchpad, + 128 B (the deconvolution's nested scratchpad), beside
            # the weight's gradient; then that gradient copied out (measured)
            return ((_gemm_weights_scratch(view, operands) + 128,), (w.nbytes,) + _bias_copy(op))
        if _tconv_depthwise(op, operands):  # jit_dw: blocked copies of both, a blocked result, copied out
            bx, by, bw = _tconv_dw_blocked(op, operands)
            return ((bx, by, bw - w.nbytes), (bw,) + _bias_copy(op))
        # the grouped jit weight gradient: copies of both, then the result copied out
        return ((x.nbytes, y.nbytes), (w.nbytes,) + _bias_copy(op))
    if max(int(v) for v in op.attrs["kernel"]) > 14:
        # gemm_convolution_bwd_weights on the convolution view, as a convolution's beyond 14 wide
        # (`_gemm_weights`; measured: 15 to 24 wide, strides 2 to 10, 1-D and 2-D: `x64:gemm:jit`), + 128 B
        # nested, beside the weight's gradient; then copied out
        view = _tconv_view(op)
        return ((_gemm_weights_scratch(view, operands) + 128,), (w.nbytes,) + _bias_copy(op))
    if o <= 3:
        gy, gx, gw = x.nbytes * _round(c) // c, 0, w.nbytes * _round(c) // c
    else:
        blk = BLOCK if o >= BLOCK else 8
        rnd = (lambda v: -(-v // blk) * blk)
        gy, gx, gw = x.nbytes * rnd(c) // c, y.nbytes * rnd(o) // o, w.nbytes * rnd(c) * rnd(o) // (c * o)
    return ((gy, gx, gw - w.nbytes), (gw,) + _bias_copy(op))


# ---- bfloat16 (--precision bf16-*: autocast's or model.to(bfloat16)'s convolution) ---------------
# The kernel reads bfloat16 input, weight and bias (autocast casts them before the op), so these
# sizes are in 2-byte elements whatever the dtypes the operands are held in (a float32 weight under
# bf16-mixed). Measured with torch 2.14.1 on one thread of a CPU with AMX (oneDNN picks its AMX
# kernels for bfloat16: devtools/torch_conv_sweep.py --precision bf16-true), the sizes from ATen and
# ideep's code paths (mkldnn_convolution's ideep tensors, mkldnn_to_dense):
# - ungrouped (brg_conv_fwd / brgconv_1x1, brg_conv_bwd / brgconv_strided, brgconv_bwd_w): oneDNN
#   works channels-last (nhwc). Forward: the input reordered (unpadded), the weight with its output
#   channels rounded up to 16, the nhwc output, beside the kernel's scratchpad; then mkldnn_to_dense
#   gives the output back nhwc-strided and `.contiguous()` copies it once more (three outputs at
#   once). Input's gradient: the incoming gradient reordered, the weight with its input channels
#   rounded up to 16, the nhwc result beside the scratchpad; then the same two copies. Weight's
#   gradient: the incoming gradient and the input reordered, the weight's gradient in oneDNN's
#   OIhw16i16o2i (output channels rounded up to 16, input channels to 32) and the bias's, beside the
#   scratchpad; then both copied out.
# - depthwise (jit_dw): as in float32 (channels in blocks of 16), with a float32 reduction buffer
#   beside the weight's gradient (4 x the blocked weight + 128 B, and 4 x the blocked bias + 128 B).
# - a small shape brgemm hands to the jit kernels (from 16 input channels): forward jit_bf16 /
#   jit_bf16_1x1 (input, weight and output blocked by 16; jit_bf16_1x1 converts the bias to float32, and
#   on more than one pixel copies the blocked input once more), backward brgemm's as above; on one
#   pixel (squeeze-excite, DenseNet's last block) the backward differs: the input's
#   gradient jit AMX backward-data (the weight in OIhw16o16i2o, output channels rounded up to 32, input
#   channels to 16; the result unblocked; its scratchpad from jit_avx512_core_amx_conv_kernel
#   init_conf / init_scratchpad); the weight's gradient brgconv_bwd_w without reorders (one pixel is
#   nhwc and nchw alike). A brgemm convolution on one pixel reorders nothing either (no input or
#   incoming-gradient copy, no contiguous copy of a result).
BF16 = 2


def _bf16(op, operands) -> bool:
    return operands[op.outputs[0]].dtype == "bfloat16"


def _els(operands, v) -> int:
    return math.prod(int(d) for d in operands[v].shape)


def _bf16_kernel(op, operands) -> str | None:
    """oneDNN's bfloat16 kernel family for this convolution on an AMX CPU, or None (not measured).
    brgemm's forward hands a small shape to the AVX-512 jit kernels (jit_brgemm_conv_utils
    init_conf: at most 4 output pixels and batch x C x O at most its L1 share, half that for 1x1)."""
    if _channels_last(op) or op.attrs.get("layout", "NCHW") != "NCHW" or \
            any(int(d) != 1 for d in op.attrs.get("dilation", (1,))):
        return None
    if op.type == "DepthwiseConv2D":
        # measured on 3x3 kernels; a 5x5 one's weight gradient takes oneDNN's gemm kernel (as in float32)
        three = tuple(int(v) for v in op.attrs["kernel"]) == (3, 3)
        return "jit_dw" if three and int(op.attrs.get("depth_multiplier", 1) or 1) == 1 else None
    if op.type != "Conv2D" or int(op.attrs.get("group", 1) or 1) != 1:
        return None
    x, y = operands[op.inputs[0]], operands[op.outputs[0]]
    n, c, o = int(x.shape[0]), int(x.shape[1]), int(y.shape[1])
    one = tuple(int(v) for v in op.attrs["kernel"]) == (1, 1)
    pixel = all(int(d) == 1 for d in (*x.shape[2:4], *y.shape[2:4]))  # a squeeze-excite 1x1 on one pixel
    if int(y.shape[2]) * int(y.shape[3]) <= 4 and c <= 512 and n * c * o <= (L1_BYTES // 2 if one else L1_BYTES):
        if pixel:
            return "jit_pixel"
        # the forward only (backward runs brgemm's kernels); measured from 16 input channels (3 took the
        # AMX jit kernel)
        return "jit_small" if c >= 16 else None
    return "brg_pixel" if pixel else "brgconv"


# oneDNN's cache shares (brg_blocking_t::L1, L2: 7/8 of the core's L1d, 3/4 of its L2) on the CPU the
# facts assume (CPU_NAME)
L1_BYTES, L2_BYTES = CPU_L1D * 7 // 8, CPU_L2 * 3 // 4


def _bf16_parts(op, operands) -> dict:
    x, w, y = op.inputs[0], op.inputs[1], op.outputs[0]
    o, i = int(operands[w].shape[0]), int(operands[w].shape[1])
    k = _els(operands, w) // max(o * i, 1)
    b = _has_bias(op)
    return {"x": BF16 * _els(operands, x), "y": BF16 * _els(operands, y), "w": BF16 * _els(operands, w),
            "w_fwd": BF16 * _round(o) * i * k, "w_bwd": BF16 * o * _round(i) * k,
            "w_grad": BF16 * _round(o) * _round_to(i, 32) * k, "b": BF16 * o if b else 0, "o": o, "i": i, "k": k,
            "bias": b}


# The forward's and the input gradient's brgemm scratchpads (jit_brgemm_conv_utils init_scratchpad) hold
# pieces sized by oneDNN's blocking search (an accumulator buffer of ow_block x oc_block floats, a padded
# input buffer), not reproduced here; every one holds at least the brgemm batch and the AMX tile buffer,
# each at least 4 KiB + 4 KiB of alignment. Measured: 16,408 to 73,880 B on the zoo's shapes.
BRG_SCRATCH_FLOOR = 4 * 4096


def _brg_bwd_w_scratch(op, operands) -> int:
    """brgconv_bwd_w's scratchpad on one thread (jit_brgemm_conv_utils init_conf_bwd_w and
    init_scratchpad_bwd_w): the transposed input (tr_iw x 16 x ih_block per block of 16 input
    channels, + a guard) and incoming gradient (tr_ow x 16 x oh_block per block of 16 output channels,
    + tr_iw x 16) in bfloat16, a float32 reduction buffer of the blocked weight (and bias), the brgemm
    batch (oh elements of 32 B, rounded up to 4 KiB), the AMX tile buffers (2 x 4 KiB), the tile
    configuration and a barrier (64 B each), each booked with its alignment (128 B; 4 KiB for the batch
    and the tile buffers); and 8,024 B more (measured: the same on every shape of the sweep). An
    unpadded, unstrided 1x1 kernel on rows up to 28 wide runs as one row (make_1d); the rows of a
    block are bounded by 0.8 x oneDNN's L2 share (3/4 of the core's L2)."""
    x, y = operands[op.inputs[0]], operands[op.outputs[0]]
    ih, iw, oh, ow = (int(v) for v in (*x.shape[2:4], *y.shape[2:4]))
    c, o = int(x.shape[1]), int(y.shape[1])
    kh, kw = (int(v) for v in op.attrs["kernel"])
    sh, sw = (int(v) for v in op.attrs["stride"])
    pads = tuple(int(v) for v in (op.attrs.get("pads") or (0, 0, 0, 0)))
    if (kh, kw, sh, sw) == (1, 1, 1, 1) and not any(pads) and iw <= 28:
        iw, ih, ow, oh = iw * ih, 1, ow * oh, 1
    lp = pads[1]
    rp = (ow - 1) * sw + kw - iw - lp  # negative when the stride skips the last column (oneDNN keeps it)
    tr_pad = _round_to(max(lp, rp + 1), 32)
    tr_iw = _round_to(-(-(iw + lp + rp) // sw), 32) * sw
    tr_ow = _round_to(ow, 2)
    if tr_ow > 32:  # a longer row for a better brgemm block
        best_bdb, best = tr_ow // 2, tr_ow
        for t in range(tr_ow, _round_to(tr_ow, 32) + 1, 2):
            i = next(i for i in range(32, 0, -2) if t % i == 0)
            if t // i < best_bdb:
                best_bdb, best = t // i, t
        tr_ow = best
    nb_ic, nb_oc = -(-c // 16), -(-o // 16)
    irow, orow = BF16 * tr_iw * 16 * nb_ic * 2, BF16 * tr_ow * 16 * nb_oc * 2
    limit = int(max(1.0, max(0.0, 0.8 * L2_BYTES - kh * irow) / (irow + orow)))
    oh_block = min(max(1, -(-oh // -(-oh // limit))), oh)
    ih_block = min(ih, sh * min(ih, (oh_block - 1) * sh + kh))
    tr_src = BF16 * (tr_iw * 16 * ih_block * nb_ic + tr_pad) + 128
    tr_dd = BF16 * (tr_ow * 16 * oh_block * nb_oc + tr_iw * 16) + 128
    bias = _has_bias(op)
    red = 4 * (nb_oc * 16 * nb_ic * 16 * kh * kw + (nb_oc * 16 if bias else 0)) + 128
    batch = _round_to(oh * 32, 4096) + 4096
    return tr_src + tr_dd + red + batch + 2 * (64 + 128) + 3 * 4096 + 8024


def _pixel_parts(op, operands) -> dict:
    """Input, output and weight blocked by 16 channels (jit_bf16 / jit_bf16_1x1)."""
    p = _bf16_parts(op, operands)
    x, y = operands[op.inputs[0]], operands[op.outputs[0]]
    n, hw, ohw = int(x.shape[0]), int(x.shape[2]) * int(x.shape[3]), int(y.shape[2]) * int(y.shape[3])
    o, i = p["o"], p["i"]
    p.update(bx=BF16 * n * _round(i) * hw, by=BF16 * n * _round(o) * ohw, bw=BF16 * _round(o) * _round(i) * p["k"],
             w_bwd=BF16 * _round_to(o, 32) * _round(i) * p["k"])
    return p


def _amx_bwd_data_scratch(op, operands) -> int:
    """jit_avx512_core_amx_bwd_data_kernel_t's scratchpad for one pixel on one thread: the input buffer
    (nb_oc_int x ohp x owp x 32 bfloat16), the int32 workspace (nb_ic_blocking x 16 x 16),
    each + 128 B, and the tile palette (64 B + 4 KiB)."""
    o, i = int(operands[op.outputs[0]].shape[1]), int(operands[op.inputs[0]].shape[1])
    kh, kw = (int(v) for v in op.attrs["kernel"])
    nb_ic = -(-i // 16)
    # ohp = 1 + kh - 1 rows, owp = 2 + kw - 1 columns (a tile width of one pixel, two per call)
    inp = BF16 * -(-_round(o) // 32) * kh * (1 + kw) * 32 + 128
    wsp = 4 * (2 if nb_ic % 2 == 0 else 1) * 16 * 16 + 128
    return inp + wsp + 64 + 4096


def _bf16_fwd(op, operands) -> tuple:
    p = _bf16_parts(op, operands)
    if _bf16_kernel(op, operands) in ("jit_pixel", "jit_small"):
        q = _pixel_parts(op, operands)
        o = q["o"]
        one = tuple(int(v) for v in op.attrs["kernel"]) == (1, 1)
        # a bias padded to 16 channels in bfloat16 when they are not a multiple of 16, converted to float32
        # (jit_bf16_1x1), each + 128 B
        bias = ((2 * _round(o) + 128 if o % 16 else 0) + (4 * _round(o) + 128 if one else 0)) if q["bias"] else 0
        # jit_bf16_1x1 on more than one pixel copies the blocked input once more (+ 128 B, measured)
        again = q["bx"] + 128 if one and _bf16_kernel(op, operands) == "jit_small" else 0
        return ((bias, q["bx"], q["bw"], q["by"] - q["y"], again), (q["by"],))
    if _bf16_kernel(op, operands) == "brg_pixel":
        # one pixel is nhwc and nchw alike: no reorder of the input, no contiguous copy of the output
        return ((p["w_fwd"], BRG_SCRATCH_FLOOR), (p["y"],))
    if op.type == "DepthwiseConv2D":
        c = p["o"]
        bx, by, bw = p["x"] * _round(c) // c, p["y"] * _round(c) // c, p["w"] * _round(c) // c
        # a bias is first converted to float32 (channels rounded up to 16, + 128 B)
        return ((bx, bw, by - p["y"], 4 * _round(c) + 128 if p["bias"] else 0), (by,))
    # the output itself is counted by the profile: its nhwc and strided copies beside it
    return ((p["x"], p["w_fwd"], BRG_SCRATCH_FLOOR), (2 * p["y"],))


def _bf16_bwd_dx(op, operands) -> tuple:
    p = _bf16_parts(op, operands)
    if _bf16_kernel(op, operands) == "jit_pixel":
        q = _pixel_parts(op, operands)
        # the incoming gradient read as it is; the result computed beside the weight, then copied out
        return ((q["w_bwd"], _amx_bwd_data_scratch(op, operands)), (q["x"],))
    if _bf16_kernel(op, operands) == "brg_pixel":
        return ((p["w_bwd"], BRG_SCRATCH_FLOOR), (p["x"],))
    if op.type == "DepthwiseConv2D" and _strided(op):
        # brgconv_strided, channels-last: the incoming gradient, the weight as C x KH x KW x 32
        # (measured), the nhwc result; then copied out and made contiguous, as the ungrouped kernels
        return ((p["y"], p["w"] * 32, 0), (2 * p["x"],))
    if op.type == "DepthwiseConv2D":
        c = p["o"]
        bx, by, bw = p["x"] * _round(c) // c, p["y"] * _round(c) // c, p["w"] * _round(c) // c
        return ((by, bw, bx - p["x"]), (bx,))
    return ((p["y"], p["w_bwd"], BRG_SCRATCH_FLOOR), (2 * p["x"],))


def _bf16_bwd_dw(op, operands) -> tuple:
    """Beside the weight's and the bias's gradients (the profile counts those, in bfloat16)."""
    p = _bf16_parts(op, operands)
    if _bf16_kernel(op, operands) in ("jit_pixel", "brg_pixel"):
        return ((p["w_grad"] - p["w"], _brg_bwd_w_scratch(op, operands)), (p["w_grad"], p["b"]))
    if op.type == "DepthwiseConv2D":
        c = p["o"]
        bx, by, bw = p["x"] * _round(c) // c, p["y"] * _round(c) // c, p["w"] * _round(c) // c
        red = 2 * bw + 128 + (4 * _round(c) + 128 if p["bias"] else 0)
        return ((by, bx, bw - p["w"], red), (bw,))
    return ((p["y"], p["x"], p["w_grad"] - p["w"], _brg_bwd_w_scratch(op, operands)), (p["w_grad"], p["b"]))


def _bf16_refuse(op, operands) -> str | None:
    if _bf16_kernel(op, operands) is None:
        return ("a bfloat16 convolution oneDNN runs with kernels whose memory was not measured (grouped, "
                "transposed, dilated, channels-last, not 2-D, a depthwise kernel other than 3x3, or a small "
                "shape of fewer than 16 input channels)")
    return None


def _torch_refuse(op, operands) -> str | None:
    if _bf16(op, operands):
        return _bf16_refuse(op, operands)
    if _tconv_slow(op, operands) and not _channels_last(op):
        return None  # eager's slow transposed kernel, any kernel, stride, dilation and groups (_tconv_slow)
    if op.type in TRANSPOSED:
        if op.type != "ConvTranspose2D" or (not _ungrouped_any(op) and _tconv_grouped_view(op, operands) is None):
            return ("a non-2-D transposed convolution, or a dilated grouped one: oneDNN's memory for it was not "
                    "measured")
        if any(int(d) != 1 for d in op.attrs.get("dilation", (1,))):
            return "a dilated transposed convolution: oneDNN's memory for it was not measured"
        k, st = (tuple(int(v) for v in op.attrs[a]) for a in ("kernel", "stride"))
        if (max(k) > 4 and max(st) == 1 and _ungrouped_any(op)) or (max(k) > 13 and not _ungrouped_any(op)) \
                or max(k) == 14:
            # an ungrouped unstrided one over 4 wide runs jit kernels whose limits were not worked out for it
            # (measured: 8 and 11 wide over 4 x 4 inputs, 229,760 B under and 375,552 B over); a grouped one 14
            # or more wide, forward kernels not worked out (20 and 24 wide: 899,328 and 1,290,376 B under); 14
            # wide, where the weight gradient's jit / gemm boundary lies (600,704 B under, 62,976 B over)
            return (f"a {k[0]}x{k[1]} transposed convolution of stride {st[0]}x{st[1]}, {op.attrs.get('group', 1)} "
                    f"group(s): oneDNN's memory for it was measured for strided kernels (up to 13 wide when "
                    f"grouped, not 14 wide) and unstrided ungrouped ones up to 4 only")
    k = tuple(int(v) for v in op.attrs["kernel"])
    # the wide kernels' refusals read a convolution, not a transposed one (whose view the rules above take)
    why = None if op.type in TRANSPOSED else _wide_refuse(op, operands)
    if why:
        return why
    if k == (1, 1) and _strided(op) and any(int(p) for p in op.attrs.get("pads") or ()) and \
            not _padded_strided_1x1(op, operands) and torch_backend(op, operands) == "mkldnn":
        return "a padded, strided 1x1 kernel: oneDNN runs it with kernels whose memory was not measured"
    be = torch_backend(op, operands)
    if _channels_last(op):
        grouped = int(op.attrs.get("group", 1) or 1) > 1 or op.type == "DepthwiseConv2D"
        if grouped and be != "mkldnn":  # a 1x1 depthwise kernel: one slow convolution per channel
            return "a channels-last depthwise convolution on eager's slow path: its memory was not measured"
        if any(int(d) > 1 for d in op.attrs.get("dilation", (1,))) or op.type not in ("Conv2D", "DepthwiseConv2D"):
            return "a dilated, transposed or not 2-D channels-last convolution: its memory was not measured"
        return None
    return None


class _Unsqueezed:
    """`operands` with the listed ones seen with a dimension of 1 inserted at 2 (`unsqueeze(2)`)."""

    def __init__(self, operands, which):
        self.operands, self.which = operands, set(which)

    def __getitem__(self, v):
        o = self.operands[v]
        if v not in self.which:
            return o
        return dataclasses.replace(o, shape=tuple(o.shape[:2]) + (1,) + tuple(o.shape[2:]))


def _as_2d(fn):
    """A torch fact of a 2-D convolution, also for a 1-D one: eager runs conv1d as the conv2d of its
    unsqueezed view (ATen's `_convolution`: `view1d_as_2d` and `view4d`: input (N, C, 1, L), weight
    (O, I, 1, K), stride (1, s), padding (0, p), dilation (1, d)), so oneDNN picks and sizes its
    kernels for that 2-D convolution (measured, torch 2.14: a strided Conv1d's backward takes
    brgconv_strided's scratchpad exactly as the 2-D facts size it). A ConvTranspose1d the same way
    (`view1d_as_2d` runs before the backend is chosen, transposed or not); where its 2-D view is refused,
    so is it (no 1-D transposed facts to fall back on)."""
    def fact(op, operands):
        if op.type not in ("Conv1D", "ConvTranspose1D"):
            return fn(op, operands)
        view, opd = _view_2d(op, operands)
        why = _torch_refuse(view, opd)
        if not why:
            return fn(view, opd)
        if fn is _torch_refuse:
            # a 2-D kernel not measured: a Conv1d falls back on the 1-D facts (named as estimated); a
            # ConvTranspose1d has none to fall back on, and is refused with its view's reason
            return why if op.type == "ConvTranspose1D" else None
        return fn(op, operands)
    return fact


def _view_2d(op, operands):
    a = op.attrs
    p = tuple(int(v) for v in a.get("pads") or (0, 0))
    view = copy.copy(op)
    view.type = "ConvTranspose2D" if op.type == "ConvTranspose1D" else "Conv2D"
    view.attrs = {**a, "kernel": (1, int(a["kernel"][0])), "stride": (1, int(tuple(a.get("stride") or (1,))[0])),
                  "dilation": (1, int(tuple(a.get("dilation") or (1,))[0])), "pads": (0, p[0], 0, p[-1])}
    if op.type == "ConvTranspose1D":
        view.attrs["output_padding"] = (0, int(tuple(a.get("output_padding") or (0,))[0]))
        return view, _Unsqueezed(operands, (op.inputs[0], op.inputs[1], op.outputs[0]))
    # a depthwise Conv1d (Mamba's causal kernel, ConvNeXt-1D) is a depthwise 2-D one to oneDNN: jit_dw's
    # blocked copies and its own weight-gradient limits (measured: 48 to 128 channels, kernels 3 to 7)
    g, w = int(a.get("group", 1) or 1), operands[op.inputs[1]]
    if g > 1 and g == int(operands[op.inputs[0]].shape[1]) and int(w.shape[1]) == 1 and int(w.shape[0]) % g == 0:
        view.type = "DepthwiseConv2D"
        view.attrs["depth_multiplier"] = int(w.shape[0]) // g
    return view, _Unsqueezed(operands, (op.inputs[0], op.inputs[1], op.outputs[0]))


def _torch_estimated(op, operands) -> bool:
    """A Conv1d whose 2-D view runs a kernel whose memory was not measured (a 2-D one is refused):
    the 1-D facts count it, and the report names it as estimated. So is a transposed convolution on
    oneDNN whose kernels the rules read past what was measured or where a blocking search or cost model
    decides (below; a ConvTranspose1d as its 2-D view), and a grouped channels-last forward on brgemm
    whose block of outputs is its heuristic's pick (AVX2's above 8 outputs per group, AVX-512's above
    16)."""
    if op.type == "Conv1D":
        return bool(_torch_refuse(*_view_2d(op, operands)))
    if op.type == "ConvTranspose1D":  # its 2-D view's (a refused view refuses it)
        return _torch_estimated(*_view_2d(op, operands))
    if op.type == "Conv3D":
        # a 3-D convolution on oneDNN: the 2-D facts count it, and were off where oneDNN picks other kernels
        # (measured, torch 2.14.1: 4 groups of 8 on (4, 32, 4, 8, 8), 3x3x3, backward +96,000 B; depthwise 24
        # channels, forward -95,712 B, backward +100,992 B; ungrouped 3x3x3 on (4, 512, 1, 2, 2), whose weight
        # gradient runs gemm, backward -85,154,048 B); slow_conv3d and slow_conv_dilated3d are counted
        return torch_backend(op, operands) == "mkldnn"
    if op.type == "ConvTranspose2D":
        # brgconv_strided under the generic wrapper on a grouped transposed convolution whose output width
        # the stride does not divide: its row buffer was 16 KB over the ungrouped rule's once (not worked out);
        # and brgconv_strided's weight copy where its cost model picks the block of the output channels
        # (its backward data's input channels: `_brg_ic_block_open`)
        y = operands[op.outputs[0]]
        grouped_brg = _tconv_grouped_brg(op, operands)
        if grouped_brg and int(y.shape[-1]) % int(op.attrs["stride"][1]) != 0:
            return True
        if _tconv_slow(op, operands):  # eager's slow kernel, measured whatever its kernel (_tconv_slow)
            return False
        brg = grouped_brg or (_ungrouped_any(op) and _strided(op) and not _dilated(op))
        k, st = (max(int(v) for v in op.attrs[a]) for a in ("kernel", "stride"))
        if k > 14:
            return True  # brgconv_strided's blocking search past 7 wide; its weight gradient's gemm measured
        if brg and k > 7:
            return True  # brgconv_strided's batch and row blocks are its blocking search's pick (`_brgconv_searched`)
        if not brg and not _ungrouped_any(op) and (k > 4 or st > 2):
            # the grouped jit / gemm kernels beyond the kernels and strides measured for them (4 and 2): off by
            # 1,648 and 3,072 B on two of 40 drawn shapes (transposed_large_random)
            return True
        return brg and _brg_ic_block_open(int(operands[op.inputs[1]].shape[1]))
    grp = _channels_last(op) and not _bf16(op, operands) and _cl_groups(op, operands)
    if not grp:
        return False
    if grp[1] > BLOCK:  # brgemm forward: its block of more than 16 outputs per group is a heuristic's
        return grp[2] > BLOCK
    return grp[2] > 8 and not _jit_fwd_fits(op, operands)


def _brg_ic_block_open(ic: int) -> bool:
    """Whether brgconv_strided's cost model decides how far the weight's copy rounds its `ic` input channels
    (per group). Its backward-data blocking (jit_brgemm_conv_bwd_utils.cpp `init_conf`) tries blocks of
    64, 48, 32 and 16 channels (no more than the channels' 16-blocks, at most 4), and `fast_check_ic_block`
    keeps 64 and 48 only where they divide the channels rounded up to 16; so the copy rounds past 16 only
    where `est_eff` (cache sizes, loop costs, threads) prefers 32 over channels in an odd number of
    16-blocks, 3 or more (48 as 64, 80 as 96, 112 as 128). The profile rounds to 16; measured both ways
    on 48 channels (the `conv1d` and `random_b` sets: 6,144 to 18,432 B more where it took 32)."""
    r = _round(ic)
    return r >= 3 * BLOCK and r % (2 * BLOCK) == BLOCK


def _torch_estimated_dx(op, operands) -> bool:
    """The input's gradient is counted only approximately (the report names the op where it runs):
    brgconv_strided's scratchpad where its blocking search decides it (`_brgconv_searched`), and its
    weight's copy where its cost model picks the channel block (`_brg_ic_block_open`)."""
    if _bf16(op, operands) or _channels_last(op) or op.type in TRANSPOSED or \
            torch_backend(op, operands) != "mkldnn":
        return False
    ic = int(operands[op.inputs[1]].shape[1 if op.attrs.get("layout", "NCHW") == "NCHW" else -1])
    if _brg_grouped_dx(op, operands):
        return _brgconv_searched(op, operands) or _brg_ic_block_open(ic)
    if _gemm_grouped(op, operands):
        return False
    if _wide(op, operands) and _wide_dx_kernel(op, operands) != "brgconv_strided":
        return False
    return _ungrouped(op) and _strided(op) and not _dilated(op) and \
        (_brgconv_searched(op, operands) or _brg_ic_block_open(ic))


def _torch_contiguous_grad(op, operands) -> bool:
    """oneDNN's backward (ATen's mkldnn_convolution_backward) takes the incoming gradient contiguous
    in the convolution's memory format: one laid out otherwise (a transposed view's, handed on by an
    elementwise backward) is copied first, and the copy lives through both phases (measured, torch
    2.14: one output size more beside the backward of a Conv1d and of a Conv2d, strided or not, for a
    permuted incoming gradient). Channels-last and transposed convolutions were not measured."""
    return not _channels_last(op) and op.type not in TRANSPOSED and torch_backend(op, operands) == "mkldnn"


def _torch_copies_input(op, operands) -> bool:
    """oneDNN's forward and backward (ATen's mkldnn_convolution, mkldnn_convolution_backward) take the
    input contiguous in the convolution's memory format: a channels-first input laid out otherwise
    (an elementwise op's result on a transposed view: Data2VecAudio's feature extractor, LayerNorm
    over the channels between transposes, then GELU) is copied in forward, freed in the op, and the
    saved input copied again in backward, living through both phases (measured, torch 2.14: one input
    size more in each, Conv1d (4, 128, 799) stride 2 and (4, 64, 100))."""
    return _torch_contiguous_grad(op, operands)


def _torch_cache_sized(op, operands) -> int:
    """Bytes of this convolution's scratch that oneDNN's cache model sizes from the CPU's L2 (0: none):
    gemm_convolution_fwd's scratch where its blocking search runs (`_gemm_fwd_scratch`), in a forward or,
    for a transposed convolution, its input's gradient. Exact on the CPU the facts assume (CPU_NAME); the
    report names these convolutions."""
    if _bf16(op, operands) or _channels_last(op) or torch_backend(op, operands) != "mkldnn":
        return 0
    if op.type == "ConvTranspose2D":
        view = _tconv_grouped_view(op, operands) if _tconv_gemm(op, operands) else None
        return _gemm_fwd_scratch(view, operands, nested=True) if view is not None and \
            _gemm_fwd_searched(view, operands) else 0
    if op.type not in ("Conv2D", "DepthwiseConv2D"):
        return 0
    return _gemm_fwd_scratch(op, operands) if _gemm_fwd(op, operands) and _gemm_fwd_searched(op, operands) else 0


# backward runs in two phases (the input's gradient, then the weight's), each with its scratch
TORCH = {"copies_noncontiguous": _as_2d(_torch_copies_input), "saves": (("in0", "any"), ("in1", "any")), "fwd_scratch": _as_2d(_torch_fwd),
         "bwd_scratch_dx": _as_2d(_torch_bwd_dx), "bwd_scratch_dw": _as_2d(_torch_bwd_dw), "dw_inputs": (1, 2),
         "contiguous_grad": _as_2d(_torch_contiguous_grad), "refuse": _as_2d(_torch_refuse),
         "estimated": _torch_estimated, "estimated_dx": _as_2d(_torch_estimated_dx),
         "cache_sized": _as_2d(_torch_cache_sized)}


def not_2d(t: str, nd: int) -> dict:
    """Profile facts of a window op that is not 2-D: onert (circle) has 2-D windows only."""
    return {"onert": {"refuse": f"{t} over {nd} spatial dimension(s): onert 0.1.0's train backend has 2-D "
                                f"convolution and pooling only"}}


def _def(t, rule):
    nd = int(t[-2])
    return OpDef(t, rule=rule, kernels=KERNELS, flops=flops, required_inputs=2, check=check, batch="keep",
                 bias_inputs=(2,), weight_inputs=(1, 2), autocast="lower",  # autocast: conv*d, conv_transpose*d
                 profiles={**(not_2d(t, nd) if nd != 2 and t in CONV else {}), "torch": TORCH})


OPS = [_def(t, _conv_rule) for t in CONV] + [_def("DepthwiseConv2D", _plain_rule)] + \
      [_def(t, _plain_rule) for t in TRANSPOSED]


# ---- converters -------------------------------------------------------------------------------
def same_pads(ins, kernel, stride, dilation, lower=False) -> tuple:
    """SAME padding (output = ceil(in / stride)): TF and ONNX SAME_UPPER put the odd pixel after."""
    tot = [max((-(-n // s) - 1) * s + (k - 1) * d + 1 - n, 0) for n, k, s, d in zip(ins, kernel, stride, dilation)]
    if lower:
        return tuple(t - t // 2 for t in tot) + tuple(t // 2 for t in tot)
    return tuple(t // 2 for t in tot) + tuple(t - t // 2 for t in tot)


def onnx_window(node, kernel) -> dict | None:
    """Canonical window attributes of an ONNX Conv / pool node (None: an auto_pad memplan does not know)."""
    a = node.attrs
    ins = node.shape(0)[2:]
    nd = len(ins)
    stride = _tuple(a.get("strides"), nd)
    dil = _tuple(a.get("dilations"), nd)
    auto = a.get("auto_pad", "NOTSET") or "NOTSET"
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = same_pads(ins, kernel, stride, dil, lower=auto == "SAME_LOWER")
    elif auto == "VALID":
        pads = (0,) * (2 * nd)
    elif auto == "NOTSET":
        pads = _tuple(a.get("pads"), 2 * nd, 0)
    else:
        return None
    if not any(pads):
        padding = "VALID"
    elif pads == same_pads(ins, kernel, stride, dil):
        padding = "SAME"
    else:
        padding = "EXPLICIT"
    return {"layout": "NCHW", "kernel": tuple(int(k) for k in kernel), "stride": stride, "dilation": dil,
            "pads": pads, "padding": padding, "activation": "NONE"}


def _onnx_conv(node) -> Canon | None:
    w = node.shape(1)
    x = node.shape(0)
    if w is None or x is None or len(w) != len(x) or not 3 <= len(w) <= 5:
        return None
    nd = len(w) - 2
    attrs = onnx_window(node, node.attrs.get("kernel_shape") or w[2:])
    if attrs is None:
        return None
    group = int(node.attrs.get("group", 1))
    attrs["group"] = group
    if nd == 2 and group > 1 and group == x[1] and w[1] == 1 and w[0] % group == 0:
        attrs["depth_multiplier"] = w[0] // group
        return Canon("DepthwiseConv2D", attrs)
    return Canon(f"Conv{nd}D", attrs)


def _onnx_conv_transpose(node) -> Canon | None:
    w = node.shape(1)
    x = node.shape(0)
    a = node.attrs
    if w is None or x is None or len(w) != len(x) or not 3 <= len(w) <= 5:
        return None
    if (a.get("auto_pad", "NOTSET") or "NOTSET") != "NOTSET" or a.get("output_shape"):
        return None  # torch.onnx writes explicit pads; these stay ConvTranspose and are refused
    nd = len(w) - 2
    attrs = {"layout": "NCHW", "kernel": tuple(int(k) for k in (a.get("kernel_shape") or w[2:])),
             "stride": _tuple(a.get("strides"), nd), "dilation": _tuple(a.get("dilations"), nd),
             "pads": _tuple(a.get("pads"), 2 * nd, 0), "padding": "EXPLICIT",
             "output_padding": _tuple(a.get("output_padding"), nd, 0),
             "group": int(a.get("group", 1)), "activation": "NONE"}
    return Canon(f"ConvTranspose{nd}D", attrs)


def _tflite_act(node) -> str:
    return tflite_activation(node)


def _tflite_window(node, kernel) -> dict:
    o = node.options
    stride = (int(o.get("stride_h", 1)), int(o.get("stride_w", 1)))
    dil = (int(o.get("dilation_h_factor", 1) or 1), int(o.get("dilation_w_factor", 1) or 1))
    code = int(o.get("padding", 0))
    padding = {0: "SAME", 1: "VALID"}.get(code, f"PADDING_{code}")
    ins = node.shape(0)[1:3]
    pads = same_pads(ins, kernel, stride, dil) if padding == "SAME" else (0, 0, 0, 0)
    return {"layout": "NHWC", "kernel": tuple(kernel), "stride": stride, "dilation": dil, "pads": pads,
            "padding": padding, "activation": _tflite_act(node)}


def _tflite_conv(node) -> Canon | None:
    w = node.shape(1)
    if w is None or len(w) != 4 or len(node.shape(0) or ()) != 4:
        return None
    attrs = _tflite_window(node, w[1:3])
    attrs["group"] = max(1, node.shape(0)[-1] // max(w[-1], 1))
    return Canon("Conv2D", attrs)


def _tflite_depthwise(node) -> Canon | None:
    w = node.shape(1)
    if w is None or len(w) != 4 or len(node.shape(0) or ()) != 4:
        return None
    attrs = _tflite_window(node, w[1:3])
    attrs["depth_multiplier"] = int(node.options.get("depth_multiplier", 1) or 1)
    attrs["group"] = node.shape(0)[-1]
    return Canon("DepthwiseConv2D", attrs)


def _tflite_transpose_conv(node) -> Canon | None:
    """TRANSPOSE_CONV's inputs are (output_shape, weights [C_out, KH, KW, C_in], input[, bias]); the
    canonical op reads (input, weights[, bias]) like ONNX's ConvTranspose."""
    w, x, y = node.shape(1), node.shape(2), node.out_shape()
    if w is None or x is None or len(w) != 4 or len(x) != 4 or len(y) != 4:
        return None
    o = node.options
    stride = (int(o.get("stride_h", 1) or 1), int(o.get("stride_w", 1) or 1))
    code = int(o.get("padding", 0))
    padding = {0: "SAME", 1: "VALID"}.get(code, f"PADDING_{code}")
    # the convolution this op is the input gradient of runs from Y to X: SAME pads come from Y's size
    pads = same_pads(y[1:3], w[1:3], stride, (1, 1)) if padding == "SAME" else (0, 0, 0, 0)
    attrs = {"layout": "NHWC", "kernel": tuple(w[1:3]), "stride": stride, "dilation": (1, 1), "pads": pads,
             "padding": padding, "output_padding": (0, 0), "group": 1, "activation": _tflite_act(node)}
    ins = [node.inputs[2], node.inputs[1]] + ([node.inputs[3]] if len(node.inputs) > 3 and node.inputs[3] >= 0 else [])
    return Canon("ConvTranspose2D", attrs, inputs=ins)


ONNX = {"Conv": _onnx_conv, "ConvTranspose": _onnx_conv_transpose}
# ONNX inputs only a layer's weights fill (loaders/params.py reads them before conversion)
ONNX_FACTS = {"Conv": {"weight_inputs": (1, 2)}, "ConvTranspose": {"weight_inputs": (1, 2)}}
TFLITE = {"CONV_2D": _tflite_conv, "DEPTHWISE_CONV_2D": _tflite_depthwise, "TRANSPOSE_CONV": _tflite_transpose_conv}


# ---- other runtimes' profiles (profiles/singa.py, onert/, nntrainer.py): what they know of these ops ----
# singa: the SINGA autograd operator memplan models the op as (memplan's rule keeps what it keeps)
PROFILES = {"singa": {"Conv2D": {"operator": "Conv2d"}, "DepthwiseConv2D": {"operator": "Conv2d (group)"}}}


def _onert_conv_fwd(op, operands):
    if len(op.inputs) < 3 or op.inputs[2] < 0:
        return (f"{op.type} without a bias input: onert 0.1.0's loader rejects an absent optional input "
                f"(\"loader doesn't support optional input tensor yet\")")
    r = onert.window(op, operands)
    if r:
        return r
    if op.type == "Conv2D":
        x, w = onert.shape(operands, op.inputs[0]), onert.shape(operands, op.inputs[1])
        groups = int(op.attrs.get("group", op.attrs.get("groups", 1)) or 1)
        w_in = w[-1] if onert.channels_last(op) else w[1]
        if groups == 1 and w_in and onert.channels(op, x) != w_in:
            groups = onert.channels(op, x) // w_in
        if groups != 1:
            return AfterCompile(f"grouped Conv2D ({groups} groups): {VERSION} compiles it but trains it "
                                f"wrongly (measured: loss 46.05 where TF Lite gives 2.34 on a RegNet-X "
                                f"export)")
    return None


def _onert_conv_bwd(op, operands):
    if any(v != 1 for v in onert.dilation(op)):
        return f"dilated {op.type} (dilation {onert.dilation(op)}): \"Unsupported dilation yet\" in its backward"
    if op.type == "DepthwiseConv2D":
        s = onert.pair(op.attrs.get("stride", op.attrs.get("strides")), 2)
        if s[0] != s[1]:
            return AfterCompile(f"DepthwiseConv2D with strides {s}: \"Not support different length "
                                f"strides\" in its backward")
    return None


def _onert_conv_buffers(op, ir, threads, simd_width):
    w, y = op.inputs[1], op.outputs[0]
    nb = ir.operands[w].nbytes
    return [("W^T", nb), ("conv dY", ir.operands[y].nbytes), ("dW^T", nb)] + onert.act_buffers(op, ir)


def _onert_depthwise_buffers(op, ir, threads, simd_width):
    """Filter-dim buffers [T, P], padded filter [B, kh*kw, P], filter buffers [T, kh*kw, P], floats;
    T = threads + 1, P = C_out rounded up to the SIMD width (onert takes both from its host)."""
    wshape = ir.operands[op.inputs[1]].shape
    kh, kw, c_out = wshape[1], wshape[2], wshape[3]
    batch = ir.operands[op.inputs[0]].shape[0]
    p = (c_out + simd_width - 1) // simd_width * simd_width
    tt = threads + 1
    return onert.act_buffers(op, ir) + [("filter dim buffers", tt * p * 4), ("padded filter", batch * kh * kw * p * 4),
                                        ("filter buffers", tt * kh * kw * p * 4)]


# onert (profiles/onert/): "forward" / "backward": fn(op, operands) -> why onert refuses at load or
# compile (backward: only when the op's backward runs), an `AfterCompile` reason when onert finds it
# only after it compiles; "kernel_buffers": fn(op, ir, threads, simd_width) -> [(name, bytes)] its
# train kernel allocates; "usedef": fn(op, chains), its backward's training use-defs;
# "weighted": the backward region is cut to ops reachable from these
PROFILES["onert"] = {
    "Conv2D": {"forward": _onert_conv_fwd, "backward": _onert_conv_bwd, "kernel_buffers": _onert_conv_buffers,
               "usedef": onert.weighted_usedef, "weighted": True},
    "DepthwiseConv2D": {"forward": _onert_conv_fwd, "backward": _onert_conv_bwd,
                        "kernel_buffers": _onert_depthwise_buffers, "usedef": onert.weighted_usedef, "weighted": True},
}


def nntrainer_spatial(graph, op, batchnorm):
    """nntrainer's convolution and pooling layers are 2-D."""
    x = graph.operands[op.inputs[0]].shape
    if len(x) != 4:
        return (f"nntrainer profile: op {op.label} ({op.type}) works over {len(x) - 2} spatial dimension(s); "
                f"nntrainer's are 2-D")
    return None


def _nntrainer_groups(graph, op) -> int:
    w = graph.operands[op.inputs[1]].shape
    x = graph.operands[op.inputs[0]].shape
    groups = int(op.attrs.get("group", 1) or 1)
    if groups == 1 and len(w) == 4 and len(x) == 4:
        c_in, w_in = (x[1], w[1]) if op.attrs.get("layout") == "NCHW" else (x[-1], w[-1])
        groups = c_in // w_in if w_in and c_in != w_in else 1
    return groups


def _nntrainer_grouped(graph, op):
    groups = _nntrainer_groups(graph, op)
    return f"a grouped ({groups} groups)" if groups != 1 else None


# nntrainer (profiles/nntrainer.py): "layer", the nntrainer 0.6.0 layer the profile models the op as;
# "kind", that layer's type; "check": fn(graph, op, batchnorm) -> why the layer cannot take this op
# "cannot_train": fn(graph, op) -> what convolution nntrainer itself cannot train (named first)
PROFILES["nntrainer"] = {
    "Conv2D": {"layer": "conv2d", "kind": "conv2d", "check": nntrainer_spatial, "cannot_train": _nntrainer_grouped},
    "DepthwiseConv2D": {"cannot_train": lambda graph, op: "a depthwise"},
}
