"""Elementwise arithmetic of two (or, for Sum / Max / Min, more) inputs with numpy broadcasting in both
directions: Add, Sub, Mul, Div (ONNX Add/Sub/Mul/Div, TFLite ADD/SUB/MUL/DIV with their fused
activation), Pow (ONNX Pow, TFLite POW), SquaredDifference (TFLite SQUARED_DIFFERENCE), Sum (ONNX
Sum, TFLite ADD_N: any number of inputs), MeanOf (ONNX Mean: their elementwise mean), Max / Min (ONNX
Max/Min, TFLite MAXIMUM/MINIMUM).

Training rules (PyTorch derivatives.yaml; each side reads only what its own formula needs, and only
when that side needs a gradient or back-prop):
- `add` / `sub`: self: grad, other: ±grad: backward reads dY only, so memplan keeps neither input
  (`policy.add_keeps_nothing`). Off (onert's BinaryArithmetic): both inputs are kept until the op's
  backward.
- `mul`: self: grad * other, other: grad * self: each side keeps the *other* input (a Mul by a
  constant scale that does not train keeps only the scale).
- `div`: self: grad / other (keeps other), other: -grad * self / other² (keeps self and other).
- `pow.Tensor_Scalar` (a constant scalar exponent, read at load into the `exponent` attribute, never
  trained: PyTorch's exponent is a Python number there): self: pow_backward(grad, self, exponent),
  keeps X. `pow.Tensor_Tensor` (any other exponent: an activation, or a learned tensor): self keeps X
  and the exponent; exponent: pow_backward_exponent(grad, self, exponent, result) = grad·Y·log X
  (0 where X = 0 and exponent >= 0), keeps X, the exponent and Y.
- Sum (a chain of `add`): every input's gradient is dY: backward keeps nothing. MeanOf: dY / n.
- SquaredDifference (no derivatives.yaml entry; TensorFlow's `_SquaredDifferenceGrad`): dA = 2(A-B)·dY,
  dB = -dA: either side keeps both inputs.
- `maximum` / `minimum`: the gradient goes to the input that is the result, split evenly on ties
  (grad / 2 for two inputs, as derivatives.yaml has it): keeps every input (Y is recomputed from them).
- Broadcasting: every side's result is summed over the dimensions it was broadcast along, back to its
  own shape (either side may be the broadcast one). `x op x` (one operand twice) sums its sides.
- A float constant input is a parameter (an ONNX MatMul + Add bias, a scale): it gets its gradient in
  calcGradient (reads dY and what its side reads) when the op trains.
- In place (`policy.inplace`): the output may overwrite a non-constant input that is dead after the
  forward step; a back-prop contribution may overwrite dY when dY is dead after the backward step
  (every side is computed before any is stored).
- A fused activation's derivative comes from Y (`fused_activation`).
- Integer operands (shape arithmetic) run forward only (ints carry no gradient); integer Div truncates
  toward zero as ONNX and TFLite do.
- ONNX opset < 7 `broadcast=1` with an `axis` that does not align B with A's trailing dimensions is
  refused (numpy broadcasting would pair other dimensions).
FLOPs per output element: forward 1 (+1 for a fused activation; Pow 1, SquaredDifference 2, Max/Min
one per extra input, Sum too); backward per side: Add/Sub/Sum 1 (the broadcast sum), Mul 2, Div 2 (A) and 4 (B),
Pow 3 (base) and 4 (exponent), SquaredDifference 3 and 1, Max/Min 3.
"""
from __future__ import annotations

import math

from dataclasses import dataclass
from typing import Callable

import numpy as np

from memplan_cli.kernels import activation
from memplan_cli.kernels.common import reduce_to_shape, store
from memplan_cli.ops import _onert as onert
from memplan_cli.ops._onert import AfterCompile
from memplan_cli.ops.base import Canon, OpDef
from memplan_cli.ops.kernel_util import tflite_activation
from memplan_cli.ops.rule import OpRule, StepIO, bp_targets, forward_io, fused_activation

