"""ScatterND and ScatterElements (ONNX, opsets 11-18; TFLite has no in-place form).

ScatterND: Y = a copy of `data` with
the slices named by `indices` (last axis: a prefix of data's axes) replaced by `updates`
(reduction "none") or added to (reduction "add"). Torch exports write slice assignments with it
(Swin-T's shifted-window mask: `mask[:, h, w] = k`).

Training rule (PyTorch derivatives.yaml `index_put` / `index_put_` with accumulate false / true):
- data: grad.masked_fill(indices, 0) for "none" (the replaced slices get nothing), grad for "add";
- updates: grad[indices] (the slices of dY it was written to).
Backward reads dY and the indices (integers, no gradient): neither data nor updates is kept.
ScatterElements (torch `select_scatter` / `scatter`: HF RWKV writes each token's output into its
row): Y = a copy of `data` with Y[..., indices[i, j], ...] (along `axis`) = updates[i, j] (or +=).
Its rule is ScatterND's, with the element positions the indices name (derivatives.yaml `scatter`:
self: grad.scatter(dim, index, 0); src: grad.gather(dim, index)). Indices of batch 1 in front of
batched updates (a re-batched export whose index constant was made at batch 1) apply to every
sample: a batch-1 file has one row of them, the same for each sample; a constant `data` made at
the file's batch (zeros the exporter folded) grows with the updates.
Reductions "max" and "min" (torch `scatter_reduce` with "amax" / "amin": the dynamo exporter writes
them, TAPAS's segment reductions of its table positions) take derivatives.yaml's
`scatter_reduce_backward` (torch/csrc/autograd/FunctionsManual.cpp, the amax / amin branch): the
gradient is split evenly among the values equal to the result, data's and the updates' alike,
`N = (data == Y) + scatter_add(updates == Y[where])`, d(data) = (data == Y) dY / N, d(updates) =
(updates == Y[where]) (dY / N)[where]; the backward reads data, updates and Y besides dY and the
indices. ONNX's reduction takes data as the first value (torch's `include_self=True`). "mul" is
refused (its gradient divides by the values; no export met writes it).
`--profile torch`: an out-of-place ScatterND of reduction add is eager's index_add (the dynamo
exporter's decomposition: an accumulating index_put), which keeps its index and source; one of
reduction none recording index_put keeps its indices (docs/torchprof.md, "Sizes computed from the data").
FLOPs: forward |updates| (data copied), backward |updates| (the gather) for updates and |Y| for data.
"""
from __future__ import annotations

import re

import numpy as np

from memplan_cli.ops.base import Canon, OpDef
from memplan_cli.ops.kernel_util import target
from memplan_cli.ops.rule import OpRule, StepIO, bp_targets, forward_io

REDUCTIONS = ("none", "add", "max", "min")
# a reduction that selects one of the values (names only: NumPy loads on first use, not with the registry)
_SELECTING = ("max", "min")


def rule(op, ctx) -> OpRule:
    data, idx, upd = op.inputs[0], op.inputs[1], op.inputs[2]
    y = op.outputs[0]
    r = OpRule(forward=forward_io(op))
    reads = [("bp", y), ("fwd", idx)]
    if op.attrs.get("reduction", "none") in _SELECTING:  # which values won: data, updates and the result
        reads += [("fwd", data), ("fwd", upd), ("fwd", y)]
    weights = [i for i in dict.fromkeys((data, upd)) if ctx.is_param(i)]
    r.weights += weights
    if ctx.trains(op) and weights:
        r.calc_gradient = StepIO(list(reads), [("grad", w) for w in weights])
    targets = bp_targets(op, ctx, [data, upd])
    if targets:
        r.calc_derivative = StepIO(list(reads), [("bp", t) for t in targets])
    return r


def _elements_where(ctx):
    """ScatterElements: the element positions in data of every update, as an index tuple."""
    ax = int(ctx.attrs["axis"])
    upd_shape = tuple(ctx.tg.graph.operands[ctx.op.inputs[2]].shape)  # backward may not read the updates
    idx = np.broadcast_to(np.asarray(ctx.x(1)).astype(np.int64), upd_shape)
    n = ctx.tg.graph.operands[ctx.op.inputs[0]].shape[ax]
    full = list(np.indices(upd_shape))
    full[ax] = np.where(idx < 0, idx + n, idx)
    return tuple(full)


def _scatter(ctx, where, updates):
    """Y = the data with `updates` written at `where` (added, with reduction "add")."""
    out = np.asarray(ctx.x(0)).copy()
    red = ctx.attrs.get("reduction", "none")
    if red == "add":
        np.add.at(out, where, updates)
    elif red in _SELECTING:
        (np.maximum if red == "max" else np.minimum).at(out, where, updates)
    else:
        out[where] = updates
    ctx.y()[...] = out


