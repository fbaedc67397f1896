"""Helpers shared by op-family modules (not a family itself).

Data-movement ops (Transpose, Slice, Split, Squeeze, Expand, ...) usually move activations, but a
constant-folding rule keeps them when they read a float parameter that must stay itself (a table
shared by two ops, a Slice of position rows): the parameter then trains through them, with the
same backward as the activation case written into its gradient.
"""
from __future__ import annotations

from memplan_cli.ops.rule import OpRule, StepIO, bp_targets, forward_io


def param_gradient(op, ctx, rule: OpRule, x: int, reads: list) -> None:
    """Input `x`, when it is a float constant, is the op's weight: its gradient is computed in
    calcGradient from `reads` (what the back-prop to an activation would read)."""
    if not ctx.is_param(x):
        return
    rule.weights.append(x)
    if ctx.trains(op):
        rule.calc_gradient = StepIO(list(reads), [("grad", x)])


def view_rule(op, ctx) -> OpRule:
    """The rule of an op whose output is its input's bytes seen in another shape (Reshape, Squeeze,
    Identity, ...): with `policy.alias_reshape` Y is a view of X (never of a persistent weight) and
    dX a view of dY; otherwise copies. Nothing is kept for backward; a parameter kept unfolded as the
    input (a shared weight) trains through it."""
    x, y = op.inputs[0], op.outputs[0]
    r = OpRule(forward=forward_io(op))
    if ctx.policy.alias_reshape and not ctx.is_const(x):
        r.view = (y, x)
    if bp_targets(op, ctx, [x]):
        r.calc_derivative = StepIO([("bp", y)], [("bp", x)])
        if ctx.policy.alias_reshape:
            r.inplace.append((("bp", y), ("bp", x)))
    param_gradient(op, ctx, r, x, [("bp", y)])
    return r


def dy_only_rule(op, ctx) -> OpRule:
    """The rule of a one-input op whose backward is a fixed linear map of dY alone (a permutation, a
    broadcast's sum, a resampling): calcDerivative reads dY and writes dX, nothing is kept; a
    parameter input (a tied table's transpose, a position table) trains through the same map."""
    x, y = op.inputs[0], op.outputs[0]
    r = OpRule(forward=forward_io(op))
    if bp_targets(op, ctx, [x]):
        r.calc_derivative = StepIO([("bp", y)], [("bp", x)])
    param_gradient(op, ctx, r, x, [("bp", y)])
    return r


def broadcast_batch(op, graph, shapes, batched):
    """Re-batch rule of an elementwise op: the output has the inputs' broadcast shape."""
    import numpy as np

    try:
        return [tuple(np.broadcast_shapes(*(tuple(shapes[i]) for i in op.inputs if i >= 0)))]
    except ValueError:
        return [None]


def first_input_value(op, ins):
    """`OpDef.shape_value` of an op that passes its input's values on (a view, a cast)."""
    return ins[0]


def target(ctx, k: int):
    """Where this backward step writes input k's result: its gradient in calcGradient, its back-prop
    in calcDerivative (None when the step writes neither)."""
    return ctx.grad(k) if ctx.step.kind == "calcGradient" else ctx.dx(k)


# per-element FLOPs (forward, backward) of a fused activation
_FUSED_FLOPS = {"NONE": (0, 0), "RELU": (1, 1), "RELU6": (2, 2), "RELU_N1_TO_1": (2, 2), "TANH": (5, 3),
                "SIGMOID": (4, 3), "LOGISTIC": (4, 3)}


def fused_activation_flops(op, operands, f: int, b: int):
    """(f, b) plus the op's fused activation over output 0; None (withheld) when it is unknown."""
    a = str(op.attrs.get("activation", "NONE") or "NONE").upper()
    if a not in _FUSED_FLOPS:
        return None
    n = operands[op.outputs[0]].num_elements
    return f + _FUSED_FLOPS[a][0] * n, b + _FUSED_FLOPS[a][1] * n


def tflite_activation(node) -> str:
    """The fused activation a TFLite builtin's options name, as `ir.graph.ACTIVATIONS` spells it."""
    from memplan_cli.ir.vocab import ACTIVATIONS

    f = int(node.options.get("fused_activation_function", 0) or 0)
    return ACTIVATIONS[f] if 0 <= f < len(ACTIVATIONS) else f"ACT_{f}"
