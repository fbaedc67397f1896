"""Dropout (ONNX Dropout, every opset): zero a random `ratio` of the elements, scale the rest by
1/(1 - ratio).

Canonical form: `Dropout(X) -> Y [, mask]` with attr `ratio` (the constant ratio; opset 12 moved it
from an attribute to an input, default 0.5). The training setup's `--dropout` (`TrainConfig.dropout`)
decides what a training step computes:

- `train` (default): what a training step does (PyTorch's `model.train()`): drop with the ratio.
  How the model was exported does not change that: opset < 7 `is_test`, opsets 7-11 (no flag: the
  runtime decides) and opset 12+ `training_mode` false only say the file was written for inference,
  as a BatchNormalization in eval form still trains with batch statistics. A ratio of 0 drops
  nothing: the op is an identity.
- `off`: every Dropout is an identity (inference form, as fine-tuning with dropout disabled does).

Training rule (PyTorch derivatives.yaml `native_dropout`: input: native_dropout_backward(grad,
result1, scale), result1 being the mask, a bool tensor: 1 byte per element):
- dropping: forward writes the mask as a bool extra `dropout_mask` of |X| bytes (1 byte/element,
  forward to backward), or into the model's own mask output when it has one (then that output is
  what backward keeps: no extra). calcDerivative: dX = dY·mask/(1 - ratio); reads the mask and dY
  only, never X or Y. In place (`policy.inplace`): Y over a dead X, dX over a dead dY.
- identity (off, ratio 0): as Identity: Y a view of X (`policy.alias_reshape`), dX a view of dY;
  nothing kept. A mask output is all true.
- A parameter read through dropout (DeBERTa's relative-position embedding) is the op's weight: its
  gradient is dX, made in calcGradient from the same mask.
- Y is cheap to recompute from X and the mask (`recompute_mask`, passes/cheap_recompute.py): when both
  are kept anyway (attention probabilities for the Softmax's backward, the mask for this op's own), the
  next MatMul's backward reads Y recomputed instead of Y kept from forward: a recompute step reads the
  mask instead of drawing it, with the same arithmetic (bit-identical).
- The mask output carries no gradient. The mask is drawn from a generator seeded by the op's index,
  so a step is deterministic (verify and finite differences rerun forward with the same mask).
FLOPs (per element): dropping: forward 2 (draw and compare, scale), backward 1; identity: none.
Refused: a ratio that is not a constant (a run-time input), a ratio outside [0, 1].
"""
from __future__ import annotations

import numpy as np

from memplan_cli.ops.base import Canon, OpDef
from memplan_cli.ops.rule import FORWARD_TO_BACKWARD, ExtraRequest, OpRule, StepIO, bp_targets, forward_io

DEFAULT_RATIO = 0.5


def mode(cfg) -> str:
    return getattr(cfg, "dropout", "train") or "train"


def drops(op, cfg) -> bool:
    """Whether this Dropout drops anything in a training step under `cfg`."""
    return mode(cfg) == "train" and float(op.attrs.get("ratio", DEFAULT_RATIO)) > 0


def rule(op, ctx) -> OpRule:
    x, y = op.inputs[0], op.outputs[0]
    # a parameter read through dropout (DeBERTa's relative-position table): its gradient is dX
    weights = [x] if ctx.is_param(x) else []
    r = OpRule(forward=forward_io(op), weights=weights)
    trains = bool(weights) and ctx.trains(op)
    has_bp = bool(bp_targets(op, ctx, [x]))
    if not drops(op, ctx.tg.config):
        if ctx.policy.alias_reshape and not ctx.is_const(x):
            r.view = (y, x)
        if trains:
            r.calc_gradient = StepIO([("bp", y)], [("grad", x)])
        if has_bp:
            r.calc_derivative = StepIO([("bp", y)], [("bp", x)])
            if ctx.policy.alias_reshape:
                r.inplace.append((("bp", y), ("bp", x)))
        return r
    if ctx.policy.inplace and not ctx.is_const(x):
        r.inplace.append((("fwd", x), ("fwd", y)))
    if not has_bp and not trains:
        return r
    if len(op.outputs) > 1 and op.outputs[1] >= 0:
        mask = ("fwd", op.outputs[1])
    else:
        r.extras = [ExtraRequest("dropout_mask", tuple(ctx.operand(x).shape), "bool", FORWARD_TO_BACKWARD)]
        r.forward.writes.append(("extra", 0))
        mask = ("extra", 0)
    if trains:
        r.calc_gradient = StepIO([mask, ("bp", y)], [("grad", x)])
        return r
    r.calc_derivative = StepIO([mask, ("bp", y)], [("bp", x)])
    if ctx.policy.inplace:
        r.inplace.append((("bp", y), ("bp", x)))
    return r


# ---- kernels ---------------------------------------------------------------------------------
def _ratio(ctx) -> float:
    return float(ctx.attrs.get("ratio", DEFAULT_RATIO))


def _scale(ratio: float) -> float:
    return 0.0 if ratio >= 1 else 1.0 / (1.0 - ratio)


def _mask_out(ctx):
    """Where the mask goes: the model's mask output, else the extra (None when nobody keeps it)."""
    if len(ctx.op.outputs) > 1 and ctx.op.outputs[1] >= 0:
        return ctx.y(1)
    return ctx.extra("dropout_mask")


def _mask_id(ctx) -> int | None:
    if len(ctx.op.outputs) > 1 and ctx.op.outputs[1] >= 0:
        t = ctx.tg.fwd.get(ctx.op.outputs[1])
        return ctx.subst.get(t, t)
    return ctx.extra_id("dropout_mask")


