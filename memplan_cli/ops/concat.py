"""Concat (ONNX Concat; TFLite CONCATENATION, with its fused activation).

Rules: backward reads dY only; keeps no activation (a fused activation's derivative comes from Y);
writes the back-prop of every input that needs one. A float constant input (a parameter the
constant folding kept, e.g. a class token) is a weight: its slice of dY is its gradient; an input of
batch 1 broadcast over the batch (`broadcast_batch`, set by re-batching) gets the sum over samples.
Contract: the inputs agree on every dim but the axis, and the output is their sum along it.
FLOPs: 0, plus a fused activation's per-element cost.
"""
from __future__ import annotations

import numpy as np

from memplan_cli.kernels import activation as act
from memplan_cli.kernels import shape
from memplan_cli.kernels.common import store
from memplan_cli.ops.base import Canon, OpDef
from memplan_cli.ops.kernel_util import fused_activation_flops, tflite_activation
from memplan_cli.ops.rule import OpRule, StepIO, bp_targets, forward_io, fused_activation


def concat(op, ctx) -> OpRule:
    y = op.outputs[0]
    rule = OpRule(forward=forward_io(op))
    targets = bp_targets(op, ctx)
    if targets:
        rule.calc_derivative = StepIO([("bp", y)], [("bp", t) for t in targets])
    # parameters kept unfolded (a class token, two tables side by side) train through it
    rule.weights = [i for i in dict.fromkeys(op.inputs) if i >= 0 and ctx.is_param(i)]
    if rule.weights and ctx.trains(op):
        rule.calc_gradient = StepIO([("bp", y)], [("grad", w) for w in rule.weights])
    fused_activation(op, ctx, rule, y)
    return rule


def _check(op, operands) -> str | None:
    ins = [operands[i] for i in op.inputs if i >= 0]
    y = operands[op.outputs[0]]
    rank = len(y.shape)
    if any(len(x.shape) != rank for x in ins) or not rank:
        return None  # ranks that differ are the loaders' to reject; scalars have no axis
    axis = int(op.attrs.get("axis", 0)) % rank
    for k in range(rank):
        dims = [x.shape[k] for x in ins]
        if k == 0 and axis != 0 and op.attrs.get("broadcast_batch"):
            dims = [y.shape[0] if d == 1 else d for d in dims]  # a class token broadcast over the batch
        want = sum(dims) if k == axis else dims[0]
        if (k != axis and any(d != dims[0] for d in dims)) or y.shape[k] != want:
            return (f"concatenates {', '.join(str(tuple(x.shape)) for x in ins)} on axis {axis} into "
                    f"{tuple(y.shape)}: the shapes disagree at dim {k}")
    return None


def _axis(ctx, ndim):
    return int(ctx.attrs.get("axis", 0)) % ndim


def _forward(ctx):
    xs = [ctx.x(k) for k in range(len(ctx.op.inputs))]
    y = ctx.y()
    if ctx.attrs.get("broadcast_batch"):  # an input of batch 1 (a class token) goes to every sample
        xs = [np.broadcast_to(x, (y.shape[0],) + x.shape[1:]) if x.shape[0] == 1 else x for x in xs]
    shape.concat_forward(xs, _axis(ctx, y.ndim), y)
    act.apply(y, ctx.act(), y)


def _backward(ctx):
    to = ctx.grad if ctx.step.kind == "calcGradient" else ctx.dx
    outs = [(k, d) for k, d in ((k, to(k)) for k in range(len(ctx.op.inputs))) if d is not None]
    if not outs:
        return
    dz = ctx.dz()
    axis = _axis(ctx, dz.ndim)
    sizes = [ctx.tg.graph.operands[o].shape[axis] for o in ctx.op.inputs]
    seen = set()
    for k, d in outs:
        start = sum(sizes[:k])
        part = np.array(dz[tuple(slice(start, start + sizes[k]) if i == axis else slice(None)
                                 for i in range(dz.ndim))])
        if part.shape[0] != d.shape[0]:  # broadcast over the batch: its gradient sums the samples
            part = part.sum(axis=0, keepdims=True)
        o = ctx.op.inputs[k]
        store(d, part, acc=o in seen)
        seen.add(o)


