"""Pad in constant, reflect and edge modes (ONNX Pad, opsets 1-21; TFLite PAD, PADV2, MIRROR_PAD).

TFLite PADV2 is PAD with its fill as a third input, a float scalar constant read at load: how
litert-torch and onnx2tf write a padded max-pool (the lowest float32 or -inf, then a VALID pool). onert
0.1.0 loads PADV2 as its Pad, whose train kernel takes the fill (backend/train/ops/PadLayer), and
trains it with the ALLOC lines of PAD (tests/onert/test_against_runtime.py, zoo `padded_max_pool`).

Canonical attributes: `mode` ("constant", "reflect": mirror without repeating the edge, ONNX's and
TFLite MIRROR_PAD REFLECT; "edge": repeat the border), `pads` (begin..., end... for every axis, as
ONNX writes them: TFLite's [[before, after], ...] and ONNX opset-18 `axes` are expanded at load),
`value` (the constant). A negative pad (constant mode) removes that many elements: a crop, as the
ONNX spec has it ("add or remove (if negative)"; HF RWKV's time shift). The operands stay as the file has them (onert keeps the paddings tensor).

Training rule (PyTorch derivatives.yaml `constant_pad_nd`: self: constant_pad_nd_backward(grad, pad);
`reflection_pad2d`/`replication_pad2d`: reflection_pad2d_backward(grad, self, padding), which reads
only self's shape): backward keeps no activation.
- calcDerivative: constant: dX is dY with the padding cut off (onert's Depad); reflect / edge: each
  element of dY is added to the input element it was copied from. Reads dY and the paddings constant
  (as onert's kernel does); dX is smaller than dY, so it gets its own buffer. Where a negative pad
  cropped the input, dX is 0 (the cropped elements never reached the output).
FLOPs: forward none (data movement); backward one add per padded element (reflect / edge).
Refused: negative pads in reflect / edge mode, ONNX "wrap" mode, TFLite MIRROR_PAD SYMMETRIC, pads that are not
constant.
"""
from __future__ import annotations

import numpy as np

from memplan_cli.ops import _onert as onert
from memplan_cli.ops._onert import VERSION
from memplan_cli.ops.base import Canon, OpDef
from memplan_cli.ops.rule import OpRule, StepIO, bp_targets, forward_io

MODES = ("constant", "reflect", "edge")


def widths(op, ndim: int) -> list:
    p = op.attrs["pads"]
    return [(int(p[k]), int(p[k + ndim])) for k in range(ndim)]


def _crop_then_pad(w, shape):
    """(slices of the input kept, non-negative pad widths) for widths that may be negative."""
    keep = tuple(slice(max(-b, 0), n - max(-e, 0)) for (b, e), n in zip(w, shape))
    return keep, [(max(b, 0), max(e, 0)) for b, e in w]


def rule(op, ctx) -> OpRule:
    x, y = op.inputs[0], op.outputs[0]
    r = OpRule(forward=forward_io(op))
    if bp_targets(op, ctx, [x]):
        consts = [("fwd", i) for i in op.inputs[1:] if i >= 0]
        r.calc_derivative = StepIO([("bp", y)] + consts, [("bp", x)])
    return r


def forward(ctx):
    x = ctx.x(0)
    mode = ctx.attrs.get("mode", "constant")
    w = widths(ctx.op, x.ndim)
    if mode == "constant":
        keep, w = _crop_then_pad(w, x.shape)
        ctx.y()[...] = np.pad(x[keep], w, constant_values=float(ctx.attrs.get("value", 0.0)))
    else:
        ctx.y()[...] = np.pad(x, w, mode=mode)


def calc_derivative(ctx):
    dx = ctx.dx(0)
    if dx is None:
        return
    dy = ctx.dy()
    mode = ctx.attrs.get("mode", "constant")
    w = widths(ctx.op, dx.ndim)
    if mode == "constant":
        keep, w = _crop_then_pad(w, dx.shape)
        if any(b < 0 or e < 0 for b, e in widths(ctx.op, dx.ndim)):
            dx[...] = 0
        kept = dx[keep]
        dx[keep] = dy[tuple(slice(b, b + n) for (b, _), n in zip(w, kept.shape))]
        return
    g = dy
    for ax, (b, e) in enumerate(w):  # the adjoint of np.pad, one axis at a time
        if not b and not e:
            continue
        src = np.pad(np.arange(dx.shape[ax]), (b, e), mode=mode)  # where each output element came from
        out = np.zeros(g.shape[:ax] + (dx.shape[ax],) + g.shape[ax + 1:], dtype=g.dtype)
        np.add.at(np.moveaxis(out, ax, 0), src, np.moveaxis(g, ax, 0))
        g = out
    dx[...] = g


def check(op, operands):
    rank = len(operands[op.inputs[0]].shape)
    mode = op.attrs.get("mode", "constant")
    if mode not in MODES:
        return f"has mode {mode!r} (memplan implements {', '.join(MODES)})"
    p = op.attrs.get("pads")
    if p is None:
        return "has paddings that are not a constant memplan can read"
    if op.attrs.get("value", 0.0) is None:
        return "has a pad value that is not a constant scalar memplan can read"
    if len(p) != 2 * rank:
        return f"has {len(p)} pads for a rank-{rank} input"
    if any(v < 0 for v in p) and mode != "constant":
        return f"has negative pads {tuple(p)} (a crop) in {mode} mode"
    shape = operands[op.inputs[0]].shape
    if any(max(-p[k], 0) + max(-p[k + rank], 0) > n for k, n in enumerate(shape)):
        return f"crops more than the input holds (pads {tuple(p)}, input {list(shape)})"
    if mode != "constant":
        for k, n in enumerate(operands[op.inputs[0]].shape):
            if mode == "reflect" and max(p[k], p[k + rank]) >= n:
                return f"reflects {max(p[k], p[k + rank])} elements of an axis of {n}"
    return None


