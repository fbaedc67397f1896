"""One remat problem: a model and training setup, its candidates, their costs, and a plan's figures.

Rules:
- The training graph is built once up to its execution order (the expensive part: rules, tensors,
  steps); each plan forks it and runs the rematerialization and aliasing passes, so a plan costs a
  few milliseconds to score.
- Candidates are `passes.rematerialize.droppable` (ops whose results backward needs and that can
  run again), in forward order. A dropped op runs its forward once more, so its cost is exactly its
  forward FLOPs (`passes/cost.py`), and a plan's added FLOPs are the sum over its dropped ops.
- A plan's memory figure here is the lower bound of its buffer list (most bytes live at one step);
  the solver plans the arena and checks it against the budget itself.
"""
from __future__ import annotations

import copy

from memplan_cli.passes.aliasing import Aliasing
from memplan_cli.passes.cheap_recompute import CheapRecompute
from memplan_cli.passes.cost import op_flops, step_flops
from memplan_cli.passes.pipeline import passes
from memplan_cli.passes.policy import Policy
from memplan_cli.passes.rematerialize import Rematerialization, droppable
from memplan_cli.passes.rules import default_rules
from memplan_cli.passes.training_graph import TrainingGraph
from memplan_cli.planners.bound import lower_bound


class RematProblem:
    def __init__(self, graph, config, policy: Policy | None = None, align: int = 16):
        self.graph = graph
        self.config = config
        self.policy = policy or Policy()
        self.align = align
        tg = TrainingGraph(graph, config)
        ran = []
        for p in passes(self.policy, default_rules(), config=config):
            if isinstance(p, (Rematerialization, CheapRecompute, Aliasing)):  # a remat plan runs without cheap recompute
                continue
            ran.append((p.name, p.run(tg)))
        tg.info["passes"] = ran
        tg.info["policy"] = self.policy
        self._base = tg
        self.candidates: list[int] = droppable(tg)
        full = self.build(())
        self.flops = step_flops(full)  # of the step without remat (None figures when unavailable)
        self.cost: dict[int, int | None] = {}
        self.graph = g = tg.graph  # the training graph's forward ops (LoRA adapters and the loss included)
        for k in self.candidates:
            f = op_flops(g.operations[k], g.operands)
            self.cost[k] = None if f is None else f[0]
        self._bounds: dict[frozenset, int] = {}

    @property
    def flops_available(self) -> bool:
        return self.flops.available and all(v is not None for v in self.cost.values())

    def build(self, drop) -> TrainingGraph:
        """The training graph of plan `drop` (a fork of the base: the base is never changed)."""
        b = self._base
        tg = copy.copy(b)
        tg.tensors = list(b.tensors)
        tg.steps = list(b.steps)
        tg.aliases = dict(b.aliases)
        tg.info = dict(b.info)
        Rematerialization(drop).run(tg)
        Aliasing().run(tg)
        return tg

    def buffer_list(self, drop):
        return self.build(drop).to_buffer_list(align=self.align)

    def bound(self, drop) -> int:
        """Lower bound (peak live bytes) of plan `drop`, cached."""
        key = frozenset(drop)
        v = self._bounds.get(key)
        if v is None:
            v = self._bounds[key] = self._lean_bound(self.build(key))
        return v

    def _lean_bound(self, tg) -> int:
        """`lower_bound` of `tg.to_buffer_list(align)` without building the Buffer objects: the same
        intervals (alias groups' unions, persistent over every step, live-out to the end) and sizes
        (the largest member, aligned); tests/remat checks the two agree."""
        from memplan_cli.passes.training_graph import align_up

        first: dict[int, int] = {}
        last: dict[int, int] = {}
        for s in tg.steps:
            i = s.index
            for t in s.touched():
                first.setdefault(t, i)
                last[t] = i
        end = len(tg.steps) - 1
        for t in tg.live_out:
            if t in first:
                last[t] = end
        for t in tg.persistent:
            first[t], last[t] = 0, end
        al = tg.aliases
        iv: dict[int, list] = {}
        for t, a in first.items():
            r = al.get(t, t)
            b = last[t]
            n = tg.tensors[t].nbytes
            cur = iv.get(r)
            if cur is None:
                iv[r] = [a, b, n]
            else:
                cur[0], cur[1], cur[2] = min(cur[0], a), max(cur[1], b), max(cur[2], n)
        for t, r in al.items():  # a member no step touches still sizes its group's buffer
            if r in iv and t not in first:
                iv[r][2] = max(iv[r][2], tg.tensors[t].nbytes)
        vals = list(iv.values())
        return lower_bound([align_up(v[2], self.align) for v in vals], [v[0] for v in vals], [v[1] for v in vals])

    def added_flops(self, drop) -> int:
        return sum(self.cost[k] or 0 for k in drop)

    @property
    def evaluations(self) -> int:
        return len(self._bounds)
