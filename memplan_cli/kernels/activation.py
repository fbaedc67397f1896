"""Activations: ReLU, ReLU6, ReLU_N1_TO_1, Sigmoid, Tanh; standalone or fused into another op.

Backward is written in terms of the op's output y (what onert keeps), so the input need not be
kept: ReLU-family masks come from y, sigmoid' = y(1-y), tanh' = 1-y^2. No temporaries beyond one
mask/product array per call.
"""
from __future__ import annotations

import numpy as np

from memplan_cli.kernels.common import store

FUSED = ("NONE", "RELU", "RELU6", "RELU_N1_TO_1", "TANH", "SIGMOID")
# the ReLU-family activations whose derivative is one bit per element: lo < y < hi (None: unbounded)
MASK_BOUNDS = {"RELU": (0, None), "RELU6": (0, 6), "RELU_N1_TO_1": (-1, 1)}


def between(y: np.ndarray, bounds) -> np.ndarray:
    """lo < y < hi, elementwise, as a bool array."""
    lo, hi = bounds
    m = np.ones(y.shape, dtype=bool)
    if lo is not None:
        m &= y > lo
    if hi is not None:
        m &= y < hi
    return m


def normalize(act) -> str:
    a = "NONE" if act in (None, "", 0) else str(act).upper()
    if a not in FUSED:
        raise ValueError(f"unsupported activation {act!r}")
    return a


def apply(x: np.ndarray, act, out: np.ndarray | None = None) -> np.ndarray:
    """out = act(x); with out=None returns a new array (used for fused activations in place)."""
    a = normalize(act)
    if out is None:
        out = np.array(x, copy=True)
    elif out is not x:
        store(out, x)
    if a == "RELU":
        np.maximum(out, 0, out=out)
    elif a == "RELU6":
        np.clip(out, 0, 6, out=out)
    elif a == "RELU_N1_TO_1":
        np.clip(out, -1, 1, out=out)
    elif a == "TANH":
        np.tanh(out, out=out)
    elif a == "SIGMOID":
        # 1/(1+exp(-x)), written to avoid overflow warnings for large |x|
        np.negative(out, out=out)
        np.exp(np.minimum(out, 80, out=out), out=out)
        out += 1
        np.reciprocal(out, out=out)
    return out


def grad(y: np.ndarray | None, dy: np.ndarray, act) -> np.ndarray:
    """dL/d(pre-activation) from the output y and dL/dy. Returns dy itself for NONE (no copy)."""
    a = normalize(act)
    if a == "NONE":
        return dy
    if y is None:
        raise ValueError(f"the backward of activation {a} needs the op's output")
    if a == "RELU":
        return dy * (y > 0)
    if a == "RELU6":
        return dy * ((y > 0) & (y < 6))
    if a == "RELU_N1_TO_1":
        return dy * ((y > -1) & (y < 1))
    if a == "TANH":
        return dy * (1 - y * y)
    return dy * (y * (1 - y))  # SIGMOID


# ---- standalone ops ---------------------------------------------------------------------------
def forward(x, out, act):
    return apply(x, act, out)


def calc_derivative(y, dy, out_dx, act, acc=False):
    return store(out_dx, grad(y, dy, act), acc)
