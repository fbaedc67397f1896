"""Machinery shared by the one-input elementwise families (ops/activations_ext.py, ops/unary.py): not
a family itself (its name starts with "_").

A `Pointwise` spec gives Y = f(X) and its derivative dY/dX as a function of either X or Y (`uses`:
"x", "y", or "" for a constant derivative), chosen the way PyTorch's derivatives.yaml does: where
the derivative can be taken from the result (exp, sqrt, reciprocal, sigmoid, ...; `result` in
derivatives.yaml, or the `is_result` backward of elu_/leaky_relu_), only the output is kept.

Rules (one function for every spec):
- calcDerivative: dX = dY ⊙ f'(kept); reads the kept tensor (X, Y or nothing) and dY.
- In place (`policy.inplace`): forward may write Y over X when X is dead after the step (it is not
  when the derivative reads X); backward may write dX over dY (the derivative is computed first).
- A float constant input (a parameter kept unfolded) trains through the op: calcGradient writes its
  gradient with the same formula.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from memplan_cli.ops.base import OpDef
from memplan_cli.ops.kernel_util import param_gradient, target
from memplan_cli.ops.rule import OpRule, StepIO, bp_targets, forward_io


@dataclass
class Pointwise:
    type: str
    fwd: Callable  # (x, attrs) -> y
    grad: Callable  # (x or y, attrs) -> dY/dX (elementwise); for uses "": (shape, attrs)
    uses: object = "x"  # "x" | "y" | "" | fn(attrs) -> one of those
    flops: tuple = (1, 1)  # per element: forward, backward (the dY product included)
    check: Callable | None = None
    doc: str = ""
    profiles: dict = field(default_factory=dict)

    def kept(self, attrs) -> str:
        return self.uses(attrs) if callable(self.uses) else self.uses


def _rule(spec: Pointwise):
    def rule(op, ctx) -> OpRule:
        x, y = op.inputs[0], op.outputs[0]
        r = OpRule(forward=forward_io(op))
        kept = spec.kept(op.attrs)
        reads = ([("fwd", x if kept == "x" else y)] if kept else []) + [("bp", y)]
        if bp_targets(op, ctx, [x]):
            r.calc_derivative = StepIO(list(reads), [("bp", x)])
            if ctx.policy.inplace:
                r.inplace.append((("bp", y), ("bp", x)))
        param_gradient(op, ctx, r, x, reads)
        if ctx.policy.inplace:
            r.inplace.append((("fwd", x), ("fwd", y)))
        return r
    return rule


def _kernels(spec: Pointwise) -> dict:
    def forward(ctx):
        y = ctx.y()
        y[...] = spec.fwd(np.asarray(ctx.x(0)), ctx.attrs)

    def backward(ctx):
        out = target(ctx, 0)
        if out is None:
            return
        dy = np.asarray(ctx.dy())
        kept = spec.kept(ctx.attrs)
        if kept == "x":
            d = spec.grad(np.asarray(ctx.x(0)), ctx.attrs)
        elif kept == "y":
            d = spec.grad(np.asarray(ctx.y()), ctx.attrs)
        else:
            d = spec.grad(dy.shape, ctx.attrs)
        out[...] = (dy * d).reshape(out.shape)
    return {"forward": forward, "calcDerivative": backward, "calcGradient": backward}


def opdef(spec: Pointwise) -> OpDef:
    f, b = spec.flops

    def flops(op, operands):
        n = operands[op.outputs[0]].num_elements
        return f * n, b * n

    def check(op, operands):
        xs, ys = tuple(operands[op.inputs[0]].shape), tuple(operands[op.outputs[0]].shape)
        if xs != ys:
            return f"is elementwise but maps {xs} to {ys}"
        return spec.check(op, operands) if spec.check else None

    return OpDef(spec.type, rule=_rule(spec), kernels=_kernels(spec), flops=flops, check=check,
                 batch="keep", profiles={"torch": torch_facts(spec.type), **spec.profiles}, doc=spec.doc)


# `--profile torch` (derivatives.yaml): what eager's op saves for backward; most keep their input,
# these their result, Neg nothing
_TORCH_RESULT = ("Exp", "Sqrt", "Rsqrt", "Reciprocal", "Sigmoid", "Tanh", "Tan")


# the temporaries their backward formula makes before the input's gradient (read off torch 2.14's
# allocator events: sqrt `grad / (2 * result)`, reciprocal `-grad * (result * result)`, rsqrt
# `-0.5 * grad * result.pow(3)`, sin `grad * cos(x)`, cos `grad * -sin(x)`, abs `grad * sgn(x)`,
# erf `grad * 2/sqrt(pi) * exp(-x.pow(2))`, acos `grad * -((-self * self + 1).rsqrt())`: its five
# intermediates live together until dX is made); the others write the gradient directly. The other
# inverse trigonometric and hyperbolic functions, from their derivatives.yaml formulas the same way
# (a C++ expression's temporaries live until its end, so each intermediate is alive when dX is
# made; `.conj()` of a real tensor is itself): asin `grad * (-self * self + 1).rsqrt()` four, atan
# `grad / (self * self + 1)` two, sinh `grad * self.cosh()` and cosh `grad * self.sinh()` one, tan
# `grad * (1 + result.pow(2))` two (of the result), asinh `grad * (self.pow(2) + 1).rsqrt()` and
# acosh `grad * (self * self - 1).rsqrt()` three, atanh `grad * 1 / (1 - self.pow(2))` three (`grad
# * 1` is one)
_TORCH_BWD_TMP = {"Sqrt": ("out0",), "Reciprocal": ("out0", "out0"), "Rsqrt": ("out0", "out0"), "Sin": ("in0",),
                  "Cos": ("in0", "in0"), "Abs": ("in0",), "Erf": ("in0", "in0", "in0", "in0"), "Acos": ("in0",) * 5,
                  "Asin": ("in0",) * 4, "Atan": ("in0",) * 2, "Sinh": ("in0",), "Cosh": ("in0",),
                  "Tan": ("out0",) * 2, "Asinh": ("in0",) * 3, "Acosh": ("in0",) * 3, "Atanh": ("in0",) * 3}


def torch_facts(t: str) -> dict:
    if t == "Neg":
        return {}
    f = {"saves": (("out0" if t in _TORCH_RESULT else "in0", "any"),)}
    if t in _TORCH_BWD_TMP:
        f["bwd_tmp"] = (_TORCH_BWD_TMP[t],)
    return f


# ---- erf without scipy: piecewise polynomials fitted once to math.erf --------------------------
_W, _DEG, _TOP = 0.25, 13, 6.0  # |x| >= 6: erf is 1 to double precision
_N = int(_TOP / _W)


def _fit_erf() -> np.ndarray:
    from numpy.polynomial import chebyshev as cheb

    rows = []
    nodes = np.cos(np.pi * (np.arange(_DEG + 1) + 0.5) / (_DEG + 1))  # in u = (x - centre) / (W/2)
    for i in range(_N):
        c = i * _W + _W / 2
        coef = cheb.cheb2poly(cheb.chebfit(nodes, [math.erf(c + u * _W / 2) for u in nodes], _DEG))
        rows.append(np.pad(coef, (0, _DEG + 1 - len(coef)))[::-1])
    return np.array(rows)


_ERF: np.ndarray | None = None


def erf(x: np.ndarray) -> np.ndarray:
    """erf(x), float64 inside, within 2e-15 of math.erf (Chebyshev interpolants on 24 intervals of
    width 1/4, evaluated by Horner's rule: vectorised, no per-element Python)."""
    global _ERF
    if _ERF is None:
        _ERF = _fit_erf()
    x = np.asarray(x)
    a = np.abs(x.astype(np.float64, copy=False))
    idx = np.minimum((a / _W).astype(np.intp), _N - 1)
    u = (a - (idx * _W + _W / 2)) * (2 / _W)
    acc = _ERF[idx, 0]
    for k in range(1, _DEG + 1):
        acc = acc * u + _ERF[idx, k]
    acc = np.where(a >= _TOP, 1.0, acc)
    return np.copysign(acc, x).astype(x.dtype if x.dtype.kind == "f" else np.float64, copy=False)