ARITH = ("Add", "Sub", "Mul", "Div")
ADD_TYPE, MUL_TYPE = "Add", "Mul"  # what LoRA's adapters compute with (passes/lora.py)
DIV_TYPE = "Div"  # weight_norm's direction, as the exporters write it (profiles/torch/weightnorm.py)
Y = "y"  # in a spec's `needs`: the op's output


@dataclass
class Spec:
    """One elementwise op: `forward(xs, attrs, out_dtype)`; `needs(op, k)`: the input positions (and
    `Y`) side k's derivative reads; `grads(dz, want, xs, y, attrs)`: per input, its gradient at the
    broadcast shape (None where not wanted; `xs[k]` / `y` are None unless some wanted side needs them);
    `flops`: (forward per element, fn(op, k) -> backward per element of side k)."""

    type: str
    forward: Callable
    needs: Callable
    grads: Callable
    flops: tuple
    min_inputs: int = 2
    max_inputs: int = 2


# ---- rule ------------------------------------------------------------------------------------------
def _rule(spec: Spec):
    def rule(op, ctx) -> OpRule:
        ins = [i for i in op.inputs if i >= 0]
        y = op.outputs[0]
        weights = [i for i in dict.fromkeys(ins) if ctx.is_param(i)]
        r = OpRule(forward=forward_io(op), weights=weights)
        keep_all = op.type in ("Add", "Sub") and not ctx.policy.add_keeps_nothing

        def reads_for(i):
            out = []
            for k in (k for k, v in enumerate(op.inputs) if v == i):
                out += [("fwd", y if p == Y else op.inputs[p]) for p in spec.needs(op, k)]
            if keep_all:
                out += [("fwd", v) for v in ins]
            return out

        if ctx.trains(op) and weights:
            reads = [("bp", y)]
            for w in weights:
                reads += reads_for(w)
            r.calc_gradient = StepIO(list(dict.fromkeys(reads)), [("grad", w) for w in weights])
        targets = bp_targets(op, ctx, ins)
        if targets:
            reads = [("bp", y)]
            for t in targets:
                reads += reads_for(t)
            r.calc_derivative = StepIO(list(dict.fromkeys(reads)), [("bp", t) for t in targets])
            if ctx.policy.inplace:
                r.inplace += [(("bp", y), ("bp", t)) for t in targets]
                r.inplace_equal = op.type == "Add"
        if ctx.policy.inplace:
            r.inplace += [(("fwd", i), ("fwd", y)) for i in dict.fromkeys(ins) if not ctx.is_const(i)]
        fused_activation(op, ctx, r, y)
        return r
    return rule


def binary(op, ctx) -> OpRule:
    """The rule of Add / Sub / Mul / Div (profiles wrap it)."""
    return _rule(SPECS[op.type])(op, ctx)


# ---- kernels ---------------------------------------------------------------------------------------
def _kernels(spec: Spec) -> dict:
    def forward(ctx):
        y = ctx.y()
        xs = [np.asarray(ctx.x(k)) for k in range(len(ctx.op.inputs)) if ctx.operand_in(k) >= 0]
        v = np.asarray(spec.forward(xs, ctx.attrs, y.dtype))
        if ctx.act() != "NONE":
            v = activation.apply(v.astype(y.dtype, copy=False), ctx.act())
        store(y, v)

    def backward(ctx, want_grad: bool):
        to = ctx.grad if want_grad else ctx.dx
        n = len(ctx.op.inputs)
        outs = [to(k) for k in range(n)]
        want = [o is not None for o in outs]
        if not any(want):
            return
        needed = set()
        for k in range(n):
            if want[k]:
                needed.update(spec.needs(ctx.op, k))
        xs = [np.asarray(ctx.x(k)) if k in needed else None for k in range(n)]
        y = np.asarray(ctx.y()) if Y in needed else None
        gs = spec.grads(np.asarray(ctx.dz()), want, xs, y, ctx.attrs)
        # one result per operand (x op x sums its sides), each copied out of dY's memory before any
        # is stored: a result may overwrite dY in place
        res: dict[int, tuple] = {}
        for k in range(n):
            if not want[k]:
                continue
            o = ctx.operand_in(k)
            g = reduce_to_shape(np.asarray(gs[k]), outs[k].shape)
            res[o] = (outs[k], g if o not in res else res[o][1] + g)
        done = [(out, np.array(g)) for out, g in res.values()]
        for out, g in done:
            store(out, g)

    return {"forward": forward, "calcGradient": lambda c: backward(c, True),
            "calcDerivative": lambda c: backward(c, False)}


