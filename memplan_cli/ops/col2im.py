"""Col2Im (ONNX Col2Im; torch's `F.fold`, `aten.col2im`): sums sliding blocks of columns back into an
image. Input (N, C·∏block, L), output (N, C, *image_shape), L the blocks' positions (each spatial dim
(size + pads - dilation·(block - 1) - 1) // stride + 1). MobileViTV2's attention folds its patches
back with it.

Canonical op `Col2Im`, attributes `image_shape`, `block_shape` (the constant inputs 1 and 2, read at
load), `dilations`, `pads` (begins, then ends), `strides`.

Training rule (PyTorch derivatives.yaml `col2im`: self: im2col(grad, kernel_size, dilation, padding,
stride)): calcDerivative gathers the blocks of dY (im2col), a fixed linear map of dY alone; nothing is
kept. FLOPs: one add per input element.
"""
from __future__ import annotations

import itertools

import numpy as np

from memplan_cli.ops.base import Canon, OpDef
from memplan_cli.ops.kernel_util import dy_only_rule, target

COL2IM_TYPE = "Col2Im"


def _geometry(attrs: dict):
    img, blk = tuple(int(v) for v in attrs["image_shape"]), tuple(int(v) for v in attrs["block_shape"])
    r = len(img)
    dil = tuple(int(v) for v in (attrs.get("dilations") or (1,) * r))
    st = tuple(int(v) for v in (attrs.get("strides") or (1,) * r))
    pads = tuple(int(v) for v in (attrs.get("pads") or (0,) * (2 * r)))
    positions = tuple((img[d] + pads[d] + pads[r + d] - dil[d] * (blk[d] - 1) - 1) // st[d] + 1 for d in range(r))
    return img, blk, dil, st, pads, positions


def out_shape(attrs: dict, x_shape) -> tuple | None:
    img, blk, *_ = _geometry(attrs)
    k = int(np.prod(blk))
    if len(x_shape) != 3 or int(x_shape[1]) % k:
        return None
    return (int(x_shape[0]), int(x_shape[1]) // k) + img


def _slices(attrs: dict):
    """For each block offset: its index into the block and the slice of the padded image it covers."""
    img, blk, dil, st, pads, pos = _geometry(attrs)
    for off in itertools.product(*(range(b) for b in blk)):
        yield off, tuple(slice(o * d, o * d + s * (p - 1) + 1, s) for o, d, s, p in zip(off, dil, st, pos))


def _padded(attrs: dict, lead: tuple) -> np.ndarray:
    img, _, _, _, pads, _ = _geometry(attrs)
    r = len(img)
    return np.zeros(lead + tuple(img[d] + pads[d] + pads[r + d] for d in range(r)), np.float64)


def _crop(attrs: dict, padded):
    img, _, _, _, pads, _ = _geometry(attrs)
    return padded[(Ellipsis,) + tuple(slice(pads[d], pads[d] + img[d]) for d in range(len(img)))]


def forward(ctx):
    x = np.asarray(ctx.x(0))
    y = ctx.y()
    _, blk, *_, pos = _geometry(ctx.attrs)
    n, c = y.shape[:2]
    cols = x.reshape((n, c) + blk + pos)
    acc = _padded(ctx.attrs, (n, c))
    for off, sl in _slices(ctx.attrs):
        acc[(Ellipsis,) + sl] += cols[(slice(None), slice(None)) + off]
    y[...] = _crop(ctx.attrs, acc)


def calc_derivative(ctx):
    dx = target(ctx, 0)
    if dx is None:
        return
    dy = np.asarray(ctx.dy())
    _, blk, *_, pos = _geometry(ctx.attrs)
    n, c = dy.shape[:2]
    img, _, _, _, pads, _ = _geometry(ctx.attrs)
    r = len(img)
    padded = np.zeros((n, c) + tuple(img[d] + pads[d] + pads[r + d] for d in range(r)), dy.dtype)
    padded[(Ellipsis,) + tuple(slice(pads[d], pads[d] + img[d]) for d in range(r))] = dy
    cols = np.empty((n, c) + blk + pos, dy.dtype)
    for off, sl in _slices(ctx.attrs):
        cols[(slice(None), slice(None)) + off] = padded[(Ellipsis,) + sl]
    dx[...] = cols.reshape(dx.shape)


def check(op, operands):
    for k in ("image_shape", "block_shape"):
        v = op.attrs.get(k)
        if not v or any(int(d) < 1 for d in v):
            return f"has {k.replace('_', ' ')} {v!r}: it must be a constant of sizes above 0"
    if len(op.attrs["image_shape"]) != len(op.attrs["block_shape"]):
        return "has an image shape and a block shape of different ranks"
    xs, ys = tuple(operands[op.inputs[0]].shape), tuple(operands[op.outputs[0]].shape)
    *_, pos = _geometry(op.attrs)
    if len(xs) != 3 or int(xs[2]) != int(np.prod(pos)) or any(p < 1 for p in pos):
        return f"has an input {xs} that does not hold blocks over {tuple(op.attrs['image_shape'])}"
    want = out_shape(op.attrs, xs)
    if want != ys:
        return f"has an output {ys}, not {want}"
    return None


def _batch(op, graph, shapes, batched):
    x = op.inputs[0]
    return [out_shape(op.attrs, shapes[x]) if x in batched else None]


def _flops(op, operands):
    return (operands[op.inputs[0]].num_elements, 0)


KERNELS = {"forward": forward, "calcDerivative": calc_derivative, "calcGradient": calc_derivative}
# `--profile torch`: aten.col2im allocates its output and saves nothing; its backward (im2col) allocates
# the input's gradient alone (measured, torch 2.14, one thread: (4, 512, 16) -> (4, 128, 8, 8) and two
# other shapes, blocks 2 x 2 and 3 x 3: the profiler's allocator events are the output in forward and
# the gradient in backward, nothing else)
TORCH = {"saves": ()}
OPS = [OpDef(COL2IM_TYPE, rule=dy_only_rule, kernels=KERNELS, flops=_flops, check=check, batch=_batch,
             profiles={"torch": TORCH})]


def _onnx(node) -> Canon:
    img, blk = node.values(1), node.values(2)
    r = len(img) if img is not None else 0
    a = node.attrs
    return Canon(COL2IM_TYPE, {"image_shape": tuple(int(v) for v in img) if img is not None else None,
                               "block_shape": tuple(int(v) for v in blk) if blk is not None else None,
                               "dilations": tuple(a.get("dilations") or (1,) * r),
                               "pads": tuple(a.get("pads") or (0,) * (2 * r)),
                               "strides": tuple(a.get("strides") or (1,) * r)},
                 inputs=node.inputs[:1])


ONNX = {"Col2Im": _onnx}
