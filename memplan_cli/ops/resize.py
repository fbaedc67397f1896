"""Resize (ONNX Resize opset 10+, Upsample opset 7-9; TFLite RESIZE_NEAREST_NEIGHBOR, RESIZE_BILINEAR):
Y samples X on a scaled grid, by nearest neighbour, (multi)linear or cubic interpolation, on any axes.

Canonical op `Resize`, attributes:
- `mode`: "nearest", "linear" (bilinear / trilinear: linear on each resized axis) or "cubic" (Keys'
  kernel with coefficient `cubic_a`: -0.75 as ONNX and PyTorch default, -0.5 as TF; with
  `exclude_outside`, taps outside the input get no weight and the rest are renormalised);
- `coord`: how an output index x maps to the input coordinate, ONNX's coordinate_transformation_mode
  ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
  "tf_half_pixel_for_nn");
- `nearest_mode`: "round_prefer_floor", "round_prefer_ceil", "floor", "ceil";
- `scales`: one per axis (the given scales, else output / input), which the coordinate maps use.
The output shape comes from shape inference (ONNX) or the output tensor (TFLite), so the scales,
sizes and roi operands are dropped. TFLite maps: align_corners -> "align_corners" (nearest rounds
half up, as TF's round does), half_pixel_centers -> "half_pixel" (bilinear) / "tf_half_pixel_for_nn"
with floor (nearest), neither -> "asymmetric" (nearest floors).

Every tap index is clamped to [0, n - 1] (ONNX pads with the edge value; TF and PyTorch clamp: the
same samples); linear also clamps the coordinate, cubic does not (as PyTorch and ONNX). The op is
separable: each resized axis is a 1-D resampling with one tap (nearest), two (linear) or four
(cubic), index and weight computed from sizes and attributes only. With `antialias` (Resize-18; torch.onnx
writes it for `F.interpolate(..., antialias=True)`) linear and cubic widen their filter to 1 / scale and
2 / scale input pixels when downsampling, weights normalised (onnx.reference's op_resize).

Training rule (PyTorch derivatives.yaml `upsample_nearest2d` / `upsample_bilinear2d`: self:
upsample_*_backward(grad, output_size, input_size, ...): nothing is saved but sizes):
- calcDerivative: dX = the transpose of the resampling applied to dY (each tap scatter-adds its
  weight times dY at its index); reads dY only, keeps nothing.
FLOPs: per resized axis, over the elements that axis's pass writes, with T taps: 2T - 1 forward
(T products, T - 1 sums), 2T backward (products and accumulations); nearest 0 forward (a copy), 1
backward.
Refused at load: nearest with antialias, tf_crop_and_resize, keep_aspect_ratio_policy other than stretch, scales
computed at run time (the coordinate map needs their values).
"""
from __future__ import annotations

import math

import numpy as np

from memplan_cli.ops.base import Canon, OpDef
from memplan_cli.ops.kernel_util import dy_only_rule, target

MODES = ("nearest", "linear", "cubic")
COORDS = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
          "tf_half_pixel_for_nn")
NEAREST = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


# ---- the 1-D resampling of one axis -------------------------------------------------------------
def source_coords(n_in: int, n_out: int, scale: float, coord: str) -> np.ndarray:
    """The input coordinate of each output index (ONNX's coordinate_transformation_mode)."""
    x = np.arange(n_out, dtype=np.float64)
    if coord == "align_corners":
        return x * ((n_in - 1) / (n_out - 1)) if n_out > 1 else np.zeros(n_out)
    if coord == "asymmetric":
        return x / scale
    if coord == "tf_half_pixel_for_nn":
        return (x + 0.5) / scale
    if coord == "pytorch_half_pixel":
        return (x + 0.5) / scale - 0.5 if n_out > 1 else np.full(n_out, -0.5)
    if coord == "half_pixel_symmetric":
        adj = n_out / (scale * n_in)
        return n_in / 2 * (1 - adj) + (x + 0.5) / scale - 0.5
    return (x + 0.5) / scale - 0.5  # half_pixel


