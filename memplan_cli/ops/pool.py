"""Max and average pooling in 1-D, 2-D and 3-D (ONNX MaxPool, AveragePool, GlobalMaxPool; TFLite
MAX_POOL_2D, AVERAGE_POOL_2D).

Canonical types `MaxPool1D/2D/3D`, `AvgPool1D/2D/3D`; attributes as the conv family's (`layout`,
`kernel`, `stride`, `dilation`, `pads` (begin..., end...), `padding`, `activation`) plus
`ceil_mode` (output sizes rounded up: windows may run past the end padding, and see nothing there)
and `count_include_pad` (AvgPool: the explicit padding counts in the divisor, as torch's default;
the ceil_mode overhang never does). TFLite's SAME padding excludes the padding (count_include_pad 0).
Padded positions never win a max. GlobalMaxPool is a MaxPool whose window is the whole input.

Training rule (PyTorch derivatives.yaml `max_pool2d_with_indices`: self: grad scattered by the saved
indices; `avg_pool2d`: avg_pool2d_backward(grad, self, ...), which needs only the input's shape):
- AvgPool: dX spreads dY evenly over each window: reads dY only; keeps nothing.
- MaxPool: dX routes dY to each window's maximum. memplan (`policy.maxpool_recompute`): when the
  input X is kept anyway (its producer reads it in backward, e.g. a fused ReLU's output), backward
  recomputes the argmax from X at no memory cost; otherwise forward writes a 1-byte window index per
  output element (uint8, windows up to 256 elements), FORWARD_TO_BACKWARD. Off (onert): an int32
  argmax of |Y| from forward to backward.
- Nothing is kept or requested when X needs no back-prop (a pool before the first trained op).
- A fused activation's derivative comes from Y (see `rule.fused_activation`).
FLOPs: forward one compare or add per window element per output; backward the same.
Refused at load: spatial rank other than 1-3, an output size neither the floor nor (with
ceil_mode) the ceiling of the geometry, negative pads, MaxPool's Indices output, storage_order 1.
"""
from __future__ import annotations

import math

import numpy as np

from memplan_cli.ops._window import Window, _tuple, avg_pool, avg_pool_backward, channels_first, max_pool, \
    max_pool_backward, to_cf, to_cl
from memplan_cli.ops import _onert as onert
from memplan_cli.ops.base import Canon, OpDef, UnsupportedKernel
from memplan_cli.ops.conv import _tflite_act, _tflite_window, not_2d, nntrainer_spatial, onnx_window
from memplan_cli.ops.rule import FORWARD_TO_BACKWARD, ExtraRequest, OpRule, StepIO, bp_targets, forward_io, \
    fused_activation

MAX = ("MaxPool1D", "MaxPool2D", "MaxPool3D")
AVG = ("AvgPool1D", "AvgPool2D", "AvgPool3D")


def window_size(op) -> int:
    k = op.attrs.get("kernel") or op.attrs.get("filter") or ()
    return math.prod(int(d) for d in k) if k else 0


# ---- rules ------------------------------------------------------------------------------------
def max_pool_rule(op, ctx) -> OpRule:
    x, y = op.inputs[0], op.outputs[0]
    rule = OpRule(forward=forward_io(op))
    if not bp_targets(op, ctx, [x]):
        return rule
    rule.calc_derivative = StepIO([("bp", y)], [("bp", x)])
    if ctx.policy.maxpool_recompute and ctx.kept_by_producer(x):
        rule.calc_derivative.reads.append(("fwd", x))
        rule.note = "argmax recomputed from the kept input"
    else:
        small = ctx.policy.maxpool_recompute and 0 < window_size(op) <= 256
        dtype = "uint8" if small else "int32"
        rule.extras.append(ExtraRequest("window_index" if small else "arg_max", ctx.operand(y).shape,
                                        dtype, FORWARD_TO_BACKWARD))
        rule.forward.writes.append(("extra", 0))
        rule.calc_derivative.reads.append(("extra", 0))
    fused_activation(op, ctx, rule, y)
    return rule


def avg_pool_rule(op, ctx) -> OpRule:
    x, y = op.inputs[0], op.outputs[0]
    rule = OpRule(forward=forward_io(op))
    if bp_targets(op, ctx, [x]):
        rule.calc_derivative = StepIO([("bp", y)], [("bp", x)])
    fused_activation(op, ctx, rule, y)
    return rule


# ---- kernels ----------------------------------------------------------------------------------
def _cf(op, a):
    return a if channels_first(op) else to_cf(a)


def _back(op, a):
    return a if channels_first(op) else to_cl(a)


def _geometry(ctx, x_shape, y_shape) -> Window:
    return Window.of(ctx.op, None, x_shape=x_shape, y_shape=y_shape)


def _argmax_extra(ctx):
    return ctx.extra("arg_max") if ctx.extra_id("arg_max") is not None else ctx.extra("window_index")


