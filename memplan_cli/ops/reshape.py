"""Reshape / Flatten (ONNX Reshape, Flatten; TFLite RESHAPE).

Rules:
- The data is unchanged, so memplan (`policy.alias_reshape`) makes the output a view of the input
  (one buffer) and the input's back-prop contribution a view of the output's back-prop (taken over
  in place when dY is dead after the step). Nothing is kept for backward.
- Off (onert): forward and backward are copies, so both sides get their own buffers.
- The shape operand, if any, is a constant read by forward only.
- A parameter kept unfolded as the input (a shared weight) trains through it.
- ONNX Flatten is a Reshape with `flatten_axis`; ONNX Reshape's 0 copies the input's dim unless
  `allowzero` (attribute `zero_copies_input`).
- Contract: the output holds as many elements as the input.
FLOPs: 0 (bytes move or are viewed).
"""
from __future__ import annotations

import math

from memplan_cli.kernels import shape
from memplan_cli.ops import _onert as onert
from memplan_cli.ops.base import Canon, OpDef
from memplan_cli.ops.kernel_util import first_input_value, target, view_rule




def _check(op, operands) -> str | None:
    x, y = operands[op.inputs[0]], operands[op.outputs[0]]
    if x.num_elements != y.num_elements:
        return f"reshapes {tuple(x.shape)} ({x.num_elements} elements) to {tuple(y.shape)} ({y.num_elements})"
    return None


def _forward(ctx):
    shape.reshape_forward(ctx.x(0), ctx.y())


def _backward(ctx):
    dx = target(ctx, 0)
    if dx is not None:
        shape.reshape_calc_derivative(ctx.dy(), dx)


def _flops(op, operands):
    return 0, 0


_KERNELS = {"forward": _forward, "calcDerivative": _backward, "calcGradient": _backward}


def _batch(op, graph, shapes, batched):
    """Re-batching: with a known shape constant (or TFLite's `new_shape`), a leading entry that is a
    multiple of the old batch (the batch itself, or the batch times windows / patches, as MobileViT
    and Swin fold them) scales with it, then -1 (and ONNX's 0, "copy this dim") are resolved against
    the new element count; ONNX Flatten splits at its axis; otherwise dim 0 scales with the input.
    (A shape computed in the graph is followed as a value by `opgraph/rebatch.py` before this runs.)"""
    from memplan_cli.ir.batch import numel, scale_rows
    from memplan_cli.ir.graph import GraphError

    i = op.inputs[0]
    if i not in batched:
        return [None]
    target = None
    if len(op.inputs) > 1 and op.inputs[1] >= 0:
        target = graph.operands[op.inputs[1]].value
    if target is None:
        target = op.attrs.get("new_shape")
    if "flatten_axis" in op.attrs:  # ONNX Flatten
        ax = op.attrs["flatten_axis"]
        s = shapes[i]
        return [(numel(s[:ax]), numel(s[ax:]))]
    if target is None:
        return scale_rows(op, graph, shapes, batched)
    old_in = graph.operands[i].shape
    new_in = shapes[i]
    t = list(target)
    if t and old_in and old_in[0] != new_in[0] and t[0] > 0 and t[0] % old_in[0] == 0:
        # row-major: the input's outermost dim (the batch) is an outermost factor of the target's
        # first dim (the batch itself, or the batch times windows / heads / patches)
        t[0] = t[0] // old_in[0] * new_in[0]
    if op.attrs.get("zero_copies_input"):
        t = [new_in[k] if d == 0 and k < len(new_in) else d for k, d in enumerate(t)]
    total = numel(new_in)
    if t.count(-1) == 1:
        known = numel([d for d in t if d != -1])
        if known <= 0 or total % known:
            raise GraphError(f"cannot re-batch op {op.label}: shape {list(target)} does not fit {list(new_in)}")
        t[t.index(-1)] = total // known
    if numel(t) != total:
        # the target names the old batch in another place: fall back to scaling dim 0
        return scale_rows(op, graph, shapes, batched)
    return [tuple(t)]