# ---- the ops ---------------------------------------------------------------------------------------
def _divide(a, b, out_dtype):
    if np.dtype(out_dtype).kind in "iu":  # ONNX / TFLite integer division truncates toward zero
        return np.trunc(np.true_divide(a, b)).astype(out_dtype)
    return np.true_divide(a, b)


_FWD = {"Add": lambda xs, a, t: np.add(*xs), "Sub": lambda xs, a, t: np.subtract(*xs),
        "Mul": lambda xs, a, t: np.multiply(*xs), "Div": lambda xs, a, t: _divide(*xs, t)}


def side_grads(op_type: str, dz, want, a=None, b=None):
    """dL/dA and dL/dB (at the broadcast shape, None where not wanted) of y = a op b (Add/Sub/Mul/Div)."""
    ga = gb = None
    if want[0]:
        ga = dz if op_type in ("Add", "Sub") else dz * b if op_type == "Mul" else dz / b
    if want[1]:
        gb = dz if op_type == "Add" else -dz if op_type == "Sub" else dz * a if op_type == "Mul" else \
            -dz * a / (b * b)
    return ga, gb


def _arith_needs(op, k):
    t = op.type
    if t in ("Add", "Sub"):
        return []
    if t == "Mul":
        return [1 - k]
    return [1] if k == 0 else [0, 1]  # Div


def _arith_grads(t):
    def grads(dz, want, xs, y, attrs):
        return side_grads(t, dz, want, xs[0], xs[1])
    return grads


_ARITH_BACK = {"Add": (1, 1), "Sub": (1, 1), "Mul": (2, 2), "Div": (2, 4)}


# Pow: a constant scalar exponent is an attribute (one input), otherwise a second input
def _pow_forward(xs, attrs, out_dtype):
    e = attrs["exponent"] if len(xs) == 1 else xs[1]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.power(xs[0], e)


def _pow_needs(op, k):
    if len(op.inputs) == 1:
        return [0]
    return [0, 1] if k == 0 else [0, 1, Y]


def _pow_grads(dz, want, xs, y, attrs):
    x = xs[0]
    e = attrs.get("exponent") if len(xs) == 1 else xs[1]
    out = [None] * len(xs)
    with np.errstate(invalid="ignore", divide="ignore"):
        if want[0]:
            out[0] = np.where(e == 0, 0.0, dz * e * np.power(x, e - 1))
        if len(xs) > 1 and want[1]:
            out[1] = np.where((x == 0) & (e >= 0), 0.0, dz * y * np.log(np.where(x == 0, 1.0, x)))
    return out


def _sqdiff_grads(dz, want, xs, y, attrs):
    d = 2 * (xs[0] - xs[1]) * dz
    return [d if want[0] else None, -d if want[1] else None]


def _extreme(name):
    def forward(xs, attrs, out_dtype):
        fn = getattr(np, name)  # resolved on use: importing the registry does not load NumPy
        out = xs[0]
        for v in xs[1:]:
            out = fn(out, v)
        return out

    def grads(dz, want, xs, y, attrs):
        m = forward(xs, attrs, None)
        hits = [np.asarray(x == m) for x in xs]
        count = sum(h.astype(np.float64) for h in hits)
        return [dz * h / count if w else None for w, h in zip(want, hits)]
    return forward, grads


_MAX, _MIN = _extreme("maximum"), _extreme("minimum")


