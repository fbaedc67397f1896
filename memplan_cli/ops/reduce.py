"""Reductions over axes: Mean (ONNX ReduceMean, GlobalAveragePool; TFLite MEAN), ReduceSum (ONNX
ReduceSum; TFLite SUM), ReduceMax / ReduceMin (ONNX ReduceMax / ReduceMin; TFLite REDUCE_MAX /
REDUCE_MIN), ReduceProd (ONNX ReduceProd; TFLite REDUCE_PROD: the TF Lite converter computes Keras
Dense's row count on a sequence with it, on integers), ReduceL1 / ReduceL2 (ONNX; torch's
`linalg.vector_norm` of order 1 / 2: torch.norm, F.normalize, weight_norm's direction norm),
ReduceSumSquare, ReduceLogSum and ReduceLogSumExp (ONNX; torch.logsumexp: a z-loss, attention sinks).
ArgMax / ArgMin, whose results are indices, are in ops/discrete.py (no gradient).

Canonical form: `<type>(x[, axes])`, attrs `axes` (non-negative, sorted; absent: every axis),
`keep_dims`, `noop` (ONNX noop_with_empty_axes with no axes: nothing is reduced, and the op is its
elementwise steps alone: the identity for Mean, Sum, Max, Min, Prod and LogSumExp; |x| for L1 and L2,
x² for SumSquare, log x for LogSum, as the ONNX spec and its reference say). ONNX gives the axes as an
attribute before opset 13 (ReduceSum) / 18 (the others) and as an input after; TFLite as input 1, with
`keep_dims` in ReducerOptions. The axes are read at load; an axes input computed at run time is
refused (the output shape would not be known). The axes operand stays an input (int, no gradient), as
onert's Mean has it.

Training rules (PyTorch derivatives.yaml; dY is broadcast back over the reduced axes):
- `mean.dim`: self: mean_backward(grad, ...) = dY / N; `sum.dim_IntList`: self: grad.expand(...) = dY.
  Backward reads dY (and the axes constant) only: nothing is kept.
- `amax` / `amin`: self: scale_grad_by_count(restore_reduced_dims(grad), restore_reduced_dims(result)
  == self, dim): the gradient goes to the elements equal to the result, split evenly on ties; keeps
  X and Y.
- `prod.dim_int`: self: prod_backward(grad, self, result): dX = dY times the product of the other
  elements of X's group; computed from X alone (exclusive prefix and suffix products, right with
  zeros too), so only X is kept.
- `linalg_vector_norm`: self: linalg_vector_norm_backward(grad, self, ord, result, ...) (norm_backward):
  order 1: dX = dY·sign(X), keeps X; order 2: dX = dY·X / Y (0 where Y is 0), keeps X and Y.
- SumSquare (sum of X²): dX = 2·X·dY, keeps X. LogSum (log of the sum): dX = dY / sum = dY·exp(-Y),
  keeps Y.
- `logsumexp`: self: logsumexp_backward(grad, self, result, dim, keepdim) = dY·exp(X - Y), each
  element's softmax weight within its group; keeps X and Y.
- A float parameter reduced directly (kept unfolded because another op reads it too) trains through
  the op with the same backward (calcGradient).
FLOPs (`_FLOPS`): forward |X| (Mean also |Y| divisions; L1, L2 and SumSquare 2|X|, L2 and LogSum |Y|
more; LogSumExp 4|X| + 2|Y|: the max, the shift, exp, the sum, then log and the max added back);
backward Mean |X| (the division), Sum 0 (a broadcast copy), Max / Min 2|X| (the comparison and the
split), Prod 3|X| (two scans and the product), L1, L2 and SumSquare 2|X|, LogSum |X|, LogSumExp 3|X|
(the shift, exp, the product).
"""
from __future__ import annotations

import math

import numpy as np

from memplan_cli.ops import _onert as onert
from memplan_cli.ops._torch import VAR
from memplan_cli.ops.base import Canon, OpDef
from memplan_cli.ops.kernel_util import param_gradient, target
from memplan_cli.ops.rule import OpRule, StepIO, bp_targets, forward_io

