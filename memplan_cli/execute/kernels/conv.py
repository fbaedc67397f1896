"""Conv2D (NHWC, weights OHWI) and DepthwiseConv2D (weights [1, KH, KW, C*M]), with fused activation.

Conv2D is im2col + one matrix product; backward-input is the transposed product scattered back tap
by tap (col2im). Depthwise loops over the KH*KW taps. Temporaries: the zero-padded input, the
column matrix (N*OH*OW x KH*KW*C; none for 1x1 stride-1 convs), the padded input gradient.
`*_nchw` wrap these for ONNX (NCHW activations, OIHW weights; depthwise = Conv with group == C).
"""
from __future__ import annotations

import numpy as np

from memplan_cli.execute.kernels import activation
from memplan_cli.execute.kernels.common import out_hw, pad_nhwc, pair, resolve_pads, store, window


class Geometry:
    """Resolved strides, dilations, pads and output size of one conv/pool application."""

    def __init__(self, x_shape, k_hw, stride=1, dilation=1, padding="VALID"):
        self.n, self.h, self.w, self.c = x_shape
        self.k = pair(k_hw)
        self.stride = pair(stride)
        self.dilation = pair(dilation)
        self.pads = resolve_pads(padding, (self.h, self.w), self.k, self.stride, self.dilation)
        self.oh, self.ow = out_hw((self.h, self.w), self.k, self.stride, self.dilation, self.pads)

    @property
    def pointwise(self) -> bool:
        return self.k == (1, 1) and self.stride == (1, 1) and not any(self.pads)

    def taps(self):
        for i in range(self.k[0]):
            for j in range(self.k[1]):
                yield i, j

    def crop(self, xp):
        t, b, l, r = self.pads
        return xp[:, t:t + self.h, l:l + self.w, :]


def _cols(x, g: Geometry) -> np.ndarray:
    """im2col: [N*OH*OW, KH*KW*C] in (kh, kw, c) order, matching OHWI weights."""
    if g.pointwise:
        return x.reshape(-1, g.c)
    xp = pad_nhwc(x, g.pads)
    parts = [window(xp, i, j, g.oh, g.ow, g.stride, g.dilation) for i, j in g.taps()]
    return np.stack(parts, axis=3).reshape(g.n * g.oh * g.ow, -1)


# ---- Conv2D -----------------------------------------------------------------------------------
def conv2d_forward(x, w, b, out, stride=1, dilation=1, padding="VALID", act="NONE"):
    g = Geometry(x.shape, w.shape[1:3], stride, dilation, padding)
    y = _cols(x, g) @ w.reshape(w.shape[0], -1).T
    if b is not None:
        y += b.reshape(1, -1)
    activation.apply(y, act, y)
    return store(out, y)


def conv2d_calc_derivative(dy, w, out_dx, stride=1, dilation=1, padding="VALID", act="NONE",
                           y=None, acc=False):
    g = Geometry(out_dx.shape, w.shape[1:3], stride, dilation, padding)
    dz = activation.grad(y, dy, act).reshape(-1, w.shape[0])
    dcols = dz @ w.reshape(w.shape[0], -1)  # [N*OH*OW, KH*KW*C]
    if g.pointwise:
        return store(out_dx, dcols, acc)
    dcols = dcols.reshape(g.n, g.oh, g.ow, g.k[0], g.k[1], g.c)
    t, b_, l, r = g.pads
    dxp = np.zeros((g.n, g.h + t + b_, g.w + l + r, g.c), dtype=out_dx.dtype)
    for i, j in g.taps():
        window(dxp, i, j, g.oh, g.ow, g.stride, g.dilation)[...] += dcols[:, :, :, i, j, :]
    return store(out_dx, g.crop(dxp), acc)


def conv2d_calc_gradient(dy, x, out_dw, out_db=None, stride=1, dilation=1, padding="VALID",
                         act="NONE", y=None, acc=False):
    g = Geometry(x.shape, out_dw.shape[1:3], stride, dilation, padding)
    dz = activation.grad(y, dy, act).reshape(-1, out_dw.shape[0])
    store(out_dw, dz.T @ _cols(x, g), acc)
    if out_db is not None:
        store(out_db, dz.sum(axis=0), acc)


# ---- DepthwiseConv2D --------------------------------------------------------------------------
def _dw_geometry(x_shape, w, stride, dilation, padding):
    g = Geometry(x_shape, w.shape[1:3], stride, dilation, padding)
    mult = w.shape[3] // g.c
    if mult * g.c != w.shape[3]:
        raise ValueError(f"depthwise weights {w.shape} do not fit {g.c} input channels")
    return g, mult


def depthwise_forward(x, w, b, out, stride=1, dilation=1, padding="VALID", act="NONE"):
    g, m = _dw_geometry(x.shape, w, stride, dilation, padding)
    xp = pad_nhwc(x, g.pads)
    y = np.zeros((g.n, g.oh, g.ow, g.c, m), dtype=np.result_type(x, w))
    for i, j in g.taps():
        y += window(xp, i, j, g.oh, g.ow, g.stride, g.dilation)[..., None] * w[0, i, j].reshape(g.c, m)
    y = y.reshape(g.n, g.oh, g.ow, g.c * m)
    if b is not None:
        y += b
    activation.apply(y, act, y)
    return store(out, y)


