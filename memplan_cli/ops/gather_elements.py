"""GatherElements (ONNX; torch.gather): Y[i][j] = X[index[i][j]][j] along `axis` (Y has the index's
shape). RoBERTa's exports gather their buffered token-type ids with it (integers: no gradient).

Training rule (PyTorch derivatives.yaml `gather`: self: gather_backward(grad, self, dim, index,
sparse_grad) = zeros scattered-added with dY at the index): calcDerivative reads dY and the index,
keeps the index (an integer tensor) only.
FLOPs: none forward (data movement), |Y| additions backward.
`--profile torch` (torch.gather, measured on torch 2.14 CPU): keeps the index when X needs a gradient;
backward allocates dX alone (zeros, scatter-added into in place).
"""
from __future__ import annotations

import numpy as np

from memplan_cli.ops.base import Canon, OpDef
from memplan_cli.ops.gather import constant_index_problem
from memplan_cli.ops.kernel_util import param_gradient, target
from memplan_cli.ops.rule import OpRule, StepIO, bp_targets, forward_io


def rule(op, ctx) -> OpRule:
    x, idx, y = op.inputs[0], op.inputs[1], op.outputs[0]
    r = OpRule(forward=forward_io(op))
    reads = [("bp", y), ("fwd", idx)]
    if bp_targets(op, ctx, [x]):
        r.calc_derivative = StepIO(list(reads), [("bp", x)])
    param_gradient(op, ctx, r, x, list(reads))
    return r


def _index(ctx, size):
    idx = np.asarray(ctx.x(1)).astype(np.int64)
    return np.where(idx < 0, idx + size, idx)


def _fit(x, idx, ax):
    """torch.gather reads only the first idx.shape[d] entries of every other axis d."""
    return x[tuple(slice(None) if d == ax else slice(0, n) for d, n in enumerate(idx.shape))]


def forward(ctx):
    x = np.asarray(ctx.x(0))
    ax = int(ctx.attrs["axis"])
    y = ctx.y()
    idx = _index(ctx, x.shape[ax])
    y[...] = np.take_along_axis(_fit(x, idx, ax), idx, axis=ax)


def calc_derivative(ctx):
    out = target(ctx, 0)
    if out is None:
        return
    ax = int(ctx.attrs["axis"])
    idx = _index(ctx, out.shape[ax])
    dy = np.asarray(ctx.dy())
    g = np.zeros(out.shape, dtype=dy.dtype)
    # every position of dY adds into the element it was gathered from (repeats accumulate)
    full = list(np.indices(idx.shape, sparse=True))
    full[ax] = idx
    np.add.at(_fit(g, idx, ax), tuple(full), dy)
    out[...] = g


def check(op, operands):
    xs, ix = operands[op.inputs[0]].shape, operands[op.inputs[1]].shape
    if len(xs) != len(ix):
        return f"gathers a rank-{len(ix)} index from a rank-{len(xs)} input"
    if not 0 <= int(op.attrs.get("axis", 0)) < max(len(xs), 1):
        return f"gathers along axis {op.attrs.get('axis')} of a rank-{len(xs)} input"
    return constant_index_problem(operands[op.inputs[1]], xs, int(op.attrs.get("axis", 0)))


def _flops(op, operands):
    return 0, operands[op.outputs[0]].num_elements


def _batch(op, graph, shapes, batched):
    """Y has the index's shape. Data re-batched under an index that keeps the file's batch (ViT-MAE's
    masking index, computed from noise drawn at the export's batch) would gather one sample only."""
    data, idx = op.inputs[0], op.inputs[1]
    old_d, old_i = graph.operands[data].shape, graph.operands[idx].shape
    if (int(op.attrs.get("axis", 0)) != 0 and old_d and old_i and old_d[0] == old_i[0]
            and shapes[data][0] != old_d[0] and shapes[idx][0] == old_i[0]):
        from memplan_cli.ir.graph import GraphError

        raise GraphError(f"cannot re-batch op {op.label}: its index keeps batch {old_i[0]} while its data "
                         f"takes batch {shapes[data][0]}")
    return [tuple(shapes[idx])]


OPS = [OpDef("GatherElements", rule=rule, kernels={"forward": forward, "calcDerivative": calc_derivative,
                                                   "calcGradient": calc_derivative},
             flops=_flops, required_inputs=2, check=check, nondiff_inputs=(1,), batch=_batch,
             # gather's backward (GatherBackward0, generated from derivatives.yaml's `gather_backward(grad,
             # self, dim, index, sparse_grad)`) keeps self and the index (measured: DeBERTa's c2p / p2c
             # score tensors held to backward)
             profiles={"torch": {"saves": (("in0", "g0"), ("in1", "g0"))}})]


def _onnx(node) -> Canon:
    rank = len(node.shape(0) or ())
    return Canon("GatherElements", {"axis": int(node.attrs.get("axis", 0)) % max(rank, 1)})


ONNX = {"GatherElements": _onnx}