TYPES = ("Mean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceSumSquare",
         "ReduceLogSum", "ReduceLogSumExp")
_EXTREME = ("ReduceMax", "ReduceMin")
# what each backward reads beside dY ("x": the input, "y": the output); Mean and Sum read nothing
_KEEPS = {"ReduceMax": "xy", "ReduceMin": "xy", "ReduceProd": "x", "ReduceL1": "x", "ReduceL2": "xy",
          "ReduceSumSquare": "x", "ReduceLogSum": "y", "ReduceLogSumExp": "xy"}
# over no axis (noop_with_empty_axes) an op is its elementwise steps alone: the identity for these, |x|,
# x², log x for L1 / L2, SumSquare, LogSum (ONNX's noop_with_empty_axes and its reference)
_IDENTITY_WHEN_NOOP = ("Mean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceLogSumExp")


def keeps(op) -> str:
    """What the op's backward reads of its forward: "x", "y", both, or nothing."""
    if op.attrs.get("noop") and op.type in _IDENTITY_WHEN_NOOP:
        return ""
    return _KEEPS.get(op.type, "")


# ---- rule ------------------------------------------------------------------------------------------
def rule(op, ctx) -> OpRule:
    x, y = op.inputs[0], op.outputs[0]
    r = OpRule(forward=forward_io(op))
    reads = [("bp", y)] + [("fwd", x if k == "x" else y) for k in keeps(op)]
    reads += [("fwd", i) for i in op.inputs[1:] if i >= 0]  # the axes constant
    if bp_targets(op, ctx, [x]):
        r.calc_derivative = StepIO(list(reads), [("bp", x)])
    param_gradient(op, ctx, r, x, list(reads))
    return r


# ---- kernels ---------------------------------------------------------------------------------------
def reduced_axes(attrs, rank: int) -> tuple[int, ...]:
    """The axes the op reduces over (none for a noop)."""
    if attrs.get("noop"):
        return ()
    ax = attrs.get("axes")
    if ax is None:
        return tuple(range(rank))
    return tuple(sorted({int(a) % max(rank, 1) for a in ax}))


def _kept_shape(shape, axes) -> tuple:
    return tuple(1 if k in axes else n for k, n in enumerate(shape))


def _l1(x, axis):
    return np.sum(np.abs(x), axis=axis, keepdims=True)


def _l2(x, axis):
    return np.sqrt(np.sum(x * x, axis=axis, keepdims=True))


def _sum_square(x, axis):
    return np.sum(x * x, axis=axis, keepdims=True)


def _log_sum(x, axis):
    return np.log(np.sum(x, axis=axis, keepdims=True))


def _log_sum_exp(x, axis):
    """log(sum(exp(x))) without overflow: the group's max taken out first; an infinite max is not
    subtracted (ATen's logsumexp does the same), so a +inf element gives +inf and an all -inf group
    -inf, not NaN."""
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isinf(m), 0.0, m)
    with np.errstate(divide="ignore"):
        return np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m


# NumPy names resolved on use: importing the registry does not load NumPy
_FWD = {"Mean": "mean", "ReduceSum": "sum", "ReduceMax": "max", "ReduceMin": "min", "ReduceProd": "prod",
        "ReduceL1": _l1, "ReduceL2": _l2, "ReduceSumSquare": _sum_square, "ReduceLogSum": _log_sum,
        "ReduceLogSumExp": _log_sum_exp}


def _product_of_others(x, ax):
    """For each element, the product of the other elements of its reduction group (zeros allowed)."""
    rest = [a for a in range(x.ndim) if a not in ax]
    xt = np.transpose(x, rest + list(ax))
    lead = xt.shape[:len(rest)]
    flat = xt.reshape(lead + (-1,))
    ones = np.ones(lead + (1,), x.dtype)
    before = np.cumprod(np.concatenate([ones, flat[..., :-1]], axis=-1), axis=-1)
    after = np.cumprod(np.concatenate([ones, flat[..., :0:-1]], axis=-1), axis=-1)[..., ::-1]
    return np.transpose((before * after).reshape(xt.shape), np.argsort(rest + list(ax)))


