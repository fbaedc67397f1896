"""Losses appended after the model output: mean squared error and categorical cross-entropy.

Reduction is onert's default SUM_OVER_BATCH_SIZE: MSE = mean over every element (Keras), CCE =
-sum(t log y) / batch on probabilities (y clipped to [eps, 1], as Keras does). Backward writes
dL/dy_pred. Temporaries: one array of y's size.
"""
from __future__ import annotations

import numpy as np

from memplan_cli.kernels.common import store

EPS = 1e-7


def mse_value(y, t):
    d = y - t
    return (d * d).mean()


def mse_forward(y, t, out):
    return store(out, np.full(out.shape, mse_value(y, t), dtype=out.dtype))


def mse_calc_derivative(y, t, out_dy, acc=False):
    return store(out_dy, (y - t) * (2.0 / y.size), acc)


def cce_value(y, t):
    batch = y.shape[0] if y.ndim > 1 else 1
    return -(t * np.log(np.clip(y, EPS, 1.0))).sum() / batch


def cce_forward(y, t, out):
    return store(out, np.full(out.shape, cce_value(y, t), dtype=out.dtype))


def cce_calc_derivative(y, t, out_dy, acc=False):
    batch = y.shape[0] if y.ndim > 1 else 1
    yc = np.clip(y, EPS, 1.0)
    g = -(t / yc) / batch
    g = np.where((y > EPS) & (y < 1.0), g, 0)  # clipped positions carry no gradient
    return store(out_dy, g, acc)


FORWARD = {"mse": mse_forward, "cce": cce_forward}
VALUE = {"mse": mse_value, "cce": cce_value}
DERIVATIVE = {"mse": mse_calc_derivative, "cce": cce_calc_derivative}
