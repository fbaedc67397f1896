"""ScatterND (ONNX ScatterND, opsets 11-18; TFLite has no in-place form): Y = a copy of `data` with
the slices named by `indices` (last axis: a prefix of data's axes) replaced by `updates`
(reduction "none") or added to (reduction "add"). Torch exports write slice assignments with it
(Swin-T's shifted-window mask: `mask[:, h, w] = k`).

Training rule (PyTorch derivatives.yaml `index_put` / `index_put_` with accumulate false / true):
- data: grad.masked_fill(indices, 0) for "none" (the replaced slices get nothing), grad for "add";
- updates: grad[indices] (the slices of dY it was written to).
Backward reads dY and the indices (integers, no gradient): neither data nor updates is kept.
Reductions "mul", "max", "min" are refused (their gradient needs the values; no export met writes them).
FLOPs: forward |updates| (data copied), backward |updates| (the gather) for updates and |Y| for data.
"""
from __future__ import annotations

import numpy as np

from memplan_cli.ops.base import Canon, OpDef
from memplan_cli.ops.kernel_util import target
from memplan_cli.ops.rule import OpRule, StepIO, bp_targets, forward_io

REDUCTIONS = ("none", "add")


def rule(op, ctx) -> OpRule:
    data, idx, upd = op.inputs[0], op.inputs[1], op.inputs[2]
    y = op.outputs[0]
    r = OpRule(forward=forward_io(op))
    reads = [("bp", y), ("fwd", idx)]
    weights = [i for i in dict.fromkeys((data, upd)) if ctx.is_param(i)]
    r.weights += weights
    if ctx.trains(op) and weights:
        r.calc_gradient = StepIO(list(reads), [("grad", w) for w in weights])
    targets = bp_targets(op, ctx, [data, upd])
    if targets:
        r.calc_derivative = StepIO(list(reads), [("bp", t) for t in targets])
    return r


def _where(ctx):
    data_shape = tuple(ctx.tg.graph.operands[ctx.op.inputs[0]].shape)
    idx = np.asarray(ctx.x(1)).astype(np.int64)
    k = idx.shape[-1]
    return tuple(idx.reshape(-1, k).T), data_shape, k


def forward(ctx):
    data, upd = np.asarray(ctx.x(0)), np.asarray(ctx.x(2))
    where, shape, k = _where(ctx)
    out = data.copy()
    u = upd.reshape((-1,) + shape[k:])
    if ctx.attrs.get("reduction", "none") == "add":
        np.add.at(out, where, u)
    else:
        out[where] = u
    ctx.y()[...] = out


def backward(ctx):
    where, shape, k = _where(ctx)
    dy = np.asarray(ctx.dy())
    dd, du = target(ctx, 0), target(ctx, 2)
    if du is not None:
        du[...] = dy[where].reshape(du.shape)
    if dd is not None:
        g = dy.copy()
        if ctx.attrs.get("reduction", "none") == "none":
            g[where] = 0
        dd[...] = g


def check(op, operands):
    red = op.attrs.get("reduction", "none")
    if red not in REDUCTIONS:
        return f"has reduction {red!r} (memplan trains 'none' and 'add')"
    data, idx, upd = (operands[i] for i in op.inputs[:3])
    if not idx.dtype.startswith("int") or not idx.shape:
        return f"has indices of type {idx.dtype} and shape {tuple(idx.shape)} (needs integers, rank >= 1)"
    k = idx.shape[-1]
    if k > len(data.shape):
        return f"indexes {k} axes of a rank-{len(data.shape)} input"
    want = tuple(idx.shape[:-1]) + tuple(data.shape[k:])
    if tuple(upd.shape) != want:
        return f"has updates of shape {tuple(upd.shape)}, not {want}"
    return None


def flops(op, operands):
    u = operands[op.inputs[2]].num_elements
    return u, u + operands[op.outputs[0]].num_elements


def _batch(op, graph, shapes, batched):
    if any(i in batched for i in op.inputs[1:3]):
        from memplan_cli.ir.graph import GraphError

        raise GraphError(f"cannot re-batch op {op.label}: its indices or updates carry the batch")
    d = op.inputs[0]
    return [tuple(shapes[d]) if d in batched else None]


OPS = [OpDef("ScatterND", rule=rule, kernels={"forward": forward, "calcDerivative": backward,
                                              "calcGradient": backward},
             flops=flops, check=check, required_inputs=3, nondiff_inputs=(1,), batch=_batch)]


def _onnx(node) -> Canon:
    return Canon("ScatterND", {"reduction": str(node.attrs.get("reduction", "none"))})


ONNX = {"ScatterND": _onnx}
TFLITE = {}
