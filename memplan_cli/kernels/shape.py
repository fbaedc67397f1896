"""Data-movement ops: Reshape/Flatten, Mean (reduce over axes), Concat.

None keeps anything from forward for backward except Mean's axes (attributes).
A Reshape whose output aliases its input is a no-op copy (numpy handles the overlap).
"""
from __future__ import annotations

import numpy as np

from memplan_cli.kernels.common import store


def reshape_forward(x, out):
    return store(out, x.reshape(out.shape))


def reshape_calc_derivative(dy, out_dx, acc=False):
    return store(out_dx, dy.reshape(out_dx.shape), acc)


def _axes(axes, ndim):
    return tuple(sorted(int(a) % ndim for a in np.atleast_1d(axes)))


def mean_forward(x, axes, out, keepdims=False):
    return store(out, x.mean(axis=_axes(axes, x.ndim), keepdims=keepdims))


def mean_calc_derivative(dy, axes, out_dx, acc=False):
    ax = _axes(axes, out_dx.ndim)
    count = int(np.prod([out_dx.shape[a] for a in ax]))
    kept = [1 if k in ax else n for k, n in enumerate(out_dx.shape)]
    g = np.broadcast_to(dy.reshape(kept) / count, out_dx.shape)
    return store(out_dx, g, acc)


def concat_forward(xs, axis, out):
    return store(out, np.concatenate(xs, axis=axis))


def concat_calc_derivative(dy, axis, index, sizes, out_dx, acc=False):
    """Back-prop to input `index` of a concat whose inputs have `sizes` along `axis`."""
    start = int(sum(sizes[:index]))
    sl = [slice(None)] * dy.ndim
    sl[axis] = slice(start, start + sizes[index])
    return store(out_dx, dy[tuple(sl)], acc)