def _sum_all(xs):
    out = xs[0]
    for v in xs[1:]:
        out = out + v
    return out

SPECS = {t: Spec(t, _FWD[t], _arith_needs, _arith_grads(t), (1, lambda op, k, t=t: _ARITH_BACK[t][k]))
         for t in ARITH}
SPECS["Pow"] = Spec("Pow", _pow_forward, _pow_needs, _pow_grads, (1, lambda op, k: 3 if k == 0 else 4),
                    min_inputs=1)
SPECS["SquaredDifference"] = Spec("SquaredDifference", lambda xs, a, t: np.square(xs[0] - xs[1]),
                                  lambda op, k: [0, 1], _sqdiff_grads, (2, lambda op, k: 3 if k == 0 else 1))
SPECS["Sum"] = Spec("Sum", lambda xs, a, t: _sum_all(xs), lambda op, k: [],
                    lambda dz, want, xs, y, a: [dz if w else None for w in want], (1, lambda op, k: 1),
                    min_inputs=1, max_inputs=64)
# ONNX Mean: the elementwise mean of its inputs (not TF Lite's MEAN, a reduction: canonical "Mean")
SPECS["MeanOf"] = Spec("MeanOf", lambda xs, a, t: _sum_all(xs) / len(xs), lambda op, k: [],
                       lambda dz, want, xs, y, a: [dz / len(want) if w else None for w in want],
                       (1, lambda op, k: 1), min_inputs=1, max_inputs=64)
for _t, (_f, _g) in (("Max", _MAX), ("Min", _MIN)):
    SPECS[_t] = Spec(_t, _f, lambda op, k: list(range(len(op.inputs))), _g,
                     (1, lambda op, k: 3), min_inputs=1, max_inputs=64)


# ---- contract, FLOPs, batch ------------------------------------------------------------------------
def broadcast_shapes(*shapes) -> tuple:
    """NumPy's broadcasting rule on shapes (ValueError when they do not broadcast), in plain Python:
    loading and checking a model never imports NumPy."""
    n = max((len(x) for x in shapes), default=0)
    out = []
    for k in range(n):
        dims = {x[len(x) - n + k] for x in shapes if len(x) - n + k >= 0} - {1}
        if len(dims) > 1:
            raise ValueError(f"shapes {shapes} do not broadcast")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def broadcast_check(op, operands):
    ins = [i for i in op.inputs if i >= 0]
    shapes = [tuple(operands[i].shape) for i in ins]
    try:
        s = broadcast_shapes(*shapes)
    except ValueError:
        return f"cannot broadcast {' and '.join(str(x) for x in shapes)}"
    y = tuple(operands[op.outputs[0]].shape)
    if math.prod(s) != math.prod(y):
        return f"broadcasts {' and '.join(str(x) for x in shapes)} to {s}, not to its output {y}"
    return None


def _check(spec: Spec):
    def check(op, operands):
        n = len(op.inputs)
        if any(i < 0 for i in op.inputs) or not spec.min_inputs <= n <= spec.max_inputs:
            want = spec.min_inputs if spec.min_inputs == spec.max_inputs else f"{spec.min_inputs} to {spec.max_inputs}"
            return f"has {sum(1 for i in op.inputs if i >= 0)} input(s) of {n}, needs {want}"
        if op.type == "Pow":
            if (n == 1) != ("exponent" in op.attrs):
                return "needs one exponent: an input or a constant"
            if n == 1 and not np.isfinite(float(op.attrs["exponent"])):
                return f"has a non-finite exponent {op.attrs['exponent']}"
        ax = op.attrs.get("legacy_axis")
        if ax is not None:
            ra, rb = (len(operands[op.inputs[k]].shape) for k in (0, 1))
            if ax % max(ra, 1) != ra - rb:
                return (f"broadcasts B from axis {ax} (ONNX opset < 7), which numpy broadcasting does not pair "
                        "the same way; re-export with opset >= 7")
        return broadcast_check(op, operands)
    return check


