"""The loss op the pipeline appends (`passes/loss_insertion.py`): inputs (y_pred, label), output the
scalar loss; `attrs["loss"]` is mse or cce. No file format has it, so it has no loader converters.

Rules (MSE and CCE alike):
- forward reads y_pred and the label, writes the loss;
- calcDerivative reads y_pred and the label and writes dL/dy_pred (MSE: 2(y_pred - label)/N;
  CCE: -label / y_pred / B); there is no incoming back-prop (the seed is 1).
- The label gets a back-prop only under `policy.input_backprop` (onert computes one, nothing reads it).
- In place (`policy.inplace`): dL/dy_pred may overwrite the label, which nothing reads afterwards.
Kernels: reduction is onert's default SUM_OVER_BATCH_SIZE (`execute/kernels/loss.py`).
FLOPs per element of y_pred: MSE 3 forward (difference, square, sum), 2 backward; CCE 3 forward
(log, product, sum), 2 backward (division, scale).
"""
from __future__ import annotations

import numpy as np

from memplan_cli.kernels import loss as kernels
from memplan_cli.kernels.common import store
from memplan_cli.ops.base import OpDef
from memplan_cli.ops.rule import OpRule, StepIO, bp_targets, forward_io


def loss(op, ctx) -> OpRule:
    y_pred, label = op.inputs[0], op.inputs[1]
    rule = OpRule(forward=forward_io(op))
    targets = bp_targets(op, ctx, [y_pred, label])
    if targets:
        rule.calc_derivative = StepIO([("fwd", y_pred), ("fwd", label)], [("bp", t) for t in targets])
        if ctx.policy.inplace and y_pred in targets:
            rule.inplace.append((("fwd", label), ("bp", y_pred)))
    return rule


def _kind(ctx) -> str:
    return str(ctx.attrs.get("loss", getattr(ctx.tg.config, "loss", "mse"))).lower()


def _forward(ctx):
    kernels.FORWARD[_kind(ctx)](ctx.x(0), ctx.x(1), ctx.y())


def _backward(ctx):
    dpred, dlabel = ctx.dx(0), ctx.dx(1)
    if dpred is None and dlabel is None:
        return
    y, t = ctx.x(0), ctx.x(1)
    kind = _kind(ctx)
    gl = None
    if dlabel is not None:  # onert computes and keeps back-prop(y_true): dL/dt
        if kind == "mse":
            gl = (t - y) * (2.0 / y.size)
        else:
            gl = -np.log(np.clip(y, kernels.EPS, 1.0)) / (y.shape[0] if y.ndim > 1 else 1)
    if dpred is not None:  # may overwrite the label in place: the kernel computes before it stores
        kernels.DERIVATIVE[kind](y, t, dpred)
    if gl is not None:
        store(dlabel, gl)


def _flops(op, operands):
    n = operands[op.inputs[0]].num_elements
    return 3 * n, 2 * n


OPS = [OpDef("Loss", rule=loss, kernels={"forward": _forward, "calcDerivative": _backward}, flops=_flops,
             required_inputs=2)]