def forward(ctx):
    x = np.asarray(ctx.x(0))
    y = ctx.y()
    ax = reduced_axes(ctx.attrs, x.ndim)  # () reduces nothing: NumPy's reductions over no axis
    fn = _FWD[ctx.op.type]
    if isinstance(fn, str):
        y[...] = getattr(np, fn)(x, axis=ax, keepdims=True).reshape(y.shape)
    else:
        y[...] = fn(x, ax).reshape(y.shape)


def backward(ctx):
    out = target(ctx, 0)
    if out is None:
        return
    shape = tuple(ctx.tg.graph.operands[ctx.op.inputs[0]].shape)
    ax = reduced_axes(ctx.attrs, len(shape))
    dy = np.asarray(ctx.dy()).reshape(_kept_shape(shape, ax))
    t = ctx.op.type
    kept = keeps(ctx.op)
    x = np.asarray(ctx.x(0)) if "x" in kept else None
    yk = np.asarray(ctx.y()).reshape(_kept_shape(shape, ax)) if "y" in kept else None
    if t == "Mean":
        g = np.broadcast_to(dy / max(math.prod(shape[a] for a in ax), 1), shape)
    elif not kept:  # a sum, or an identity (a noop)
        g = np.broadcast_to(dy, shape)
    elif t == "ReduceProd":
        g = dy * _product_of_others(x, ax)
    elif t == "ReduceL1":
        g = dy * np.sign(x)
    elif t == "ReduceL2":
        g = dy * np.divide(x, yk, out=np.zeros(shape), where=yk != 0)
    elif t == "ReduceSumSquare":
        g = 2.0 * x * dy
    elif t == "ReduceLogSum":
        g = np.broadcast_to(dy * np.exp(-yk), shape)  # dY / sum(X)
    elif t == "ReduceLogSumExp":
        g = dy * np.exp(x - yk)  # each element's softmax weight within its group
    else:
        hit = x == yk
        g = dy * hit / hit.sum(axis=ax, keepdims=True)
    out[...] = g.reshape(out.shape)


KERNELS = {"forward": forward, "calcDerivative": backward, "calcGradient": backward}


# ---- contract, FLOPs, batch ------------------------------------------------------------------------
def check(op, operands):
    if op.attrs.get("axes_unknown"):
        return "has axes computed at run time (memplan needs them at load to size the output)"
    shape = tuple(operands[op.inputs[0]].shape)
    ax = op.attrs.get("axes")
    if ax is not None and any(not -max(len(shape), 1) <= int(a) < max(len(shape), 1) for a in ax):
        return f"reduces over axes {tuple(ax)} of a rank-{len(shape)} input"
    if ax is not None and len(set(int(a) % max(len(shape), 1) for a in ax)) != len(ax):
        return f"repeats an axis in {tuple(ax)}"
    axes = reduced_axes(op.attrs, len(shape))
    keep = bool(op.attrs.get("keep_dims", False)) or not axes
    want = _kept_shape(shape, axes) if keep else tuple(n for k, n in enumerate(shape) if k not in axes)
    y = tuple(operands[op.outputs[0]].shape)
    if math.prod(want) != math.prod(y):
        return f"reduces {shape} over axes {axes} to {want}, not to its output {y}"
    return None


# FLOPs per element: (forward per input element, forward per output element, backward per input element)
_FLOPS = {"Mean": (1, 1, 1), "ReduceSum": (1, 0, 0), "ReduceMax": (1, 0, 2), "ReduceMin": (1, 0, 2),
          "ReduceProd": (1, 0, 3), "ReduceL1": (2, 0, 2), "ReduceL2": (2, 1, 2), "ReduceSumSquare": (2, 0, 2),
          "ReduceLogSum": (1, 1, 1), "ReduceLogSumExp": (4, 2, 3)}


def flops(op, operands):
    n = operands[op.inputs[0]].num_elements
    m = operands[op.outputs[0]].num_elements
    if op.attrs.get("noop") and op.type in _IDENTITY_WHEN_NOOP:
        return 0, 0
    per_in, per_out, bwd = _FLOPS[op.type]
    return per_in * n + per_out * m, bwd * n


