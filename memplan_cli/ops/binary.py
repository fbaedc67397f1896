"""Two-input elementwise arithmetic with numpy broadcasting in both directions: Add, Sub, Mul, Div
(ONNX Add/Sub/Mul/Div, TFLite ADD/SUB/MUL/DIV with their fused activation).

Training rules (PyTorch derivatives.yaml):
- `add` / `sub`: self: grad, other: ±grad: backward reads dY only, so memplan keeps neither input
  (`policy.add_keeps_nothing`). Off (onert's BinaryArithmetic): both inputs are kept until the op's
  backward.
- `mul`: self: grad * other, other: grad * self: each side keeps the *other* input, and only when
  that side needs a gradient (a Mul whose one side is a constant scale keeps nothing of the scale's
  partner unless the scale trains).
- `div`: self: grad / other (keeps other), other: -grad * self / other² (keeps self and other).
- Broadcasting: every side's result is summed over the dimensions it was broadcast along, back to its
  own shape (either side may be the broadcast one). `x op x` (one operand twice) sums both sides.
- A float constant input is a parameter (an ONNX MatMul + Add bias, a scale): it gets its gradient in
  calcGradient (reads dY and what its side reads) when the op trains.
- In place (`policy.inplace`): the output may overwrite a non-constant input that is dead after the
  forward step; a back-prop contribution may overwrite dY when dY is dead after the backward step
  (both sides are computed before either is stored).
- A fused activation's derivative comes from Y (`fused_activation`).
- Integer operands (shape arithmetic) run forward only (ints carry no gradient); integer Div truncates
  toward zero as ONNX and TFLite do.
- ONNX opset < 7 `broadcast=1` with an `axis` that does not align B with A's trailing dimensions is
  refused (numpy broadcasting would pair other dimensions).
FLOPs per output element: forward 1 (+1 for a fused activation); backward Add/Sub 1 per side (the
broadcast sum), Mul 2 per side, Div 2 for A and 4 for B.
"""
from __future__ import annotations

import numpy as np

from memplan_cli.execute.kernels import activation
from memplan_cli.execute.kernels.common import reduce_to_shape, store
from memplan_cli.ops.base import Canon, OpDef
from memplan_cli.ops.rule import OpRule, StepIO, bp_targets, forward_io, fused_activation

ARITH = ("Add", "Sub", "Mul", "Div")


# ---- rule ------------------------------------------------------------------------------------------
def _needs(op_type: str, side: int, a: int, b: int) -> list[int]:
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
        out = []
        for k in (k for k, v in enumerate((a, b)) if v == i):
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


# ---- kernels ---------------------------------------------------------------------------------------
def _divide(a, b, out_dtype):
    if np.dtype(out_dtype).kind in "iu":  # ONNX / TFLite integer division truncates toward zero
        return np.trunc(np.true_divide(a, b)).astype(out_dtype)
    return np.true_divide(a, b)


FORWARD = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply}


def _forward(ctx):
    y = ctx.y()
    a, b = np.asarray(ctx.x(0)), np.asarray(ctx.x(1))
    v = _divide(a, b, y.dtype) if ctx.op.type == "Div" else FORWARD[ctx.op.type](a, b)
    v = np.asarray(v)
    if ctx.act() != "NONE":
        v = activation.apply(v.astype(y.dtype, copy=False), ctx.act())
    store(y, v)


def side_grads(op_type: str, dz, want: tuple[bool, bool], a=None, b=None):
    """dL/dA and dL/dB (at the broadcast shape, None where not wanted) of y = a op b."""
    ga = gb = None
    if want[0]:
        ga = dz if op_type in ("Add", "Sub") else dz * b if op_type == "Mul" else dz / b
    if want[1]:
        gb = dz if op_type == "Add" else -dz if op_type == "Sub" else dz * a if op_type == "Mul" else \
            -dz * a / (b * b)
    return ga, gb