def _flops(op, operands):
    if op.attrs.get("mode", "constant") == "constant":
        return 0, 0
    return 0, operands[op.outputs[0]].num_elements


def _batch(op, graph, shapes, batched):
    i = op.inputs[0]
    if i not in batched:
        return [None]
    p = op.attrs["pads"]
    n = len(shapes[i])
    return [tuple(shapes[i][k] + p[k] + p[k + n] for k in range(n))]


def _torch(op) -> dict:
    """`--profile torch` (derivatives.yaml): constant_pad_nd keeps nothing and its backward is a narrow
    view of the incoming gradient; reflection / replication pads keep their input."""
    if op.attrs.get("mode", "constant") == "constant":
        return {"grad": "view"}
    return {"saves": (("in0", "any"),)}


PAD_TYPE = "Pad"  # `--profile torch` puts back a zero pad the dynamo exporter folded (profiles/torch/export.py)
OPS = [OpDef(PAD_TYPE, rule=rule, kernels={"forward": forward, "calcDerivative": calc_derivative}, flops=_flops,
             check=check, nondiff_inputs=(1, 2, 3), batch=_batch, profiles={"torch": _torch},
             # reflection_pad*d, replication_pad*d: autocast's fp32 list; constant_pad_nd is on none
             autocast=lambda op: "" if op.attrs.get("mode", "constant") == "constant" else "fp32")]


def _onnx(node) -> Canon:
    a = node.attrs
    mode = a.get("mode", "constant") or "constant"
    attrs = {"mode": mode}
    rank = len(node.shape(0))
    if node.opset < 11 or "pads" in a:
        pads, value = a.get("pads"), a.get("value", 0.0)
    else:
        pads = node.values(1)
        v = node.values(2)
        value = v[0] if v else 0.0
        if node.input(2) is not None and v is None:
            pads = None  # a constant value memplan cannot read: refused by check
        axes = node.values(3)
        if node.input(3) is not None:
            if axes is None or pads is None:
                pads = None
            else:
                full = [0] * (2 * rank)
                for k, ax in enumerate(axes):
                    full[int(ax) % rank] = pads[k]
                    full[int(ax) % rank + rank] = pads[k + len(axes)]
                pads = full
    if pads is not None:
        attrs["pads"] = tuple(int(v) for v in pads)
    attrs["value"] = float(value)
    return Canon("Pad", attrs)


def _tflite(mode_of):
    def conv(node) -> Canon | None:
        v = node.values(1)
        if v is None:
            return None  # paddings computed at run time
        mode = mode_of(node)
        if mode is None:
            return None
        rank = len(v) // 2
        attrs = {"mode": mode, "value": 0.0,
                 "pads": tuple(int(v[2 * k]) for k in range(rank)) + tuple(int(v[2 * k + 1]) for k in range(rank))}
        if node.builtin == "PADV2":
            # input 2: the fill, a float32 scalar; litert-torch and onnx2tf write a padded max-pool as
            # PADV2 with the lowest float (or -inf) and a VALID pool
            c = node.values(2) if node.input(2) is not None and node.input(2).num_elements == 1 else None
            if c is None:
                attrs["value"] = None  # computed at run time (or not a scalar): refused by check
            else:
                attrs["value"] = float(c[0])
        return Canon("Pad", attrs)
    return conv


ONNX = {"Pad": _onnx}
# MIRROR_PAD mode 0 is REFLECT (no edge repeat); SYMMETRIC (1) repeats the edge: not implemented.
# PADV2 is PAD with its fill as input 2; its paddings and fill are read at load.
TFLITE_FACTS = {"PADV2": {"shape_const_input": 1}}
TFLITE = {"PAD": _tflite(lambda n: "constant"), "PADV2": _tflite(lambda n: "constant"),
          "MIRROR_PAD": _tflite(lambda n: "reflect" if int(n.options.get("mode", 0)) == 0 else None)}


# ---- other runtimes' profiles (profiles/singa.py, onert/, nntrainer.py): what they know of these ops ----
# singa: the SINGA autograd operator memplan models the op as
PROFILES = {"singa": {"Pad": {"operator": "Pad"}}}


def _onert_pad_fwd(op, operands):
    mode = str(op.attrs.get("mode", "constant")).lower()
    if mode != "constant":
        return f"Pad in {mode} mode: {VERSION} pads with a constant only (MIRROR_PAD is not loaded)"
    rank = len(onert.shape(operands, op.inputs[0]))
    if rank > 4:
        return f"Pad of a rank-{rank} tensor: \"Padding for rank > 4 NYI\""
    pads = op.attrs.get("pads")
    if pads is None and len(op.inputs) > 1 and op.inputs[1] >= 0:
        pads = getattr(operands[op.inputs[1]], "value", None)
    if pads is not None and any(p < 0 for p in pads):
        return "Pad with negative amounts (a crop): circle's PAD adds only"
    return None


def _onert_pad_usedef(op, c):
    c.use(op.inputs[1])
    c.bp_def(op.inputs[0])


# onert (profiles/onert/): "forward" / "backward": fn(op, operands) -> why onert refuses at load or
# compile (backward: only when the op's backward runs), an `AfterCompile` reason when onert finds it
# only after it compiles; "kernel_buffers": fn(op, ir, threads, simd_width) -> [(name, bytes)] its
# train kernel allocates; "usedef": fn(op, chains), its backward's training use-defs;
# "weighted": the backward region is cut to ops reachable from these
PROFILES["onert"] = {"Pad": {"forward": _onert_pad_fwd, "usedef": _onert_pad_usedef}}
