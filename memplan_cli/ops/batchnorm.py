"""BatchNormalization (ONNX BatchNormalization, every opset): per-channel normalisation, channel axis 1.

Canonical form: `BatchNormalization(X, scale, B, mean, var) -> Y [, running_mean, running_var
[, saved_mean, saved_var]]` with attrs `epsilon`, `momentum`. The training setup's `--batchnorm`
(`TrainConfig.batchnorm`) decides what a training step computes:

- `train` (default): batch statistics, as PyTorch's `model.train()` does. An ONNX model exported
  for inference stores BN in eval form (one output, `training_mode` 0): memplan trains it with batch
  statistics anyway, as training would, ignoring the stored mean/var in Y (they only feed the
  running-statistics outputs when the model has them: running = momentum·stored + (1-momentum)·batch,
  biased variance, as ONNX's reference). Y = scale·(X - μ)·σ⁻¹ + B, μ and σ⁻¹ = 1/sqrt(var + ε)
  over every axis but 1.
- `frozen`: the stored mean/var (eval form, as fine-tuning with frozen BN does): Y = a·X + b per
  channel, an affine op that trains only scale and B (or nothing when the op is not selected).

Training rule (PyTorch derivatives.yaml `native_batch_norm`: input, weight, bias:
native_batch_norm_backward(grad, input, weight, running_mean, running_var, result1, result2, train,
eps, ...): saves the input, the weight and, in training, result1/result2 = the batch mean and inverse
std):
- train: forward writes two per-channel extras, `bn_mean` and `bn_invstd` (C floats each, forward to
  backward). calcGradient: dscale = Σ dY·x̂, dB = Σ dY (reads X, the extras, dY). calcDerivative:
  dX = scale·σ⁻¹/M · (M·dY - Σ dY - x̂·Σ dY·x̂), M = elements per channel (reads X, scale, extras, dY).
  Kept for backward: X and 2·C floats.
- frozen: calcGradient: dscale = Σ dY·x̂ (reads X, mean, var, dY), dB = Σ dY; calcDerivative:
  dX = dY·scale·σ⁻¹ (reads scale, var, dY: X is kept only when scale trains).
- mean and var (inputs 3, 4) never receive a gradient; scale and B are the op's weights when they
  are float constants, else activations that get back-props.
FLOPs: train forward 7/element (mean, var, normalise, affine), backward 9/element; frozen forward 2,
backward 5 (1 for dX alone).
Recompute (memplan's policy `cheap_recompute`, passes/cheap_recompute.py): in train mode, Y is not kept
for the backward of the ops after BN but recomputed from X, the extras, scale and B (2 FLOPs/element).
Refused: `spatial` 0 (per-element statistics), a rank < 2
input, parameters that are not C-vectors.
"""
from __future__ import annotations

import numpy as np

from memplan_cli.ops.base import Canon, OpDef
from memplan_cli.ops.rule import FORWARD_TO_BACKWARD, ExtraRequest, OpRule, StepIO, bp_targets, forward_io

EPS = 1e-5


def mode(cfg) -> str:
    return getattr(cfg, "batchnorm", "train") or "train"


def _cfg(ctx):
    return ctx.tg.config


def rule(op, ctx) -> OpRule:
    x, scale, bias, mean, var = op.inputs[:5]
    y = op.outputs[0]
    # X itself may be a parameter: weight standardization (timm's ScaledStdConv2d, NFNets) normalises
    # the conv weight with batch_norm, and that weight trains through it
    weights = [i for i in (x, scale, bias) if ctx.is_param(i)]
    r = OpRule(forward=forward_io(op), weights=weights)
    trained = weights if ctx.trains(op) else []
    targets = bp_targets(op, ctx, [x, scale, bias])
    if not trained and not targets:
        return r
    if mode(_cfg(ctx)) == "frozen":
        if trained:
            reads = ([("fwd", x), ("fwd", mean), ("fwd", var)] if scale in trained else []) + [("bp", y)]
            if x in trained:
                reads += [("fwd", scale), ("fwd", var)]
            r.calc_gradient = StepIO(list(dict.fromkeys(reads)), [("grad", w) for w in trained])
        if targets:
            reads = [("fwd", scale), ("fwd", var)]
            if scale in targets or bias in targets:
                reads = [("fwd", x), ("fwd", scale), ("fwd", mean), ("fwd", var)]
            r.calc_derivative = StepIO(reads + [("bp", y)], [("bp", t) for t in targets])
        return r
    c = ctx.operand(scale).shape
    r.extras = [ExtraRequest("bn_mean", tuple(c), "float32", FORWARD_TO_BACKWARD),
                ExtraRequest("bn_invstd", tuple(c), "float32", FORWARD_TO_BACKWARD)]
    r.forward.writes += [("extra", 0), ("extra", 1)]
    stats = [("fwd", x), ("extra", 0), ("extra", 1)]
    if trained:
        extra = [("fwd", scale)] if x in trained else []
        r.calc_gradient = StepIO(stats + extra + [("bp", y)], [("grad", w) for w in trained])
    if targets:
        r.calc_derivative = StepIO(stats + [("fwd", scale), ("bp", y)], [("bp", t) for t in targets])
    return r


