"""InstanceNormalization (ONNX; torch's InstanceNorm and GroupNorm export to it, GroupNorm with a
Reshape before and a per-channel Mul / Add after): normalisation over the spatial axes of each
(sample, channel).

Canonical form: `InstanceNormalization(X, scale[C], B[C]) -> Y`, attr `epsilon`. X is (N, C, *S);
with R = N·C rows of M = prod(S) elements: Y = scale[c]·(X - μ)·σ⁻¹ + B[c], μ and σ⁻¹ =
1/sqrt(var + ε) per row (biased variance, as ONNX's reference).

Training rule (PyTorch derivatives.yaml: instance_norm runs batch_norm over the (1, N·C, *S) view
in training mode, `native_batch_norm`: input, weight, bias: saves the input, the weight and the
per-row mean and inverse std):
- forward writes two per-row extras, `in_mean` and `in_invstd` (N·C floats each, forward to backward).
- calcGradient: dscale[c] = Σ_{n,s} dY·x̂ (reads X, mean, inverse std, dY), dB[c] = Σ_{n,s} dY.
- calcDerivative: g = dY·scale[c]; dX = σ⁻¹ · (g - mean(g) - x̂·mean(g·x̂)) per row (reads X, scale,
  mean, inverse std, dY). Kept for backward: X, scale and 2·N·C floats.
FLOPs (per element of X): forward 7, backward 12 (as LayerNormalization).
Refused: an input of rank < 3, a scale or B that is not one value per channel.
"""
from __future__ import annotations

import numpy as np

from memplan_cli.ops.base import Canon, OpDef
from memplan_cli.ops.rule import FORWARD_TO_BACKWARD, ExtraRequest, OpRule, StepIO, bp_targets, forward_io

EPS = 1e-5


def rule(op, ctx) -> OpRule:
    x, scale, bias = op.inputs[0], op.inputs[1], op.inputs[2]
    y = op.outputs[0]
    weights = [i for i in dict.fromkeys((scale, bias)) if i >= 0 and ctx.is_param(i)]
    r = OpRule(forward=forward_io(op), weights=weights)
    trained = weights if ctx.trains(op) else []
    targets = bp_targets(op, ctx, [x, scale, bias])
    if not trained and not targets:
        return r
    stats = []
    if targets or scale in trained:
        rows = tuple(ctx.operand(x).shape[:2])
        r.extras = [ExtraRequest("in_mean", rows, "float32", FORWARD_TO_BACKWARD),
                    ExtraRequest("in_invstd", rows, "float32", FORWARD_TO_BACKWARD)]
        r.forward.writes += [("extra", 0), ("extra", 1)]
        stats = [("fwd", x), ("extra", 0), ("extra", 1)]
    if trained:
        r.calc_gradient = StepIO((stats if scale in trained else []) + [("bp", y)], [("grad", w) for w in trained])
    if targets:
        r.calc_derivative = StepIO(stats + [("fwd", scale), ("bp", y)], [("bp", t) for t in targets])
    return r


# ---- kernels ---------------------------------------------------------------------------------
def _rows(a):
    a = np.asarray(a)
    return a.reshape(a.shape[0] * a.shape[1], -1)


def _per_row(v, x):
    """A per-channel vector repeated for every sample: an (N·C, 1) column."""
    return np.tile(np.asarray(v).reshape(-1), x.shape[0]).reshape(-1, 1)


def forward(ctx):
    x = np.asarray(ctx.x(0))
    xr = _rows(x)
    mu = xr.mean(axis=1, keepdims=True)
    inv = 1.0 / np.sqrt(((xr - mu) ** 2).mean(axis=1, keepdims=True) + float(ctx.attrs.get("epsilon", EPS)))
    y = (xr - mu) * inv * _per_row(ctx.x(1), x) + _per_row(ctx.x(2), x)
    ctx.y()[...] = y.reshape(ctx.y().shape)
    for what, v in (("in_mean", mu), ("in_invstd", inv)):
        e = ctx.extra(what)
        if e is not None:
            e[...] = v.reshape(e.shape)


