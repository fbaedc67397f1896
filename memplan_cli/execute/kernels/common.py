"""Helpers shared by the kernels: storing into outputs, broadcasting reductions, padding arithmetic."""
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


def pair(v, default=1) -> tuple[int, int]:
    if v is None:
        return (default, default)
    if isinstance(v, int):
        return (v, v)
    v = tuple(int(x) for x in v)
    return (v[0], v[0]) if len(v) == 1 else (v[0], v[1])


def out_size_same(n: int, stride: int) -> int:
    return -(-n // stride)


def resolve_pads(padding, in_hw, k_hw, stride, dilation=(1, 1)) -> tuple[int, int, int, int]:
    """(top, bottom, left, right) from "SAME" / "VALID" / explicit 4-tuple, tflite's SAME rule
    (the odd pixel goes after)."""
    if isinstance(padding, str):
        p = padding.upper()
        if p == "VALID":
            return (0, 0, 0, 0)
        if p != "SAME":
            raise ValueError(f"unknown padding {padding!r}")
        out = []
        for n, k, s, d in zip(in_hw, k_hw, stride, dilation):
            o = out_size_same(n, s)
            total = max((o - 1) * s + (k - 1) * d + 1 - n, 0)
            out += [total // 2, total - total // 2]
        return tuple(out)
    t = tuple(int(x) for x in padding)
    if len(t) != 4:
        raise ValueError(f"explicit padding needs (top, bottom, left, right), got {padding!r}")
    return t


def out_hw(in_hw, k_hw, stride, dilation, pads) -> tuple[int, int]:
    (h, w), (kh, kw), (sh, sw), (dh, dw) = in_hw, k_hw, stride, dilation
    top, bottom, left, right = pads
    oh = (h + top + bottom - (kh - 1) * dh - 1) // sh + 1
    ow = (w + left + right - (kw - 1) * dw - 1) // sw + 1
    return oh, ow


def pad_nhwc(x: np.ndarray, pads, value=0.0) -> np.ndarray:
    top, bottom, left, right = pads
    if not any(pads):
        return x
    return np.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)), constant_values=value)


def window(xp: np.ndarray, i: int, j: int, oh: int, ow: int, stride, dilation) -> np.ndarray:
    """The slice of padded NHWC `xp` that kernel tap (i, j) sees for every output position."""
    (sh, sw), (dh, dw) = stride, dilation
    r0, c0 = i * dh, j * dw
    return xp[:, r0:r0 + (oh - 1) * sh + 1:sh, c0:c0 + (ow - 1) * sw + 1:sw, :]
