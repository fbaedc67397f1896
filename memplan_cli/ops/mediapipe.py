"""mediapipe's documented TF Lite custom ops (mediapipe/util/tflite/operations/).

- `Convolution2DTransposeBias` (selfie segmentation, hair segmentation): a transposed convolution
  plus a bias. Inputs (data NHWC, weights OHWI [C_out, KH, KW, C_in], bias [C_out]); its
  custom_options are a `TfLiteTransposeConvParams` C struct: int32 padding (TfLitePadding: 1 SAME,
  2 VALID), int32 stride_width, int32 stride_height. Output size stride x (in - 1) + K - pad with
  pad = max(0, K - (in - 1) % stride - 1) under SAME (0 under VALID), pad // 2 of it before. That
  is the canonical `ConvTranspose2D` (ops/conv.py: its rule, kernels and FLOPs) with pads (pad // 2,
  pad - pad // 2).
- `MaxPoolingWithArgmax2D` -> `MaxPoolArgmax2D`: a max pool (NHWC) that also outputs, per output
  element, its maximum's position inside the window as a float (filter_y x filter_w + filter_x +
  0.1; the first strict maximum scanning rows then columns). custom_options: a `TfLitePoolParams`
  struct, int32 padding, stride_width, stride_height, filter_width, filter_height, activation
  (only none is taken). Output size: SAME ceil(in / stride), VALID (in - filter + stride) // stride;
  pad before: max(0, ((out - 1) x stride + filter - in) // 2) (TF Lite's ComputePadding).
- `MaxUnpooling2D` -> `MaxUnpool2D`: inputs (values, indices from a MaxPoolingWithArgmax2D), the
  same options struct; output in x filter per spatial dim, zeros but each value written at its
  window position (pad from ComputePadding(stride, out, filter, in)). Taken only when the windows
  do not overlap (stride == filter): then no two values land on one element.
  Training rules (derivatives.yaml `max_pool2d_with_indices` and its backward, which is the unpool):
  MaxPoolArgmax2D's dX routes dY to each window's maximum, read from its own indices output (kept
  for backward, as torch keeps `indices`); MaxUnpool2D's dValues gathers dY at the positions, reads
  dY and the indices; the indices never carry a gradient. FLOPs: forward one compare per window
  element per output (pool), none (unpool); backward |Y| adds (pool), none (unpool).
- `Landmarks2TransformMatrix`, `TransformTensorBilinear`, `TransformLandmarks`: no rule here.
  Outside the backward region (face_landmark_with_attention's attention refinement runs on the
  landmarks, after the trained layers) `memplan verify` runs them as seeded sources of their
  outputs' shapes (execute/ops.py `seeded_source`); inside it, training through them is refused
  with the op named.
"""
from __future__ import annotations

import struct

import numpy as np

from memplan_cli.ops.base import Canon, OpDef
from memplan_cli.ops.rule import OpRule, StepIO, bp_targets, forward_io

PADDING = {1: "SAME", 2: "VALID"}