def _flops(spec: Spec):
    fwd, back = spec.flops

    def flops(op, operands):
        n = operands[op.outputs[0]].num_elements
        act = 0 if (op.attrs.get("activation") or "NONE") == "NONE" else n
        f = fwd * n * (max(len(op.inputs) - 1, 1) if spec.max_inputs > 2 else 1)
        return f + act, sum(back(op, k) for k in range(len(op.inputs))) * n + act
    return flops


def broadcast_batch(op, graph, shapes, batched):
    """The output is the broadcast of the (re-batched) inputs."""
    try:
        s = broadcast_shapes(*(tuple(shapes[i]) for i in op.inputs if i >= 0))
    except ValueError:
        from memplan_cli.ir.graph import GraphError

        raise GraphError(f"cannot re-batch op {op.label}: its inputs no longer broadcast") from None
    return [tuple(s)]


def _vector_bias(op, operands):
    """Add / Sub of a rank-1 float constant (an exporter's MatMul + Add, a per-channel shift): a bias."""
    ins = [i for i in op.inputs if i >= 0]
    if len(ins) != 2:
        return ()
    return tuple(k for k, i in enumerate(op.inputs) if i >= 0 and operands[i].is_const
                 and len(operands[i].shape) == 1 and operands[i].dtype.startswith("float")
                 and not operands[ins[1 - ins.index(i)]].is_const)


# integer shape arithmetic (NumPy names, resolved on use: loading the registry does not load NumPy);
# Div of shape values is a floor division
_SHAPE_ARITH = {"Add": "add", "Sub": "subtract", "Mul": "multiply", "Div": "floor_divide"}


def _shape_value(name):
    def value(op, ins):
        return getattr(np, name)(ins[0], ins[1])
    return value


# `--profile torch` (derivatives.yaml): add / sub save nothing (a same-shape side gets the incoming
# gradient itself); mul saves each side for the other's gradient; div saves the divisor, and the
# dividend when the divisor needs its gradient
# a broadcast side's gradient is the full-size product summed down (a temporary of the output's size);
# where both sides are broadcast (an outer product, `a[..., :, None] * b[..., None, :]`) both products
# are alive at once: MulBackward0 returns both full-size gradients and the engine's validate_outputs
# sums each down after (measured, torch 2.14.1: (8, 64, 1, 32) x (8, 1, 64, 32), backward peak two
# products of 4 MiB, one with a side that needs no gradient)


def _torch_broadcast_tmp(op, operands) -> tuple:
    y = tuple(operands[op.outputs[0]].shape)
    sides = tuple("out0?g%d" % k for k, v in enumerate(op.inputs[:2]) if v >= 0 and tuple(operands[v].shape) != y)
    return (sides,) if sides else ()


def _torch_pow(op) -> dict | None:
    """pow(x, scalar) saves x; its backward `grad * (e * x.pow(e - 1))` makes two input-sized
    temporaries (measured). A tensor exponent (pow.Tensor_Tensor) is not modelled."""
    if len(op.inputs) != 1:
        return None
    return {"saves": (("in0", "any"),), "bwd_tmp": (("in0", "in0"),)}


def _torch_minmax_tmp(op, operands) -> tuple:
    """maximum / minimum backward, per input needing its gradient, one after the other (measured):
    a bool mask, `grad / 2`, an equality mask, then `where(...)` (the gradient itself, or a full-size
    temporary summed down for a broadcast side)."""
    y = tuple(operands[op.outputs[0]].shape)
    return tuple((f"mask:out0?g{k}", f"out0?g{k}", f"mask:out0?g{k}")
                 + ((f"out0?g{k}",) if tuple(operands[v].shape) != y else ())
                 for k, v in enumerate(op.inputs[:2]) if v >= 0)


