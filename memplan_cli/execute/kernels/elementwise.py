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


def calc_derivative(op, dy, out_da=None, out_db=None, a=None, b=None, y=None, act="NONE",
                    a_shape=None, b_shape=None, acc=False):
    """Back-prop to a (out_da) and/or b (out_db). Shapes come from the outputs or the kept inputs."""
    dz = activation.grad(y, dy, act)
    if out_da is not None:
        if op in ("Add", "Sub"):
            g = dz
        elif op == "Mul":
            g = dz * b
        else:
            g = dz / b
        store(out_da, reduce_to_shape(np.asarray(g), out_da.shape), acc)
    if out_db is not None:
        if op == "Add":
            g = dz
        elif op == "Sub":
            g = -dz
        elif op == "Mul":
            g = dz * a
        else:
            g = -dz * a / (b * b)
        store(out_db, reduce_to_shape(np.asarray(g), out_db.shape), acc)
