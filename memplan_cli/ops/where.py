"""Where (ONNX Where, TFLite SELECT_V2 and SELECT): Y = cond ? X : Y', broadcasting all three.

Training rule (PyTorch derivatives.yaml `where.self`: condition: non_differentiable; self:
where(condition, grad, 0); other: where(condition, 0, grad)): saves the condition only.
- The condition (input 0, boolean) is never differentiable.
- calcDerivative: dX = Σ_broadcast where(cond, dY, 0), dY' = Σ_broadcast where(cond, 0, dY); reads
  the condition and dY. A float constant branch (e.g. a -inf fill of an attention mask) is a
  parameter, as for the elementwise ops: it gets its gradient in calcGradient when the op trains.
- Kept for backward: the condition (one byte per element).
FLOPs: forward one select per output element; backward one per element per side.
Refused: TFLite SELECT (v1) whose condition is not shaped like X (it then selects whole rows).
"""
from __future__ import annotations

import numpy as np

from memplan_cli.kernels.common import reduce_to_shape
from memplan_cli.ops.base import Canon, OpDef
from memplan_cli.ops.rule import OpRule, StepIO, bp_targets, forward_io


def rule(op, ctx) -> OpRule:
    c, y = op.inputs[0], op.outputs[0]
    branches = [i for i in dict.fromkeys(op.inputs[1:3]) if i >= 0]
    weights = [i for i in branches if ctx.is_param(i)]
    r = OpRule(forward=forward_io(op), weights=weights)
    if weights and ctx.trains(op):
        r.calc_gradient = StepIO([("fwd", c), ("bp", y)], [("grad", w) for w in weights])
    targets = bp_targets(op, ctx, branches)
    if targets:
        r.calc_derivative = StepIO([("fwd", c), ("bp", y)], [("bp", t) for t in targets])
    return r


def forward(ctx):
    y = ctx.y()
    y[...] = np.where(ctx.x(0), ctx.x(1), ctx.x(2))


def _back(out_of):
    def step(ctx):
        outs = [(k, out_of(ctx, k)) for k in (1, 2)]
        outs = [(k, o) for k, o in outs if o is not None]
        if not outs:
            return
        c, dy = np.asarray(ctx.x(0), dtype=bool), np.asarray(ctx.dy())
        parts = [(o, reduce_to_shape(np.where(c, dy, 0) if k == 1 else np.where(c, 0, dy), o.shape))
                 for k, o in outs]
        if len(outs) == 2 and ctx.operand_in(1) == ctx.operand_in(2):
            parts = [(outs[0][1], parts[0][1] + parts[1][1])]
        for o, g in parts:
            o[...] = g
    return step


def check(op, operands):
    shapes = [tuple(operands[i].shape) for i in op.inputs[:3]]
    try:
        out = np.broadcast_shapes(*shapes)
    except ValueError:
        return f"cannot broadcast {shapes[0]}, {shapes[1]} and {shapes[2]} together"
    if out != tuple(operands[op.outputs[0]].shape):
        return f"broadcasts to {out}, not its output {tuple(operands[op.outputs[0]].shape)}"
    if op.attrs.get("rows") and shapes[0] != shapes[1]:
        return "is a TFLite SELECT whose condition selects whole rows"
    return None


def _flops(op, operands):
    n = operands[op.outputs[0]].num_elements
    return n, 2 * n


def _batch(op, graph, shapes, batched):
    try:
        return [tuple(np.broadcast_shapes(*(tuple(shapes[i]) for i in op.inputs[:3])))]
    except ValueError:
        from memplan_cli.ir.graph import GraphError

        raise GraphError(f"cannot re-batch op {op.label}: its inputs no longer broadcast") from None


OPS = [OpDef("Where", rule=rule, kernels={"forward": forward, "calcGradient": _back(lambda c, k: c.grad(k)),
                                         "calcDerivative": _back(lambda c, k: c.dx(k))},
             flops=_flops, required_inputs=3, check=check, nondiff_inputs=(0,), batch=_batch,
             profiles={"torch": {"saves": (("in0", "any"),)}})]  # `--profile torch`: where keeps its condition


def _where(node) -> Canon:
    return Canon("Where", {})


def _select_v1(node) -> Canon:
    # SELECT (v1) does not broadcast, except a 1-D condition that picks rows: refused by check
    return Canon("Where", {} if node.shape(0) == node.shape(1) else {"rows": True})


ONNX = {"Where": _where}
TFLITE = {"SELECT_V2": _where, "SELECT": _select_v1}
