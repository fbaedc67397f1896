"""One-input arithmetic: Exp, Log, Sqrt, Rsqrt, Reciprocal, Neg, Abs, Sin, Cos, Acos, Square (ONNX Exp,
Log, Sqrt, Reciprocal, Neg, Abs, Sin, Cos, Acos; TFLite EXP, LOG, SQRT, RSQRT, NEG, ABS, SIN, COS, SQUARE).

What backward keeps (PyTorch derivatives.yaml; the shared rule is ops/_pointwise.py):
- the output Y, where the derivative is a function of it (`result` in derivatives.yaml):
  exp (grad * result), sqrt (grad / (2 * result)), rsqrt (-0.5 * grad * result³), reciprocal
  (-grad * result²);
- the input X: log (grad / self), abs (grad * self.sgn()), sin (grad * self.cos()), cos
  (grad * -self.sin()), acos (grad * -((-self * self + 1).rsqrt())), square (pow(self, 2): 2 * self * grad);
- nothing: neg (-grad).
In place (`policy.inplace`): forward may write Y over X when X is dead after it; backward writes dX
over dY.
FLOPs per element: forward 1 (Rsqrt 2); backward 1 for the product with dY plus the derivative's own
(Sqrt, Reciprocal, Log 2; Rsqrt 3; Neg 1; Acos 5: square, subtract, rsqrt, negate).
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
    Pointwise("Acos", lambda x, a: np.arccos(x), lambda x, a: -1.0 / np.sqrt(1.0 - x * x), uses="x", flops=(1, 5)),
    Pointwise("Square", lambda x, a: np.square(x), lambda x, a: 2.0 * x, uses="x", flops=(1, 2)),
]
OPS = [opdef(s) for s in SPECS]


def _same(t):
    def conv(node) -> Canon:
        return Canon(t, {})
    return conv


ONNX = {t: _same(t) for t in ("Exp", "Log", "Sqrt", "Reciprocal", "Neg", "Abs", "Sin", "Cos", "Acos")}
TFLITE = {"EXP": _same("Exp"), "LOG": _same("Log"), "SQRT": _same("Sqrt"), "RSQRT": _same("Rsqrt"),
          "NEG": _same("Neg"), "ABS": _same("Abs"), "SIN": _same("Sin"), "COS": _same("Cos"),
          "SQUARE": _same("Square")}