def _batch(op, graph, shapes, batched):
    """Reducing over the batch axis leaves the output as it is; otherwise dim 0 follows the input.
    A file of batch 1 that reduces dim 0 with other axes kept is refused: at batch 1 that is either a
    statistic over the batch or a squeeze a converter wrote (litert-torch's LayerNorm: MEAN over axes
    (0, 2) of [1, S, C]), and the file cannot tell which."""
    x = op.inputs[0]
    if x not in batched:
        return [None]
    rank = len(graph.operands[x].shape)
    axes = reduced_axes(op.attrs, rank)
    if 0 in axes:
        if graph.operands[x].shape[0] == 1 and shapes[x][0] != 1 and len(axes) < rank:
            from memplan_cli.ir.graph import GraphError

            raise GraphError(f"op {op.label} reduces over axes {axes} of an input whose dim 0 is 1: over the "
                             "batch, or a squeeze of it (how litert-torch writes a LayerNorm); the file cannot tell")
        return [None]
    s = graph.operands[op.outputs[0]].shape
    return [(shapes[x][0],) + tuple(s[1:]) if s else None]


def _prod_value(op, ins):
    ax = reduced_axes(op.attrs, ins[0].ndim)
    return np.prod(ins[0], axis=ax) if ax else ins[0]


# `--profile torch` (derivatives.yaml and FunctionsManual.cpp, each checked on networks built for it):
# - mean / sum save only sizes. mean_backward divides the expanded gradient (a new tensor); sum_backward
#   is `grad.expand(sizes)`, a stride-0 view of the incoming gradient: no bytes ("grad": "expand").
# - linalg_vector_norm (ReduceL2: F.normalize, torch.norm, ConvNeXt V2's global response norm; ReduceL1:
#   order 1) keeps its input and result (the formula names both); norm_backward makes, beside the
#   input's gradient, order 2: self / norm and a bool mask of norm == 0 (measured, torch 2.14); order
#   1: self.sgn().
# - logsumexp (ReduceOps.cpp logsumexp_out_impl): amax of the input kept (maxes, the output's size), its
#   infinite entries zeroed through abs() == inf (an output-sized float and bool, freed at once), then
#   sum_out(result, (self - maxes).exp_()) (one input-sized tensor alive while the result is made), log_
#   and add_ in place; backward logsumexp_backward `grad * (self - result).exp()`: the difference and
#   its exp, two input-sized temporaries beside the input's gradient.
# - amax / amin keep input and result; scale_grad_by_count `(grad / mask.sum(dim, true)) * mask` with
#   mask = (result == self): a bool mask of the input's size; its sum casts it to int64 first (8 bytes an
#   element, freed once the count is made), then the int64 count and the quotient (the output's size
#   each), and the mask cast to the gradient's dtype for the product. max.dim / min.dim (values and
#   indices) keep only the int64 indices, made in forward; value_selecting_reduction_backward scatters
#   into a zeroed gradient: no temporaries. max() / min() over everything keep input and result;
#   evenly_distribute_backward makes the zeroed gradient, then the mask and its int64 cast for the
#   count. The dynamo exporter records which ran; TorchScript writes max.dim whose indices are read as
#   a ReduceMax and an ArgMax of one input (profiles/torch/rewrites.py `max_with_indices`); any other
#   TorchScript ReduceMax over some axes is amax or `max(dim).values`, which the file does not tell:
#   counted as amax, and named as estimated.
# - prod.dim_int keeps input and result; prod_backward makes (input == 0) (bool, the input's size), its
#   int64 count per group (through an int64 cast of the mask), then `grad * (result / input)`: one
#   input-sized temporary beside the gradient. prod() over everything: the mask is freed before
#   `result / input` is made. No eager op takes a product over several but not all axes: refused.
# All measured on one reduction of a [4, 32, 128] float32 tensor over each axis (torch 2.14, the
# allocator's events): the temporaries above to the byte.


def _aten(op) -> str:
    """The aten overload the dynamo exporter recorded for the op ("aten.max.dim"); "" when none was
    (TorchScript)."""
    return getattr(op, "call", "").partition(" = ")[2].partition("(")[0]


