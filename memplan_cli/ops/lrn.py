"""Local response normalization (ONNX LRN, TFLite LOCAL_RESPONSE_NORMALIZATION): across channels,
Y = X / s^beta with s = bias + a * S, S[c] = sum of X[c']^2 over the window c' in [c - lo, c + hi].

Canonical attrs: `axis` (the channel axis: 1 for ONNX's NCHW, the last for TFLite's NHWC), `lo`,
`hi` (the window: ONNX size gives floor((size-1)/2) below and ceil((size-1)/2) above; TFLite's
radius r gives r on both sides), `alpha` (a: ONNX's alpha / size, TFLite's alpha), `beta`, `bias`.

Training rule (no derivatives.yaml entry: PyTorch composes LRN from pow / avg_pool3d / mul / pow /
div and saves each of their inputs; this is the closed form, as Caffe's LRN layer has it):
dX[c] = dY[c] * s[c]^-beta - 2 a beta X[c] * sum over the c'' whose window holds c of
dY[c''] Y[c''] / s[c'']. Backward keeps X only: s and Y are recomputed from it (one window sum and a
power), less memory than keeping the scale and Y as Caffe does.
FLOPs per element: forward 2w + 4 (w = lo + hi + 1: squares and window sum, scale, power, divide);
backward 2w + 4 to recompute s and Y, then 2w + 6.
"""
from __future__ import annotations

import numpy as np

from memplan_cli.ops.base import Canon, OpDef
from memplan_cli.ops.kernel_util import target
from memplan_cli.ops.rule import OpRule, StepIO, bp_targets, forward_io


def rule(op, ctx) -> OpRule:
    x, y = op.inputs[0], op.outputs[0]
    r = OpRule(forward=forward_io(op))
    if bp_targets(op, ctx, [x]):
        r.calc_derivative = StepIO([("bp", y), ("fwd", x)], [("bp", x)])
    return r


def _window_sum(v, axis: int, lo: int, hi: int):
    """out[c] = sum of v[c'] for c' in [c - lo, c + hi] (clipped to the axis) along `axis`."""
    v = np.moveaxis(v, axis, -1)
    n = v.shape[-1]
    c = np.concatenate([np.zeros(v.shape[:-1] + (1,), v.dtype), np.cumsum(v, axis=-1)], axis=-1)
    idx = np.arange(n)
    top = np.minimum(idx + hi + 1, n)
    bottom = np.maximum(idx - lo, 0)
    return np.moveaxis(c[..., top] - c[..., bottom], -1, axis)


def _scale(x, a):
    return a["bias"] + a["alpha"] * _window_sum(x * x, a["axis"] % x.ndim, a["lo"], a["hi"])


def forward(ctx):
    x = np.asarray(ctx.x(0))
    ctx.y()[...] = x * np.power(_scale(x, ctx.attrs), -ctx.attrs["beta"])


def calc_derivative(ctx):
    dx = target(ctx, 0)
    if dx is None:
        return
    a = ctx.attrs
    x = np.asarray(ctx.x(0))
    dy = np.asarray(ctx.dy())
    s = _scale(x, a)
    y = x * np.power(s, -a["beta"])
    # the c'' whose window [c'' - lo, c'' + hi] holds c are c'' in [c - hi, c + lo]
    back = _window_sum(dy * y / s, a["axis"] % x.ndim, a["hi"], a["lo"])
    dx[...] = dy * np.power(s, -a["beta"]) - 2.0 * a["alpha"] * a["beta"] * x * back


def check(op, operands):
    a = op.attrs
    if a.get("lo", 0) < 0 or a.get("hi", 0) < 0:
        return f"has a negative window ({a.get('lo')}, {a.get('hi')})"
    if len(operands[op.inputs[0]].shape) < 2:
        return "needs an input of rank >= 2 (a channel axis)"
    if not float(a.get("bias", 1.0)) > 0:
        return f"has bias {a.get('bias')}: the scale must stay positive for s^-beta"
    return None


def flops(op, operands):
    n = operands[op.inputs[0]].num_elements
    w = op.attrs["lo"] + op.attrs["hi"] + 1
    return (2 * w + 4) * n, (4 * w + 10) * n


def _batch(op, graph, shapes, batched):
    x = op.inputs[0]
    return [tuple(shapes[x]) if x in batched else None]


OPS = [OpDef("LRN", rule=rule, kernels={"forward": forward, "calcDerivative": calc_derivative},
             flops=flops, check=check, batch=_batch)]


def _onnx(node) -> Canon:
    size = int(node.attrs.get("size", 1))
    return Canon("LRN", {"axis": 1, "lo": (size - 1) // 2, "hi": size - 1 - (size - 1) // 2,
                         "alpha": float(node.attrs.get("alpha", 1e-4)) / max(size, 1),
                         "beta": float(node.attrs.get("beta", 0.75)), "bias": float(node.attrs.get("bias", 1.0)),
                         "layout": "NCHW"})


def _tflite(node) -> Canon:
    o = node.options
    r = int(o.get("radius", 0))
    return Canon("LRN", {"axis": -1, "lo": r, "hi": r, "alpha": float(o.get("alpha", 0.0)),
                         "beta": float(o.get("beta", 0.0)), "bias": float(o.get("bias", 0.0)), "layout": "NHWC"})


ONNX = {"LRN": _onnx}
TFLITE = {"LOCAL_RESPONSE_NORMALIZATION": _tflite}
