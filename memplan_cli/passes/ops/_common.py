"""Helpers shared by the op-family rule modules."""
from __future__ import annotations

from memplan_cli.passes.rules import OpRule, StepIO


def forward_io(op) -> StepIO:
    """A forward step reads every present input and writes every output."""
    return StepIO([("fwd", i) for i in dict.fromkeys(op.inputs) if i >= 0], [("fwd", o) for o in op.outputs])


def plain_rule(op) -> OpRule:
    return OpRule(forward=forward_io(op))


def bp_targets(op, ctx, inputs=None) -> list[int]:
    """The op's non-constant inputs whose back-prop someone needs."""
    cand = op.inputs if inputs is None else inputs
    return [i for i in dict.fromkeys(cand) if i >= 0 and not ctx.is_const(i) and ctx.needs_bp(i)]