# ---- kernels ---------------------------------------------------------------------------------
def _axes(x) -> tuple:
    return (0,) + tuple(range(2, x.ndim))


def _bc(v, ndim) -> np.ndarray:
    """A per-channel vector shaped to broadcast against an (N, C, ...) tensor."""
    return np.asarray(v).reshape((1, -1) + (1,) * (ndim - 2))


def _invstd(var, eps) -> np.ndarray:
    """1/sqrt(|var| + eps): a variance is never negative; |var| keeps verify's seeded values (memplan
    never reads weight bytes, so a stored variance may be seeded below 0) finite."""
    return 1.0 / np.sqrt(np.abs(np.asarray(var)) + eps)


def _eps(ctx) -> float:
    return float(ctx.attrs.get("epsilon", EPS))


def _stats(ctx):
    """(mean, inverse std) per channel: the batch's (train; from the extras in backward) or the
    stored ones (frozen)."""
    if mode(_cfg(ctx)) == "frozen":
        return np.asarray(ctx.x(3)), _invstd(ctx.x(4), _eps(ctx))
    m, s = ctx.extra("bn_mean"), ctx.extra("bn_invstd")
    return m, s


def _recomputing(ctx) -> bool:
    """A train-mode recompute step (passes/cheap_recompute.py): it reads the saved statistics instead of
    writing them."""
    t = ctx.extra_id("bn_mean")
    return t is not None and t in ctx._reads and t not in ctx._writes


def forward(ctx):
    x = np.asarray(ctx.x(0))
    scale, bias = np.asarray(ctx.x(1)), np.asarray(ctx.x(2))
    eps = _eps(ctx)
    if _recomputing(ctx):  # Y from the saved statistics: the same arithmetic as the forward step
        mu, inv = _stats(ctx)
        ctx.y()[...] = (x - _bc(mu, x.ndim)) * _bc(inv * scale, x.ndim) + _bc(bias, x.ndim)
        return
    rm, rv = np.asarray(ctx.x(3)), np.asarray(ctx.x(4))
    if mode(_cfg(ctx)) == "frozen":
        mu, var = rm, rv
    else:
        mu, var = x.mean(axis=_axes(x)), x.var(axis=_axes(x))
        for what, v in (("bn_mean", mu), ("bn_invstd", _invstd(var, eps))):
            e = ctx.extra(what)
            if e is not None:
                e[...] = v
    inv = _invstd(var, eps)
    ctx.y()[...] = (x - _bc(mu, x.ndim)) * _bc(inv * scale, x.ndim) + _bc(bias, x.ndim)
    outs = ctx.op.outputs
    mom = float(ctx.attrs.get("momentum", 0.9))
    train = mode(_cfg(ctx)) != "frozen"
    values = {1: mom * rm + (1 - mom) * mu if train else rm, 2: mom * rv + (1 - mom) * var if train else rv,
              3: mu, 4: var}
    for k in range(1, len(outs)):
        out = ctx.y(k, optional=True)  # a frozen-mode recompute step writes Y alone
        if out is not None:
            out[...] = values[k]


def _xhat(ctx, x, mu, inv):
    return (x - _bc(mu, x.ndim)) * _bc(inv, x.ndim)


def calc_gradient(ctx):
    dy = np.asarray(ctx.dy())
    ax = _axes(dy)
    gs, gb = ctx.grad(1), ctx.grad(2)
    if gb is not None:
        gb[...] = dy.sum(axis=ax).reshape(gb.shape)
    if gs is not None:
        mu, inv = _stats(ctx)
        gs[...] = (dy * _xhat(ctx, np.asarray(ctx.x(0)), mu, inv)).sum(axis=ax).reshape(gs.shape)
    if ctx.grad(0) is not None:  # a standardized weight: the same formula as an activation's dX
        _backward(ctx, dy, ctx.grad(0), None, None)


def calc_derivative(ctx):
    dy = np.asarray(ctx.dy())
    _backward(ctx, dy, ctx.dx(0), ctx.dx(1), ctx.dx(2))


