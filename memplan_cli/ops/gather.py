"""Gather (ONNX Gather, opsets 1-13; TFLite GATHER, and EMBEDDING_LOOKUP(ids, table), litert-torch's
nn.Embedding, as Gather(table, ids) on axis 0): Y = take(data, indices, axis); and GatherND
(ONNX GatherND, TFLite GATHER_ND): Y[i] = data[b..., indices[b..., i, :]] (torch's advanced indexing
`x[torch.arange(B), input_ids.argmax(-1)]` in CLIP's pooling, a relative-position bias table read at a
[N, N, 2] index in SwinV2 / VGG's exports).

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
- GatherND: the same rule (derivatives.yaml `index`: self: index_backward(..., indices, grad),
  saving the indices only); its backward scatter-adds dY's slices at the indexed positions.
FLOPs: forward none (data movement); backward one add per element of dY.
Refused: TFLite Gather's `batch_dims` other than 0.
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
    return constant_index_problem(operands[op.inputs[1]], operands[op.inputs[0]].shape, a % max(rank, 1))


def constant_index_problem(idx, data_shape, axis: int) -> str | None:
    """A constant index outside [-n, n) of the data's axis: no runtime can run the op (onnx says so;
    NumPy raised IndexError in `verify`, or wrapped a too-negative one silently)."""
    if idx.value is None or not data_shape or not 0 <= axis < len(data_shape):
        return None
    n = data_shape[axis]
    if not isinstance(n, int) or n < 0:
        return None
    bad = next((v for v in idx.value if isinstance(v, int) and not -n <= v < n), None)
    if bad is None:
        return None
    return f"has a constant index {bad} outside axis {axis} of its data (size {n}): no runtime can run it"


def _flops(op, operands):
    return 0, operands[op.outputs[0]].num_elements


def _batch(op, graph, shapes, batched):
    data, idx = op.inputs[0], op.inputs[1]
    ds, ish = shapes[data], shapes[idx]
    ax = axis_of(op, len(ds))
    return [tuple(ds[:ax]) + tuple(ish) + tuple(ds[ax + 1:])]


# ---- GatherND ------------------------------------------------------------------------------------
def _nd_index(ctx, data_shape):
    """The flat index tuple GatherND reads: (batch, i_0, ..., i_{k-1}) per gathered slice."""
    b = int(ctx.attrs.get("batch_dims", 0))
    idx = np.asarray(ctx.x(1)).astype(np.int64)
    k = idx.shape[-1]
    nb = int(np.prod(data_shape[:b], dtype=np.int64))
    ind = idx.reshape(nb, -1, k)
    dims = np.asarray(data_shape[b:b + k], dtype=np.int64)
    ind = np.where(ind < 0, ind + dims, ind)
    batch = np.repeat(np.arange(nb), ind.shape[1])
    return (batch,) + tuple(ind.reshape(-1, k).T), nb


def nd_forward(ctx):
    data = np.asarray(ctx.x(0))
    b = int(ctx.attrs.get("batch_dims", 0))
    index, nb = _nd_index(ctx, data.shape)
    y = ctx.y()
    y[...] = data.reshape((nb,) + data.shape[b:])[index].reshape(y.shape)


def _nd_back(out_of):
    def step(ctx):
        out = out_of(ctx)
        if out is None:
            return
        b = int(ctx.attrs.get("batch_dims", 0))
        index, nb = _nd_index(ctx, out.shape)
        k = np.asarray(ctx.x(1)).shape[-1]
        acc = np.zeros((nb,) + out.shape[b:], dtype=out.dtype)
        dy = np.asarray(ctx.dy()).reshape((index[0].size,) + out.shape[b + k:])
        np.add.at(acc, index, dy)
        out[...] = acc.reshape(out.shape)
    return step


def nd_check(op, operands):
    ds, ish = operands[op.inputs[0]].shape, operands[op.inputs[1]].shape
    b = int(op.attrs.get("batch_dims", 0))
    if operands[op.inputs[1]].dtype not in ("int32", "int64", "int16", "int8", "uint8"):
        return f"has indices of dtype {operands[op.inputs[1]].dtype}"
    if not ish or b < 0 or b >= len(ish) or tuple(ish[:b]) != tuple(ds[:b]) or not 1 <= ish[-1] <= len(ds) - b:
        return f"cannot index data {tuple(ds)} with indices {tuple(ish)} (batch_dims {b})"
    want = tuple(ish[:-1]) + tuple(ds[b + ish[-1]:])
    if tuple(operands[op.outputs[0]].shape) != want:
        return f"has an output {tuple(operands[op.outputs[0]].shape)}, not {want}"
    return None


def _nd_batch(op, graph, shapes, batched):
    ds, ish = shapes[op.inputs[0]], shapes[op.inputs[1]]
    b = int(op.attrs.get("batch_dims", 0))
    return [tuple(ish[:-1]) + tuple(ds[b + ish[-1]:])]


# `--profile torch`: embedding / index_select keep only the indices (the table's gradient is a new
# tensor of its size)
TORCH = {"saves": (("in1", "any"),)}
OPS = [OpDef("Gather", rule=rule, kernels={"forward": forward, "calcGradient": _back(lambda c: c.grad(0)),
                                          "calcDerivative": _back(lambda c: c.dx(0))},
             flops=_flops, required_inputs=2, check=check, nondiff_inputs=(1,), batch=_batch, table_inputs=(0,),
             shape_value=lambda op, ins: np.take(ins[0], ins[1], axis=int(op.attrs.get("axis", 0))),
             profiles={"torch": TORCH}),
       OpDef("GatherND", rule=rule, kernels={"forward": nd_forward, "calcGradient": _nd_back(lambda c: c.grad(0)),
                                             "calcDerivative": _nd_back(lambda c: c.dx(0))},
             flops=_flops, required_inputs=2, check=nd_check, nondiff_inputs=(1,), batch=_nd_batch,
             # `--profile torch`: advanced indexing (aten::index) keeps its index tensors; its backward
             # scatters into a zeroed tensor of the input's size (measured)
             profiles={"torch": TORCH})]


def _onnx(node) -> Canon:
    return Canon("Gather", {"axis": int(node.attrs.get("axis", 0))})


def _tflite(node) -> Canon:
    attrs = {"axis": int(node.options.get("axis", 0))}
    if node.options.get("batch_dims", 0):
        attrs["batch_dims"] = int(node.options["batch_dims"])
    return Canon("Gather", attrs)


def _onnx_nd(node) -> Canon:
    return Canon("GatherND", {"batch_dims": int(node.attrs.get("batch_dims", 0))})


def _tflite_embedding(node) -> Canon:
    """EMBEDDING_LOOKUP(ids, table) (litert-torch's nn.Embedding): rows of the table, a Gather on
    axis 0 with the operands the other way round."""
    return Canon("Gather", {"axis": 0}, inputs=[node.inputs[1], node.inputs[0]])


ONNX = {"Gather": _onnx, "GatherND": _onnx_nd}
TFLITE = {"GATHER": _tflite, "GATHER_ND": lambda node: Canon("GatherND", {"batch_dims": 0}),
          "EMBEDDING_LOOKUP": _tflite_embedding}


# onert 0.1.0 loads EMBEDDING_LOOKUP (and GATHER) but its train backend has no kernel for it: the
# compile fails wherever the op is, also before the trained ops (measured: "EmbeddingLookup operation
# is not trainable yet", tests/ops/test_gather.py)
PROFILES = {"onert": {"Gather": {"refuse": "onert 0.1.0's train backend has no Gather / EmbeddingLookup kernel: "
                                           "\"... operation is not trainable yet\" (onert fails to compile)"}}}
