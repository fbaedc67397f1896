"""GridSample (ONNX GridSample; torch.nn.functional.grid_sample): Y[n, c, i, j] samples X[n, c] at
the point grid[n, i, j] = (x, y) in [-1, 1] (x across the width), bilinearly, zero outside X. RAFT's
correlation lookups and spatial transformers use it.

Canonical attrs: `mode` ("bilinear"; ONNX opset 20's "linear"), `padding_mode` ("zeros"),
`align_corners` (0 / 1: whether -1 and 1 are the corner pixels' centres or their outer edges). 4-D
inputs only; other modes and paddings are refused at load (no kernel here).
Training rule (PyTorch derivatives.yaml `grid_sampler_2d`: input, grid: grid_sampler_2d_backward(grad,
input, grid, ...)): calcDerivative reads dY, X and the grid and writes dX (dY scattered into the four
corners with the bilinear weights) and dgrid (dY times the sampled values' slope across x and y);
backward keeps X and the grid.
FLOPs per output element: forward 4 corners x 2 (weights and sum) + 10 for the coordinates; backward
twice that for dX and dgrid.
`--profile torch` (ATen GridSampler.cpp grid_sampler_2d_backward_cpu, torch 2.14 CPU): saves X and the
grid; backward allocates dX (zeros_like, when X needs a gradient) and a grid-sized gradient
(`empty_like(grid)`) whether the grid needs one or not: a temporary where it does not.
"""
from __future__ import annotations

import numpy as np

from memplan_cli.ops.base import Canon, OpDef
from memplan_cli.ops.kernel_util import param_gradient, target
from memplan_cli.ops.rule import OpRule, StepIO, bp_targets, forward_io


def rule(op, ctx) -> OpRule:
    x, grid, y = op.inputs[0], op.inputs[1], op.outputs[0]
    r = OpRule(forward=forward_io(op))
    reads = [("bp", y), ("fwd", x), ("fwd", grid)]
    targets = bp_targets(op, ctx, [x, grid])
    if targets:
        r.calc_derivative = StepIO(list(reads), [("bp", t) for t in targets])
    param_gradient(op, ctx, r, x, list(reads))
    return r


def _corners(x, grid, align: bool):
    """The four corners' (row, column) indices, bilinear weights and in-bounds masks of every sample,
    and d(pixel coordinate)/d(grid coordinate) for x and y."""
    h, w = x.shape[2], x.shape[3]
    gx, gy = grid[..., 0], grid[..., 1]
    if align:
        ix, iy, sx, sy = (gx + 1) / 2 * (w - 1), (gy + 1) / 2 * (h - 1), (w - 1) / 2, (h - 1) / 2
    else:
        ix, iy, sx, sy = ((gx + 1) * w - 1) / 2, ((gy + 1) * h - 1) / 2, w / 2, h / 2
    x0, y0 = np.floor(ix), np.floor(iy)
    fx, fy = ix - x0, iy - y0
    out = []
    for dy_, wy, dwy in ((0, 1 - fy, -1.0), (1, fy, 1.0)):
        for dx_, wx, dwx in ((0, 1 - fx, -1.0), (1, fx, 1.0)):
            r, c = (y0 + dy_).astype(np.int64), (x0 + dx_).astype(np.int64)
            inside = (r >= 0) & (r < h) & (c >= 0) & (c < w)
            # the weight and its slopes along x and y
            out.append((np.clip(r, 0, h - 1), np.clip(c, 0, w - 1), inside, wy * wx, wy * dwx, dwy * wx))
    return out, sx, sy


def _gathered(x, r, c, inside):
    n = np.arange(x.shape[0])[:, None, None]
    v = x[n, :, r, c]  # (N, Ho, Wo, C)
    return np.where(inside[..., None], v, 0.0)


def forward(ctx):
    x, grid = np.asarray(ctx.x(0)), np.asarray(ctx.x(1))
    corners, _, _ = _corners(x, grid, bool(ctx.attrs.get("align_corners")))
    y = sum(_gathered(x, r, c, m) * wgt[..., None] for r, c, m, wgt, _, _ in corners)
    ctx.y()[...] = np.moveaxis(y, -1, 1)


def calc_derivative(ctx):
    x, grid = np.asarray(ctx.x(0)), np.asarray(ctx.x(1))
    dy = np.moveaxis(np.asarray(ctx.dy()), 1, -1)  # (N, Ho, Wo, C)
    corners, sx, sy = _corners(x, grid, bool(ctx.attrs.get("align_corners")))
    dx = target(ctx, 0)
    if dx is not None:
        g = np.zeros(x.shape, dtype=dy.dtype)
        n = np.broadcast_to(np.arange(x.shape[0])[:, None, None], corners[0][0].shape)
        for r, c, m, wgt, _, _ in corners:
            contrib = dy * (wgt * m)[..., None]
            # g[n, :, r, c] += contrib over every sample (repeats accumulate)
            np.add.at(np.moveaxis(g, 1, -1), (n, r, c), contrib)
        dx[...] = g
    dgrid = target(ctx, 1)
    if dgrid is not None:
        gx = sum((_gathered(x, r, c, m) * dy).sum(-1) * ddx for r, c, m, _, ddx, _ in corners)
        gy = sum((_gathered(x, r, c, m) * dy).sum(-1) * ddy for r, c, m, _, _, ddy in corners)
        dgrid[...] = np.stack([gx * sx, gy * sy], -1)


def check(op, operands):
    a = op.attrs
    if len(operands[op.inputs[0]].shape) != 4:
        return "samples a rank-%d input: only 4-D (N, C, H, W) is supported" % len(operands[op.inputs[0]].shape)
    if a.get("mode") != "bilinear" or a.get("padding_mode") != "zeros":
        return f"has mode {a.get('mode')!r}, padding {a.get('padding_mode')!r}: only bilinear with zeros is supported"
    return None


def _flops(op, operands):
    n = operands[op.outputs[0]].num_elements
    return 18 * n, 36 * n


def _batch(op, graph, shapes, batched):
    x, grid = op.inputs[0], op.inputs[1]
    if x not in batched and grid not in batched:
        return [None]
    xs, gs = shapes[x], shapes[grid]
    return [(int(gs[0]), int(xs[1]), int(gs[1]), int(gs[2]))]


# derivatives.yaml grid_sampler_2d saves input and grid; grid_sampler_2d_backward_cpu allocates
# grad_input (zeros_like) only when the input needs it, grad_grid (empty_like) always: a temporary
# where the grid needs no gradient (RAFT detaches its coordinates)
TORCH = {"saves": (("in0", "any"), ("in1", "any")), "bwd_tmp": (("in1?n1",),)}
OPS = [OpDef("GridSample", rule=rule, kernels={"forward": forward, "calcDerivative": calc_derivative,
                                               "calcGradient": calc_derivative},
             required_inputs=2, flops=_flops, check=check, batch=_batch, profiles={"torch": TORCH})]

_MODES = {"linear": "bilinear", "bilinear": "bilinear", "nearest": "nearest", "cubic": "bicubic",
          "bicubic": "bicubic"}


def _onnx(node) -> Canon:
    mode = node.attrs.get("mode", "linear")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    pad = node.attrs.get("padding_mode", "zeros")
    pad = pad.decode() if isinstance(pad, bytes) else str(pad)
    return Canon("GridSample", {"mode": _MODES.get(mode, mode), "padding_mode": pad,
                                "align_corners": int(node.attrs.get("align_corners", 0))}, inputs=node.inputs[:2])


ONNX = {"GridSample": _onnx}
