"""FullyConnected / Gemm / MatMul: Y = act(X · W (+ b)).

Rules:
- calcGradient (the op trains): dW = X^T·dY reads X and dY; db = Σ dY reads dY only.
- calcDerivative (X needs a back-prop): dX = dY·W^T reads W and dY. A MatMul of two activations
  reads the other operand for each side.
- Kept for backward: X (only when W trains), W (only when X needs a back-prop), Y when an activation
  is fused (its derivative comes from Y).
- Extras: none in memplan (GEMM with transpose flags reads W, X and dY as they are). With
  `policy.transpose_extras` (onert): W^T (|W|) in calcDerivative, X^T (|X|) and dY^T (|dY|) in
  calcGradient, all BACKWARD.
"""
from __future__ import annotations

from memplan_cli.passes.ops._common import bp_targets, forward_io
from memplan_cli.passes.rules import BACKWARD, ExtraRequest, OpRule, StepIO, fused_activation


def matmul_like(op, ctx, *, transposes=("W^T", "X^T", "dY^T")) -> OpRule:
    a, b = op.inputs[0], op.inputs[1]
    y = op.outputs[0]
    weights = [i for i in dict.fromkeys(op.inputs) if i >= 0 and ctx.is_param(i)]
    rule = OpRule(forward=forward_io(op), weights=weights)
    other = {a: b, b: a}
    if ctx.trains(op) and weights:
        reads = [("bp", y)]
        for w in weights:
            if w in other:  # a matrix operand: its gradient needs the other matrix
                reads.append(("fwd", other[w]))
        rule.calc_gradient = StepIO(reads, [("grad", w) for w in weights])
    targets = bp_targets(op, ctx, [a, b])
    if targets:
        rule.calc_derivative = StepIO([("bp", y)] + [("fwd", other[t]) for t in targets],
                                      [("bp", t) for t in targets])
    if ctx.policy.transpose_extras:
        _transposes(op, ctx, rule, transposes)
    fused_activation(op, ctx, rule, y)
    return rule


def _transposes(op, ctx, rule, names):
    """onert's materialised transposes: W^T for dX, X^T and dY^T for dW."""
    w, x, y = op.inputs[1], op.inputs[0], op.outputs[0]
    if rule.calc_derivative is not None:
        k = len(rule.extras)
        rule.extras.append(ExtraRequest(names[0], tuple(reversed(ctx.operand(w).shape)), "float32", BACKWARD))
        rule.calc_derivative.writes.insert(0, ("extra", k))
        rule.calc_derivative.reads.append(("extra", k))
        if ("fwd", w) not in rule.calc_derivative.reads:
            rule.calc_derivative.reads.append(("fwd", w))
    if rule.calc_gradient is not None:
        for name, src in ((names[1], x), (names[2], y)):
            k = len(rule.extras)
            rule.extras.append(ExtraRequest(name, tuple(reversed(ctx.operand(src).shape)), "float32", BACKWARD))
            rule.calc_gradient.writes.insert(0, ("extra", k))
            rule.calc_gradient.reads.append(("extra", k))


def fully_connected(op, ctx) -> OpRule:
    return matmul_like(op, ctx)


RULES = {"FullyConnected": fully_connected, "MatMul": fully_connected, "Gemm": fully_connected}
