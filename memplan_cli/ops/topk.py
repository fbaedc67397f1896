"""TopK (ONNX; torch.topk, torch.sort): the k largest (or smallest) elements along `axis` and their
int64 positions. A mixture of experts routes with it (JetMoE: `logits.topk(k)`, then a softmax of
the values: the gates); the dynamo exporter writes `sort` as a TopK over the whole axis.

Training rule (PyTorch derivatives.yaml `topk`: self: value_selecting_reduction_backward_symint(grad,
dim, indices, self.sym_sizes(), true), which makes zeros of self's size and scatters the values'
gradient in at the indices): calcDerivative reads dY of the values and the indices output (an
integer tensor), nothing of X. The indices carry no gradient.
FLOPs: none (a selection: comparisons, not counted, as for max pooling's); backward none either
(a scatter of |Y| values).
`--profile torch` (derivatives.yaml above): forward saves the indices when X needs a gradient;
backward allocates dX alone (zeros, scattered into in place).
"""
from __future__ import annotations

import numpy as np

from memplan_cli.ops.base import Canon, OpDef
from memplan_cli.ops.kernel_util import target
from memplan_cli.ops.rule import OpRule, StepIO, bp_targets, forward_io


def rule(op, ctx) -> OpRule:
    x, (y, idx) = op.inputs[0], op.outputs[:2]
    r = OpRule(forward=forward_io(op))
    if bp_targets(op, ctx, [x]):
        r.calc_derivative = StepIO([("bp", y), ("fwd", idx)], [("bp", x)])
    return r


def _k(ctx) -> int:
    return int(ctx.tg.graph.operands[ctx.op.outputs[0]].shape[int(ctx.attrs["axis"])])


def forward(ctx):
    x = np.asarray(ctx.x(0))
    ax, k = int(ctx.attrs["axis"]), _k(ctx)
    # a stable sort (equal values keep their order, lower index first, as ONNX's TopK asks)
    order = np.argsort(-x if ctx.attrs.get("largest", 1) else x, axis=ax, kind="stable")
    idx = np.take(order, np.arange(k), axis=ax)
    ctx.y(0)[...] = np.take_along_axis(x, idx, axis=ax)
    ctx.y(1)[...] = idx


def calc_derivative(ctx):
    dx = target(ctx, 0)
    if dx is None:
        return
    ax = int(ctx.attrs["axis"])
    g = np.zeros(dx.shape, dtype=dx.dtype)
    np.put_along_axis(g, np.asarray(ctx.y(1)).astype(np.int64), np.asarray(ctx.dy(0)), axis=ax)
    dx[...] = g


def check(op, operands):
    if len(op.outputs) < 2 or op.outputs[1] < 0:
        return "has no indices output"
    xs, ys = operands[op.inputs[0]].shape, operands[op.outputs[0]].shape
    ax = int(op.attrs.get("axis", -1))
    if len(xs) != len(ys) or not 0 <= ax < len(xs) or ys[ax] > xs[ax]:
        return f"takes {list(ys)} from {list(xs)} along axis {ax}"
    return None


OPS = [OpDef("TopK", rule=rule, kernels={"forward": forward, "calcDerivative": calc_derivative},
             flops=lambda op, operands: (0, 0), required_inputs=1, check=check, nondiff_inputs=(1,),
             nondiff_outputs=(1,),
             profiles={"torch": {"saves": (("out1", "g0"),)}})]


def _onnx(node) -> Canon:
    rank = len(node.shape(0) or ())
    attrs = {"axis": int(node.attrs.get("axis", -1)) % max(rank, 1), "largest": int(node.attrs.get("largest", 1)),
             "sorted": int(node.attrs.get("sorted", 1))}
    return Canon("TopK", attrs, inputs=node.inputs[:1])


ONNX = {"TopK": _onnx}