def _torch_div_tmp(op, operands, needs) -> tuple:
    """div backward (derivatives.yaml, div_tensor_other_backward: `-grad * ((self / other) / other)`)
    makes the divisor's gradient first: `self / other`, its quotient by `other` and `-grad`, each of the
    output's size, beside the full-size product (the gradient itself, or summed down for a broadcast
    divisor); they are freed before `grad / other` (the dividend's gradient) is made (measured, torch
    2.14). The profile allocates both gradients in one step: the temporary is what eager's peak of
    four output-sized tensors holds beyond them."""
    y = operands[op.outputs[0]]
    if len(needs) < 2 or not needs[1] or op.inputs[1] < 0:
        return _torch_broadcast_tmp(op, operands)
    grads = operands[op.inputs[1]].nbytes + (operands[op.inputs[0]].nbytes if needs[0] else 0)
    return ((max(4 * y.nbytes - grads, 0),),)


# maximum / minimum (two inputs) save both
_TORCH_MINMAX = {"saves": (("in0", "any"), ("in1", "any")), "bwd_tmp": _torch_minmax_tmp}
# an Add marked "inplace" (sdpa's math path: `attn.add_(mask)`) writes into input 0: its result is that storage
TORCH = {"Add": {"grad": "pass", "grad_shared": (0, 1), "view_if": lambda op: bool(op.attrs.get("inplace"))},
         "Sub": {"grad_shared": (0,)},
         "Mul": {"saves": (("in1", "g0"), ("in0", "g1")), "bwd_tmp": _torch_broadcast_tmp},
         "Div": {"saves": (("in1", "any"), ("in0", "g1")), "bwd_tmp": _torch_div_tmp},
         "Pow": _torch_pow,
         "Max": lambda op: _TORCH_MINMAX if len(op.inputs) == 2 else None,
         "Min": lambda op: _TORCH_MINMAX if len(op.inputs) == 2 else None}
OPS = [OpDef(t, rule=_rule(s), kernels=_kernels(s), flops=_flops(s), required_inputs=s.min_inputs,
             check=_check(s), batch=broadcast_batch, bias_inputs=_vector_bias if t in ("Add", "Sub") else (),
             shape_value=_shape_value(_SHAPE_ARITH[t]) if t in _SHAPE_ARITH else None,
             # an exporter's MatMul + Add of a bias is one linear (addmm) in eager: after a cast-down op
             # the bias add runs in its dtype (passes/precision.py); otherwise type promotion
             autocast="bias" if t == "Add" else "",
             profiles={"torch": TORCH[t]} if t in TORCH else {})
       for t, s in SPECS.items()]


# ---- converters ------------------------------------------------------------------------------------
def _onnx_arith(node) -> Canon:
    attrs = {"activation": "NONE"}
    if node.opset < 7 and node.attrs.get("broadcast") and "axis" in node.attrs:
        attrs["legacy_axis"] = int(node.attrs["axis"])
    return Canon(node.op_type, attrs)


def _tflite_arith(t):
    def conv(node) -> Canon:
        return Canon(t, {"activation": tflite_activation(node)})
    return conv


def _scalar_exponent(node) -> float | None:
    e = node.input(1)
    if e is None or not e.is_const or e.num_elements != 1:
        return None
    v = node.values(1)
    return None if v is None else float(v[0])


def _onnx_pow(node) -> Canon:
    c = _scalar_exponent(node)
    if c is not None:  # x ** constant: the exponent is a number, not a tensor that trains
        return Canon("Pow", {"exponent": c}, inputs=node.inputs[:1])
    attrs = {}
    if node.opset < 7 and node.attrs.get("broadcast") and "axis" in node.attrs:
        attrs["legacy_axis"] = int(node.attrs["axis"])
    return Canon("Pow", attrs)


def _tflite_pow(node) -> Canon:
    c = _scalar_exponent(node)
    return Canon("Pow", {"exponent": c}, inputs=node.inputs[:1]) if c is not None else Canon("Pow", {})


def _same(t):
    def conv(node) -> Canon:
        return Canon(t, {})
    return conv


