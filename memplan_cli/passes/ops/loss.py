"""The loss op the pipeline appends: inputs (y_pred, label), output the scalar loss.

Rules (MSE and CCE alike):
- forward reads y_pred and the label, writes the loss;
- calcDerivative reads y_pred and the label and writes dL/dy_pred (MSE: 2(y_pred - label)/N;
  CCE: -label / y_pred / B); there is no incoming back-prop (the seed is 1).
- The label gets a back-prop only under `policy.input_backprop` (onert computes one, nothing reads it).
- In place (`policy.inplace`): dL/dy_pred may overwrite the label, which nothing reads afterwards.
"""
from __future__ import annotations

from memplan_cli.passes.ops._common import bp_targets, forward_io
from memplan_cli.passes.rules import OpRule, StepIO


def loss(op, ctx) -> OpRule:
    y_pred, label = op.inputs[0], op.inputs[1]
    rule = OpRule(forward=forward_io(op))
    targets = bp_targets(op, ctx, [y_pred, label])
    if targets:
        rule.calc_derivative = StepIO([("fwd", y_pred), ("fwd", label)], [("bp", t) for t in targets])
        if ctx.policy.inplace and y_pred in targets:
            rule.inplace.append((("fwd", label), ("bp", y_pred)))
    return rule


RULES = {"Loss": loss}
