"""Mean (over axes) and GlobalAveragePool.

Rules: dX broadcasts dY / N back over the reduced axes: backward reads dY (and the axes constant
when there is one); keeps no activation.
"""
from __future__ import annotations

from memplan_cli.passes.ops._common import bp_targets, forward_io
from memplan_cli.passes.rules import OpRule, StepIO


def mean(op, ctx) -> OpRule:
    x, y = op.inputs[0], op.outputs[0]
    rule = OpRule(forward=forward_io(op))
    if bp_targets(op, ctx, [x]):
        consts = [("fwd", i) for i in op.inputs[1:] if i >= 0]
        rule.calc_derivative = StepIO([("bp", y)] + consts, [("bp", x)])
    return rule


RULES = {"Mean": mean, "GlobalAveragePool": mean}
