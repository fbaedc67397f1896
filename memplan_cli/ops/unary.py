"""One-input arithmetic: Exp, Log, Sqrt, Rsqrt, Reciprocal, Neg, Abs, Sin, Cos, Tan, the inverse
trigonometric and the hyperbolic functions (Asin, Acos, Atan, Sinh, Cosh, Asinh, Acosh, Atanh),
Square (ONNX Exp, Log, Sqrt, Reciprocal, Neg, Abs, Sin, Cos, Tan, Asin, Acos, Atan, Sinh, Cosh, Asinh,
Acosh, Atanh; TFLite EXP, LOG, SQRT, RSQRT, NEG, ABS, SIN, COS, SQUARE).

What backward keeps (PyTorch derivatives.yaml; the shared rule is ops/_pointwise.py):
- the output Y, where the derivative is a function of it (`result` in derivatives.yaml):
  exp (grad * result), sqrt (grad / (2 * result)), rsqrt (-0.5 * grad * result³), reciprocal
  (-grad * result²), tan (grad * (1 + result.pow(2)));
- the input X: log (grad / self), abs (grad * self.sgn()), sin (grad * self.cos()), cos
  (grad * -self.sin()), asin (grad * (-self * self + 1).rsqrt()), acos (grad * -((-self * self +
  1).rsqrt())), atan (grad / (self * self + 1)), sinh (grad * self.cosh()), cosh (grad *
  self.sinh()), asinh (grad * (self.pow(2) + 1).rsqrt()), acosh (grad * (self * self - 1).rsqrt(),
  real), atanh (grad * 1 / (1 - self.pow(2))), square (pow(self, 2): 2 * self * grad);
- nothing: neg (-grad).
In place (`policy.inplace`): forward may write Y over X when X is dead after it; backward writes dX
over dY.
FLOPs per element: forward 1 (Rsqrt 2); backward 1 for the product with dY plus the derivative's own
operations as derivatives.yaml writes them (Sqrt, Reciprocal, Log, Abs, Sin, Cos, Sinh, Cosh 1;
Rsqrt, Tan, Atan 2; Asinh, Acosh, Atanh 3; Asin 4; Acos 5; Neg none: dX is dY negated).
"""
from __future__ import annotations

import numpy as np

from memplan_cli.ops._pointwise import Pointwise, opdef
from memplan_cli.ops.base import Canon


def _rsqrt(x, a):
    return 1.0 / np.sqrt(x)


SPECS = [
    Pointwise("Exp", lambda x, a: np.exp(x), lambda y, a: y, uses="y", flops=(1, 1)),
    Pointwise("Log", lambda x, a: np.log(x), lambda x, a: 1.0 / x, uses="x", flops=(1, 2)),
    Pointwise("Sqrt", lambda x, a: np.sqrt(x), lambda y, a: 0.5 / y, uses="y", flops=(1, 2)),
    Pointwise("Rsqrt", _rsqrt, lambda y, a: -0.5 * y * y * y, uses="y", flops=(2, 3)),
    Pointwise("Reciprocal", lambda x, a: 1.0 / x, lambda y, a: -y * y, uses="y", flops=(1, 2)),
    Pointwise("Neg", lambda x, a: np.negative(x), lambda shape, a: np.full(shape, -1.0), uses="", flops=(1, 1)),
    Pointwise("Abs", lambda x, a: np.abs(x), lambda x, a: np.sign(x), uses="x", flops=(1, 2)),
    Pointwise("Sin", lambda x, a: np.sin(x), lambda x, a: np.cos(x), uses="x", flops=(1, 2)),
    Pointwise("Cos", lambda x, a: np.cos(x), lambda x, a: -np.sin(x), uses="x", flops=(1, 2)),
    Pointwise("Tan", lambda x, a: np.tan(x), lambda y, a: 1.0 + y * y, uses="y", flops=(1, 3)),
    Pointwise("Asin", lambda x, a: np.arcsin(x), lambda x, a: 1.0 / np.sqrt(1.0 - x * x), uses="x", flops=(1, 5)),
    Pointwise("Acos", lambda x, a: np.arccos(x), lambda x, a: -1.0 / np.sqrt(1.0 - x * x), uses="x", flops=(1, 6)),
    Pointwise("Atan", lambda x, a: np.arctan(x), lambda x, a: 1.0 / (x * x + 1.0), uses="x", flops=(1, 3)),
    Pointwise("Sinh", lambda x, a: np.sinh(x), lambda x, a: np.cosh(x), uses="x", flops=(1, 2)),
    Pointwise("Cosh", lambda x, a: np.cosh(x), lambda x, a: np.sinh(x), uses="x", flops=(1, 2)),
    Pointwise("Asinh", lambda x, a: np.arcsinh(x), lambda x, a: 1.0 / np.sqrt(x * x + 1.0), uses="x", flops=(1, 4)),
    Pointwise("Acosh", lambda x, a: np.arccosh(x), lambda x, a: 1.0 / np.sqrt(x * x - 1.0), uses="x", flops=(1, 4)),
    Pointwise("Atanh", lambda x, a: np.arctanh(x), lambda x, a: 1.0 / (1.0 - x * x), uses="x", flops=(1, 4)),
    Pointwise("Square", lambda x, a: np.square(x), lambda x, a: 2.0 * x, uses="x", flops=(1, 2)),
]
OPS = [opdef(s) for s in SPECS]


def _same(t):
    def conv(node) -> Canon:
        return Canon(t, {})
    return conv


ONNX = {t: _same(t) for t in ("Exp", "Log", "Sqrt", "Reciprocal", "Neg", "Abs", "Sin", "Cos", "Tan", "Asin", "Acos",
                               "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh")}
TFLITE = {"EXP": _same("Exp"), "LOG": _same("Log"), "SQRT": _same("Sqrt"), "RSQRT": _same("Rsqrt"),
          "NEG": _same("Neg"), "ABS": _same("Abs"), "SIN": _same("Sin"), "COS": _same("Cos"),
          "SQUARE": _same("Square")}