def _backward(ctx, want_grad: bool):
    to = ctx.grad if want_grad else ctx.dx
    outs = (to(0), to(1))
    if outs[0] is None and outs[1] is None:
        return
    t = ctx.op.type
    same = ctx.operand_in(0) == ctx.operand_in(1)
    want = (True, True) if same else (outs[0] is not None, outs[1] is not None)
    need_a = t in ("Mul", "Div") and want[1]
    need_b = t == "Div" or (t == "Mul" and want[0])
    a = np.asarray(ctx.x(0)) if need_a else None
    b = np.asarray(ctx.x(1)) if need_b else None
    ga, gb = side_grads(t, np.asarray(ctx.dz()), want, a, b)
    if same:  # x op x: both sides land in one back-prop
        store(outs[0], reduce_to_shape(np.asarray(ga + gb), outs[0].shape))
        return
    # both sides are computed (and copied out of dY's memory) before either is stored
    res = [None if g is None else np.array(reduce_to_shape(np.asarray(g), o.shape))
           for g, o in zip((ga, gb), outs)]
    for g, o in zip(res, outs):
        if o is not None:
            store(o, g)


KERNELS = {"forward": _forward, "calcGradient": lambda c: _backward(c, True),
           "calcDerivative": lambda c: _backward(c, False)}


# ---- contract, FLOPs, batch ------------------------------------------------------------------------
def broadcast_check(op, operands):
    ins = [i for i in op.inputs if i >= 0]
    shapes = [tuple(operands[i].shape) for i in ins]
    try:
        s = np.broadcast_shapes(*shapes)
    except ValueError:
        return f"cannot broadcast {' and '.join(str(x) for x in shapes)}"
    y = tuple(operands[op.outputs[0]].shape)
    if int(np.prod(s)) != int(np.prod(y)):
        return f"broadcasts {' and '.join(str(x) for x in shapes)} to {s}, not to its output {y}"
    return None


def _arith_check(op, operands):
    ax = op.attrs.get("legacy_axis")
    if ax is not None:
        ra, rb = (len(operands[op.inputs[k]].shape) for k in (0, 1))
        if ax % max(ra, 1) != ra - rb:
            return (f"broadcasts B from axis {ax} (ONNX opset < 7), which numpy broadcasting does not pair "
                    "the same way; re-export with opset >= 7")
    return broadcast_check(op, operands)


_BACK_PER_SIDE = {"Add": (1, 1), "Sub": (1, 1), "Mul": (2, 2), "Div": (2, 4)}


def _arith_flops(op, operands):
    n = operands[op.outputs[0]].num_elements
    act = 0 if (op.attrs.get("activation") or "NONE") == "NONE" else n
    fa, fb = _BACK_PER_SIDE[op.type]
    return n + act, (fa + fb) * n + act


def broadcast_batch(op, graph, shapes, batched):
    """The output is the broadcast of the (re-batched) inputs."""
    try:
        s = np.broadcast_shapes(*(tuple(shapes[i]) for i in op.inputs if i >= 0))
    except ValueError:
        from memplan_cli.ir.graph import GraphError

        raise GraphError(f"cannot re-batch op {op.label}: its inputs no longer broadcast") from None
    return [tuple(s)]


OPS = [OpDef(t, rule=binary, kernels=KERNELS, flops=_arith_flops, required_inputs=2, check=_arith_check,
             batch=broadcast_batch) for t in ARITH]


# ---- converters ------------------------------------------------------------------------------------
def _onnx_arith(node) -> Canon:
    attrs = {"activation": "NONE"}
    if node.opset < 7 and node.attrs.get("broadcast") and "axis" in node.attrs:
        attrs["legacy_axis"] = int(node.attrs["axis"])
    return Canon(node.op_type, attrs)


def _tflite_arith(t):
    def conv(node) -> Canon:
        from memplan_cli.ir.graph import ACTIVATIONS

        f = int(node.options.get("fused_activation_function", 0) or 0)
        act = ACTIVATIONS[f] if 0 <= f < len(ACTIVATIONS) else f"ACT_{f}"
        return Canon(t, {"activation": act})
    return conv


ONNX = {t: _onnx_arith for t in ARITH}
TFLITE = {"ADD": _tflite_arith("Add"), "SUB": _tflite_arith("Sub"), "MUL": _tflite_arith("Mul"),
          "DIV": _tflite_arith("Div")}
