"""Conv2D: Y = act(conv(X, W) + b).

Rules:
- calcGradient (the op trains): dW = corr(X, dY) reads X and dY; db = Σ dY.
- calcDerivative (X needs a back-prop): dX = conv_transpose(dY, W) reads W and dY.
- Kept for backward: X only when W trains, Y only when an activation is fused.
- Extras: none in memplan (direct kernels index W and dW in their stored layout). With
  `policy.transpose_extras` (onert): W^T (|W|, calcDerivative) and dW^T (|W|, calcGradient), BACKWARD.
"""
from __future__ import annotations

from memplan_cli.passes.ops._common import bp_targets, forward_io
from memplan_cli.passes.rules import BACKWARD, ExtraRequest, OpRule, StepIO, fused_activation


def conv_like(op, ctx, *, transposes=True) -> OpRule:
    x, w = op.inputs[0], op.inputs[1]
    y = op.outputs[0]
    weights = [i for i in dict.fromkeys(op.inputs[1:]) if i >= 0 and ctx.is_param(i)]
    rule = OpRule(forward=forward_io(op), weights=weights)
    if ctx.trains(op) and weights:
        reads = [("bp", y)] + ([("fwd", x)] if w in weights else [])
        rule.calc_gradient = StepIO(reads, [("grad", i) for i in weights])
    if bp_targets(op, ctx, [x]):
        rule.calc_derivative = StepIO([("bp", y), ("fwd", w)], [("bp", x)])
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


def conv2d(op, ctx) -> OpRule:
    return conv_like(op, ctx)


RULES = {"Conv2D": conv2d}