def max_forward(ctx):
    from memplan_cli.kernels import activation

    op = ctx.op
    x, y = ctx.x(0), ctx.y()
    xc = _cf(op, x)
    g = _geometry(ctx, x.shape, y.shape)
    best, arg = max_pool(xc, g)
    y[...] = _back(op, best)
    a = _argmax_extra(ctx)
    if a is not None:
        if g.size > np.iinfo(a.dtype).max + 1:
            raise UnsupportedKernel(f"a {g.size}-element window indexed in {a.dtype}")
        a[...] = _back(op, arg).astype(a.dtype, copy=False)
    activation.apply(y, ctx.act(), y)


def max_derivative(ctx):
    dx = ctx.dx(0)
    if dx is None:
        return
    op = ctx.op
    arg, x = _argmax_extra(ctx), ctx.x(0, optional=True)
    dz = ctx.dz()
    dzc = _cf(op, dz)
    xshape = _cf(op, dx).shape
    g = _geometry(ctx, dx.shape, dz.shape)
    if arg is not None:
        argc = _cf(op, arg)
    elif x is not None:
        argc = max_pool(_cf(op, x), g)[1]
    else:
        from memplan_cli.ops.base import AccessError

        raise AccessError(f"{ctx.where()}: MaxPool backward reads neither its argmax nor its input")
    dx[...] = _back(op, max_pool_backward(dzc, argc, xshape, g))


def avg_forward(ctx):
    from memplan_cli.kernels import activation

    op = ctx.op
    x, y = ctx.x(0), ctx.y()
    xc = _cf(op, x)
    g = _geometry(ctx, x.shape, y.shape)
    y[...] = _back(op, avg_pool(xc, g, bool(op.attrs.get("count_include_pad"))))
    activation.apply(y, ctx.act(), y)


def avg_derivative(ctx):
    dx = ctx.dx(0)
    if dx is None:
        return
    op = ctx.op
    dz = ctx.dz()
    dzc = _cf(op, dz)
    xshape = _cf(op, dx).shape
    g = _geometry(ctx, dx.shape, dz.shape)
    dx[...] = _back(op, avg_pool_backward(dzc, xshape, g, bool(op.attrs.get("count_include_pad"))))


# ---- contract, FLOPs --------------------------------------------------------------------------
def check(op, operands):
    a = op.attrs
    if a.get("padding", "VALID") not in ("SAME", "VALID", "EXPLICIT"):
        return f"has an unknown padding {a.get('padding')!r}"
    xs, ys = tuple(operands[op.inputs[0]].shape), tuple(operands[op.outputs[0]].shape)
    nd = len(xs) - 2
    want = int(op.type[-2])
    if nd != want or len(ys) != len(xs):
        return f"has a rank-{len(xs)} input, not a {want}-D pool"
    k = a.get("kernel") or a.get("filter")
    if not k or len(_tuple(k, nd)) != nd or any(int(v) <= 0 for v in _tuple(k, nd)):
        return f"has no valid {nd}-D kernel ({k})"
    if any(s <= 0 for s in _tuple(a.get("stride"), nd)):
        return f"has a non-positive stride {tuple(a.get('stride'))}"
    if any(d <= 0 for d in _tuple(a.get("dilation"), nd)):
        return f"has a non-positive dilation {tuple(a.get('dilation'))}"
    if any(p < 0 for p in a.get("pads") or ()):
        return f"has negative pads {tuple(a['pads'])}"
    g = Window.of(op, operands)
    if g.outs != g.out_size(False) and not (a.get("ceil_mode") and g.outs == g.out_size(True)):
        return f"has an output {g.outs} its kernel, stride, dilation and pads do not give ({g.out_size()})"
    return None


def flops(op, operands):
    f = operands[op.outputs[0]].num_elements * window_size(op)
    return f, f


# `--profile torch`: max_pool2d_with_indices saves its input and the int64 argmax indices;
# avg_pool2d saves its input
TORCH_MAX = {"saves": (("in0", "any"),), "aux": (("indices", "out0", "int64"),)}
TORCH_AVG = {"saves": (("in0", "any"),)}
OPS = [OpDef(t, rule=max_pool_rule, kernels={"forward": max_forward, "calcDerivative": max_derivative},
             flops=flops, check=check, autocast="fp32" if t.endswith("3D") else "",  # max_pool3d: fp32 list
             profiles={**(not_2d(t, int(t[-2])) if t[-2] != "2" else {}), "torch": TORCH_MAX}) for t in MAX] + \
      [OpDef(t, rule=avg_pool_rule, kernels={"forward": avg_forward, "calcDerivative": avg_derivative},
             flops=flops, check=check, autocast="fp32" if t.endswith("3D") else "",  # avg_pool3d: fp32 list
             profiles={**(not_2d(t, int(t[-2])) if t[-2] != "2" else {}), "torch": TORCH_AVG}) for t in AVG]


