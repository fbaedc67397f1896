"""Reshape / Flatten (and any other shape-only op the loaders map to Reshape).

Rules:
- The data is unchanged, so memplan (`policy.alias_reshape`) makes the output a view of the input
  (one buffer) and the input's back-prop contribution a view of the output's back-prop (taken over
  in place when dY is dead after the step). Nothing is kept for backward.
- Off (onert): forward and backward are copies, so both sides get their own buffers.
- The shape operand, if any, is a constant read by forward only.
"""
from __future__ import annotations

from memplan_cli.ops.kernel_util import param_gradient
from memplan_cli.passes.ops._common import bp_targets, forward_io
from memplan_cli.passes.rules import OpRule, StepIO


def reshape(op, ctx) -> OpRule:
    x, y = op.inputs[0], op.outputs[0]
    rule = OpRule(forward=forward_io(op))
    if ctx.policy.alias_reshape and not ctx.is_const(x):  # never a view of a (persistent) weight
        rule.view = (y, x)
    if bp_targets(op, ctx, [x]):
        rule.calc_derivative = StepIO([("bp", y)], [("bp", x)])
        if ctx.policy.alias_reshape:
            rule.inplace.append((("bp", y), ("bp", x)))
    param_gradient(op, ctx, rule, x, [("bp", y)])  # a shared weight kept unfolded trains through it
    return rule


RULES = {"Reshape": reshape, "Flatten": reshape}
