"""Add, Sub, Mul, Div with numpy broadcasting and an optional fused activation.

Backward needs: Add/Sub nothing but dy (and y if an activation is fused); Mul the other input;
Div the divisor (and the dividend for the divisor's gradient). Gradients of broadcast operands are
summed back to their shape. Temporaries: one product array per call.
"""
from __future__ import annotations

import numpy as np

from memplan_cli.execute.kernels import activation
from memplan_cli.execute.kernels.common import reduce_to_shape, store

OPS = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide}


def forward(op, a, b, out, act="NONE"):
    y = OPS[op](a, b)
    activation.apply(y, act, y)
    return store(out, np.broadcast_to(y, out.shape) if y.shape != out.shape else y)


def calc_derivative(op, dy, out_da=None, out_db=None, a=None, b=None, y=None, act="NONE", acc=False):
    """Back-prop (or gradient) to a (out_da) and/or b (out_db), summed to their shapes.

    Both results are computed before either is stored, so an output may share memory with dy
    (an in-place back-prop)."""
    dz = activation.grad(y, dy, act)
    ga = gb = None
    if out_da is not None:
        ga = dz if op in ("Add", "Sub") else dz * b if op == "Mul" else dz / b
        ga = reduce_to_shape(np.asarray(ga), out_da.shape)
    if out_db is not None:
        gb = dz if op == "Add" else -dz if op == "Sub" else dz * a if op == "Mul" else -dz * a / (b * b)
        gb = reduce_to_shape(np.asarray(gb), out_db.shape)
    if ga is not None and out_db is not None and np.shares_memory(out_da, dy):
        ga = np.array(ga, copy=True)  # storing ga must not change dz before gb is stored
    if gb is not None and np.shares_memory(out_db, dy) and ga is not None:
        gb = np.array(gb, copy=True)
    if ga is not None:
        store(out_da, ga, acc)
    if gb is not None:
        store(out_db, gb, acc)