def _antialias_taps(n_in: int, c: np.ndarray, scale: float, a: dict) -> tuple[np.ndarray, np.ndarray]:
    """ONNX's antialiased linear / cubic (Resize-18 `antialias`, as PyTorch's `antialias=True`): when
    downsampling the filter's support grows to 1 / scale (linear) or 2 / scale (cubic) input pixels, its
    taps at scale x distance, the weights normalised to sum 1; the taps sit at the input pixels nearest
    the source coordinate (the left one on a tie: ratio in (0, 1]), edge pixels repeated outside."""
    sc = min(scale, 1.0)
    fl = np.floor(c)
    ratio = np.where(c == fl, 1.0, c - fl)
    base = c - ratio
    if a.get("mode") == "cubic":
        A = float(a.get("cubic_a", -0.75))
        start = int(np.floor(-2 / sc) + 1)
        offs = np.arange(start, 2 - start)
        x = np.abs(sc * (offs[None, :] - ratio[:, None]))
        w = np.where(x <= 1, (A + 2) * x ** 3 - (A + 3) * x ** 2 + 1,
                     np.where(x < 2, A * x ** 3 - 5 * A * x ** 2 + 8 * A * x - 4 * A, 0.0))
    else:
        start = int(np.floor(-1 / sc) + 1)
        offs = np.arange(start, start + 2 - 2 * start)
        w = np.clip(1 - np.abs((offs[None, :] - ratio[:, None]) * sc), 0, 1)
    w = w / w.sum(axis=1, keepdims=True)
    idx = base[:, None] + offs[None, :]
    if a.get("exclude_outside"):
        w = np.where((idx < 0) | (idx > n_in - 1), 0.0, w)
        w = w / w.sum(axis=1, keepdims=True)
    return np.clip(idx, 0, n_in - 1).astype(np.int64), w


def taps(n_in: int, n_out: int, scale: float, a: dict) -> tuple[np.ndarray, np.ndarray]:
    """(index, weight) arrays of shape [n_out, T]: output i = sum over t of weight[i, t] x input[index[i, t]]."""
    c = source_coords(n_in, n_out, scale, a.get("coord", "half_pixel"))
    if a.get("antialias") and a.get("mode") in ("linear", "cubic"):
        return _antialias_taps(n_in, c, scale, a)
    if a.get("mode", "nearest") == "nearest":
        nm = a.get("nearest_mode", "round_prefer_floor")
        fl = np.floor(c)
        if nm == "floor":
            i = fl
        elif nm == "ceil":
            i = np.ceil(c)
        elif nm == "round_prefer_ceil":
            i = np.floor(c + 0.5)
        else:  # round_prefer_floor: a tie goes down
            i = np.where(c - fl == 0.5, fl, np.floor(c + 0.5))
        idx = np.clip(i, 0, n_in - 1).astype(np.int64)[:, None]
        return idx, np.ones((n_out, 1))
    if a.get("mode") == "cubic":
        A = float(a.get("cubic_a", -0.75))
        fl = np.floor(c)
        r = c - fl
        idx = np.stack([fl - 1, fl, fl + 1, fl + 2], axis=1)
        w = np.stack([((A * (r + 1) - 5 * A) * (r + 1) + 8 * A) * (r + 1) - 4 * A,
                      ((A + 2) * r - (A + 3)) * r * r + 1,
                      ((A + 2) * (1 - r) - (A + 3)) * (1 - r) * (1 - r) + 1,
                      ((A * (2 - r) - 5 * A) * (2 - r) + 8 * A) * (2 - r) - 4 * A], axis=1)
        if a.get("exclude_outside"):
            w = np.where((idx < 0) | (idx > n_in - 1), 0.0, w)
            w = w / w.sum(axis=1, keepdims=True)
        return np.clip(idx, 0, n_in - 1).astype(np.int64), w
    c = np.clip(c, 0, n_in - 1)
    lo = np.floor(c)
    w1 = c - lo
    idx = np.stack([lo, np.minimum(lo + 1, n_in - 1)], axis=1).astype(np.int64)
    return idx, np.stack([1 - w1, w1], axis=1)


def resized_axes(attrs: dict, in_shape, out_shape) -> list[int]:
    """Axes that change (an axis of scale 1 and equal size maps every index to itself in every mode)."""
    sc = attrs.get("scales") or (1.0,) * len(in_shape)
    return [k for k, (a, b, s) in enumerate(zip(in_shape, out_shape, sc)) if a != b or s != 1.0]


def _scale(attrs: dict, k: int, n_in: int, n_out: int) -> float:
    sc = attrs.get("scales")
    return float(sc[k]) if sc else n_out / n_in


