"""The loss op the pipeline appends: inputs (y_pred_1, label_1, y_pred_2, label_2, ...), output the
scalar loss, the sum of one loss per (y_pred, label) pair (one pair per output carrying a loss).

Rules (MSE and CCE alike):
- forward reads every y_pred and label, writes the loss;
- calcDerivative reads them and writes each dL/dy_pred (MSE: 2(y_pred - label)/N;
  CCE: -label / y_pred / B); there is no incoming back-prop (the seed is 1).
- A label gets a back-prop only under `policy.input_backprop` (onert computes one, nothing reads it).
- In place (`policy.inplace`): each dL/dy_pred may overwrite its own label, which nothing reads afterwards.
"""
from __future__ import annotations

from memplan_cli.passes.ops._common import bp_targets, forward_io
from memplan_cli.passes.rules import OpRule, StepIO


def loss(op, ctx) -> OpRule:
    pairs = list(zip(op.inputs[0::2], op.inputs[1::2]))
    rule = OpRule(forward=forward_io(op))
    targets = bp_targets(op, ctx, op.inputs)
    if targets:
        rule.calc_derivative = StepIO([("fwd", i) for i in dict.fromkeys(op.inputs)], [("bp", t) for t in targets])
        if ctx.policy.inplace:
            rule.inplace += [(("fwd", label), ("bp", y_pred)) for y_pred, label in pairs if y_pred in targets]
    return rule


RULES = {"Loss": loss}
