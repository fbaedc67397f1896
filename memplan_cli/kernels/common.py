"""Helpers shared by the kernels: storing into outputs, broadcasting reductions."""
from __future__ import annotations

import numpy as np


def store(out: np.ndarray, value, acc: bool = False) -> np.ndarray:
    """Write `value` into `out` (or add it when `acc`); `value` is reshaped to `out`'s shape."""
    value = np.asarray(value)
    if value.shape != out.shape:
        value = value.reshape(out.shape)
    if acc:
        out += value
    else:
        out[...] = value
    return out


def reduce_to_shape(g: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Sum a broadcast gradient `g` back down to an operand of `shape` (numpy broadcasting rules)."""
    shape = tuple(shape)
    if g.shape == shape:
        return g
    lead = g.ndim - len(shape)
    if lead:
        g = g.sum(axis=tuple(range(lead)))
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and g.shape[i] != 1)
    if axes:
        g = g.sum(axis=axes, keepdims=True)
    return g.reshape(shape)
