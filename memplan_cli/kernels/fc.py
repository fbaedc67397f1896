"""FullyConnected (tflite weights [O, I], y = x W^T + b), Gemm with transposes, and MatMul.

The input is flattened to [-1, I] as tflite does. Temporaries: the pre-activation product, and in
backward the activation-masked dy (one array of y's size).
"""
from __future__ import annotations

import numpy as np

from memplan_cli.kernels import activation
from memplan_cli.kernels.common import reduce_to_shape, store


def _w_oi(w: np.ndarray, w_layout: str) -> np.ndarray:
    """Weights as [O, I] whatever their stored layout ("OI" tflite / Gemm transB=1, "IO" Gemm transB=0)."""
    return w if w_layout == "OI" else w.T


def forward(x, w, b, out, act="NONE", w_layout="OI"):
    wo = _w_oi(w, w_layout)
    y = x.reshape(-1, wo.shape[1]) @ wo.T
    if b is not None:
        y += b.reshape(1, -1)
    activation.apply(y, act, y)
    return store(out, y)


def calc_derivative(dy, w, out_dx, y=None, act="NONE", w_layout="OI", acc=False):
    """dL/dx = dz W, with dz = dL/dy through the fused activation."""
    wo = _w_oi(w, w_layout)
    dz = activation.grad(y, dy, act).reshape(-1, wo.shape[0])
    return store(out_dx, dz @ wo, acc)


def calc_gradient(dy, x, out_dw, out_db=None, y=None, act="NONE", w_layout="OI", acc=False):
    """dL/dW = dz^T x (laid out like W), dL/db = sum of dz over rows."""
    n_out = out_dw.shape[0] if w_layout == "OI" else out_dw.shape[1]
    dz = activation.grad(y, dy, act).reshape(-1, n_out)
    x2 = x.reshape(dz.shape[0], -1)
    dw = dz.T @ x2
    store(out_dw, dw if w_layout == "OI" else dw.T, acc)
    if out_db is not None:
        store(out_db, dz.sum(axis=0), acc)


# ---- MatMul: y = a @ b (numpy batch-broadcasting semantics) -----------------------------------
def matmul_forward(a, b, out):
    return store(out, np.matmul(a, b))


def matmul_grad_a(dy, b, out_da, acc=False):
    g = np.matmul(dy, np.swapaxes(b, -1, -2)) if b.ndim > 1 else np.multiply.outer(dy, b)
    return store(out_da, reduce_to_shape(g, out_da.shape), acc)


def matmul_grad_b(dy, a, out_db, acc=False):
    if a.ndim == 1:
        g = np.multiply.outer(a, dy)
    else:
        g = np.matmul(np.swapaxes(a, -1, -2), dy)
    return store(out_db, reduce_to_shape(g, out_db.shape), acc)
