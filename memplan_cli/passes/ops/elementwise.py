"""Elementwise Add, Sub, Mul, Div (with broadcasting and an optional fused activation).

Rules:
- Add / Sub: dA = dY, dB = ±dY (summed over broadcast dimensions): backward reads dY only, so
  memplan keeps neither input (`policy.add_keeps_nothing`). Off (onert's BinaryArithmetic): both
  inputs are kept until the op's backward.
- Mul: dA = dY·B, dB = dY·A: each side keeps the other input. Div: dA = dY/B, dB = -dY·A/B²: both
  sides read B, the B side also reads A.
- A float constant input is a parameter (e.g. an ONNX MatMul + Add bias): it gets a gradient
  (calcGradient, reads dY and, for Mul / Div, the other input) when the op trains.
- In place (`policy.inplace`): the output may overwrite an input of the same size that is dead after
  the forward step; a back-prop contribution may overwrite dY when dY is dead after the backward step.
- A fused activation's derivative comes from Y.
"""
from __future__ import annotations

from memplan_cli.passes.ops._common import bp_targets, forward_io
from memplan_cli.passes.rules import OpRule, StepIO, fused_activation


def _needs(op_type, side, a, b):
    """Forward operands the derivative for input `side` (0: A, 1: B) reads."""
    if op_type in ("Add", "Sub"):
        return []
    if op_type == "Mul":
        return [b] if side == 0 else [a]
    return [b] if side == 0 else [a, b]  # Div


def binary(op, ctx) -> OpRule:
    a, b = op.inputs[0], op.inputs[1]
    y = op.outputs[0]
    weights = [i for i in dict.fromkeys((a, b)) if ctx.is_param(i)]
    rule = OpRule(forward=forward_io(op), weights=weights)
    keep_all = op.type in ("Add", "Sub") and not ctx.policy.add_keeps_nothing

    def reads_for(i):
        sides = [k for k, v in enumerate((a, b)) if v == i]
        out = []
        for k in sides:
            out += [("fwd", v) for v in _needs(op.type, k, a, b)]
        if keep_all:
            out += [("fwd", a), ("fwd", b)]
        return out

    if ctx.trains(op) and weights:
        reads = [("bp", y)]
        for w in weights:
            reads += reads_for(w)
        rule.calc_gradient = StepIO(list(dict.fromkeys(reads)), [("grad", w) for w in weights])
    targets = bp_targets(op, ctx, [a, b])
    if targets:
        reads = [("bp", y)]
        for t in targets:
            reads += reads_for(t)
        rule.calc_derivative = StepIO(list(dict.fromkeys(reads)), [("bp", t) for t in targets])
        if ctx.policy.inplace:
            rule.inplace += [(("bp", y), ("bp", t)) for t in targets]
    if ctx.policy.inplace:
        rule.inplace += [(("fwd", i), ("fwd", y)) for i in dict.fromkeys((a, b)) if not ctx.is_const(i)]
    fused_activation(op, ctx, rule, y)
    return rule


RULES = {"Add": binary, "Sub": binary, "Mul": binary, "Div": binary}