def _whole(op, operands) -> bool:
    """Reduces every axis to a scalar (torch's max() / prod() with no dim)."""
    rank = len(operands[op.inputs[0]].shape)
    return not op.attrs.get("keep_dims") and len(reduced_axes(op.attrs, rank)) == rank


def _int64_out(op, operands) -> int:
    return 8 * math.prod(operands[op.outputs[0]].shape)


def _int64_in(op, operands) -> int:
    """The bool mask of the input's size cast to int64 for its sum."""
    return 8 * math.prod(operands[op.inputs[0]].shape)


def _int64_mask_cast(op, operands) -> int:
    """That cast where it is made before the input's gradient: the replay counts the gradient beside
    every temporary of the step, so its bytes are taken off here."""
    return max(_int64_in(op, operands) - operands[op.inputs[0]].nbytes, 0)


def _count_tmp(op, operands) -> tuple:
    """scale_grad_by_count's (amax / amin) or prod_backward's temporaries beside the input's gradient:
    while the mask's count is summed, or while the gradient is made from the count (amax: the
    quotient and the mask in the gradient's dtype; prod: result / input)."""
    last = ("out0", "in0") if op.type in _EXTREME else ("in0",)
    return (("mask:in0", _int64_mask_cast(op, operands), _int64_out(op, operands)),
            ("mask:in0", _int64_out(op, operands)) + last)


def _torch_extreme(op) -> dict:
    """amax / amin, max.dim / min.dim or max() / min(): by the recorded call, else by the axes."""
    call = _aten(op)
    if call.endswith((".dim", ".dim_max", ".dim_min")) or op.attrs.get("with_indices"):
        return {"aux": (("indices", "out0", "int64"),)}
    saves = (("in0", "any"), ("out0", "any"))
    full = lambda o, opd: (("mask:in0", _int64_in(o, opd)),)  # noqa: E731 (after the zeroed gradient)
    if call.endswith(".default") and not call.startswith(("aten.amax", "aten.amin")):
        return {"saves": saves, "bwd_tmp": full}
    if call:
        return {"saves": saves, "bwd_tmp": _count_tmp}
    return {"saves": saves, "bwd_tmp": lambda o, opd: full(o, opd) if _whole(o, opd) else _count_tmp(o, opd),
            "estimated": lambda o, opd: not _whole(o, opd)}


def _torch_prod_refuse(op, operands):
    x = operands[op.inputs[0]]
    axes = reduced_axes(op.attrs, len(x.shape))
    if len(axes) > 1 and not _whole(op, operands) and str(x.dtype).startswith(("float", "bfloat")):
        return f"takes a product over axes {axes}: no eager op does (prod takes one dim, or every one)"
    return None


TORCH = {"Mean": {}, "ReduceSum": {"grad": "expand"},
         "ReduceL1": {"saves": (("in0", "any"), ("out0", "any")), "bwd_tmp": (("in0",),)},
         "ReduceL2": {"saves": (("in0", "any"), ("out0", "any")), "bwd_tmp": (("in0", "mask:out0"),)},
         "ReduceLogSumExp": {"saves": (("in0", "any"), ("out0", "any")), "fwd_tmp": ("in0", "out0"),
                             "bwd_tmp": (("in0", "in0"),)},
         "ReduceMax": _torch_extreme, "ReduceMin": _torch_extreme,
         "ReduceProd": {"saves": (("in0", "any"), ("out0", "any")), "refuse": _torch_prod_refuse,
                        "bwd_tmp": lambda o, opd: (("in0",),) if _whole(o, opd) else _count_tmp(o, opd),
                        # under autocast (prod is on its fp32 list) eager computes on a float32 copy of a
                        # lower-precision input, saved, with float32 temporaries: not modelled, named
                        "estimated": lambda o, opd: opd[o.inputs[0]].dtype != opd[o.outputs[0]].dtype}}