# ---- kernels ------------------------------------------------------------------------------------
def forward(ctx):
    a = ctx.attrs
    y = ctx.y()
    v = np.asarray(ctx.x(0))
    for k in resized_axes(a, v.shape, y.shape):
        idx, w = taps(v.shape[k], y.shape[k], _scale(a, k, v.shape[k], y.shape[k]), a)
        bshape = [1] * v.ndim
        bshape[k] = -1
        acc = None
        for t in range(idx.shape[1]):
            part = np.take(v, idx[:, t], axis=k)
            if a.get("mode") != "nearest":
                part = part * w[:, t].astype(v.dtype).reshape(bshape)
            acc = part if acc is None else acc + part
        v = acc
    y[...] = v


def calc_derivative(ctx):
    dx = target(ctx, 0)
    if dx is None:
        return
    a = ctx.attrs
    g = np.asarray(ctx.dy())
    axes = resized_axes(a, dx.shape, g.shape)
    for k in reversed(axes):  # the transpose of the forward passes, last first
        n_in = dx.shape[k]
        idx, w = taps(n_in, g.shape[k], _scale(a, k, n_in, g.shape[k]), a)
        gm = np.moveaxis(g, k, 0)
        out = np.zeros((n_in,) + gm.shape[1:], dtype=g.dtype)
        for t in range(idx.shape[1]):
            part = gm if a.get("mode") == "nearest" else gm * w[:, t].astype(g.dtype).reshape((-1,) + (1,) * (gm.ndim - 1))
            np.add.at(out, idx[:, t], part)
        g = np.moveaxis(out, 0, k)
    dx[...] = g


rule = dy_only_rule


def check(op, operands):
    a = op.attrs
    if a.get("unsupported"):
        return (f"resizes by {a['unsupported']}: memplan implements nearest, linear and cubic (antialiased "
                f"linear and cubic too) "
                f"with ONNX's coordinate modes other than tf_crop_and_resize")
    for key, allowed in (("mode", MODES), ("coord", COORDS), ("nearest_mode", NEAREST)):
        if a.get(key) not in allowed:
            return f"has {key} {a.get(key)!r}: memplan resizes with {', '.join(allowed)}"
    xs, ys = tuple(operands[op.inputs[0]].shape), tuple(operands[op.outputs[0]].shape)
    sc = a.get("scales")
    if len(xs) != len(ys) or (sc is not None and len(sc) != len(xs)):
        return f"maps a rank-{len(xs)} input to a rank-{len(ys)} output"
    if sc is not None and any(not s > 0 for s in sc):
        return f"has a non-positive scale in {tuple(sc)}"
    return None


def flops(op, operands):
    xs, ys = operands[op.inputs[0]].shape, operands[op.outputs[0]].shape
    cur = list(xs)
    fwd = bwd = 0
    taps_n = {"linear": 2, "cubic": 4}.get(op.attrs.get("mode"), 1)
    for k in resized_axes(op.attrs, xs, ys):
        cur[k] = ys[k]
        n = math.prod(cur)
        fwd += (2 * taps_n - 1) * n if taps_n > 1 else 0
        bwd += 2 * taps_n * n if taps_n > 1 else n
    return fwd, bwd


def _torch_refuse(op, operands) -> str | None:
    rank = len(operands[op.inputs[0]].shape)
    if rank != 4 and not (rank in (3, 5) and op.attrs.get("mode") in ("nearest", "linear")
                          and not op.attrs.get("antialias")):
        return (f"{op.attrs.get('mode')} resizing of a rank-{rank} tensor: eager's kernel for it was not "
                f"measured (nearest, bilinear and bicubic over 2-D images, nearest and linear over 1-D and 3-D "
                f"ones were)")
    return None


def _torch_fwd(op, operands) -> tuple:
    """2-D: the input copied and a second output-sized buffer (below). 1-D and 3-D (upsample_nearest1d /
    3d, upsample_linear1d, upsample_trilinear3d; ATen's UpSampleKernel.cpp `compute_indices_weights_*`):
    the output and, per spatial axis and per tap (1 nearest, 2 linear), an int64 index and a float weight
    for every output position along that axis, made beside the output and freed in the forward (measured,
    torch 2.14.1: 12 B x taps x the output's spatial sizes summed, 1-D and 3-D, up and down, either
    align_corners); backward the input's gradient only."""
    if len(operands[op.inputs[0]].shape) == 4:
        return (("in0", "out0"),)
    taps = 2 if op.attrs.get("mode") == "linear" else 1
    return ((12 * taps * sum(int(d) for d in operands[op.outputs[0]].shape[2:]),),)


