"""SpaceToBatchND and BatchToSpaceND (TFLite SPACE_TO_BATCH_ND, BATCH_TO_SPACE_ND): the TF Lite
converter writes a dilated convolution (Keras Conv1D / Conv2D with dilation_rate, DeepLab's atrous
convolutions) as SpaceToBatchND -> convolution -> BatchToSpaceND.

Canonical attrs `block` (one per spatial axis, axes 1..M of an NHWC tensor), `pads` ((begin, end)
per spatial axis: SpaceToBatchND's paddings) or `crops` (BatchToSpaceND's). TF's definition:
- SpaceToBatchND: pad, reshape [B, H'/bh, bh, W'/bw, bw, C], move the block axes in front of the
  batch, reshape [bh·bw·B, H'/bh, W'/bw, C];
- BatchToSpaceND: the inverse reshape and transpose, then crop.
Both are permutations of the elements (plus padding / cropping), so the training rule keeps nothing
(derivatives.yaml has no entry; TF registers the gradient of each as the other):
- calcDerivative: dX = the other op applied to dY (SpaceToBatchND's back-prop drops the padding,
  BatchToSpaceND's pads the cropped border with zeros). Reads dY only.
The batch dim changes (x prod(block)): re-batching scales it. FLOPs: none (data movement).
Refused at load: a block or paddings computed at run time (the converter writes constants).
"""
from __future__ import annotations

import math

import numpy as np

from memplan_cli.ops.base import Canon, OpDef
from memplan_cli.ops.kernel_util import dy_only_rule, target


def space_to_batch(x, block, pads):
    m = len(block)
    widths = [(0, 0)] + [tuple(p) for p in pads] + [(0, 0)] * (x.ndim - 1 - m)
    xp = np.pad(x, widths)
    b, rest = xp.shape[0], xp.shape[1 + m:]
    shape = [b]
    for k in range(m):
        shape += [xp.shape[1 + k] // block[k], block[k]]
    v = xp.reshape(shape + list(rest))
    perm = [2 + 2 * k for k in range(m)] + [0] + [1 + 2 * k for k in range(m)] + \
        list(range(1 + 2 * m, 1 + 2 * m + len(rest)))
    return v.transpose(perm).reshape([b * math.prod(block)] + [xp.shape[1 + k] // block[k] for k in range(m)]
                                     + list(rest))


def batch_to_space(x, block, crops):
    m = len(block)
    nb = x.shape[0] // math.prod(block)
    rest = x.shape[1 + m:]
    v = x.reshape(list(block) + [nb] + list(x.shape[1:]))
    perm = [m]
    for k in range(m):
        perm += [m + 1 + k, k]
    perm += list(range(2 * m + 1, 2 * m + 1 + len(rest)))
    full = v.transpose(perm).reshape([nb] + [x.shape[1 + k] * block[k] for k in range(m)] + list(rest))
    sl = (slice(None),) + tuple(slice(c[0], full.shape[1 + k] - c[1]) for k, c in enumerate(crops))
    return full[sl]


rule = dy_only_rule


def s2b_forward(ctx):
    y = ctx.y()
    y[...] = space_to_batch(np.asarray(ctx.x(0)), ctx.attrs["block"], ctx.attrs["pads"])


def s2b_derivative(ctx):
    dx = target(ctx, 0)
    if dx is not None:  # the inverse, with the padding dropped
        dx[...] = batch_to_space(np.asarray(ctx.dy()), ctx.attrs["block"], ctx.attrs["pads"])


def b2s_forward(ctx):
    y = ctx.y()
    y[...] = batch_to_space(np.asarray(ctx.x(0)), ctx.attrs["block"], ctx.attrs["crops"])


def b2s_derivative(ctx):
    dx = target(ctx, 0)
    if dx is not None:  # the inverse, with the cropped border as zeros
        dx[...] = space_to_batch(np.asarray(ctx.dy()), ctx.attrs["block"], ctx.attrs["crops"])


def _out_shape(op, xs):
    a = op.attrs
    block = a.get("block") or ()
    m = len(block)
    if op.type == "SpaceToBatchND":
        sp = [(xs[1 + k] + sum(a["pads"][k])) // block[k] for k in range(m)]
        return (xs[0] * math.prod(block),) + tuple(sp) + tuple(xs[1 + m:])
    sp = [xs[1 + k] * block[k] - sum(a["crops"][k]) for k in range(m)]
    return (xs[0] // math.prod(block),) + tuple(sp) + tuple(xs[1 + m:])


def check(op, operands):
    a = op.attrs
    block, key = a.get("block"), "pads" if op.type == "SpaceToBatchND" else "crops"
    xs, ys = tuple(operands[op.inputs[0]].shape), tuple(operands[op.outputs[0]].shape)
    if not block or a.get(key) is None or len(a[key]) != len(block) or any(b < 1 for b in block):
        return f"has a block shape or {key} memplan cannot read (computed at run time?)"
    if len(xs) < 2 + len(block) - 1 or any(p < 0 for pair in a[key] for p in pair):
        return f"has a block {tuple(block)} and {key} {tuple(map(tuple, a[key]))} that do not fit {xs}"
    if op.type == "SpaceToBatchND" and any((xs[1 + k] + sum(a["pads"][k])) % block[k] for k in range(len(block))):
        return f"pads {xs} to a size its block {tuple(block)} does not divide"
    if op.type == "BatchToSpaceND" and xs[0] % math.prod(block):
        return f"has a batch of {xs[0]}, not a multiple of its block {tuple(block)}"
    if _out_shape(op, xs) != ys:
        return f"has an output {ys}, not {_out_shape(op, xs)}"
    return None


def _batch(op, graph, shapes, batched):
    x = op.inputs[0]
    return [_out_shape(op, shapes[x])] if x in batched else [None]


OPS = [OpDef("SpaceToBatchND", rule=rule, kernels={"forward": s2b_forward, "calcDerivative": s2b_derivative,
                                                    "calcGradient": s2b_derivative},
             flops=lambda op, operands: (0, 0), check=check, batch=_batch, changes_batch=True),
       OpDef("BatchToSpaceND", rule=rule, kernels={"forward": b2s_forward, "calcDerivative": b2s_derivative,
                                                    "calcGradient": b2s_derivative},
             flops=lambda op, operands: (0, 0), check=check, batch=_batch, changes_batch=True)]


def _tflite(t, key):
    def convert(node) -> Canon:
        block, pairs = node.values(1), node.values(2)
        attrs = {"layout": "NHWC"}
        if block is not None and pairs is not None and len(pairs) == 2 * len(block):
            attrs.update(block=tuple(int(b) for b in block),
                         **{key: tuple((int(pairs[2 * k]), int(pairs[2 * k + 1])) for k in range(len(block)))})
        return Canon(t, attrs, inputs=node.inputs[:1])
    return convert


TFLITE = {"SPACE_TO_BATCH_ND": _tflite("SpaceToBatchND", "pads"),
          "BATCH_TO_SPACE_ND": _tflite("BatchToSpaceND", "crops")}