OPS = [OpDef(t, rule=rule, kernels=KERNELS, flops=flops, check=check, nondiff_inputs=(1,), batch=_batch,
             shape_value=_prod_value if t == "ReduceProd" else None, shape_const_input=1 if t == "Mean" else None,
             profiles={"torch": TORCH[t]} if t in TORCH else {},
             autocast="fp32" if t == "ReduceProd" else "")  # prod: autocast's fp32 list
       for t in TYPES]


# ---- converters ------------------------------------------------------------------------------------
def _axes_attrs(values, rank: int, noop: bool) -> dict:
    """Canonical attrs for axes `values` (None: none given; "unknown": computed at run time)."""
    if values == "unknown":
        return {"axes_unknown": True}
    if values is None or len(values) == 0:
        return {"noop": True} if noop else {}
    return {"axes": tuple(sorted(int(a) % max(rank, 1) for a in values))}


def _onnx_reduce(t):
    def conv(node) -> Canon:
        rank = len(node.shape(0) or ())
        a = node.attrs
        if "axes" in a:
            values = tuple(a["axes"])
        elif node.input(1) is not None:
            v = node.values(1)
            values = "unknown" if v is None else v
        else:
            values = None
        attrs = {"keep_dims": bool(a.get("keepdims", 1)), "layout": "NCHW"}
        attrs.update(_axes_attrs(values, rank, bool(a.get("noop_with_empty_axes", 0))))
        return Canon(t, attrs)
    return conv


def _onnx_global_average(node) -> Canon:
    rank = len(node.shape(0) or ())
    return Canon("Mean", {"axes": tuple(range(2, rank)), "keep_dims": True, "layout": "NCHW"})


def _tflite_reduce(t):
    def conv(node) -> Canon:
        rank = len(node.shape(0) or ())
        v = node.values(1) if node.input(1) is not None else None
        attrs = {"keep_dims": bool(node.options.get("keep_dims", False))}
        # TFLite reduces over no axis when given none: the output is the input
        attrs.update(_axes_attrs("unknown" if v is None else v, rank, True))
        return Canon(t, attrs)
    return conv


ONNX = {"ReduceMean": _onnx_reduce("Mean"), "ReduceSum": _onnx_reduce("ReduceSum"),
        "ReduceMax": _onnx_reduce("ReduceMax"), "ReduceMin": _onnx_reduce("ReduceMin"),
        "ReduceProd": _onnx_reduce("ReduceProd"), "ReduceL1": _onnx_reduce("ReduceL1"),
        "ReduceL2": _onnx_reduce("ReduceL2"), "ReduceSumSquare": _onnx_reduce("ReduceSumSquare"),
        "ReduceLogSum": _onnx_reduce("ReduceLogSum"), "ReduceLogSumExp": _onnx_reduce("ReduceLogSumExp"),
        "GlobalAveragePool": _onnx_global_average}
# its converter declines (an option it does not read): the builtin kept, its shape-deciding constant
# input still read at load (loaders/flatbuffer_loader.py)
TFLITE_FACTS = {"SUM": {"shape_const_input": 1}, "REDUCE_MAX": {"shape_const_input": 1}}
TFLITE = {"MEAN": _tflite_reduce("Mean"), "SUM": _tflite_reduce("ReduceSum"),
          "REDUCE_MAX": _tflite_reduce("ReduceMax"), "REDUCE_MIN": _tflite_reduce("ReduceMin"),
          "REDUCE_PROD": _tflite_reduce("ReduceProd")}


# ---- other runtimes' profiles (profiles/singa.py, onert/, nntrainer.py): what they know of these ops ----
# singa: the SINGA autograd operator memplan models the op as (ONNX GlobalAveragePool: when its
# converter declines)
PROFILES = {"singa": {"Mean": {"operator": "GlobalAveragePool / ReduceMean"},
                      "GlobalAveragePool": {"operator": "GlobalAveragePool"}}}

# onert (profiles/onert/): "forward" / "backward": fn(op, operands) -> why onert refuses at load or
# compile (backward: only when the op's backward runs), an `AfterCompile` reason when onert finds it
# only after it compiles; "kernel_buffers": fn(op, ir, threads, simd_width) -> [(name, bytes)] its
# train kernel allocates; "usedef": fn(op, chains), its backward's training use-defs;
# "weighted": the backward region is cut to ops reachable from these
PROFILES["onert"] = {"Mean": {"usedef": onert.first_input_usedef}}


