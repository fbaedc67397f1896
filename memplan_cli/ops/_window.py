"""Window geometry and N-D NumPy kernels shared by the conv and pool families (channels first).

Geometry (`Window.of(op, operands)`) is the one place that reads a window op's canonical attributes:
- `layout`: "NCHW" (channels first: ONNX) or "NHWC" (channels last: TFLite/circle); the spatial
  rank is the input's rank - 2 (1-D, 2-D, 3-D);
- `kernel`, `stride`, `dilation`: one int per spatial dim (a missing kernel comes from the weights);
- `pads`: (begin..., end...) per spatial dim, as ONNX writes them; loaders resolve SAME/auto_pad into
  it. Hand-built graphs without `pads` may give `padding` "SAME" (TF: the odd pixel after) or "VALID";
- the output size is the output operand's (so ceil_mode needs no attribute here): windows that run
  past the end padding (ceil_mode) see nothing there (`extra`).

Kernels take channels-first arrays; the op modules move NHWC to channels first at the boundary.
Convolution is im2col + one matrix product per group; backward scatters tap by tap.
"""
from __future__ import annotations

import numbers

import itertools
import math

import numpy as np


def _tuple(v, n: int, default: int = 1) -> tuple:
    if v is None:
        return (default,) * n
    if isinstance(v, numbers.Integral):  # NumPy's integers register here: no NumPy needed
        return (int(v),) * n
    t = tuple(int(a) for a in v)
    return t * n if len(t) == 1 and n > 1 else t


def channels_first(op) -> bool:
    return str(op.attrs.get("layout", "NHWC")).upper() == "NCHW"


