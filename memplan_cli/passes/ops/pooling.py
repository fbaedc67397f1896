"""MaxPool2D and AvgPool2D.

Rules:
- AvgPool: dX spreads dY evenly over each window: reads dY only; keeps nothing.
- MaxPool: dX routes dY to each window's maximum. memplan (`policy.maxpool_recompute`): when the
  input X is kept anyway (its producer reads it in backward, e.g. a fused ReLU's output), backward
  recomputes the argmax from X at no memory cost; otherwise forward writes a 1-byte window index per
  output element (uint8, windows up to 256 elements), FORWARD_TO_BACKWARD. Off (onert): an int32
  argmax of |Y| from forward to backward.
- Nothing is kept or requested when X needs no back-prop (a pool before the first trained op).
- A fused activation's derivative comes from Y (see `rules.fused_activation`).
"""
from __future__ import annotations

from memplan_cli.passes.ops._common import bp_targets, forward_io
from memplan_cli.passes.rules import FORWARD_TO_BACKWARD, ExtraRequest, OpRule, StepIO, fused_activation


def _window(op) -> int:
    f = op.attrs.get("filter") or op.attrs.get("kernel_shape") or op.attrs.get("ksize")
    n = 1
    for d in f or ():
        n *= int(d)
    return n if f else 0


def max_pool(op, ctx) -> OpRule:
    x, y = op.inputs[0], op.outputs[0]
    rule = OpRule(forward=forward_io(op))
    if not bp_targets(op, ctx, [x]):
        return rule
    rule.calc_derivative = StepIO([("bp", y)], [("bp", x)])
    if ctx.policy.maxpool_recompute and ctx.kept_by_producer(x):
        rule.calc_derivative.reads.append(("fwd", x))
        rule.note = "argmax recomputed from the kept input"
    else:
        small = ctx.policy.maxpool_recompute and 0 < _window(op) <= 256
        dtype = "uint8" if small else "int32"
        rule.extras.append(ExtraRequest("window_index" if small else "arg_max", ctx.operand(y).shape,
                                        dtype, FORWARD_TO_BACKWARD))
        rule.forward.writes.append(("extra", 0))
        rule.calc_derivative.reads.append(("extra", 0))
    fused_activation(op, ctx, rule, y)
    return rule


def avg_pool(op, ctx) -> OpRule:
    x, y = op.inputs[0], op.outputs[0]
    rule = OpRule(forward=forward_io(op))
    if bp_targets(op, ctx, [x]):
        rule.calc_derivative = StepIO([("bp", y)], [("bp", x)])
    fused_activation(op, ctx, rule, y)
    return rule


RULES = {"MaxPool2D": max_pool, "AvgPool2D": avg_pool}