def _selecting_backward(ctx, where):
    """max / min: dY split evenly among the values equal to the result (scatter_reduce_backward)."""
    dy, data, y = np.asarray(ctx.dy()), np.asarray(ctx.x(0)), np.asarray(ctx.y())
    updates = np.asarray(ctx.x(2)).reshape(y[where].shape)
    dd, du = target(ctx, 0), target(ctx, 2)
    data_won = (data == y).astype(dy.dtype)
    upd_won = (updates == y[where]).astype(dy.dtype)
    n = data_won.copy()
    np.add.at(n, where, upd_won)
    share = dy / np.where(n == 0, 1, n)
    if du is not None:
        du[...] = (upd_won * share[where]).reshape(du.shape)
    if dd is not None:
        dd[...] = data_won * share


def _scatter_backward(ctx, where):
    """d(updates) = dY at `where`; d(data) = dY, but 0 where the updates overwrote it."""
    if ctx.attrs.get("reduction", "none") in _SELECTING:
        return _selecting_backward(ctx, where)
    dy = np.asarray(ctx.dy())
    dd, du = target(ctx, 0), target(ctx, 2)
    if du is not None:
        du[...] = dy[where].reshape(du.shape)
    if dd is not None:
        g = dy.copy()
        if ctx.attrs.get("reduction", "none") == "none":
            g[where] = 0
        dd[...] = g


def elements_forward(ctx):
    _scatter(ctx, _elements_where(ctx), np.asarray(ctx.x(2)))


def elements_backward(ctx):
    _scatter_backward(ctx, _elements_where(ctx))


def elements_check(op, operands):
    red = op.attrs.get("reduction", "none")
    if red not in REDUCTIONS:
        return f"has reduction {red!r} (memplan trains 'none', 'add', 'max' and 'min')"
    data, idx, upd = (operands[i] for i in op.inputs[:3])
    if not idx.dtype.startswith("int"):
        return f"has indices of type {idx.dtype} (needs integers)"
    if not len(data.shape) == len(idx.shape) == len(upd.shape):
        return f"has data, indices and updates of ranks {len(data.shape)}, {len(idx.shape)}, {len(upd.shape)}"
    if tuple(idx.shape) != tuple(upd.shape) and not (idx.shape[0] == 1 and tuple(idx.shape[1:]) == tuple(upd.shape[1:])):
        return f"has indices of shape {tuple(idx.shape)} and updates of shape {tuple(upd.shape)}"
    ax = int(op.attrs.get("axis", 0))
    if not -len(data.shape) <= ax < len(data.shape):
        return f"has axis {ax} for a rank-{len(data.shape)} input"
    if any(u > d for k, (u, d) in enumerate(zip(upd.shape, data.shape)) if k != ax % len(data.shape)):
        return f"has updates {tuple(upd.shape)} larger than data {tuple(data.shape)} off the axis"
    return None


def _elements_batch(op, graph, shapes, batched):
    d, idx, upd = op.inputs[:3]
    old = graph.operands
    if (upd in batched and d not in batched and old[d].is_const and old[d].shape
            and old[d].shape[0] == old[upd].shape[0]):
        # the buffer written into was made at the file's batch (RWKV's zeros, folded): it follows
        shapes[d] = (shapes[upd][0],) + tuple(shapes[d][1:])
        batched.add(d)
    if idx in batched or (upd in batched) != (d in batched):
        from memplan_cli.ir.graph import GraphError

        raise GraphError(f"cannot re-batch op {op.label}: its indices carry the batch, or only one of data "
                         "and updates does")
    if upd in batched and shapes[idx][0] != 1:
        from memplan_cli.ir.graph import GraphError

        raise GraphError(f"cannot re-batch op {op.label}: its indices were made at batch {shapes[idx][0]}")
    return [tuple(shapes[d]) if d in batched else None]


def _where(ctx):
    data_shape = tuple(ctx.tg.graph.operands[ctx.op.inputs[0]].shape)
    idx = np.asarray(ctx.x(1)).astype(np.int64)
    k = idx.shape[-1]
    return tuple(idx.reshape(-1, k).T), data_shape, k


def forward(ctx):
    where, shape, k = _where(ctx)
    _scatter(ctx, where, np.asarray(ctx.x(2)).reshape((-1,) + shape[k:]))


def backward(ctx):
    _scatter_backward(ctx, _where(ctx)[0])


def check(op, operands):
    red = op.attrs.get("reduction", "none")
    if red not in REDUCTIONS:
        return f"has reduction {red!r} (memplan trains 'none', 'add', 'max' and 'min')"
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


def _selecting_bwd_tmp(op, operands, needs) -> tuple:
    """scatter_reduce_backward's amax / amin branch (FunctionsManual.cpp; allocator events measured,
    torch 2.14.1, one thread, (4, 4, 512) data, (4, 16, 512) updates, with and without include_self and
    a data gradient: the same events): the result gathered at the indices, float masks of the values
    that won (data's and the updates'), their count, dY shared out, the data's share (made whether or
    not data needs it), the share gathered back, a bool mask of the updates and the updates' share
    before its cast: at its peak 5 updates-sized and 4 data-sized float tensors and an updates-sized
    bool, the gradients it returns among them."""
    d, u = operands[op.inputs[0]], operands[op.inputs[2]]
    tmp = 5 * u.nbytes + int(np.prod(u.shape)) + 4 * d.nbytes
    tmp -= (u.nbytes if needs[2] else 0) + (d.nbytes if needs[0] else 0)
    return ((tmp,),)