ONNX = {**{t: _onnx_arith for t in ARITH}, "Pow": _onnx_pow, "Max": _same("Max"), "Min": _same("Min"),
        "Sum": _same("Sum"), "Mean": _same("MeanOf")}
TFLITE = {"ADD": _tflite_arith("Add"), "SUB": _tflite_arith("Sub"), "MUL": _tflite_arith("Mul"),
          "DIV": _tflite_arith("Div"), "POW": _tflite_pow, "SQUARED_DIFFERENCE": _same("SquaredDifference"),
          "MAXIMUM": _same("Max"), "MINIMUM": _same("Min"), "ADD_N": _same("Sum")}


# ---- other runtimes' profiles (profiles/singa.py, onert/, nntrainer.py): what they know of these ops ----
_ADD = next(d for d in OPS if d.type == ADD_TYPE)


def _singa_add(op, ctx):
    """SINGA's Add returns dy itself as both inputs' back-prop (`dx0, dx1 = dy, dy`)."""
    r = _ADD.rule(op, ctx)
    if r.calc_derivative is not None:
        y = op.outputs[0]
        r.inplace += [(("bp", y), w) for w in r.calc_derivative.writes if w[0] == "bp"]
    return r


# singa: the SINGA autograd operator memplan models the op as, and SINGA's own rule
PROFILES = {"singa": {"Add": {"operator": "Add", "rule": _singa_add}, "Sub": {"operator": "Sub"},
                      "Mul": {"operator": "Mul"}, "Div": {"operator": "Div"}}}


def _onert_binary_bwd(op, operands):
    if op.type == "Div":
        return AfterCompile("Div: \"Unsupported Binary Arithmetic Operation\" in its backward")
    for i in op.inputs:
        if i >= 0 and operands[i].is_const:
            return AfterCompile(f"{op.type} with a constant input ({operands[i].name}): onert crashes "
                                f"(SIGSEGV) in its backward, which has no back-prop tensor for a constant")
    shapes = {onert.shape(operands, i) for i in op.inputs if i >= 0} | {onert.shape(operands, op.outputs[0])}
    if len(shapes) > 1:
        shown = " and ".join(str(onert.shape(operands, i)) for i in op.inputs)
        return AfterCompile(f"{op.type} broadcasting {shown}: its backward needs equal shapes (\"Shape of "
                            f"lhs, rhs, incoming, lhs_grad, and rhs_grad must match\")")
    return None


def _onert_binary_usedef(op, c):
    if op.act != "NONE":
        c.use(op.outputs[0])
    for i in dict.fromkeys(op.inputs):
        if i >= 0:
            c.use(i)
            c.bp_def(i)


# onert (profiles/onert/): "forward" / "backward": fn(op, operands) -> why onert refuses at load or
# compile (backward: only when the op's backward runs), an `AfterCompile` reason when onert finds it
# only after it compiles; "kernel_buffers": fn(op, ir, threads, simd_width) -> [(name, bytes)] its
# train kernel allocates; "usedef": fn(op, chains), its backward's training use-defs;
# "weighted": the backward region is cut to ops reachable from these
PROFILES["onert"] = {t: {"backward": _onert_binary_bwd, "usedef": _onert_binary_usedef,
                         "kernel_buffers": onert.act_only_buffers}
                     for t in ARITH}


def _nntrainer_add(graph, op, batchnorm):
    shapes = [graph.operands[i].shape for i in op.inputs if i >= 0]
    if any(graph.operands[i].is_const for i in op.inputs if i >= 0) or len(set(shapes)) != 1:
        return (f"nntrainer profile: op {op.label} (Add) adds a constant or broadcasts: nntrainer's "
                f"addition layer adds layer outputs of one shape")
    return None


# nntrainer (profiles/nntrainer.py): "layer", the nntrainer 0.6.0 layer the profile models the op as;
# "kind", that layer's type; "check": fn(graph, op, batchnorm) -> why the layer cannot take this op
PROFILES["nntrainer"] = {"Add": {"layer": "addition", "kind": "addition", "check": _nntrainer_add}}