def _nntrainer_global_average(graph, op, batchnorm):
    """nntrainer's pooling2d global_average averages over the two spatial axes only."""
    x = graph.operands[op.inputs[0]].shape
    spatial = (1, 2) if op.attrs.get("layout") == "NHWC" else (2, 3)
    if len(x) == 4 and tuple(sorted(a % 4 for a in (op.attrs.get("axes") or ()))) == spatial:
        return None
    return (f"nntrainer profile: op {op.label} (Mean) does not average over the two spatial axes: "
            f"nntrainer's pooling2d global_average does only that")


# nntrainer (profiles/nntrainer.py): "layer", the nntrainer 0.6.0 layer the profile models the op as;
# "kind", that layer's type; "check": fn(graph, op, batchnorm) -> why the layer cannot take this op
PROFILES["nntrainer"] = {"Mean": {"layer": "pooling2d (global_average)", "kind": "pooling2d",
                                  "check": _nntrainer_global_average}}

# torch (profiles/torch/): eager's one `aten::var.correction` where an exporter wrote `x.var(dims)` as
# Mean, Sub, Mul, Mean (read back by profiles/torch/rewrites.py `variances`). derivatives.yaml:
# `self: var_backward(grad, self, dim, correction, keepdim)`, saving only self; FunctionsManual.cpp's
# var_backward returns `(2.0 / (n - correction)) * grad * (self - self.mean(dim, true))`: the scaled
# gradient and the mean (the output's size) and `self - mean` (the input's) are temporaries of that
# one expression, alive until the input's gradient is made. The forward (std_var_kernel, a Welford
# reduction) makes nothing beside its output.
PROFILES["torch"] = {VAR["eager"]: {"saves": (("in0", "any"),), "bwd_tmp": (("in0", "out0", "out0"),)}}

# torch's weight norm (torch.nn.utils.parametrizations.weight_norm, nn.utils.weight_norm): both
# exporters write `torch._weight_norm(v, g, dim)` as ReduceL2 of v over every axis but `dim` (kept),
# a Div and a Mul (TorchScript: (v / ||v||) * g; dynamo: v * (g / ||v||)). Eager (WeightNorm.cpp
# `_weight_norm`) runs one fused `_weight_norm_interface(v, g, dim)` when `dim` is the first or the
# last axis (else it computes `v * (g / norm_except_dim(v, 2, dim))` op by op, which is left to the
# ops as written); profiles/torch/weightnorm.py reads the pattern back as that one op. derivatives.yaml:
# `_weight_norm_interface` saves v, g and its second result, the norms (g's size, float); its backward,
# `_weight_norm_interface_backward`, makes v's and g's gradients. Measured (torch 2.14, one thread, the
# allocator's events; v of (192, 12, 128), (64, 32, 5) along the last axis, (64, 32, 3, 3) along the
# first): forward the weight and the norms, and along the last axis one more g-sized buffer freed in
# the op (the kernel's per-column sums); backward the two gradients and, along the last axis, a
# buffer of 3 x g's bytes freed in the op; nothing else.
REDUCE_L2_TYPE = "ReduceL2"
WEIGHT_NORM_EAGER = "WeightNorm"  # the fused eager op: inputs (v, g), attrs["dim"]


def _weight_norm_last(op, operands) -> bool:
    return int(op.attrs["dim"]) == len(operands[op.inputs[0]].shape) - 1 and int(op.attrs["dim"]) > 0


PROFILES["torch"][WEIGHT_NORM_EAGER] = {
    "saves": (("in0", "any"), ("in1", "any")),
    "aux": (("norms", "in1", "float32"),),
    "fwd_tmp": lambda op, opd: ("in1",) if _weight_norm_last(op, opd) else (),
    "bwd_tmp": lambda op, opd: ((3 * opd[op.inputs[1]].nbytes,),) if _weight_norm_last(op, opd) else ()}
