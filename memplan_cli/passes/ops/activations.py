"""Standalone activations: Relu, Relu6 (and ONNX Clip(0, 6)), Sigmoid, Tanh.

Rules:
- Every one of them has a derivative that is a function of its output Y (ReLU: Y > 0; ReLU6:
  0 < Y < 6; Sigmoid: Y(1-Y); Tanh: 1-Y²), so backward keeps Y only, never X.
- calcDerivative reads Y and dY and writes the input's back-prop.
- In place (`policy.inplace`): forward may write Y over X when X is dead after the step (a Conv
  without fused activation followed by a ReLU, as ONNX writes it, then costs one buffer like the
  fused circle op); backward may write dX over dY when dY is dead after the step.
- Fused activations are handled by the op that carries them (`rules.fused_activation`).
- A parameter as the input (ConViT's gating parameter through Sigmoid, SwinV2's logit scale through
  Clip) trains: calcGradient reads Y and dY and writes its gradient.
"""
from __future__ import annotations

from memplan_cli.ops.kernel_util import param_gradient
from memplan_cli.passes.ops._common import bp_targets, forward_io
from memplan_cli.passes.rules import OpRule, StepIO


def activation(op, ctx) -> OpRule:
    x, y = op.inputs[0], op.outputs[0]
    rule = OpRule(forward=forward_io(op))
    if bp_targets(op, ctx, [x]):
        rule.calc_derivative = StepIO([("fwd", y), ("bp", y)], [("bp", x)])
        if ctx.policy.inplace:
            rule.inplace.append((("bp", y), ("bp", x)))
    if ctx.policy.inplace:
        rule.inplace.append((("fwd", x), ("fwd", y)))
    param_gradient(op, ctx, rule, x, [("fwd", y), ("bp", y)])
    return rule


RULES = {"Relu": activation, "Relu6": activation, "Sigmoid": activation, "Tanh": activation,
         "Clip": activation}
