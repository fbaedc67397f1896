"""Gather (ONNX Gather, opsets 1-13; TFLite GATHER): Y = take(data, indices, axis).

Y's shape is data.shape[:axis] + indices.shape + data.shape[axis+1:]. Negative indices count from
the end of the axis (ONNX opset 11+, TFLite).

Training rule (PyTorch derivatives.yaml `embedding`: weight: embedding_backward(grad, indices, ...);
`index_select`: self: index_select_backward(grad, self.sizes(), dim, index)): both save the indices
only, never the data.
- calcGradient (data is a float constant, an embedding table, and the op trains): dW = zeros, then
  dY's slices are added at their indices (repeated indices accumulate); reads the indices and dY.
- calcDerivative (data is an activation that needs a back-prop, e.g. picking one token's hidden
  state): the same scatter-add into dX; reads the indices and dY.
- The indices (input 1) are never differentiable. Kept for backward: the indices (small ints).
- The gradient is dense (the whole table), as torch's default `sparse=False` embedding has it.
FLOPs: forward none (data movement); backward one add per element of dY.
Refused: TFLite `batch_dims` other than 0.
"""
from __future__ import annotations

import numpy as np

from memplan_cli.ops.base import Canon, OpDef
from memplan_cli.ops.rule import OpRule, StepIO, bp_targets, forward_io


def axis_of(op, rank: int) -> int:
    return int(op.attrs.get("axis", 0)) % max(rank, 1)


def rule(op, ctx) -> OpRule:
    data, idx, y = op.inputs[0], op.inputs[1], op.outputs[0]
    weights = [data] if ctx.is_param(data) else []
    r = OpRule(forward=forward_io(op), weights=weights)
    if weights and ctx.trains(op):
        r.calc_gradient = StepIO([("fwd", idx), ("bp", y)], [("grad", data)])
    if bp_targets(op, ctx, [data]):
        r.calc_derivative = StepIO([("fwd", idx), ("bp", y)], [("bp", data)])
    return r


def _indices(ctx, dim: int) -> np.ndarray:
    idx = np.asarray(ctx.x(1)).astype(np.int64)
    return np.where(idx < 0, idx + dim, idx)


def forward(ctx):
    data = ctx.x(0)
    ax = axis_of(ctx.op, data.ndim)
    ctx.y()[...] = np.take(data, _indices(ctx, data.shape[ax]), axis=ax).reshape(ctx.y().shape)


def scatter_add(out: np.ndarray, dy: np.ndarray, idx: np.ndarray, ax: int) -> None:
    """out = 0, then out[..., idx[j], ...] += dy's j-th slice along `ax` (repeats accumulate)."""
    out[...] = 0
    lead, tail = out.shape[:ax], out.shape[ax + 1:]
    d = dy.reshape(lead + (idx.size,) + tail)
    np.add.at(np.moveaxis(out, ax, 0), idx.reshape(-1), np.moveaxis(d, ax, 0))


def _back(out_of):
    def step(ctx):
        out = out_of(ctx)
        if out is None:
            return
        ax = axis_of(ctx.op, out.ndim)
        scatter_add(out, ctx.dy(), _indices(ctx, out.shape[ax]), ax)
    return step


def check(op, operands):
    rank = len(operands[op.inputs[0]].shape)
    a = int(op.attrs.get("axis", 0))
    if not -rank <= a < rank:
        return f"has axis {a} outside the data's {rank} dimensions"
    if op.attrs.get("batch_dims", 0):
        return f"has batch_dims={op.attrs['batch_dims']} (only 0 is implemented)"
    if operands[op.inputs[1]].dtype not in ("int32", "int64", "int16", "int8", "uint8"):
        return f"has indices of dtype {operands[op.inputs[1]].dtype}"
    return None


def _flops(op, operands):
    return 0, operands[op.outputs[0]].num_elements


def _batch(op, graph, shapes, batched):
    data, idx = op.inputs[0], op.inputs[1]
    ds, ish = shapes[data], shapes[idx]
    ax = axis_of(op, len(ds))
    return [tuple(ds[:ax]) + tuple(ish) + tuple(ds[ax + 1:])]


OPS = [OpDef("Gather", rule=rule, kernels={"forward": forward, "calcGradient": _back(lambda c: c.grad(0)),
                                          "calcDerivative": _back(lambda c: c.dx(0))},
             flops=_flops, required_inputs=2, check=check, nondiff_inputs=(1,), batch=_batch)]


def _onnx(node) -> Canon:
    return Canon("Gather", {"axis": int(node.attrs.get("axis", 0))})


def _tflite(node) -> Canon:
    attrs = {"axis": int(node.options.get("axis", 0))}
    if node.options.get("batch_dims", 0):
        attrs["batch_dims"] = int(node.options["batch_dims"])
    return Canon("Gather", attrs)


ONNX = {"Gather": _onnx}
TFLITE = {"GATHER": _tflite}