# `--profile torch`: a view of a contiguous input (a non-contiguous one is copied, profiles/torch/strides.py)
TORCH = {"view": True, "grad": "view", "view_needs_contiguous": True}
RESHAPE_TYPE = "Reshape"  # `--profile torch` reads the exporters' GroupNorm pattern (profiles/torch/groupnorm.py)
OPS = [OpDef("Reshape", rule=view_rule, kernels=_KERNELS, flops=_flops, check=_check, moves_data=True,
             shape_value=first_input_value, batch=_batch, shape_const_input=1, role="reshape",
             profiles={"torch": TORCH}),
       OpDef("Flatten", rule=view_rule, kernels=_KERNELS, flops=_flops, check=_check, moves_data=True,
             profiles={"torch": TORCH})]


def _onnx_reshape(node) -> Canon:
    return Canon("Reshape", {} if node.attrs.get("allowzero", 0) else {"zero_copies_input": True})


def _onnx_flatten(node) -> Canon:
    return Canon("Reshape", {"flatten_axis": node.attrs.get("axis", 1)})


def _tflite_reshape(node) -> Canon:
    ns = node.options.get("new_shape")
    return Canon("Reshape", {"new_shape": tuple(ns)} if ns else {})


ONNX = {"Reshape": _onnx_reshape, "Flatten": _onnx_flatten}
TFLITE = {"RESHAPE": _tflite_reshape}


# ---- other runtimes' profiles (profiles/singa.py, onert/, nntrainer.py): what they know of these ops ----
# singa: the SINGA autograd operator memplan models the op as
PROFILES = {"singa": {"Reshape": {"operator": "Reshape"}, "Flatten": {"operator": "Flatten"}}}


def _onert_reshape_fwd(op, operands):
    """onert's shape inference for a Reshape with a constant shape (`util/ShapeInference.cc`
    inferReshapeShape): one -1 takes the rest; when the element counts still differ, a leading 1
    becomes the input's dim 0 if that makes them equal, else "Reshape: 2nd param is not compatible
    with the shape of input" (measured: [4, 8] after a [1, 4, 8] input, at batch 2)."""
    if len(op.inputs) < 2 or op.inputs[1] < 0:
        return None
    v = getattr(operands[op.inputs[1]], "value", None)
    if not v:
        return None
    x = onert.shape(operands, op.inputs[0])
    n = math.prod(x)
    zero_copies = op.attrs.get("zero_copies_input")  # ONNX: a 0 copies the input's dim
    ret = [x[k] if d == 0 and zero_copies and k < len(x) else d for k, d in enumerate(v)]
    if sum(d < 0 for d in ret) > 1:
        return f"Reshape to {tuple(v)}: more than one -1"
    if any(d < 0 for d in ret):
        rest = math.prod(d for d in ret if d >= 0)
        ret = [n // rest if d < 0 and rest else d for d in ret]
    total = math.prod(ret)
    if total == n or (ret and ret[0] == 1 and x and total * x[0] == n):
        return None
    return (f"Reshape to the constant shape {tuple(v)}, which does not hold its input {x}: onert re-batches "
            f"only a leading 1 (\"Reshape: 2nd param is not compatible with the shape of input\")")


# onert (profiles/onert/): "forward" / "backward": fn(op, operands) -> why onert refuses at load or
# compile (backward: only when the op's backward runs), an `AfterCompile` reason when onert finds it
# only after it compiles; "kernel_buffers": fn(op, ir, threads, simd_width) -> [(name, bytes)] its
# train kernel allocates; "usedef": fn(op, chains), its backward's training use-defs;
# "weighted": the backward region is cut to ops reachable from these
PROFILES["onert"] = {"Reshape": {"forward": _onert_reshape_fwd, "usedef": onert.first_input_usedef}}

# nntrainer (profiles/nntrainer.py): "layer", the nntrainer 0.6.0 layer the profile models the op as;
# "kind", that layer's type; "check": fn(graph, op, batchnorm) -> why the layer cannot take this op
PROFILES["nntrainer"] = {"Reshape": {"layer": "flatten / reshape", "kind": "reshape"}}