def _transpose_conv_bias(node) -> Canon | None:
    raw = node.options.get("custom_options") or b""
    x, w, b, y = node.shape(0), node.shape(1), node.shape(2), node.out_shape()
    if len(raw) < 12 or x is None or w is None or b is None or len(x) != 4 or len(w) != 4 or len(b) != 1:
        return None  # not the documented layout: stays a custom op (refused if training needs it)
    padding, sw, sh = struct.unpack_from("<3i", raw)
    if padding not in PADDING or sw < 1 or sh < 1 or w[3] != x[3] or b[0] != w[0]:
        return None
    stride, kernel = (sh, sw), (w[1], w[2])
    pad = [max(0, k - (n - 1) % s - 1) if PADDING[padding] == "SAME" else 0
           for n, k, s in zip(x[1:3], kernel, stride)]
    want = tuple(s * (n - 1) + k - p for n, k, s, p in zip(x[1:3], kernel, stride, pad))
    if len(y) != 4 or tuple(y[1:3]) != want or y[3] != w[0]:
        return None  # the file's output shape disagrees with the op's own arithmetic
    attrs = {"layout": "NHWC", "kernel": kernel, "stride": stride, "dilation": (1, 1),
             "pads": (pad[0] // 2, pad[1] // 2, pad[0] - pad[0] // 2, pad[1] - pad[1] // 2),
             "padding": PADDING[padding], "output_padding": (0, 0), "group": 1, "activation": "NONE"}
    return Canon("ConvTranspose2D", attrs, inputs=list(node.inputs[:3]))


# ---- max pooling with argmax, max unpooling ------------------------------------------------------
def _pool_params(node):
    """(padding, stride (h, w), filter (h, w)) from a TfLitePoolParams struct, or None."""
    raw = node.options.get("custom_options") or b""
    if len(raw) < 24:
        return None
    padding, sw, sh, fw, fh, act = struct.unpack_from("<6i", raw)
    if padding not in PADDING or act != 0 or min(sw, sh, fw, fh) < 1:
        return None  # a fused activation: not taken (mediapipe's models write none)
    return PADDING[padding], (sh, sw), (fh, fw)


def _compute_padding(stride, size, filt, out):
    return max(0, ((out - 1) * stride + filt - size) // 2)


def _argmax_pool(node) -> Canon | None:
    p = _pool_params(node)
    x = node.shape(0)
    if p is None or x is None or len(x) != 4 or len(node.outputs) != 2:
        return None
    padding, stride, filt = p
    out = tuple((n + s - 1) // s if padding == "SAME" else (n - f + s) // s for n, f, s in zip(x[1:3], filt, stride))
    if any(tuple(node.out_shape(k)) != (x[0],) + out + (x[3],) for k in (0, 1)):
        return None
    pads = tuple(_compute_padding(s, n, f, o) for s, n, f, o in zip(stride, x[1:3], filt, out))
    return Canon("MaxPoolArgmax2D", {"layout": "NHWC", "kernel": filt, "stride": stride, "pads": pads,
                                     "padding": padding})


def _unpool(node) -> Canon | None:
    p = _pool_params(node)
    x, idx = node.shape(0), node.shape(1)
    if p is None or x is None or idx is None or len(x) != 4 or tuple(idx) != tuple(x):
        return None
    _, stride, filt = p
    out = tuple(n * f for n, f in zip(x[1:3], filt))
    if stride != filt or tuple(node.out_shape()) != (x[0],) + out + (x[3],):
        return None  # overlapping windows: two values may land on one element
    pads = tuple(_compute_padding(s, o, f, n) for s, o, f, n in zip(stride, out, filt, x[1:3]))
    return Canon("MaxUnpool2D", {"layout": "NHWC", "kernel": filt, "stride": stride, "pads": pads})


def _windows(op, small_shape):
    """For each window position k = fy x fw + fx: the slices of the padded large tensor that the
    small tensor's elements see at k, and the padded size."""
    (fh, fw), (sh, sw), (ph, pw) = op.attrs["kernel"], op.attrs["stride"], op.attrs["pads"]
    oh, ow = small_shape[1:3]
    out = []
    for fy in range(fh):
        for fx in range(fw):
            out.append((fy * fw + fx, (slice(None), slice(fy, fy + (oh - 1) * sh + 1, sh),
                                       slice(fx, fx + (ow - 1) * sw + 1, sw), slice(None))))
    return out, (ph, pw), ((oh - 1) * sh + fh, (ow - 1) * sw + fw)


def _padded(a, pads, size, fill):
    """`a` (N, H, W, C) placed at offset `pads` in a (N, size..., C) array of `fill` (cut to fit)."""
    n, h, w, c = a.shape
    out = np.full((n, max(size[0], pads[0] + h), max(size[1], pads[1] + w), c), fill, dtype=a.dtype)
    out[:, pads[0]:pads[0] + h, pads[1]:pads[1] + w] = a
    return out


def _argmax(ctx, x, y_shape):
    wins, pads, size = _windows(ctx.op, y_shape)
    xp = _padded(x, pads, size, -np.inf)
    vals = np.stack([xp[sl] for _, sl in wins])  # (K, N, OH, OW, C), in k order
    return vals, np.argmax(vals, axis=0)  # the first maximum, as mediapipe's strict '>' scan


def pool_forward(ctx):
    x = np.asarray(ctx.x(0))
    y, idx = ctx.y(0), ctx.y(1, optional=True)
    vals, k = _argmax(ctx, x, y.shape)
    y[...] = np.take_along_axis(vals, k[None], axis=0)[0]
    if idx is not None:
        idx[...] = k + 0.1


def pool_derivative(ctx):
    dx = ctx.dx(0)
    if dx is None:
        return
    dy = np.asarray(ctx.dy())
    k = np.floor(np.asarray(ctx.y(1))).astype(np.int64)
    wins, pads, size = _windows(ctx.op, dy.shape)
    g = _padded(np.zeros(dx.shape, dy.dtype), pads, size, 0)
    for j, sl in wins:
        g[sl] += np.where(k == j, dy, 0)
    dx[...] = g[:, pads[0]:pads[0] + dx.shape[1], pads[1]:pads[1] + dx.shape[2]]


def unpool_forward(ctx):
    v = np.asarray(ctx.x(0))
    k = np.floor(np.asarray(ctx.x(1))).astype(np.int64)
    y = ctx.y()
    wins, pads, size = _windows(ctx.op, v.shape)
    g = _padded(np.zeros(y.shape, y.dtype), pads, size, 0)
    for j, sl in wins:  # windows do not overlap (stride == filter): one value per element
        g[sl] = np.where(k == j, v, g[sl])
    y[...] = g[:, pads[0]:pads[0] + y.shape[1], pads[1]:pads[1] + y.shape[2]]


def unpool_derivative(ctx):
    dv = ctx.dx(0)
    if dv is None:
        return
    k = np.floor(np.asarray(ctx.x(1))).astype(np.int64)
    dy = np.asarray(ctx.dy())
    wins, pads, size = _windows(ctx.op, dv.shape)
    g = _padded(dy, pads, size, 0)  # a value written outside the output got no gradient
    out = np.zeros(dv.shape, dy.dtype)
    for j, sl in wins:
        out = np.where(k == j, g[sl], out)
    dv[...] = out


def pool_rule(op, ctx) -> OpRule:
    x, y, idx = op.inputs[0], op.outputs[0], op.outputs[1]
    r = OpRule(forward=forward_io(op))
    if bp_targets(op, ctx, [x]):
        r.calc_derivative = StepIO([("bp", y), ("fwd", idx)], [("bp", x)])
    return r


def unpool_rule(op, ctx) -> OpRule:
    v, idx, y = op.inputs[0], op.inputs[1], op.outputs[0]
    r = OpRule(forward=forward_io(op))
    if bp_targets(op, ctx, [v]):
        r.calc_derivative = StepIO([("bp", y), ("fwd", idx)], [("bp", v)])
    return r


def _pool_flops(op, operands):
    n = operands[op.outputs[0]].num_elements
    return n * op.attrs["kernel"][0] * op.attrs["kernel"][1], n


OPS = [OpDef("MaxPoolArgmax2D", rule=pool_rule, kernels={"forward": pool_forward, "calcDerivative": pool_derivative},
             flops=_pool_flops, batch="keep"),
       OpDef("MaxUnpool2D", rule=unpool_rule, kernels={"forward": unpool_forward, "calcDerivative": unpool_derivative},
             flops=lambda op, operands: (0, 0), required_inputs=2, nondiff_inputs=(1,), batch="keep")]

TFLITE = {"Convolution2DTransposeBias": _transpose_conv_bias, "MaxPoolingWithArgmax2D": _argmax_pool,
          "MaxUnpooling2D": _unpool}
