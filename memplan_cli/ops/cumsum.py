"""CumSum (ONNX CumSum; TFLite CUMSUM): running sums along one axis. RoBERTa-style position ids
(cumsum of the non-padding mask) use it on integers; on floats it is differentiable.

Canonical form: `CumSum(X) -> Y` with attrs `axis` (non-negative), `exclusive`, `reverse`; the axis
input is read at load (an axis computed at run time is refused).
Training rule (PyTorch derivatives.yaml `cumsum`: self: cumsum_backward(grad, dim) = the cumsum of
dY in the other direction): calcDerivative reads dY only, keeps nothing. Integer CumSum carries no
gradient (requires-grad analysis).
FLOPs: forward |X| additions, backward |X|.
`--profile torch` (torch.cumsum, measured on torch 2.14 CPU): saves nothing; backward makes two
temporaries the size of X besides dX (the flipped gradient and its running sum). An exclusive or
reversed CumSum has no one eager op: refused.
"""
from __future__ import annotations

import numpy as np

from memplan_cli.ops.base import Canon, OpDef
from memplan_cli.ops.kernel_util import dy_only_rule, target


rule = dy_only_rule


def cumsum(x, axis: int, exclusive: bool, reverse: bool) -> np.ndarray:
    x = np.asarray(x)
    if reverse:
        x = np.flip(x, axis)
    y = np.cumsum(x, axis=axis, dtype=x.dtype)
    if exclusive:
        y = y - x
    return np.flip(y, axis) if reverse else y


def forward(ctx):
    a = ctx.attrs
    y = ctx.y()
    y[...] = cumsum(ctx.x(0), int(a["axis"]), bool(a.get("exclusive")), bool(a.get("reverse"))).astype(y.dtype)


def calc_derivative(ctx):
    out = target(ctx, 0)
    if out is None:
        return
    a = ctx.attrs
    # the adjoint of a running sum is the running sum the other way (exclusive stays exclusive)
    out[...] = cumsum(ctx.dy(), int(a["axis"]), bool(a.get("exclusive")), not a.get("reverse"))


def check(op, operands):
    if op.attrs.get("axis_unknown"):
        return "has an axis computed at run time"
    rank = len(operands[op.inputs[0]].shape)
    if not 0 <= int(op.attrs.get("axis", 0)) < max(rank, 1):
        return f"sums along axis {op.attrs.get('axis')} of a rank-{rank} input"
    return None


def _flops(op, operands):
    n = operands[op.inputs[0]].num_elements
    return n, n


def _torch_refuse(op, operands):
    if op.attrs.get("exclusive") or op.attrs.get("reverse"):
        return "an exclusive or reversed cumsum is no one eager op (torch.cumsum is neither)"
    return None


TORCH = {"bwd_tmp": (("in0", "in0"),), "refuse": _torch_refuse}
OPS = [OpDef("CumSum", rule=rule, kernels={"forward": forward, "calcDerivative": calc_derivative,
                                           "calcGradient": calc_derivative},
             flops=_flops, check=check, batch="keep", profiles={"torch": TORCH})]


def _canon(node, axis_values, exclusive, reverse) -> Canon:
    rank = len(node.shape(0) or ())
    if axis_values is None:
        return Canon("CumSum", {"axis_unknown": True}, inputs=node.inputs[:1])
    return Canon("CumSum", {"axis": int(axis_values[0]) % max(rank, 1), "exclusive": int(exclusive),
                            "reverse": int(reverse)}, inputs=node.inputs[:1])


def _onnx(node) -> Canon:
    return _canon(node, node.values(1), node.attrs.get("exclusive", 0), node.attrs.get("reverse", 0))


def _tflite(node) -> Canon:
    return _canon(node, node.values(1), node.options.get("exclusive", False), node.options.get("reverse", False))


ONNX = {"CumSum": _onnx}
TFLITE = {"CUMSUM": _tflite}