# `--profile torch`: upsample_nearest2d / upsample_bilinear2d keep only sizes; on CPU the forward
# copies its input and computes into a second output-sized buffer beside the output (measured, torch
# 2.14: +Y, +X, +Y, -Y, -X for 7 shapes); backward allocates the input's gradient only
def _torch_contiguous_grad(op, operands) -> bool:
    """Every one of them copies an incoming gradient of other strides contiguous before its backward
    (`grad_output.contiguous()`: a transposed gradient, e.g. of tokens resized along the sequence between
    two transposes; measured, torch 2.14.1: +Y in backward for nearest and linear 1-D, nearest, bilinear
    and bicubic 2-D, nearest and trilinear 3-D). Over images and volumes a channels-last gradient is taken
    as it is (measured for nearest and bilinear 2-D), and the profile does not tell a resize's memory
    format, so the copy is counted over sequences only (rank 3: no channels-last format there)."""
    return len(operands[op.inputs[0]].shape) == 3


TORCH = {"fwd_scratch": _torch_fwd, "refuse": _torch_refuse, "contiguous_grad": _torch_contiguous_grad}
# upsample_bicubic2d (derivatives.yaml: keeps only sizes, as the two above) computes straight into its
# output: its CPU forward allocates only the output and, per axis, four taps' int64 indices and float
# weights per output row or column (48 B each, freed inside the forward: not counted); backward the
# input's gradient only (measured, torch 2.14.1: +Y, tables, -tables; backward +X; 4 shapes, either
# align_corners)
TORCH_CUBIC = {"refuse": _torch_refuse, "contiguous_grad": _torch_contiguous_grad}