# ---- converters -------------------------------------------------------------------------------
def _onnx_pool(kind):
    def conv(node) -> Canon | None:
        x = node.shape(0)
        k = node.attrs.get("kernel_shape")
        if x is None or not 3 <= len(x) <= 5 or not k or len(k) != len(x) - 2:
            return None
        if kind == "Max" and (len(node.outputs) > 1 or node.attrs.get("storage_order", 0)):
            return None  # the Indices output: MaxPool stays itself and is refused if training needs it
        attrs = onnx_window(node, k)
        if attrs is None:
            return None
        if node.attrs.get("ceil_mode"):
            attrs["ceil_mode"] = True
        if kind == "Avg":
            attrs["count_include_pad"] = bool(node.attrs.get("count_include_pad", 0))
        return Canon(f"{kind}Pool{len(x) - 2}D", attrs)
    return conv


def _onnx_global_max(node) -> Canon | None:
    x = node.shape(0)
    if x is None or not 3 <= len(x) <= 5:
        return None
    nd = len(x) - 2
    return Canon(f"MaxPool{nd}D", {"layout": "NCHW", "kernel": tuple(x[2:]), "stride": (1,) * nd,
                                   "dilation": (1,) * nd, "pads": (0,) * (2 * nd), "padding": "VALID",
                                   "activation": "NONE"})


def _tflite_pool(kind):
    def conv(node) -> Canon | None:
        if len(node.shape(0) or ()) != 4:
            return None
        o = node.options
        k = (int(o.get("filter_height", 1)), int(o.get("filter_width", 1)))
        attrs = _tflite_window(node, k)
        attrs["activation"] = _tflite_act(node)
        if kind == "Avg":
            attrs["count_include_pad"] = False
        return Canon(f"{kind}Pool2D", attrs)
    return conv


ONNX = {"MaxPool": _onnx_pool("Max"), "AveragePool": _onnx_pool("Avg"), "GlobalMaxPool": _onnx_global_max}
TFLITE = {"MAX_POOL_2D": _tflite_pool("Max"), "AVERAGE_POOL_2D": _tflite_pool("Avg")}


# ---- other runtimes' profiles (profiles/singa.py, onert/, nntrainer.py): what they know of these ops ----


def _singa_pool(op, ctx):
    """SINGA's max and average pooling keep X and Y (`self.cache = (x, y)`); no argmax buffer."""
    x, y = op.inputs[0], op.outputs[0]
    rule = OpRule(forward=forward_io(op))
    if bp_targets(op, ctx, [x]):
        rule.calc_derivative = StepIO([("bp", y), ("fwd", x), ("fwd", y)], [("bp", x)])
    fused_activation(op, ctx, rule, y)
    return rule


# singa: the SINGA autograd operator memplan models the op as, and SINGA's own rule
PROFILES = {"singa": {"MaxPool2D": {"operator": "MaxPool2d", "rule": _singa_pool},
                      "AvgPool2D": {"operator": "AvgPool2d", "rule": _singa_pool}}}


def _onert_pool_fwd(op, operands):
    if any(v != 1 for v in onert.dilation(op)):
        return f"dilated {op.type} (dilation {onert.dilation(op)}): circle's pooling has no dilation"
    if op.type == "AvgPool2D" and op.attrs.get("count_include_pad") and any(op.attrs.get("pads") or ()):
        return "AvgPool2D counting padding (count_include_pad): circle's average excludes it"
    return onert.window(op, operands)


def _onert_maxpool_buffers(op, ir, threads, simd_width):
    return [("argmax", ir.operands[op.outputs[0]].nbytes)] + onert.act_buffers(op, ir)


def _onert_pool_usedef(op, c):
    if op.act != "NONE":
        c.use(op.outputs[0])
    c.bp_def(op.inputs[0])


# onert (profiles/onert/): "forward" / "backward": fn(op, operands) -> why onert refuses at load or
# compile (backward: only when the op's backward runs), an `AfterCompile` reason when onert finds it
# only after it compiles; "kernel_buffers": fn(op, ir, threads, simd_width) -> [(name, bytes)] its
# train kernel allocates; "usedef": fn(op, chains), its backward's training use-defs;
# "weighted": the backward region is cut to ops reachable from these
PROFILES["onert"] = {
    "MaxPool2D": {"forward": _onert_pool_fwd, "kernel_buffers": _onert_maxpool_buffers, "usedef": _onert_pool_usedef},
    "AvgPool2D": {"forward": _onert_pool_fwd, "kernel_buffers": onert.act_only_buffers, "usedef": _onert_pool_usedef},
}


# nntrainer (profiles/nntrainer.py): "layer", the nntrainer 0.6.0 layer the profile models the op as;
# "kind", that layer's type; "check": fn(graph, op, batchnorm) -> why the layer cannot take this op
# GlobalMaxPool (an ONNX source type): nntrainer's global_max keeps input-sized indices
PROFILES["nntrainer"] = {
    "MaxPool2D": {"layer": "pooling2d (max)", "kind": "pooling2d", "check": nntrainer_spatial},
    "AvgPool2D": {"layer": "pooling2d (average)", "kind": "pooling2d", "check": nntrainer_spatial},
    "GlobalMaxPool": {"indices": "input"},
}