class Window:
    """Resolved geometry of one window op (see the module docstring)."""

    def __init__(self, in_spatial, out_spatial, kernel, stride, dilation, pads):
        self.ins = tuple(in_spatial)
        self.outs = tuple(out_spatial)
        self.nd = len(self.ins)
        self.kernel = tuple(kernel)
        self.stride = tuple(stride)
        self.dilation = tuple(dilation)
        self.begin = tuple(pads[:self.nd])
        self.end = tuple(pads[self.nd:2 * self.nd])
        # positions past the end padding that the last windows reach (ceil_mode)
        self.extra = tuple(max(0, (o - 1) * s + (k - 1) * d + 1 - (n + b + e)) for o, s, k, d, n, b, e in
                           zip(self.outs, self.stride, self.kernel, self.dilation, self.ins, self.begin, self.end))

    @staticmethod
    def of(op, operands, x_shape=None, y_shape=None, kernel=None) -> "Window":
        """The geometry of a conv/pool `op` (x = input 0, y = output 0, kernel from attrs or weights)."""
        xs = tuple(x_shape if x_shape is not None else operands[op.inputs[0]].shape)
        ys = tuple(y_shape if y_shape is not None else operands[op.outputs[0]].shape)
        cf = channels_first(op)
        xsp, ysp = (xs[2:], ys[2:]) if cf else (xs[1:-1], ys[1:-1])
        nd = len(xsp)
        a = op.attrs
        k = kernel or a.get("kernel") or a.get("filter") or a.get("kernel_shape")
        if not k:
            w = operands[op.inputs[1]].shape
            k = w[2:] if cf else w[1:-1]
        k = _tuple(k, nd)
        s = _tuple(a.get("stride"), nd)
        d = _tuple(a.get("dilation"), nd)
        pads = a.get("pads")
        padding = str(a.get("padding", "VALID")).upper()
        if pads is None or (not any(pads) and padding == "SAME"):
            if padding == "SAME":
                tot = [max((-(-n // st) - 1) * st + (kk - 1) * dd + 1 - n, 0) for n, st, kk, dd in zip(xsp, s, k, d)]
                pads = tuple(t // 2 for t in tot) + tuple(t - t // 2 for t in tot)
            else:
                pads = (0,) * (2 * nd)
        return Window(xsp, ysp, k, s, d, _tuple(pads, 2 * nd, 0))

    @property
    def taps(self) -> list:
        return list(itertools.product(*[range(k) for k in self.kernel]))

    @property
    def size(self) -> int:
        return math.prod(self.kernel)

    def padded_shape(self, lead) -> tuple:
        return tuple(lead) + tuple(n + b + e + x for n, b, e, x in zip(self.ins, self.begin, self.end, self.extra))

    def pad(self, x, value=0.0):
        widths = [(0, 0)] * (x.ndim - self.nd) + [(b, e + x_) for b, e, x_ in zip(self.begin, self.end, self.extra)]
        if not any(a or b for a, b in widths):
            return x
        return np.pad(x, widths, constant_values=value)

    def crop(self, xp):
        lead = (slice(None),) * (xp.ndim - self.nd)
        return xp[lead + tuple(slice(b, b + n) for b, n in zip(self.begin, self.ins))]

    def tap(self, t, ndim: int):
        """The slice of a padded array that tap `t` sees for every output position."""
        lead = (slice(None),) * (ndim - self.nd)
        return lead + tuple(slice(i * d, i * d + (o - 1) * s + 1, s)
                            for i, d, o, s in zip(t, self.dilation, self.outs, self.stride))

    def out_size(self, ceil: bool = False) -> tuple:
        f = (lambda a, b: -(-a // b)) if ceil else (lambda a, b: a // b)
        return tuple(f(n + b + e - (k - 1) * d - 1, s) + 1 for n, b, e, k, d, s in
                     zip(self.ins, self.begin, self.end, self.kernel, self.dilation, self.stride))


# ---- convolution (x [N, C, *S], w [O, C/group, *K]) -------------------------------------------
# Products run on rows, one per (sample, output position), with columns in (tap, channel) order, as
# TFLite's im2col has them: float32 results then match onert's kernels to the last bits.
def _rows(x, g: Window, group: int):
    """im2col: [group, N*P, T*C/group], columns in (tap, channel) order."""
    n, c = x.shape[:2]
    xp = g.pad(x)
    cols = np.stack([xp[g.tap(t, xp.ndim)] for t in g.taps], axis=1)  # [N, T, C, *O]
    cols = cols.reshape(n, g.size, group, c // group, -1)  # [N, T, G, Cg, P]
    return np.ascontiguousarray(cols.transpose(2, 0, 4, 1, 3)).reshape(group, -1, g.size * (c // group))


def _wk(w, group: int):
    """[O, Cg, *K] -> [group, O/group, T*Cg] in (tap, channel) order."""
    o, cg = w.shape[:2]
    return np.ascontiguousarray(w.reshape(group, o // group, cg, -1).transpose(0, 1, 3, 2)).reshape(group, o // group, -1)


def _from_rows(r, n: int, g: Window):
    """[group, N*P, Og] -> [N, group*Og, *O]."""
    grp, _, og = r.shape
    return r.reshape(grp, n, -1, og).transpose(1, 0, 3, 2).reshape((n, grp * og) + g.outs)


def _to_rows(dy, group: int):
    """[N, O, *O] -> [group, N*P, O/group]."""
    n, o = dy.shape[:2]
    return np.ascontiguousarray(dy.reshape(n, group, o // group, -1).transpose(1, 0, 3, 2)).reshape(group, -1, o // group)


def conv_forward(x, w, b, g: Window, group: int = 1):
    y = _from_rows(np.matmul(_rows(x, g, group), np.swapaxes(_wk(w, group), 1, 2)), x.shape[0], g)
    if b is not None:
        y = y + b.reshape((1, -1) + (1,) * g.nd)
    return y


def conv_backward_input(dy, w, x_shape, g: Window, group: int = 1):
    n, c = x_shape[:2]
    dcols = np.matmul(_to_rows(dy, group), _wk(w, group))  # [G, N*P, T*Cg]
    dcols = dcols.reshape(group, n, -1, g.size, c // group).transpose(1, 3, 0, 4, 2)  # [N, T, G, Cg, P]
    dcols = dcols.reshape((n, g.size, c) + g.outs)
    dxp = np.zeros(g.padded_shape((n, c)), dtype=dy.dtype)
    for k, t in enumerate(g.taps):
        dxp[g.tap(t, dxp.ndim)] += dcols[:, k]
    return g.crop(dxp)


def conv_backward_weight(dy, x, w_shape, g: Window, group: int = 1):
    """dW = dY^T . rows, one product per group over every (sample, position) pair."""
    o, cg = w_shape[:2]
    dw = np.matmul(np.swapaxes(_to_rows(dy, group), 1, 2), _rows(x, g, group))  # [G, Og, T*Cg]
    return dw.reshape(group, o // group, -1, cg).transpose(0, 1, 3, 2).reshape(w_shape)


# ---- pooling (x [N, C, *S]) --------------------------------------------------------------------
def max_pool(x, g: Window):
    """(y, arg): the window maximum and which tap won it (the first maximal one, as a scan does)."""
    xp = g.pad(x, -np.inf)
    best = np.full(x.shape[:2] + g.outs, -np.inf, dtype=x.dtype)
    arg = np.zeros(best.shape, dtype=np.int32)
    for k, t in enumerate(g.taps):
        v = xp[g.tap(t, xp.ndim)]
        better = v > best
        best[better] = v[better]
        arg[better] = k
    return best, arg


def max_pool_backward(dy, arg, x_shape, g: Window):
    dxp = np.zeros(g.padded_shape(x_shape[:2]), dtype=dy.dtype)
    for k, t in enumerate(g.taps):
        dxp[g.tap(t, dxp.ndim)] += np.where(arg == k, dy, 0)
    return g.crop(dxp)


def avg_counts(g: Window, include_pad: bool, dtype):
    """How many positions each window averages over: the real input, plus the explicit padding when
    `include_pad` (ONNX count_include_pad, torch's default); never the ceil_mode overhang."""
    ones = np.ones(g.ins, dtype=dtype)
    if include_pad:
        ones = np.pad(ones, [(b, e) for b, e in zip(g.begin, g.end)], constant_values=1)
        ones = np.pad(ones, [(0, x) for x in g.extra])
    else:
        ones = np.pad(ones, [(b, e + x) for b, e, x in zip(g.begin, g.end, g.extra)])
    cnt = np.zeros(g.outs, dtype=dtype)
    for t in g.taps:
        cnt += ones[g.tap(t, ones.ndim)]
    return np.maximum(cnt, 1)


def avg_pool(x, g: Window, include_pad: bool):
    xp = g.pad(x, 0.0)
    s = np.zeros(x.shape[:2] + g.outs, dtype=x.dtype)
    for t in g.taps:
        s += xp[g.tap(t, xp.ndim)]
    return s / avg_counts(g, include_pad, x.dtype)


def avg_pool_backward(dy, x_shape, g: Window, include_pad: bool):
    dz = dy / avg_counts(g, include_pad, dy.dtype)
    dxp = np.zeros(g.padded_shape(x_shape[:2]), dtype=dy.dtype)
    for t in g.taps:
        dxp[g.tap(t, dxp.ndim)] += dz
    return g.crop(dxp)


# ---- layout helpers ----------------------------------------------------------------------------
def to_cf(a):
    """channels last -> channels first."""
    return np.moveaxis(a, -1, 1)


def to_cl(a):
    """channels first -> channels last."""
    return np.moveaxis(a, 1, -1)
