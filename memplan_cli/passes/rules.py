"""Per-op backward rules: the context rules run in, and the table of rules by op type.

The rule vocabulary (references, `OpRule`, `StepIO`, `ExtraRequest`, `fused_activation`) lives in
`memplan_cli.ops.rule`, beside the op registry; it is re-exported here for the passes and profiles.
"""
from __future__ import annotations

from memplan_cli import ops
from memplan_cli.ops.rule import (BACKWARD, FORWARD, FORWARD_TO_BACKWARD, LIFETIMES, MASKABLE_FUSED,  # noqa: F401
                                  MASKABLE_OPS, ExtraRequest, OpRule, Ref, StepIO, bp_targets, data_inputs,
                                  forward_io, fused_activation, maskable, plain_rule)


# the TrainingGraph fields a rule may read through its RuleContext (`ctx.tg`, `is_param`, `needs_bp`,
# `trains`, `kept_by_producer`): a pass that runs rules reads them all
RULE_READS = frozenset({"graph", "config", "frozen_params", "needs_bp", "trainable_ops", "backward_ops", "defs",
                        "rules"})


class RuleContext:
    """What a rule may ask about the training setup (filled by the earlier passes)."""

    def __init__(self, tg, policy):
        self.tg = tg
        self.graph = tg.graph
        self.policy = policy

    def operand(self, i):
        return self.graph.operands[i]

    def is_const(self, i) -> bool:
        return i >= 0 and self.graph.operands[i].is_const

    def is_param(self, i) -> bool:
        """A float constant of rank >= 1: a weight or bias the optimizer can update. A 0-d float
        constant is an epsilon, a scale or an exponent the exporter wrote (TorchScript's Constant
        nodes, dynamo's scalar initializers), not a module parameter: it stays frozen, unless the
        file names it a parameter (the dynamo graph signature; a TorchScript export's state-dict
        initializers): NFNet's `skipinit_gain`."""
        o = self.graph.operands[i] if i >= 0 else None
        return bool(o and o.is_const and o.dtype.startswith(("float", "bfloat"))
                    and (len(o.shape) > 0 or o.name in self._scalar_params())
                    and not o.computed and i not in self.tg.frozen_params)

    def _scalar_params(self) -> set:
        if not hasattr(self, "_scalars"):
            # a TorchScript export's initializers named by module path are its state dict (a 0-d
            # float buffer is rare); the values it made itself are named `/path/..._output_0`
            self._scalars = self.graph.signature_parameters() if self.graph.signature() else \
                {t for t in (self.graph.metadata or {}).get("state_dict_order") or () if not t.startswith("/")}
        return self._scalars

    def needs_bp(self, i) -> bool:
        return i >= 0 and i in self.tg.needs_bp

    def trains(self, op) -> bool:
        """Whether the op's weights are updated this step (it is selected and has weights)."""
        return op.index in self.tg.trainable_ops

    def kept_by_producer(self, i) -> bool:
        """Whether the op that defines operand i keeps it as a float for its own backward (e.g. a
        fused Tanh's derivative from its output), so reading it too costs nothing more. An output a
        ReLU-family derivative reads becomes a 1-bit mask under `policy.relu_mask`, so it does not count."""
        d = self.tg.defs.get(i)
        r = self.tg.rules.get(d)
        if r is None or i not in r.kept_forward():
            return False
        return not (self.policy.relu_mask and maskable(self.graph.operations[d]))


def default_rules() -> dict:
    """op type -> rule function, from the op registry (memplan_cli/ops/: one place per op)."""
    return {t: d.rule for t, d in ops.all_ops().items() if d.rule is not None}


__all__ = ["RULE_READS", "Ref", "ExtraRequest", "StepIO", "OpRule", "RuleContext", "fused_activation", "data_inputs",
           "default_rules", "FORWARD", "BACKWARD", "FORWARD_TO_BACKWARD"]
