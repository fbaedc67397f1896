"""Ops whose results are indices or piecewise constant: ArgMax, ArgMin, Floor, Ceil, Round, Sign, Mod
(on integers), OneHot (ONNX; TFLite ARG_MAX, ARG_MIN, FLOOR, CEIL, ROUND, SIGN, FLOOR_MOD, ONE_HOT).

Exports compute pooling positions (CLIP and GPT-2 classification heads take `input_ids.argmax(-1)`),
position buckets (T5: Log, Floor, Min on relative positions) and one-hot labels with them.

Rules:
- No gradient flows through them (`no_grad`): an index carries none, and PyTorch's derivatives.yaml
  gives floor, ceil, round and sign a zero gradient (`self: zeros_like(grad)`), which adds nothing to
  any parameter's gradient. They run forward only and keep nothing for backward.
- Mod on floats has a gradient (fmod: dA = dY); memplan refuses it rather than cut the gradient.
- Round: half to even (ONNX, TFLite and NumPy agree). Mod: `fmod = 1` truncates (C), `fmod = 0`
  floors (Python; TFLite FLOOR_MOD).
- ArgMax / ArgMin: `select_last_index` picks the last of equal values; ties otherwise go to the first.
FLOPs: one per input element (a comparison or rounding); OneHot none.
"""
from __future__ import annotations

import numpy as np

from memplan_cli.ops.base import Canon, OpDef
from memplan_cli.ops.kernel_util import broadcast_batch
from memplan_cli.ops.rule import OpRule, forward_io


def plain(op, ctx) -> OpRule:
    return OpRule(forward=forward_io(op))


def _arg(name):
    def fwd(ctx):
        fn = getattr(np, name)  # resolved on use: the registry loads without NumPy
        x = np.asarray(ctx.x(0))
        a = ctx.attrs
        axis = int(a.get("axis", 0)) % x.ndim
        if a.get("select_last_index"):
            r = x.shape[axis] - 1 - fn(np.flip(x, axis=axis), axis=axis)
        else:
            r = fn(x, axis=axis)
        y = ctx.y()
        y[...] = r.reshape(y.shape)
    return fwd


UNARY = {"Floor": "floor", "Ceil": "ceil", "Round": "rint", "Sign": "sign"}  # NumPy names, resolved on use


def _unary(name):
    def fwd(ctx):
        ctx.y()[...] = getattr(np, name)(ctx.x(0))
    return fwd


def mod_fwd(ctx):
    a, b = np.asarray(ctx.x(0)), np.asarray(ctx.x(1))
    ctx.y()[...] = np.fmod(a, b) if ctx.attrs.get("fmod") else np.mod(a, b)


def one_hot_fwd(ctx):
    idx = np.asarray(ctx.x(0)).astype(np.int64)
    vals = np.asarray(ctx.x(2)).reshape(-1) if ctx.attrs.get("values_input") else None
    off, on = (vals[0], vals[1]) if vals is not None else (ctx.attrs.get("off", 0), ctx.attrs.get("on", 1))
    y = ctx.y()
    axis = int(ctx.attrs.get("axis", -1)) % y.ndim
    depth = y.shape[axis]
    idx = np.where(idx < 0, idx + depth, idx)
    hot = np.expand_dims(idx, axis) == np.arange(depth).reshape([-1 if k == axis else 1 for k in range(y.ndim)])
    y[...] = np.where(hot, on, off)


def _per_input(op, operands):
    return operands[op.inputs[0]].num_elements, 0


def _zero(op, operands):
    return 0, 0


def _check_mod(op, operands):
    if operands[op.outputs[0]].dtype.startswith(("float", "bfloat")):
        return ("is a Mod of floats, whose gradient (dA = dY) memplan does not implement; only integer "
                "Mod runs")
    return None


def _check_arg(op, operands):
    if op.attrs.get("axis") is None:
        return "has no axis"
    return None


def _arg_batch(op, graph, shapes, batched):
    x = op.inputs[0]
    if x not in batched:
        return [None]
    s = list(shapes[x])
    axis = int(op.attrs["axis"]) % len(s)
    if op.attrs.get("keepdims", 1):
        s[axis] = 1
    else:
        del s[axis]
    return [tuple(s)]


def _one_hot_batch(op, graph, shapes, batched):
    s = list(shapes[op.inputs[0]])
    depth = graph.operands[op.outputs[0]].shape[int(op.attrs.get("axis", -1)) % (len(s) + 1)]
    axis = int(op.attrs.get("axis", -1)) % (len(s) + 1)
    return [tuple(s[:axis] + [depth] + s[axis:])]


OPS = ([OpDef(t, rule=plain, kernels={"forward": _arg(fn)}, flops=_per_input, no_grad=True, check=_check_arg,
              batch=_arg_batch) for t, fn in (("ArgMax", "argmax"), ("ArgMin", "argmin"))]
       + [OpDef(t, rule=plain, kernels={"forward": _unary(fn)}, flops=_per_input, no_grad=True, batch="keep")
          for t, fn in UNARY.items()]
       + [OpDef("Mod", rule=plain, kernels={"forward": mod_fwd}, flops=_per_input, required_inputs=2, no_grad=True,
                check=_check_mod, batch=broadcast_batch),
          OpDef("OneHot", rule=plain, kernels={"forward": one_hot_fwd}, flops=_zero, no_grad=True,
                nondiff_inputs=(0, 1, 2), batch=_one_hot_batch)])


# ---- converters ---------------------------------------------------------------------------------
def _onnx_arg(t):
    def convert(node) -> Canon:
        a = node.attrs
        return Canon(t, {"axis": int(a.get("axis", 0)), "keepdims": int(a.get("keepdims", 1)),
                         "select_last_index": int(a.get("select_last_index", 0))})
    return convert


def _tflite_arg(t):
    def convert(node) -> Canon | None:
        axis = node.values(1)
        if axis is None or len(axis) != 1:
            return None  # an axis computed at run time
        return Canon(t, {"axis": int(axis[0]), "keepdims": 0, "select_last_index": 0}, inputs=node.inputs[:1])
    return convert


def _same(t):
    def convert(node) -> Canon:
        return Canon(t, {})
    return convert


def _onnx_mod(node) -> Canon:
    return Canon("Mod", {"fmod": int(node.attrs.get("fmod", 0))})


def _onnx_one_hot(node) -> Canon:
    return Canon("OneHot", {"axis": int(node.attrs.get("axis", -1)), "values_input": 1})


def _tflite_one_hot(node) -> Canon:
    # TFLite ONE_HOT: indices, depth, on_value, off_value
    on, off = node.values(2), node.values(3)
    attrs = {"axis": int(node.options.get("axis", -1))}
    if on is not None and off is not None:
        attrs.update(on=on[0], off=off[0])
        return Canon("OneHot", attrs, inputs=node.inputs[:1])
    return None


ONNX = {"ArgMax": _onnx_arg("ArgMax"), "ArgMin": _onnx_arg("ArgMin"), "Mod": _onnx_mod, "OneHot": _onnx_one_hot,
        **{t: _same(t) for t in UNARY}}
TFLITE = {"ARG_MAX": _tflite_arg("ArgMax"), "ARG_MIN": _tflite_arg("ArgMin"), "FLOOR": _same("Floor"),
          "CEIL": _same("Ceil"), "ROUND": _same("Round"), "SIGN": _same("Sign"),
          "FLOOR_MOD": lambda node: Canon("Mod", {"fmod": 0}), "ONE_HOT": _tflite_one_hot}