def _recomputing(ctx) -> bool:
    """A recompute step (passes/cheap_recompute.py): it reads the kept mask instead of writing it."""
    t = _mask_id(ctx)
    return t is not None and t in ctx._reads and t not in ctx._writes


def forward(ctx):
    x = np.asarray(ctx.x(0))
    y = ctx.y()
    if _recomputing(ctx):  # the same arithmetic as below, from the kept mask
        keep = np.asarray(_mask_out(ctx)).reshape(x.shape).astype(bool)
        y[...] = (x * keep * _scale(_ratio(ctx))).reshape(y.shape)
        return
    if not drops(ctx.op, ctx.tg.config):  # an identity (a view); a recompute step writes no mask
        y[...] = x.reshape(y.shape)
        t = _mask_id(ctx)
        if t is not None and t in ctx._writes:
            ctx.tensor(t)[...] = True
        return
    m = _mask_out(ctx)
    ratio = _ratio(ctx)
    keep = np.random.default_rng(ctx.op.index).random(x.shape) >= ratio
    if m is not None:
        m[...] = keep.reshape(m.shape)
    y[...] = (x * keep * _scale(ratio)).reshape(y.shape)


def calc_gradient(ctx):
    _input_grad(ctx, ctx.grad(0))


def calc_derivative(ctx):
    _input_grad(ctx, ctx.dx(0))


def _input_grad(ctx, dx):
    if dx is None:
        return
    dy = np.asarray(ctx.dy())
    if not drops(ctx.op, ctx.tg.config):
        dx[...] = dy.reshape(dx.shape)
        return
    keep = np.asarray(_mask_out(ctx)).reshape(dy.shape).astype(bool)
    dx[...] = (dy * keep * _scale(_ratio(ctx))).reshape(dx.shape)


# ---- load-time facts -------------------------------------------------------------------------
def check(op, operands):
    if op.attrs.get("ratio") is None:
        return "has a ratio computed at run time, which memplan cannot read (it needs a constant)"
    r = float(op.attrs["ratio"])
    if not 0 <= r <= 1:
        return f"has ratio {r:g}, outside [0, 1]"
    if len(op.outputs) > 1 and tuple(operands[op.outputs[1]].shape) != tuple(operands[op.inputs[0]].shape):
        return "has a mask output whose shape is not its input's"
    return None


def _flops(op, operands):
    n = operands[op.inputs[0]].num_elements
    if float(op.attrs.get("ratio", DEFAULT_RATIO) or 0) == 0:
        return 0, 0
    return 2 * n, n


# `--profile torch`: on CPU eager takes the unfused path (`_dropout_impl`): a float noise tensor
# (bernoulli / (1 - p)), multiplied in and saved by the multiplication
TORCH = {"aux": (("noise", "in0", "in0"),), "view_if": lambda op: float(op.attrs.get("ratio", 0.5)) == 0.0}


def _torch(op) -> dict:
    """p = 0 returns its input (measured: nothing allocated, nothing saved), a view both ways."""
    if float(op.attrs.get("ratio", DEFAULT_RATIO)) == 0.0:
        return {"view": True, "grad": "view"}
    return TORCH


DROPOUT_TYPE = "Dropout"  # `--profile torch` puts back a dropout of a folded parameter computation (profiles/torch/export.py)
OPS = [OpDef(DROPOUT_TYPE, rule=rule, kernels={"forward": forward, "calcGradient": calc_gradient,
                                            "calcDerivative": calc_derivative},
             flops=_flops, check=check, batch="keep", random=True, recompute_mask="dropout_mask",
             profiles={"torch": _torch})]


def _onnx(node) -> Canon:
    if node.opset >= 12:
        if len(node.inputs) > 1 and node.inputs[1] >= 0:
            v = node.values(1)
            ratio = float(v[0]) if v else None
        else:
            ratio = DEFAULT_RATIO
    else:
        ratio = float(node.attrs.get("ratio", DEFAULT_RATIO))
    # ratio and training_mode (opset 12+) are read here: the op keeps its data input only
    return Canon("Dropout", {"ratio": ratio}, inputs=node.inputs[:1])


ONNX = {"Dropout": _onnx}
# ONNX ops whose values are drawn at random: never folded to a constant, never recomputed (the ones
# without a family here keep their ONNX type)
ONNX_FACTS = {t: {"random": True} for t in ("RandomNormal", "RandomNormalLike", "RandomUniform",
                                             "RandomUniformLike", "Bernoulli", "Multinomial", "Dropout")}


def _draw_flops(op, operands):
    """A draw kept unconverted (stochastic depth's `rand < p`): 1 FLOP per element drawn, as Dropout
    counts its draw; no backward (nothing differentiable)."""
    return sum(operands[o].num_elements for o in op.outputs if o >= 0), 0


for _t in ("RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Bernoulli"):
    ONNX_FACTS[_t]["flops"] = _draw_flops
# random masks (stochastic depth and dropout as the dynamo exporter writes them, `rand < p`): eager's
# `empty(..).bernoulli_(p)` allocates the mask alone and records no autograd node
PROFILES = {"torch": {t: {"draws": True} for t in ("RandomUniformLike", "RandomUniform", "RandomNormalLike",
                                                    "RandomNormal", "Bernoulli")}}
# the *Like ops read their input's shape alone: eager's `empty_like(x)` (the mask's own allocation)
for _t in ("RandomUniformLike", "RandomNormalLike"):
    PROFILES["torch"][_t] = {"draws": True, "shape_only": True}
