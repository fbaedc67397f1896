"""Pass (stage graph, after LoRA insertion): resolve the training configuration against the graph."""
from __future__ import annotations

import copy

from memplan_cli import ops
from memplan_cli.passes.infra import Pass
from memplan_cli.passes.rules import RULE_READS, RuleContext


class _Probe(RuleContext):
    """Asks a rule which operands are its weights: as if the op trained and no input needed a back-prop."""

    def needs_bp(self, i) -> bool:
        return False

    def trains(self, op) -> bool:
        return True

    def kept_by_producer(self, i) -> bool:
        return False


class TrainingConfiguration(Pass):
    """Rules:
    - The graph is copied (its lists; an operand or op is copied before a pass changes it): passes
      never change the caller's forward graph.
    - Trainable ops come from `TrainConfig.trainable` (all | none | the last N ops counting every op,
      as onert does | an explicit index list), narrowed by `--train ops:GLOB` / `--freeze ops:GLOB`.
    - With LoRA adapters (passes/lora.py) the adapter ops are selected and every weight of the
      model is frozen (but the biases, with `--train biases`).
    - Frozen weights (`--train biases`: all but the biases; `--freeze params:GLOB`) are not
      parameters for the rules (`RuleContext.is_param`): no gradient, no optimizer state, and no
      activation kept only to compute their gradients. The circle training metadata and the flags were merged
      before (`commands.options.config_from_flags`: flags win over metadata, metadata over defaults).
    - An op trains (its weights get gradients and updates) when it is selected and its rule declares
      weights (rules are asked with a probe context). An op without a rule trains when it has a float
      constant input. Selected ops without parameters (ReLU, Softmax, a Clip's bound constants) train
      nothing.
    """

    name = "training-configuration"
    reads = frozenset({"config", "lora"}) | RULE_READS
    writes = frozenset({"graph", "model_ops", "frozen_params", "selected_ops", "trainable_ops"})

    def __init__(self, policy=None, rules: dict | None = None):
        self.policy = policy
        self.rules = rules or {}

    def run(self, tg) -> bool:
        g = tg.graph
        # new lists, shared items: passes append to the lists and copy any item before changing it
        tg.graph = g = copy.copy(g)
        g.operands, g.operations = list(g.operands), list(g.operations)
        g.inputs, g.outputs = list(g.inputs), list(g.outputs)
        tg.model_ops = len(g.operations)
        selected = tg.config.selected_ops(g)
        biases = ops.bias_operands(g) if "biases" in tg.config.train else set()
        tg.frozen_params = tg.config.frozen_params(g, biases)
        lora = tg.lora
        if lora:  # the adapters train (passes/lora.py); the model's own weights stay frozen
            selected |= {op.index for op in g.operations if op.source_type == "LoRA"}
            tg.frozen_params |= lora.frozen - biases
        tg.selected_ops = set(selected)

        probe = _Probe(tg, self.policy)

        def has_params(op):
            if not any(probe.is_param(i) for i in op.inputs):
                return False
            fn = self.rules.get(op.type)
            if fn is not None:
                return bool(fn(op, probe).weights)
            return True

        tg.trainable_ops = {i for i in selected if has_params(g.operations[i])}
        return True
