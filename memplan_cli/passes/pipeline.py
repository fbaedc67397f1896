"""The pass pipeline: forward graph + TrainConfig -> TrainingGraph.

Three stages (`memplan_pipeline`), each pass declaring the TrainingGraph fields it reads and writes
(passes/infra.py):

    graph:    LoRAInsertion (only with --lora) -> TrainingConfiguration -> LossInsertion
              -> PrecisionDtypes
    training: BackwardRegion -> BackwardInsertion -> ActivationMasks -> Accumulation
              -> OptimizerState -> ExecutionOrder
    memory:   Rematerialization (only with a plan) -> CheapRecompute -> Aliasing -> CastCopies
    (PrecisionDtypes and CastCopies change nothing at --precision 32-true)

Profiles call `build_training_graph` with their own policy and rule overrides, then turn the result
into a BufferList (`TrainingGraph.to_buffer_list`). The remat problem (remat/problem.py) runs the
graph and training stages once and the memory stage once per plan.
"""
from __future__ import annotations

import contextlib
import contextvars

from memplan_cli.errors import UnsupportedOpError
from memplan_cli.passes.accumulation import Accumulation
from memplan_cli.passes.activation_masks import ActivationMasks
from memplan_cli.passes.aliasing import Aliasing
from memplan_cli.passes.cheap_recompute import CheapRecompute
from memplan_cli.passes.backward_insertion import BackwardInsertion
from memplan_cli.passes.backward_region import BackwardRegion
from memplan_cli.passes.configure import TrainingConfiguration
from memplan_cli.passes.execution_order import ExecutionOrder
from memplan_cli.passes.infra import Pipeline
from memplan_cli.passes.lora import LoRAInsertion
from memplan_cli.passes.loss_insertion import LossInsertion, quantized_weights, unreached_weights
from memplan_cli.passes.optimizer_state import OptimizerState
from memplan_cli.passes.policy import Policy
from memplan_cli.passes.precision import CastCopies, PrecisionDtypes
from memplan_cli.passes.rematerialize import Rematerialization
from memplan_cli.passes.rules import default_rules
from memplan_cli.passes.training_graph import TrainingGraph


# how many smaller N `trainable_hint` tries (each one builds the training graph once more)
HINT_TRIES = 8


def trainable_hint(e: UnsupportedOpError, graph, config, model_ops: int, build) -> UnsupportedOpError:
    """`e` (an op without a backward rule) with advice that holds: the largest --trainable-ops N that
    keeps that op out of the backward region, lowered past every other such op until `build` accepts
    the setup. Advice that would only lead to a second refusal is never given."""
    if not isinstance(config.trainable, (str, int)) or config.trainable == "none":
        return e
    base = e.message.rsplit(" (train fewer ops", 1)[0]
    k, tail = e.op_index, e.hint_tail
    for _ in range(HINT_TRIES):
        n = model_ops - k - 1
        if n < 1:
            break
        try:
            build(config.with_(trainable=n))
        except UnsupportedOpError as again:
            if getattr(again, "op_index", None) is None or again.op_index <= k:
                break
            k = again.op_index
            continue
        except Exception:  # another refusal: advise nothing rather than a step that fails elsewhere
            break
        return UnsupportedOpError(f"{base} (train fewer ops: --trainable-ops {n}, the last {n} ops, is "
                                  f"accepted{tail})", e.path)
    return UnsupportedOpError(f"{base} (no --trainable-ops N keeps every op without a backward rule out of "
                              f"the backward region{tail})", e.path)


GRAPH, TRAINING, MEMORY = "graph", "training", "memory"
STAGES = (GRAPH, TRAINING, MEMORY)


def memplan_pipeline(policy: Policy, rules: dict, remat=(), config=None) -> Pipeline:
    """The pipeline every profile builds its training graph with (`rules`: the resolved table)."""
    lora = LoRAInsertion(getattr(config, "lora_rank", 0), getattr(config, "lora_targets", ()))
    return Pipeline([
        (GRAPH, [lora, TrainingConfiguration(policy, rules), LossInsertion(), PrecisionDtypes()]),
        (TRAINING, [BackwardRegion(policy), BackwardInsertion(policy, rules), ActivationMasks(policy),
                    Accumulation(policy), OptimizerState(policy), ExecutionOrder(policy)]),
        (MEMORY, [Rematerialization(remat), CheapRecompute(policy), Aliasing(), CastCopies()]),
    ])


# inside `shared_builds()`: the training graphs built with the default rules, by (graph, setup, policy)
_SHARED: contextvars.ContextVar[dict | None] = contextvars.ContextVar("memplan_shared_builds", default=None)


@contextlib.contextmanager
def shared_builds():
    """Within this block, `build_training_graph` on the same graph object with an equal setup and
    policy, the default rules, no remat and no backward order returns the graph it built the first
    time (`memplan compare` and `sweep -p memplan -p torch`: memplan's and the torch profile's step on a
    file with no dynamo rewrite are one build). Forgotten when the block ends."""
    token = _SHARED.set({})
    try:
        yield
    finally:
        _SHARED.reset(token)


def build_training_graph(graph, config, *, policy: Policy | None = None, rules: dict | None = None,
                         backward_order: list[int] | None = None, remat=(), advise: bool = True) -> TrainingGraph:
    """Run every pass. `rules` entries override the default per-op rules by op type.
    `backward_order`: op indices in the order a runtime runs backward (onert's), else the reverse
    forward order. `remat`: the forward ops whose results are dropped and recomputed
    (passes/rematerialize.py). `advise`: an op without a backward rule is refused with a
    --trainable-ops N that was checked to be accepted (trainable_hint). Inside `shared_builds()`, a
    build it already made with the default rules is returned again."""
    policy = policy or Policy()
    shared = _SHARED.get()
    if shared is None or rules or backward_order or remat:
        return _build(graph, config, policy, rules, backward_order, remat, advise)
    key = (id(graph), config, repr(sorted(config.sources.items())), policy, advise)
    if key not in shared:
        # the graph is kept beside its build, so that its id is not reused while the block lasts
        shared[key] = (graph, _build(graph, config, policy, rules, backward_order, remat, advise))
    return shared[key][1]


def _build(graph, config, policy: Policy, rules, backward_order, remat, advise: bool) -> TrainingGraph:
    table = default_rules()
    table.update(rules or {})
    tg = TrainingGraph(graph, config)
    if backward_order:
        tg.backward_order = list(backward_order)
    try:
        ran = memplan_pipeline(policy, table, remat, config).run(tg)
    except UnsupportedOpError as e:
        if getattr(e, "op_index", None) is None or not advise:
            raise
        raise trainable_hint(e, graph, config, tg.model_ops,
                             lambda cfg: build_training_graph(graph, cfg, policy=policy, rules=rules,
                                                              backward_order=backward_order, remat=remat,
                                                              advise=False)) from None
    finish(tg, ran, policy)
    return tg


def finish(tg: TrainingGraph, ran, policy: Policy) -> None:
    """What the caller records after the passes: which ran, the policy, the weights no loss reaches."""
    tg.ran = list(ran)
    tg.policy = policy
    tg.frozen_weights = unreached_weights(tg) + quantized_weights(tg)
