"""The pass pipeline: forward graph + TrainConfig -> TrainingGraph.

    LoRAInsertion (only with --lora) -> TrainingConfiguration -> LossInsertion -> PrecisionDtypes -> BackwardRegion
    -> BackwardInsertion -> ActivationMasks -> Accumulation -> OptimizerState -> ExecutionOrder
    -> Rematerialization (only with a plan) -> CheapRecompute -> Aliasing -> CastCopies
    (PrecisionDtypes and CastCopies change nothing at --precision 32-true)

Profiles call `build_training_graph` with their own policy and rule overrides, then turn the result
into a BufferList (`TrainingGraph.to_buffer_list`).
"""
from __future__ import annotations

from memplan_cli.passes.accumulation import Accumulation
from memplan_cli.passes.activation_masks import ActivationMasks
from memplan_cli.passes.aliasing import Aliasing
from memplan_cli.passes.cheap_recompute import CheapRecompute
from memplan_cli.passes.backward_insertion import BackwardInsertion
from memplan_cli.passes.backward_region import BackwardRegion
from memplan_cli.passes.configure import TrainingConfiguration
from memplan_cli.passes.execution_order import ExecutionOrder
from memplan_cli.passes.lora import LoRAInsertion
from memplan_cli.passes.loss_insertion import LossInsertion, unreached_weights
from memplan_cli.passes.optimizer_state import OptimizerState
from memplan_cli.passes.policy import Policy
from memplan_cli.passes.precision import CastCopies, PrecisionDtypes
from memplan_cli.passes.rematerialize import Rematerialization
from memplan_cli.passes.rules import default_rules
from memplan_cli.passes.training_graph import TrainingGraph


def passes(policy: Policy, rules: dict, remat=(), config=None) -> list:
    lora = LoRAInsertion(getattr(config, "lora_rank", 0), getattr(config, "lora_targets", ()))
    return [lora, TrainingConfiguration(policy, rules), LossInsertion(), PrecisionDtypes(), BackwardRegion(policy),
            BackwardInsertion(policy, rules), ActivationMasks(policy), Accumulation(policy), OptimizerState(policy),
            ExecutionOrder(policy), Rematerialization(remat), CheapRecompute(policy), Aliasing(), CastCopies()]


def build_training_graph(graph, config, *, policy: Policy | None = None, rules: dict | None = None,
                         backward_order: list[int] | None = None, remat=()) -> TrainingGraph:
    """Run every pass. `rules` entries override the default per-op rules by op type.
    `backward_order`: op indices in the order a runtime runs backward (onert's), else the reverse
    forward order. `remat`: the forward ops whose results are dropped and recomputed
    (passes/rematerialize.py)."""
    policy = policy or Policy()
    table = default_rules()
    table.update(rules or {})
    tg = TrainingGraph(graph, config)
    if backward_order:
        tg.info["backward_order"] = list(backward_order)
    ran = []
    for p in passes(policy, table, remat, config):
        ran.append((p.name, p.run(tg)))
    tg.info["passes"] = ran
    tg.info["policy"] = policy
    tg.info["frozen_weights"] = unreached_weights(tg)
    return tg