def _backward(ctx, dy, dx, ds, db):
    ax = _axes(dy)
    frozen = mode(_cfg(ctx)) == "frozen"
    scale = np.asarray(ctx.x(1))
    xhat = None
    if ds is not None or db is not None or not frozen:
        mu, inv = _stats(ctx)
        xhat = _xhat(ctx, np.asarray(ctx.x(0)), mu, inv)
    else:  # frozen dX alone: the stored variance is all it needs
        inv = _invstd(ctx.x(4), _eps(ctx))
    if db is not None:
        db[...] = dy.sum(axis=ax).reshape(db.shape)
    if ds is not None:
        ds[...] = (dy * xhat).sum(axis=ax).reshape(ds.shape)
    if dx is None:
        return
    if frozen:
        dx[...] = dy * _bc(scale * inv, dy.ndim)
        return
    m = dy.size // dy.shape[1]
    sum_dy = _bc(dy.sum(axis=ax), dy.ndim)
    sum_dyx = _bc((dy * xhat).sum(axis=ax), dy.ndim)
    dx[...] = _bc(scale * inv, dy.ndim) * (dy - sum_dy / m - xhat * (sum_dyx / m))


# ---- load-time facts -------------------------------------------------------------------------
def check(op, operands):
    xs = tuple(operands[op.inputs[0]].shape)
    if len(xs) < 2:
        return f"normalises a rank-{len(xs)} input (needs N, C, ...)"
    if op.attrs.get("spatial", 1) == 0:
        return "has spatial=0 (per-element statistics), which memplan does not implement"
    for k, what in ((1, "scale"), (2, "bias"), (3, "mean"), (4, "var")):
        s = tuple(operands[op.inputs[k]].shape)
        if s != (xs[1],):
            return f"has a {what} of shape {s}, not ({xs[1]},) (one per channel)"
    return None


def _flops(op, operands):
    n = operands[op.inputs[0]].num_elements
    return 7 * n, 9 * n


def _batch(op, graph, shapes, batched):
    return [tuple(shapes[op.inputs[0]])] + [None] * (len(op.outputs) - 1)


# `--profile torch`: native_batch_norm (training) saves its input, its weight and save_mean /
# save_invstd (derivatives.yaml: native_batch_norm_backward(grad, input, weight, running_mean,
# running_var, result1, result2, ...): a weight computed each step, ScaledStdConv2d's `gain * scale`,
# is held until then); its backward kernel allocates an input-sized scratch beside the input's
# gradient (measured, torch 2.14 CPU; no tensor MemTracker sees). In training mode the ONNX op's
# input_mean / input_var make only its running statistics (outputs 1 and 2): an export of batch_norm
# without running statistics (timm's weight standardisation) computes them for nothing eager runs
# (profiles/torch/rewrites.py); the ones / zeros both exporters write for a weight / bias eager
# passes as None are no tensors there
TORCH = {"saves": (("in0", "any"), ("in1", "any")), "aux": (("save_mean", "channels", "float32"),
                                                            ("save_invstd", "channels", "float32")),
         "bwd_scratch": (("in0?g0",),), "only_for_outputs": {3: (1,), 4: (2,)}, "none_fills": (1, 2)}
BN_TYPE = "BatchNormalization"  # `--profile torch` puts back one the dynamo exporter folded (profiles/torch/export.py)
OPS = [OpDef(BN_TYPE, rule=rule,
             kernels={"forward": forward, "calcGradient": calc_gradient, "calcDerivative": calc_derivative},
             flops=_flops, required_inputs=5, check=check, nondiff_inputs=(3, 4), batch=_batch,
             bias_inputs=(2,), weight_inputs=(1, 2), nondiff_outputs=(1, 2, 3, 4), profiles={"torch": TORCH},
             recompute_stats=("bn_mean", "bn_invstd"), recompute_frozen_inputs=5,
             autocast="first")]  # on no autocast list: a bfloat16 input with float32 parameters stays bfloat16


def _onnx(node) -> Canon:
    a = node.attrs
    attrs = {"epsilon": float(a.get("epsilon", EPS)), "momentum": float(a.get("momentum", 0.9))}
    # opsets < 7: `is_test` only says the model was exported for inference (trained with batch
    # statistics all the same, see above); `consumed_inputs` is an in-place hint
    if int(a.get("spatial", 1)) == 0:
        attrs["spatial"] = 0
    return Canon("BatchNormalization", attrs)


ONNX = {"BatchNormalization": _onnx}


def _nntrainer_check(graph, op, batchnorm):
    if batchnorm == "frozen":
        return (f"nntrainer profile: op {op.label}: nntrainer's batch_normalization trains with batch statistics "
                f"(no --batchnorm frozen)")
    if not all(i >= 0 and graph.operands[i].is_const for i in op.inputs[1:5]):
        return f"nntrainer profile: op {op.label}: batch_normalization needs constant scale, bias, mean and var"
    return None


# ---- other runtimes' profiles (profiles/nntrainer.py): what they know of this op -------------------
# nntrainer (profiles/nntrainer.py): "layer", the nntrainer 0.6.0 layer the profile models the op as;
# "kind", that layer's type; "check": fn(graph, op, batchnorm) -> why the layer cannot take this op
PROFILES = {"nntrainer": {"BatchNormalization": {"layer": "batch_normalization", "kind": "batch_normalization",
                                                "check": _nntrainer_check}}}
