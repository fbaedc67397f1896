"""Expand and Tile: Y repeats X's data (by broadcasting, or by whole copies along each axis).

Canonical forms: `Expand(x)` (ONNX Expand, TFLite BROADCAST_TO) and `Tile(x)` with attr `repeats`
(ONNX Tile opset 6+, TFLite TILE). Both output shapes are static (shape inference), so the shape /
repeats operand is dropped: Expand broadcasts X to Y's shape, Tile's repeats are Y's dims over X's.

Training rules (PyTorch derivatives.yaml `expand`: self: at::sum_to(grad, self.sym_sizes());
`repeat`: self: repeat_backward(grad, repeats, self.sym_sizes())): sizes only, no data is saved.
- Expand calcDerivative: dX = dY summed over the broadcast dimensions; reads dY only.
- Tile calcDerivative: dX = dY seen as [r0, d0, r1, d1, ...] summed over the r axes; reads dY only.
FLOPs: forward none; backward one add per element of dY.
"""
from __future__ import annotations

import numpy as np

from memplan_cli.kernels.common import reduce_to_shape
from memplan_cli.ops.base import Canon, OpDef
from memplan_cli.ops.kernel_util import dy_only_rule, target


rule = dy_only_rule


def expand_forward(ctx):
    y = ctx.y()
    y[...] = np.broadcast_to(ctx.x(0), y.shape)


def expand_derivative(ctx):
    dx = target(ctx, 0)
    if dx is not None:
        dx[...] = reduce_to_shape(np.asarray(ctx.dy()), dx.shape)


def tile_forward(ctx):
    y = ctx.y()
    y[...] = np.tile(ctx.x(0), tuple(ctx.attrs["repeats"]))


def tile_derivative(ctx):
    dx = target(ctx, 0)
    if dx is None:
        return
    reps = tuple(ctx.attrs["repeats"])
    inter = [d for r, n in zip(reps, dx.shape) for d in (r, n)]
    dx[...] = ctx.dy().reshape(inter).sum(axis=tuple(range(0, 2 * dx.ndim, 2)))


def expand_check(op, operands):
    s, o = operands[op.inputs[0]].shape, operands[op.outputs[0]].shape
    try:
        b = np.broadcast_shapes(tuple(s), tuple(o))
    except ValueError:
        b = None
    if b != tuple(o):
        return f"cannot broadcast {tuple(s)} to its output {tuple(o)}"
    return None


def tile_check(op, operands):
    s, o = operands[op.inputs[0]].shape, operands[op.outputs[0]].shape
    reps = op.attrs.get("repeats")
    if reps is None or len(reps) != len(s) or tuple(r * d for r, d in zip(reps, s)) != tuple(o):
        return f"does not tile {tuple(s)} into its output {tuple(o)}"
    return None


def _flops(op, operands):
    return 0, operands[op.outputs[0]].num_elements


def _expand_batch(op, graph, shapes, batched):
    x = op.inputs[0]
    old_x, new_x = graph.operands[x].shape, shapes[x]
    out = list(graph.operands[op.outputs[0]].shape)
    off = len(out) - len(old_x)
    for k, (a, b) in enumerate(zip(old_x, new_x)):
        if a != b:
            out[off + k] = b
    return [tuple(out)]


def _tile_batch(op, graph, shapes, batched):
    return [tuple(r * d for r, d in zip(op.attrs["repeats"], shapes[op.inputs[0]]))]


TILE_TYPE = "Tile"  # `--profile torch` puts back a copy of a folded parameter computation (profiles/torch/export.py)
OPS = [OpDef("Expand", rule=rule, kernels={"forward": expand_forward, "calcDerivative": expand_derivative,
                                                        "calcGradient": expand_derivative},
             flops=_flops, check=expand_check, batch=_expand_batch, role="broadcast",
             profiles={"torch": {"view": True}}),  # `--profile torch`: expand is a view, its backward a sum
       OpDef(TILE_TYPE, rule=rule, kernels={"forward": tile_forward, "calcDerivative": tile_derivative,
                                                      "calcGradient": tile_derivative},
             flops=_flops, check=tile_check, batch=_tile_batch,
             profiles={"torch": {}})]  # `--profile torch`: repeat keeps only sizes


def _expand(node) -> Canon:
    return Canon("Expand", {}, inputs=node.inputs[:1])


def _tile(node) -> Canon:
    s, o = node.shape(0), node.out_shape()
    attrs = {}
    if len(s) == len(o) and all(d > 0 and od % d == 0 for d, od in zip(s, o)):
        attrs["repeats"] = tuple(od // d for d, od in zip(s, o))
    return Canon("Tile", attrs, inputs=node.inputs[:1])  # no repeats: refused by tile_check


ONNX = {"Expand": _expand, "Tile": _tile}
TFLITE = {"BROADCAST_TO": _expand, "TILE": _tile}
# its converter declines (an option it does not read): the builtin kept, its shape-deciding constant
# input still read at load (loaders/flatbuffer_loader.py)
TFLITE_FACTS = {"TILE": {"shape_const_input": 1}}
