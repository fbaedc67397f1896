"""Softmax over the last axis (optionally scaled by beta, as tflite's SOFTMAX). Backward uses the
output only: dx = beta * y * (dy - sum(dy * y)). Temporaries: one array of the input's size."""
from __future__ import annotations

import numpy as np

from memplan_cli.kernels.common import store


def forward(x, out, beta=1.0, axis=-1):
    z = x * beta if beta != 1.0 else np.array(x, copy=True)
    z -= z.max(axis=axis, keepdims=True)
    np.exp(z, out=z)
    z /= z.sum(axis=axis, keepdims=True)
    return store(out, z)


def calc_derivative(y, dy, out_dx, beta=1.0, axis=-1, acc=False):
    g = y * (dy - (dy * y).sum(axis=axis, keepdims=True))
    if beta != 1.0:
        g *= beta
    return store(out_dx, g, acc)