def _flops(op, operands):
    return fused_activation_flops(op, operands, 0, 0)


_KERNELS = {"forward": _forward, "calcDerivative": _backward, "calcGradient": _backward}
# batch: the re-batch rule of Concat (the class-token broadcast) lives in opgraph/rebatch.py
def _shape_value(op, ins):
    return np.concatenate([np.atleast_1d(v) for v in ins if v is not None], axis=int(op.attrs.get("axis", 0)))


# ---- re-batching ------------------------------------------------------------------------------
def _batch(op, graph, shapes, batched):
    """On axis 0 the batch is the sum of the inputs' dim 0; on any other axis it is kept."""
    from memplan_cli.ir.batch import keep_batch

    s = graph.operands[op.outputs[0]].shape
    axis = op.attrs.get("axis", 0)
    if axis < 0:
        axis += len(s)
    if axis != 0:
        return keep_batch(op, graph, shapes, batched)
    return [(sum(shapes[i][0] for i in op.inputs if i >= 0),) + tuple(s[1:])]


def _batch_attrs(op, graph, shapes, batched):
    """A Concat off the batch axis of batched inputs and a batch-1 input that does not follow the
    batch (a class or distillation token from a parameter: at batch 1 the exporter folded its
    `expand(B, ...)` away) broadcasts that input over the batch (`broadcast_batch`)."""
    s = graph.operands[op.outputs[0]].shape
    if not s or int(op.attrs.get("axis", 0)) % len(s) == 0:
        return None
    ins = [i for i in op.inputs if i >= 0]
    fixed = [i for i in ins if i not in batched]
    if fixed and len(fixed) < len(ins) and all(graph.operands[i].shape and graph.operands[i].shape[0] == 1
                                               for i in fixed):
        return ({"broadcast_batch": True}, "its batch-1 constant input (a class token the exporter expanded "
                "at batch {old_batch}) is broadcast over batch {batch_size}")
    return None


# `--profile torch`: cat keeps only sizes; its inputs' gradients are narrow views of the incoming one.
# Its result's memory format is ATen's `cat_compute_output_memory_format` (TensorShape.cpp): the format
# every input suggests, contiguous as soon as one input suggests contiguous or two disagree. So a cat of
# channels-last maps (DenseNet-style stages whose blocks end in a LayerNorm over channels: timm's
# RDNet) is channels-last, and a convolution of it runs oneDNN's channels-last kernels
# ("format": "all_inputs", read by profiles/torch/replay.py and layout.py).
TORCH = {"grad": "view", "format": "all_inputs"}
# the dynamo exporter writes a real tensor's `.to(complex)` (torch.fft of a real input) as the real part
# concatenated with a constant of zeros: eager's `_to_copy` makes the complex tensor and has no such
# zeros (a computed constant, not held); its backward (`_to_copy_backward`: at::real(grad)) is a view
TORCH_COMPLEX_COPY = {"grad": "view", "none_fills": (1,)}  # 1-D / 2-D: no memory format


def _torch(op):
    call = getattr(op, "call", "") or ""
    return TORCH_COMPLEX_COPY if "aten._to_copy" in call and "torch.complex" in call else TORCH


OPS = [OpDef("Concat", rule=concat, kernels=_KERNELS, flops=_flops, check=_check, shape_value=_shape_value,
             batch=_batch, batch_attrs=_batch_attrs, profiles={"torch": _torch})]


def _onnx(node) -> Canon:
    return Canon("Concat", {"axis": node.attrs.get("axis", 0)})


def _tflite(node) -> Canon:
    return Canon("Concat", {"axis": int(node.options.get("axis", 0)), "activation": tflite_activation(node)})


ONNX = {"Concat": _onnx}
TFLITE = {"CONCATENATION": _tflite}


# ---- other runtimes' profiles (profiles/singa.py, onert/, nntrainer.py): what they know of these ops ----
# singa: the SINGA autograd operator memplan models the op as
PROFILES = {"singa": {"Concat": {"operator": "Concat"}}}