def _xhat(ctx, x):
    inv = np.asarray(ctx.extra("in_invstd")).reshape(-1, 1)
    return (_rows(x) - np.asarray(ctx.extra("in_mean")).reshape(-1, 1)) * inv, inv


def _per_channel(g_rows, x, shape):
    """Σ over samples and spatial positions of an (N·C, M) array: one value per channel."""
    return g_rows.sum(axis=1).reshape(x.shape[0], x.shape[1]).sum(axis=0).reshape(shape)


def _param_grads(ctx, gs, gb):
    dy = np.asarray(ctx.dy())
    if gb is not None:
        gb[...] = _per_channel(_rows(dy), dy, gb.shape)
    if gs is not None:
        xhat, _ = _xhat(ctx, np.asarray(ctx.x(0)))
        gs[...] = _per_channel(_rows(dy) * xhat, dy, gs.shape)


def calc_gradient(ctx):
    _param_grads(ctx, ctx.grad(1), ctx.grad(2))


def calc_derivative(ctx):
    _param_grads(ctx, ctx.dx(1), ctx.dx(2))
    dx = ctx.dx(0)
    if dx is None:
        return
    x = np.asarray(ctx.x(0))
    xhat, inv = _xhat(ctx, x)
    g = _rows(ctx.dy()) * _per_row(ctx.x(1), x)
    d = inv * (g - g.mean(axis=1, keepdims=True) - xhat * (g * xhat).mean(axis=1, keepdims=True))
    dx[...] = d.reshape(dx.shape)


# ---- load-time facts -------------------------------------------------------------------------
def check(op, operands):
    xs = tuple(operands[op.inputs[0]].shape)
    if len(xs) < 3:
        return f"normalises a rank-{len(xs)} input (InstanceNormalization needs (N, C, spatial...))"
    for k, what in ((1, "scale"), (2, "bias")):
        s = operands[op.inputs[k]]
        if s.num_elements != xs[1]:
            return f"has a {what} of shape {tuple(s.shape)}, not one value per channel ({xs[1]})"
    return None


def _flops(op, operands):
    n = operands[op.inputs[0]].num_elements
    return 7 * n, 12 * n


INSTANCE_NORM_TYPE = "InstanceNormalization"  # both exporters' GroupNorm core (profiles/torch/groupnorm.py reads it back)
OPS = [OpDef("InstanceNormalization", rule=rule,
             kernels={"forward": forward, "calcGradient": calc_gradient, "calcDerivative": calc_derivative},
             flops=_flops, required_inputs=3, check=check, batch="keep", bias_inputs=(2,),
             weight_inputs=(1, 2), autocast="first")]  # group_norm / instance_norm: follow their input


def _onnx(node) -> Canon:
    return Canon("InstanceNormalization", {"epsilon": float(node.attrs.get("epsilon", EPS))})


ONNX = {"InstanceNormalization": _onnx}


# `--profile torch`: torch's GroupNorm (F.group_norm) is one eager op, `native_group_norm`, which
# both exporters write as Reshape (N, G, -1) -> InstanceNormalization (ones / zeros of G) -> Reshape
# back -> Mul by the weight -> Add of the bias (profiles/torch/groupnorm.py reads it back).
# derivatives.yaml: native_group_norm saves its input, the weight, mean and rstd ((N, G) each, of the
# input's dtype); native_group_norm_backward (CPU kernel, group_norm_kernel.cpp) makes the input's
# gradient, the weight's and the bias's, and two (N, C) accumulators `ds` / `db` freed in the op
# (measured, torch 2.14: x-sized output, 2 x N·G floats in forward; the gradients and 2 x N·C floats
# in backward, whether or not the input needs its gradient).
def _torch_group_norm_scratch(op, operands) -> tuple:
    x = operands[op.inputs[0]]
    n, c = (int(d) for d in x.shape[:2])
    return ((2 * n * c * 4,),)


TORCH_GROUP_NORM = {"saves": (("in0", "any"),),
                    "aux": (("mean", "groups", "float32"), ("rstd", "groups", "float32")),
                    "bwd_scratch": _torch_group_norm_scratch}
PROFILES = {"torch": {"GroupNorm": TORCH_GROUP_NORM}}
