"""Concat: each input's back-prop is its slice of dY.

Rules: backward reads dY only; keeps no activation (a fused activation's derivative comes from Y);
writes the back-prop of every input that needs one. A float constant input (a parameter the
constant folding kept, e.g. a class token) is a weight: its slice of dY is its gradient.
"""
from __future__ import annotations

from memplan_cli.passes.ops._common import bp_targets, forward_io
from memplan_cli.passes.rules import OpRule, StepIO, fused_activation


def concat(op, ctx) -> OpRule:
    y = op.outputs[0]
    rule = OpRule(forward=forward_io(op))
    targets = bp_targets(op, ctx)
    if targets:
        rule.calc_derivative = StepIO([("bp", y)], [("bp", t) for t in targets])
    # parameters kept unfolded (a class token, two tables side by side) train through it
    rule.weights = [i for i in dict.fromkeys(op.inputs) if i >= 0 and ctx.is_param(i)]
    if rule.weights and ctx.trains(op):
        rule.calc_gradient = StepIO([("bp", y)], [("grad", w) for w in rule.weights])
    fused_activation(op, ctx, rule, y)
    return rule


RULES = {"Concat": concat}