def depthwise_calc_derivative(dy, w, out_dx, stride=1, dilation=1, padding="VALID", act="NONE",
                              y=None, acc=False):
    g, m = _dw_geometry(out_dx.shape, w, stride, dilation, padding)
    dz = activation.grad(y, dy, act).reshape(g.n, g.oh, g.ow, g.c, m)
    t, b_, l, r = g.pads
    dxp = np.zeros((g.n, g.h + t + b_, g.w + l + r, g.c), dtype=out_dx.dtype)
    for i, j in g.taps():
        contrib = dz * w[0, i, j].reshape(g.c, m)
        window(dxp, i, j, g.oh, g.ow, g.stride, g.dilation)[...] += contrib.sum(axis=-1) if m > 1 else contrib[..., 0]
    return store(out_dx, g.crop(dxp), acc)


def depthwise_calc_gradient(dy, x, out_dw, out_db=None, stride=1, dilation=1, padding="VALID",
                            act="NONE", y=None, acc=False):
    g, m = _dw_geometry(x.shape, out_dw, stride, dilation, padding)
    dz = activation.grad(y, dy, act).reshape(g.n, g.oh, g.ow, g.c, m)
    xp = pad_nhwc(x, g.pads)
    dw = np.empty(out_dw.shape, dtype=out_dw.dtype)
    for i, j in g.taps():
        xs = window(xp, i, j, g.oh, g.ow, g.stride, g.dilation)
        dw[0, i, j] = np.einsum("nhwc,nhwcm->cm", xs, dz, optimize=True).reshape(-1)
    store(out_dw, dw, acc)
    if out_db is not None:
        store(out_db, dz.reshape(-1, g.c * m).sum(axis=0), acc)


# ---- ONNX layout (NCHW activations, OIHW weights), transposed at the boundary -----------------
def _nhwc(a):
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1))


def _nchw(a):
    return a.transpose(0, 3, 1, 2)


def _onnx_pads(pads):
    """ONNX pads (t, l, b, r) or auto string -> ours (t, b, l, r)."""
    if isinstance(pads, str):
        return pads
    t, l, b, r = pads
    return (t, b, l, r)


def _w_nhwc(w, depthwise):
    # OIHW -> OHWI; depthwise [C*M, 1, KH, KW] -> [1, KH, KW, C*M]
    return np.ascontiguousarray(w.transpose(1, 2, 3, 0) if depthwise else w.transpose(0, 2, 3, 1))


def conv_nchw_forward(x, w, b, out, stride=1, dilation=1, pads=(0, 0, 0, 0), depthwise=False, act="NONE"):
    """ONNX Conv; `depthwise` for group == C_in (weights [C*M, 1, KH, KW]). Other groupings are not
    supported. `pads` is ONNX's (t, l, b, r) or "SAME"/"VALID"."""
    dwise = depthwise
    y = np.empty((out.shape[0], out.shape[2], out.shape[3], out.shape[1]), dtype=out.dtype)
    f = depthwise_forward if dwise else conv2d_forward
    f(_nhwc(x), _w_nhwc(w, dwise), b, y, stride, dilation, _onnx_pads(pads), act)
    return store(out, _nchw(y))


def conv_nchw_calc_derivative(dy, w, out_dx, stride=1, dilation=1, pads=(0, 0, 0, 0), depthwise=False,
                              act="NONE", y=None, acc=False):
    dwise = depthwise
    dx = np.empty(_nhwc(out_dx).shape, dtype=out_dx.dtype)
    f = depthwise_calc_derivative if dwise else conv2d_calc_derivative
    f(_nhwc(dy), _w_nhwc(w, dwise), dx, stride, dilation, _onnx_pads(pads), act,
      None if y is None else _nhwc(y))
    return store(out_dx, _nchw(dx), acc)


def conv_nchw_calc_gradient(dy, x, out_dw, out_db=None, stride=1, dilation=1, pads=(0, 0, 0, 0),
                            depthwise=False, act="NONE", y=None, acc=False):
    dwise = depthwise
    dw = np.empty(_w_nhwc(out_dw, dwise).shape, dtype=out_dw.dtype)
    db = None if out_db is None else np.empty(out_db.shape, dtype=out_db.dtype)
    f = depthwise_calc_gradient if dwise else conv2d_calc_gradient
    f(_nhwc(dy), _nhwc(x), dw, db, stride, dilation, _onnx_pads(pads), act,
      None if y is None else _nhwc(y))
    if out_db is not None:
        store(out_db, db, acc)
    back = dw.transpose(3, 0, 1, 2) if dwise else dw.transpose(0, 3, 1, 2)
    return store(out_dw, back, acc)