def _torch(op) -> dict | None:
    """`--profile torch`: scatter / select_scatter (no reduction) copy the input and keep only the index;
    their backward makes the input's gradient (input-sized) and the updates' (updates-sized),
    measured. scatter_reduce with amax / amin (reductions "max" / "min") makes its result only and
    saves data, indices, updates and the result (derivatives.yaml: `self, src:
    scatter_reduce_backward(grad, self, dim, index, src, reduce, include_self, result)`); its backward's
    temporaries were measured (`_selecting_bwd_tmp`). "add" is not modelled (the general rule)."""
    red = str(op.attrs.get("reduction", "none"))
    if red in _SELECTING:
        return {"saves": (("in0", "any"), ("in1", "any"), ("in2", "any"), ("out0", "any")),
                "bwd_tmp": _selecting_bwd_tmp}
    if red != "none":
        return None
    return {"saves": (("in1", "any"),)}


def _torch_nd(op) -> dict | None:
    """`--profile torch`: a ScatterND read back as eager's in-place write (`k[..., :a].copy_(x)`,
    `x[idx] = v`: profiles/torch/rewrites.py `inplace_writes`), measured (torch 2.14, per-op allocator
    events): forward makes nothing and saves nothing (copy_'s formula needs sizes only); its
    backward (CopySlices around copy_, derivatives.yaml `self: zeros_like(grad)`, `src: sum_to(grad,
    src.sizes())`; index_put_'s alike) makes the result, a copy of the incoming gradient of the
    data's size, which is the data's gradient, and the written slice of it cloned, which is the
    updates' gradient; while the data needs one, a zeroed slice is made and written into the result.
    `x[idx] = v` (index_put_, IndexPutBackward0) is counted alike; its backward's temporaries were
    not worked out (within 0.7 % on the network built for it).
    Where the write made its data (a fresh `new_empty`: input 0 dropped), the result is freed in the
    op. Other ScatterNDs: no facts (the general rule)."""
    call = getattr(op, "call", "") or ""
    if not op.attrs.get("inplace"):
        if call and not re.search(r"= aten\.index_(put|add)\b", call):
            return None  # another call written as a ScatterND (a functional scatter): the general rule
        # out of place, reduction add: eager's index_add, which the dynamo exporter decomposes into
        # index_put(..., accumulate=True) (torch/_decomp `_index_add`) and TorchScript cannot export.
        # IndexAddBackward0 keeps the index and the source (derivatives.yaml: self: grad; source:
        # grad.index_select(dim, index).expand_as(source), which needs the source itself)
        if str(op.attrs.get("reduction", "none")) == "add":
            return {"saves": (("in1", "any"), ("in2", "any")), "grad_shared": (0,)}
        # reduction none: index_put; IndexPutBackward0 keeps the indices only: self:
        # grad.index_put(indices, zeros_like(values), false), values: grad.index(indices)
        if str(op.attrs.get("reduction", "none")) == "none":
            return {"saves": (("in1", "any"),), "bwd_tmp": (("in2?g0",),)}
        return None
    if str(op.attrs.get("reduction", "none")) != "none":
        return None
    if op.inputs[0] < 0:
        return {"saves": (), "bwd_tmp": (("out0",),)}
    return {"view": True, "saves": (), "bwd_tmp": (("in2?g0",),)}


OPS = [OpDef("ScatterND", rule=rule, kernels={"forward": forward, "calcDerivative": backward,
                                              "calcGradient": backward},
             flops=flops, check=check, required_inputs=3, nondiff_inputs=(1,), batch=_batch,
             profiles={"torch": _torch_nd}, role="writes_into"),
       OpDef("ScatterElements", rule=rule, kernels={"forward": elements_forward, "calcDerivative": elements_backward,
                                                    "calcGradient": elements_backward},
             flops=flops, check=elements_check, required_inputs=3, nondiff_inputs=(1,), batch=_elements_batch,
             profiles={"torch": _torch}, role="writes_into")]


def _onnx(node) -> Canon:
    return Canon("ScatterND", {"reduction": str(node.attrs.get("reduction", "none"))})


def _onnx_elements(node) -> Canon:
    rank = len(node.shape(0))
    ax = int(node.attrs.get("axis", 0))
    return Canon("ScatterElements", {"reduction": str(node.attrs.get("reduction", "none")),
                                     "axis": ax + rank if ax < 0 else ax})


ONNX = {"ScatterND": _onnx, "ScatterElements": _onnx_elements}
TFLITE = {}
