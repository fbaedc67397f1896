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
from memplan_cli.ops.shape_only import mask_count


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


def _expand_count(attrs: dict, input_shape: tuple, view=None, x: str = "", inputs=(), outputs=()) -> dict | None:
    """Expand to a shape one of whose sizes is the count of a mask: transformers' `embeds[ids == k] =
    embedding` (T5Gemma2's end-of-image embedding), which the dynamo exporter writes as index_put with
    a boolean mask: NonZero of the mask for the indices, the value expanded to (mask.sum(), width).
    The count is at most the mask's elements; the loader takes that bound (every element selected,
    as NonZero's count) unless --dim sets it (loaders/data_sized.py). Any other data-sized Expand is
    left to the loader's refusal."""
    if view is None or len(inputs) < 2:
        return None
    cat = view.node(inputs[1])
    if cat is None or cat["type"] != "Concat":
        return None
    dims, found = [], None
    for piece in cat["inputs"]:
        v = view.value(piece)
        if v is not None and v.dtype.kind in "iu" and v.ndim <= 1:
            dims += [int(d) for d in v.reshape(-1)]
            continue
        got = mask_count(view, piece) if found is None and (view.shape(piece) or (0,)) in ((1,), ()) else None
        if got is None:
            return None
        found = (len(dims), piece, got)
    if found is None:
        return None
    at, piece, got = found
    return {"dim": at, "bound": got["bound"], "leading": tuple(dims), "of": got["mask"], "value_of": piece,
            "value_dtype": got["dtype"], "value_shape": view.shape(piece)}


def _expand(node) -> Canon:
    return Canon("Expand", {}, inputs=node.inputs[:1])


def _tile(node) -> Canon:
    s, o = node.shape(0), node.out_shape()
    attrs = {}
    if len(s) == len(o) and all(d > 0 and od % d == 0 for d, od in zip(s, o)):
        attrs["repeats"] = tuple(od // d for d, od in zip(s, o))
    return Canon("Tile", attrs, inputs=node.inputs[:1])  # no repeats: refused by tile_check


ONNX = {"Expand": _expand, "Tile": _tile}
ONNX_FACTS = {"Expand": {"data_sized_count": _expand_count}}
TFLITE = {"BROADCAST_TO": _expand, "TILE": _tile}
# its converter declines (an option it does not read): the builtin kept, its shape-deciding constant
# input still read at load (loaders/flatbuffer_loader.py)
TFLITE_FACTS = {"TILE": {"shape_const_input": 1}}
