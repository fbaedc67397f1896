"""Pass (stage training, after accumulation): optimizer state tensors."""
from __future__ import annotations

from memplan_cli.passes.infra import Pass


class OptimizerState(Pass):
    """Rules:
    - sgd: no state; momentum: one tensor per trained weight (velocity); adam: two (m, v).
    - Each state tensor has its weight's shape, category opt-variable, and is persistent (it carries
      over between steps).
    - State only for weights an op trains (none for frozen layers or integer constants); with
      `policy.opt_state_all_constants` (onert) every constant gets state.
    """

    name = "optimizer-state"
    reads = frozenset({"config", "graph", "grad", "fwd"})
    writes = frozenset({"opt_state", "tensors", "persistent"})
    SUFFIXES = {0: (), 1: ("m",), 2: ("m", "v")}

    def __init__(self, policy):
        self.policy = policy

    def run(self, tg) -> bool:
        n = tg.config.optimizer_state_count
        if n == 0:
            return False
        if self.policy.opt_state_all_constants:
            targets = sorted(v for v, t in tg.fwd.items() if tg.graph.operands[v].is_const)
        else:
            targets = sorted(tg.grad)
        for w in targets:
            o = tg.graph.operands[w]
            tg.opt_state[w] = []
            for s in self.SUFFIXES[n]:
                t = tg.add_tensor(f"{o.name}:{s}", "opt-variable", o.shape, o.dtype, "opt-state",
                                  tg.tensors[tg.grad[w]].op if w in tg.grad else None, w)
                tg.persistent.add(t)
                tg.opt_state[w].append(t)
        return bool(targets)
