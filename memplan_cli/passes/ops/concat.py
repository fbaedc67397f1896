"""Concat: each input's back-prop is its slice of dY.

Rules: backward reads dY only; keeps no activation (a fused activation's derivative comes from Y);
writes the back-prop of every input that needs one (constant inputs get none).
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
    fused_activation(op, ctx, rule, y)
    return rule


RULES = {"Concat": concat}
