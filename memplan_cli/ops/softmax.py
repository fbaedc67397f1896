"""Softmax and LogSoftmax over any axis (ONNX Softmax / LogSoftmax, TFLite SOFTMAX / LOG_SOFTMAX).

Canonical form: `Softmax(x)` / `LogSoftmax(x)` with attr `axes` (the contiguous axes normalised
over; absent: the last axis) and `beta` (TFLite's input scale, 1 otherwise). ONNX opset 13+ takes
one `axis` (default -1). Before opset 13 the input is coerced to 2-D at `axis` (default 1): the
normalisation runs over every dimension from `axis` on, so axes = (axis, ..., rank-1).

Training rules (PyTorch derivatives.yaml `_softmax`: self: _softmax_backward_data(grad, result, ...);
`_log_softmax`: self: _log_softmax_backward_data(grad, result, ...)): both save the output only.
- Softmax calcDerivative: dX = beta·Y ⊙ (dY - Σ_axes(dY ⊙ Y)); reads Y and dY.
- LogSoftmax calcDerivative: dX = beta·(dY - exp(Y) ⊙ Σ_axes dY); reads Y and dY.
- In place (`policy.inplace`): forward may write Y over a dead X, backward dX over a dead dY (the
  sums are taken before the write).
FLOPs (per element): forward 5 (scale, max-subtract, exp, sum, divide / log-subtract); backward 4.
"""
from __future__ import annotations

import numpy as np

from memplan_cli.kernels import softmax as sm
from memplan_cli.kernels.common import store
from memplan_cli.ops import _onert as onert
from memplan_cli.ops.base import Canon, OpDef
from memplan_cli.ops.rule import OpRule, StepIO, bp_targets, forward_io


def rule(op, ctx) -> OpRule:
    x, y = op.inputs[0], op.outputs[0]
    r = OpRule(forward=forward_io(op))
    if bp_targets(op, ctx, [x]):
        r.calc_derivative = StepIO([("fwd", y), ("bp", y)], [("bp", x)])
        if ctx.policy.inplace:
            r.inplace.append((("bp", y), ("bp", x)))
    if ctx.policy.inplace:
        r.inplace.append((("fwd", x), ("fwd", y)))
    return r


def axes_of(attrs, rank: int) -> tuple:
    ax = attrs.get("axes")
    if ax is None:
        return (rank - 1,)
    return tuple(sorted(int(a) % rank for a in ax))


def _beta(ctx) -> float:
    return float(ctx.attrs.get("beta", 1.0))


def softmax_forward(ctx):
    x = ctx.x(0)
    sm.forward(x, ctx.y(), _beta(ctx), axes_of(ctx.attrs, x.ndim))


def softmax_derivative(ctx):
    dx = ctx.dx(0)
    if dx is not None:
        sm.calc_derivative(ctx.y(), ctx.dy(), dx, _beta(ctx), axes_of(ctx.attrs, dx.ndim))


def log_softmax_forward(ctx):
    x = ctx.x(0)
    ax = axes_of(ctx.attrs, x.ndim)
    z = x * _beta(ctx)
    z = z - z.max(axis=ax, keepdims=True)
    store(ctx.y(), z - np.log(np.exp(z).sum(axis=ax, keepdims=True)))


def log_softmax_derivative(ctx):
    dx = ctx.dx(0)
    if dx is None:
        return
    y, dy = ctx.y(), ctx.dy()
    ax = axes_of(ctx.attrs, dx.ndim)
    g = dy - np.exp(y) * dy.sum(axis=ax, keepdims=True)
    store(dx, g * _beta(ctx) if _beta(ctx) != 1.0 else g)


def check(op, operands):
    rank = len(operands[op.inputs[0]].shape)
    ax = op.attrs.get("axes")
    if ax is None:
        return None if rank else "normalises a scalar"
    norm = sorted(int(a) % rank if -rank <= int(a) < rank else -1 for a in ax)
    if not norm or norm[0] < 0 or norm != list(range(norm[0], norm[0] + len(norm))):
        return f"normalises over axes {tuple(ax)}, not contiguous axes of a {rank}-dimensional input"
    return None


def _flops(op, operands):
    n = operands[op.outputs[0]].num_elements
    return 5 * n, 4 * n


def _batch(op, graph, shapes, batched):
    return [tuple(shapes[op.inputs[0]])]


def _onert_forward(op, operands):
    """circle's SOFTMAX normalises the last axis only."""
    rank = len(operands[op.inputs[0]].shape)
    ax = axes_of(op.attrs, rank) if rank else ()
    if rank and ax != (rank - 1,):
        return f"Softmax over axes {ax} of a rank-{rank} tensor: circle's SOFTMAX is over the last axis"
    return None


def _onert_backward(op, operands):
    """onert 0.1.0's SoftMaxGrad ignores beta (measured: other weight updates than beta's)."""
    beta = float(op.attrs.get("beta", 1.0))
    return f"Softmax with beta {beta:g}: its backward ignores beta (wrong gradients)" if beta != 1.0 else None


# `--profile torch`: _softmax / _log_softmax save their result
TORCH = {"saves": (("out0", "any"),)}
OPS = [OpDef("Softmax", rule=rule, kernels={"forward": softmax_forward, "calcDerivative": softmax_derivative},
             flops=_flops, check=check, batch=_batch,
             profiles={"onert": {"forward": _onert_forward, "backward_run": _onert_backward,
                                 "usedef": onert.output_usedef}, "torch": TORCH}),
       OpDef("LogSoftmax", rule=rule, kernels={"forward": log_softmax_forward,
                                              "calcDerivative": log_softmax_derivative},
             flops=_flops, check=check, batch=_batch, profiles={"torch": TORCH})]


def _onnx(typ):
    def conv(node) -> Canon:
        rank = len(node.shape(0))
        if node.opset >= 13:
            return Canon(typ, {"axes": (int(node.attrs.get("axis", -1)) % max(rank, 1),)})
        a = int(node.attrs.get("axis", 1))
        a = a + rank if a < 0 else a
        return Canon(typ, {"axes": tuple(range(a, rank))})
    return conv


def _tflite(typ):
    def conv(node) -> Canon:
        beta = float(node.options.get("beta", 1.0))
        return Canon(typ, {"beta": beta} if typ == "Softmax" else {}, inputs=node.inputs[:1])
    return conv


ONNX = {"Softmax": _onnx("Softmax"), "LogSoftmax": _onnx("LogSoftmax")}
TFLITE = {"SOFTMAX": _tflite("Softmax"), "LOG_SOFTMAX": _tflite("LogSoftmax")}


# ---- other runtimes' profiles (profiles/singa.py, onert/, nntrainer.py): what they know of these ops ----
# singa: the SINGA autograd operator memplan models the op as
PROFILES = {"singa": {"Softmax": {"operator": "SoftMax"}}}

# nntrainer (profiles/nntrainer.py): "layer", the nntrainer 0.6.0 layer the profile models the op as;
# "kind", that layer's type; "check": fn(graph, op, batchnorm) -> why the layer cannot take this op
# "cross_entropy": the loss nntrainer fuses the op into when it ends a model trained with cce
PROFILES["nntrainer"] = {"Softmax": {"layer": "activation (softmax)", "kind": "activation",
                                     "cross_entropy": "cross_softmax"}}
