"""MaxPool2D and AvgPool2D, NHWC, tflite padding (padded positions never win a max and are not
counted in an average), with fused activation.

MaxPool's forward writes, per output element, the index of the winning tap (kh*KW + kw) into an
`argmax` array of the output's shape (any dtype: onert keeps it in a float-sized buffer); backward
routes dy through it, so the input need not be kept. Without an argmax array, backward recomputes
it from the kept input. Temporaries: the padded input, running max, padded input gradient.
`*_nchw` adapt ONNX's NCHW at the boundary.
"""
from __future__ import annotations

import numpy as np

from memplan_cli.execute.kernels import activation
from memplan_cli.execute.kernels.common import store, window
from memplan_cli.execute.kernels.conv import Geometry


def _geometry(shape, filter_hw, stride, padding):
    return Geometry(shape, filter_hw, stride, 1, padding)


def _padded(x, g, value):
    t, b, l, r = g.pads
    if not any(g.pads):
        return x
    return np.pad(x, ((0, 0), (t, b), (l, r), (0, 0)), constant_values=value)


def _argmax(x, g):
    xp = _padded(x, g, -np.inf)
    best = np.full((g.n, g.oh, g.ow, g.c), -np.inf, dtype=x.dtype)
    arg = np.zeros(best.shape, dtype=np.int32)
    for k, (i, j) in enumerate(g.taps()):
        v = window(xp, i, j, g.oh, g.ow, g.stride, g.dilation)
        better = v > best  # strict: the first maximal tap wins, as in a sequential scan
        best[better] = v[better]
        arg[better] = k
    return best, arg


def maxpool_forward(x, out, filter_hw, stride=1, padding="VALID", act="NONE", out_argmax=None):
    g = _geometry(x.shape, filter_hw, stride, padding)
    y, arg = _argmax(x, g)
    if out_argmax is not None:
        store(out_argmax, arg.astype(out_argmax.dtype, copy=False))
    activation.apply(y, act, y)
    return store(out, y)


def maxpool_calc_derivative(dy, out_dx, filter_hw, stride=1, padding="VALID", act="NONE", y=None,
                            argmax=None, x=None, acc=False):
    g = _geometry(out_dx.shape, filter_hw, stride, padding)
    if argmax is None:
        if x is None:
            raise ValueError("maxpool backward needs the argmax or the forward input")
        arg = _argmax(x, g)[1]
    else:
        arg = argmax
    dz = activation.grad(y, dy, act)
    t, b, l, r = g.pads
    dxp = np.zeros((g.n, g.h + t + b, g.w + l + r, g.c), dtype=out_dx.dtype)
    for k, (i, j) in enumerate(g.taps()):
        window(dxp, i, j, g.oh, g.ow, g.stride, g.dilation)[...] += np.where(arg == k, dz, 0)
    return store(out_dx, g.crop(dxp), acc)


def _counts(g, dtype):
    """How many real (unpadded) input positions each output window covers."""
    ones = _padded(np.ones((1, g.h, g.w, 1), dtype=dtype), g, 0)
    cnt = np.zeros((1, g.oh, g.ow, 1), dtype=dtype)
    for i, j in g.taps():
        cnt += window(ones, i, j, g.oh, g.ow, g.stride, g.dilation)
    return cnt


def avgpool_forward(x, out, filter_hw, stride=1, padding="VALID", act="NONE"):
    g = _geometry(x.shape, filter_hw, stride, padding)
    xp = _padded(x, g, 0)
    s = np.zeros((g.n, g.oh, g.ow, g.c), dtype=x.dtype)
    for i, j in g.taps():
        s += window(xp, i, j, g.oh, g.ow, g.stride, g.dilation)
    s /= _counts(g, x.dtype)
    activation.apply(s, act, s)
    return store(out, s)


def avgpool_calc_derivative(dy, out_dx, filter_hw, stride=1, padding="VALID", act="NONE", y=None,
                            acc=False):
    g = _geometry(out_dx.shape, filter_hw, stride, padding)
    dz = activation.grad(y, dy, act) / _counts(g, out_dx.dtype)
    t, b, l, r = g.pads
    dxp = np.zeros((g.n, g.h + t + b, g.w + l + r, g.c), dtype=out_dx.dtype)
    for i, j in g.taps():
        window(dxp, i, j, g.oh, g.ow, g.stride, g.dilation)[...] += dz
    return store(out_dx, g.crop(dxp), acc)


# ---- ONNX layout ------------------------------------------------------------------------------
def _t(a):
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1))


def pool_nchw_forward(kind, x, out, filter_hw, stride=1, pads=(0, 0, 0, 0), out_argmax=None):
    """kind "max" or "avg"; ONNX pads are (t, l, b, r)."""
    t, l, b, r = pads if not isinstance(pads, str) else (pads,) * 4
    p = pads if isinstance(pads, str) else (t, b, l, r)
    y = np.empty((out.shape[0], out.shape[2], out.shape[3], out.shape[1]), dtype=out.dtype)
    if kind == "max":
        arg = None if out_argmax is None else np.empty(y.shape, dtype=out_argmax.dtype)
        maxpool_forward(_t(x), y, filter_hw, stride, p, out_argmax=arg)
        if arg is not None:
            store(out_argmax, arg.transpose(0, 3, 1, 2))
    else:
        avgpool_forward(_t(x), y, filter_hw, stride, p)
    return store(out, y.transpose(0, 3, 1, 2))


def pool_nchw_calc_derivative(kind, dy, out_dx, filter_hw, stride=1, pads=(0, 0, 0, 0), argmax=None,
                              x=None, acc=False):
    t, l, b, r = pads if not isinstance(pads, str) else (pads,) * 4
    p = pads if isinstance(pads, str) else (t, b, l, r)
    dx = np.empty(_t(out_dx).shape, dtype=out_dx.dtype)
    if kind == "max":
        maxpool_calc_derivative(_t(dy), dx, filter_hw, stride, p,
                                argmax=None if argmax is None else _t(argmax),
                                x=None if x is None else _t(x))
    else:
        avgpool_calc_derivative(_t(dy), dx, filter_hw, stride, p)
    return store(out_dx, dx.transpose(0, 3, 1, 2), acc)
