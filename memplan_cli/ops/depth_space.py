"""DepthToSpace and SpaceToDepth (ONNX DepthToSpace DCR / CRD, SpaceToDepth; TFLite DEPTH_TO_SPACE,
SPACE_TO_DEPTH): blocks of channels become blocks of pixels and back. torch.onnx writes
`nn.PixelShuffle` as DepthToSpace in CRD mode.

Canonical ops `DepthToSpace` / `SpaceToDepth`, attributes `block`, `mode` ("DCR": the block offset is
the outer part of the channel index; "CRD": the inner part) and `layout` ("NCHW" for ONNX, "NHWC"
for TFLite, whose ops are DCR). Each is a reshape, a transpose and a reshape, i.e. a permutation of
the elements fixed by the shapes.

Training rule (PyTorch derivatives.yaml `pixel_shuffle`: self: pixel_unshuffle(grad, upscale_factor),
and the other way round): calcDerivative applies the inverse permutation to dY; reads dY only, keeps
nothing. Not a view (the kernels copy). FLOPs: none (data movement).
"""
from __future__ import annotations

import numpy as np

from memplan_cli.ops.base import Canon, OpDef
from memplan_cli.ops.kernel_util import dy_only_rule, target


def plan(op_type: str, attrs: dict, x_shape) -> tuple[tuple, tuple]:
    """(intermediate shape, permutation): Y = reshape(transpose(reshape(X, inter), perm), Y's shape)."""
    b = int(attrs["block"])
    nhwc = attrs.get("layout") == "NHWC"
    if nhwc:
        n, h, w, c = x_shape
        if op_type == "DepthToSpace":
            return (n, h, w, b, b, c // (b * b)), (0, 1, 3, 2, 4, 5)
        return (n, h // b, b, w // b, b, c), (0, 1, 3, 2, 4, 5)
    n, c, h, w = x_shape
    if op_type == "DepthToSpace":
        if attrs.get("mode", "DCR") == "CRD":
            return (n, c // (b * b), b, b, h, w), (0, 1, 4, 2, 5, 3)
        return (n, b, b, c // (b * b), h, w), (0, 3, 4, 1, 5, 2)
    return (n, c, h // b, b, w // b, b), (0, 3, 5, 1, 2, 4)


def out_shape(op_type: str, attrs: dict, x_shape) -> tuple:
    b = int(attrs["block"])
    if attrs.get("layout") == "NHWC":
        n, h, w, c = x_shape
        return (n, h * b, w * b, c // (b * b)) if op_type == "DepthToSpace" else (n, h // b, w // b, c * b * b)
    n, c, h, w = x_shape
    return (n, c // (b * b), h * b, w * b) if op_type == "DepthToSpace" else (n, c * b * b, h // b, w // b)


rule = dy_only_rule


def forward(ctx):
    x = np.asarray(ctx.x(0))
    y = ctx.y()
    inter, perm = plan(ctx.op.type, ctx.attrs, x.shape)
    y[...] = np.transpose(x.reshape(inter), perm).reshape(y.shape)


def calc_derivative(ctx):
    dx = target(ctx, 0)
    if dx is None:
        return
    inter, perm = plan(ctx.op.type, ctx.attrs, dx.shape)
    dy = np.asarray(ctx.dy())
    dx[...] = np.transpose(dy.reshape(tuple(inter[p] for p in perm)), np.argsort(perm)).reshape(dx.shape)


def check(op, operands):
    xs, ys = tuple(operands[op.inputs[0]].shape), tuple(operands[op.outputs[0]].shape)
    b = op.attrs.get("block")
    if not isinstance(b, int) or b < 1:
        return f"has block size {b!r}"
    if op.attrs.get("mode", "DCR") not in ("DCR", "CRD"):
        return f"has mode {op.attrs.get('mode')!r}: DCR or CRD"
    if len(xs) != 4:
        return f"has a rank-{len(xs)} input; memplan rearranges rank-4 images"
    nhwc = op.attrs.get("layout") == "NHWC"
    c, hw = (xs[3], xs[1:3]) if nhwc else (xs[1], xs[2:])
    if op.type == "DepthToSpace" and c % (b * b) or op.type == "SpaceToDepth" and any(d % b for d in hw):
        return f"cannot rearrange {xs} in blocks of {b}"
    if out_shape(op.type, op.attrs, xs) != ys:
        return f"has an output {ys}, not {out_shape(op.type, op.attrs, xs)}"
    return None


def _batch(op, graph, shapes, batched):
    x = op.inputs[0]
    return [out_shape(op.type, op.attrs, shapes[x]) if x in batched else None]


KERNELS = {"forward": forward, "calcDerivative": calc_derivative, "calcGradient": calc_derivative}


def _torch_refuse(op, operands) -> str | None:
    if op.type == "DepthToSpace" and op.attrs.get("mode") == "CRD" and op.attrs.get("layout") == "NCHW":
        return None
    return f"{op.type} in {op.attrs.get('mode')} mode over {op.attrs.get('layout')}: no eager op does it alone"


# `--profile torch`: pixel_shuffle (DepthToSpace CRD over NCHW, as torch.onnx exports it) allocates its
# output and saves nothing; its backward (pixel_unshuffle) allocates the input's gradient (measured,
# torch 2.14). Other forms are no single eager op.
TORCH = {"refuse": _torch_refuse}
OPS = [OpDef(t, rule=rule, kernels=KERNELS, flops=lambda op, operands: (0, 0), check=check, batch=_batch,
             profiles={"torch": TORCH})
       for t in ("DepthToSpace", "SpaceToDepth")]


def _onnx(t):
    def convert(node) -> Canon:
        mode = (node.attrs.get("mode", "DCR") or "DCR") if t == "DepthToSpace" else "DCR"
        return Canon(t, {"block": int(node.attrs.get("blocksize", 0)), "mode": mode, "layout": "NCHW"})
    return convert


def _tflite(t):
    def convert(node) -> Canon:
        return Canon(t, {"block": int(node.options.get("block_size", 0)), "mode": "DCR", "layout": "NHWC"})
    return convert


ONNX = {"DepthToSpace": _onnx("DepthToSpace"), "SpaceToDepth": _onnx("SpaceToDepth")}
TFLITE = {"DEPTH_TO_SPACE": _tflite("DepthToSpace"), "SPACE_TO_DEPTH": _tflite("SpaceToDepth")}