def _aa_pass(op, operands) -> tuple:
    """_upsample_bicubic2d_aa / _upsample_bilinear2d_aa (antialias=True): the width pass first, into an
    N x C x IH x OW buffer beside the output, freed in the op (the taps' index and weight tables beside it,
    a few hundred bytes, not counted); backward the input's gradient only (measured, torch 2.14.1: 4
    bicubic and 1 bilinear shapes, down and up)."""
    x, y = operands[op.inputs[0]], operands[op.outputs[0]]
    n, c, ih = (int(d) for d in x.shape[:3])
    return ((n * c * ih * int(y.shape[3]) * (x.nbytes // max(x.num_elements, 1)),),)


TORCH_AA = {"fwd_scratch": _aa_pass, "refuse": _torch_refuse}


def _torch(op):
    if op.attrs.get("antialias"):
        return TORCH_AA
    return TORCH_CUBIC if op.attrs.get("mode") == "cubic" else TORCH


OPS = [OpDef("Resize", rule=rule, kernels={"forward": forward, "calcDerivative": calc_derivative,
                                           "calcGradient": calc_derivative},
             flops=flops, check=check, batch="keep", profiles={"torch": _torch})]


# ---- converters ---------------------------------------------------------------------------------
def _given(node, k) -> bool:
    s = node.shape(k)
    return s is not None and math.prod(s) > 0


def _refuse(why: str) -> Canon:
    """A Resize memplan cannot run: the contract check names the reason at load (never a guess)."""
    return Canon("Resize", {"unsupported": why})


def _onnx(node) -> Canon:
    a = node.attrs
    xs, ys = node.shape(0), node.out_shape()
    mode = a.get("mode", "nearest")
    if mode not in MODES:
        return _refuse(mode)
    if int(a.get("antialias", 0) or 0) and mode == "nearest":
        return _refuse(f"{mode} with antialias")
    coord = a.get("coordinate_transformation_mode", "half_pixel" if node.op_type == "Resize" else "asymmetric")
    if node.op_type == "Resize" and node.opset < 11:
        coord = "asymmetric"  # opset 10 has no such attribute and samples asymmetrically
    if coord not in COORDS:
        return _refuse(f"{mode} with coordinate_transformation_mode {coord}")
    if (a.get("keep_aspect_ratio_policy", "stretch") or "stretch") != "stretch":
        return _refuse(f"{mode} with keep_aspect_ratio_policy {a['keep_aspect_ratio_policy']}")
    if node.op_type == "Upsample":
        scales = a.get("scales") or node.values(1)
        given = scales is not None or _given(node, 1)
    else:
        k = 1 if node.opset < 11 else 2
        given = _given(node, k)
        scales = node.values(k) if given else None
    if given and scales is None:
        return _refuse(f"{mode} with scales computed at run time")
    if scales is not None and a.get("axes") is not None:  # opset 18: scales for the listed axes only
        full = [1.0] * len(xs)
        for ax, s in zip(a["axes"], scales):
            full[int(ax) % len(xs)] = s
        scales = full
    attrs = {"layout": "NCHW", "mode": mode, "coord": coord, "nearest_mode": a.get("nearest_mode", "round_prefer_floor")
             if node.op_type == "Resize" else "floor"}
    if mode == "cubic":
        attrs["cubic_a"] = float(a.get("cubic_coeff_a", -0.75))
        attrs["exclude_outside"] = int(a.get("exclude_outside", 0) or 0)
    if int(a.get("antialias", 0) or 0):
        attrs["antialias"] = 1
        attrs["exclude_outside"] = int(a.get("exclude_outside", 0) or 0)
    attrs["scales"] = tuple(float(s) for s in scales) if scales is not None else tuple(
        o / i for i, o in zip(xs, ys))
    return Canon("Resize", attrs, inputs=node.inputs[:1])


def _tflite(mode):
    def convert(node) -> Canon:
        o = node.options
        xs, ys = node.shape(0), node.out_shape()
        if o.get("align_corners"):
            coord, nm = "align_corners", "round_prefer_ceil"
        elif o.get("half_pixel_centers"):
            coord, nm = ("tf_half_pixel_for_nn", "floor") if mode == "nearest" else ("half_pixel", "floor")
        else:
            coord, nm = "asymmetric", "floor"
        return Canon("Resize", {"mode": mode, "coord": coord, "nearest_mode": nm,
                                "scales": tuple(b / a for a, b in zip(xs, ys)), "layout": "NHWC"},
                     inputs=node.inputs[:1])
    return convert


ONNX = {"Resize": _onnx, "Upsample": _onnx}
# input positions whose small float values decide the output's shape: the ONNX loader keeps those
# few bytes of a stripped model for shape inference
# scales_input: the input that holds the scales, folded at load when Constants build it
ONNX_FACTS = {"Resize": {"shape_float_inputs": (1, 2), "scales_input": 2},
              "Upsample": {"shape_float_inputs": (1,), "scales_input": 1}}
TFLITE = {"RESIZE_NEAREST_NEIGHBOR": _tflite("nearest"), "RESIZE_BILINEAR": _tflite("linear")}


# ---- the dynamo exporter's decomposition of upsample_linear1d ----------------------------------
# torch.export decomposes `upsample_linear1d` (nn.Upsample(mode="linear"), F.interpolate of a 3-D
# input; torch/_decomp/decompositions.py `_upsample_linear`) before torch.onnx translates it: two
# `aten._unsafe_index` reads of the input at the lower and upper taps (written as Transpose(2, 0, 1),
# one for both taps or, with the exporter's optimizer off, one each; GatherND of a constant (L_out, 1)
# index, computed in the file and folded at load without the optimizer; Transpose(1, 2, 0)), then `lo + (hi - lo) * w` with a constant
# (L_out,) weight (Sub, Mul, Add). Eager ran the one kernel (see `_torch_fwd`), which the torch profile
# replays instead of the seven ops. Only the ops the exporter recorded as `_unsafe_index` calls (the
# decompositions' own gather, never a user's indexing) are read back this way.
UNSAFE_INDEX = "aten._unsafe_index"
LINEAR_1D_EAGER = ("Resize", {"mode": "linear", "layout": "NCHW"})  # the op the torch profile replays for it


def linear_1d_decompositions(g, uses: dict, defs: dict) -> dict:
    """{index of the final Add: (members, x, y)} for each dynamo decomposition of upsample_linear1d (above)."""
    ops = g.operations

    def only(v, n=1):
        return v >= 0 and len(uses.get(v, ())) == n and v not in g.outputs

    def made_by(v, kind):
        p = defs.get(v)
        return ops[p] if p is not None and ops[p].type == kind else None

    def tap(v):
        """(transpose in, gather, transpose out) behind one `_unsafe_index` read of x along its last axis."""
        t_out = made_by(v, "Transpose")
        if t_out is None or tuple(t_out.attrs.get("perm", ())) != (1, 2, 0) or not only(t_out.inputs[0]):
            return None
        gat = made_by(t_out.inputs[0], "GatherND")
        if gat is None or int(gat.attrs.get("batch_dims", 0)) or UNSAFE_INDEX not in (gat.call or ""):
            return None
        idx = g.operands[gat.inputs[1]]
        if not idx.is_const or len(idx.shape) != 2 or int(idx.shape[1]) != 1:
            return None
        t_in = made_by(gat.inputs[0], "Transpose")
        if t_in is None or tuple(t_in.attrs.get("perm", ())) != (2, 0, 1):
            return None
        return t_in, gat, t_out

    found = {}
    for add in ops:
        if add.type != "Add" or len(add.inputs) != 2:
            continue
        for a, m in (add.inputs, add.inputs[::-1]):
            mul = made_by(m, "Mul")
            if mul is None or not only(m) or len(mul.inputs) != 2:
                continue
            s, w = mul.inputs if g.operands[mul.inputs[1]].is_const else mul.inputs[::-1]
            sub = made_by(s, "Sub")
            lo, hi = tap(a), None
            if sub is not None and only(s) and list(sub.inputs[1:]) == [a] and only(a, 2):
                hi = tap(sub.inputs[0]) if only(sub.inputs[0]) else None
            if lo is None or hi is None or lo[0].inputs[0] != hi[0].inputs[0] or lo[1] is hi[1]:
                continue
            x, y = lo[0].inputs[0], add.outputs[0]
            xs, ys = tuple(g.operands[x].shape), tuple(g.operands[y].shape)
            n_out = int(ys[-1]) if len(ys) == 3 else -1
            wo = g.operands[w]
            if (len(xs) != 3 or xs[:2] != ys[:2] or not wo.is_const or tuple(int(d) for d in wo.shape) != (n_out,)
                    or any(int(g.operands[t[1].inputs[1]].shape[0]) != n_out for t in (lo, hi))
                    or any(set(uses.get(t[0].outputs[0], ())) - {lo[1].index, hi[1].index} for t in (lo, hi))):
                continue
            members = tuple(sorted({lo[0].index, hi[0].index, lo[1].index, lo[2].index, hi[1].index, hi[2].index,
                                    sub.index, mul.index, add.index}))
            found[add.index] = (members, x, y)
            break
    return found


# `_upsample_nearest_exact1d` / `2d` / `3d` (F.interpolate(mode="nearest-exact")) are decomposed the same
# way: one `aten._unsafe_index` read of the input at an index grid (Transpose bringing the k spatial axes
# first, GatherND of a constant (out spatial..., k) index, Transpose back). TorchScript cannot export them.
# Eager's kernels allocate as upsample_nearest's do (measured, torch 2.14.1: 1-D, 2-D and 3-D, up and down,
# the same events), so the torch profile replays one nearest Resize. Read after the linear ones: a lone
# read that no Sub / Add shares.
NEAREST_EAGER = ("Resize", {"mode": "nearest", "layout": "NCHW"})


def nearest_decompositions(g, uses: dict, defs: dict, taken=frozenset()) -> dict:
    """{index of the last Transpose: (members, x, y)} for each dynamo decomposition of an upsample_nearest_exact
    (above); ops in `taken` (read back already) are skipped."""
    ops = g.operations
    found = {}
    for gat in ops:
        if gat.type != "GatherND" or gat.index in taken or int(gat.attrs.get("batch_dims", 0)) \
                or UNSAFE_INDEX not in (gat.call or ""):
            continue
        p = defs.get(gat.inputs[0])
        t_in = ops[p] if p is not None and ops[p].type == "Transpose" else None
        us = uses.get(gat.outputs[0], ())
        if t_in is None or t_in.index in taken or len(us) != 1 or gat.outputs[0] in g.outputs:
            continue
        t_out = ops[us[0]]
        x, y, idx = t_in.inputs[0], t_out.outputs[0], g.operands[gat.inputs[1]]
        r = len(g.operands[x].shape)
        k = r - 2
        perm = tuple(range(2, r)) + (0, 1)
        back = tuple(range(k, r)) + tuple(range(k))
        xs, ys = tuple(g.operands[x].shape), tuple(g.operands[y].shape)
        if (t_out.type != "Transpose" or r not in (3, 4, 5) or tuple(t_in.attrs.get("perm", ())) != perm
                or tuple(t_out.attrs.get("perm", ())) != back or not idx.is_const
                or tuple(int(d) for d in idx.shape) != tuple(int(d) for d in ys[2:]) + (k,)
                or len(ys) != r or xs[:2] != ys[:2]
                or set(uses.get(t_in.outputs[0], ())) != {gat.index} or t_in.outputs[0] in g.outputs):
            continue
        found[t_out.index] = ((t_in.index, gat.index, t_out.index), x, y)
    return found
