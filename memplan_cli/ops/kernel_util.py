"""Helpers shared by op-family modules (not a family itself).

Data-movement ops (Transpose, Slice, Split, Squeeze, Expand, ...) usually move activations, but a
constant-folding rule keeps them when they read a float parameter that must stay itself (a table
shared by two ops, a Slice of position rows): the parameter then trains through them, with the
same backward as the activation case written into its gradient.
"""
from __future__ import annotations

from memplan_cli.ops.rule import OpRule, StepIO


def param_gradient(op, ctx, rule: OpRule, x: int, reads: list) -> None:
    """Input `x`, when it is a float constant, is the op's weight: its gradient is computed in
    calcGradient from `reads` (what the back-prop to an activation would read)."""
    if not ctx.is_param(x):
        return
    rule.weights.append(x)
    if ctx.trains(op):
        rule.calc_gradient = StepIO(list(reads), [("grad", x)])


def target(ctx, k: int):
    """Where this backward step writes input k's result: its gradient in calcGradient, its back-prop
    in calcDerivative (None when the step writes neither)."""
    return ctx.grad(k) if ctx.step.kind == "calcGradient" else ctx.dx(k)
