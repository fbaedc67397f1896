"""One remat problem: a model and training setup, its candidates, their costs, and a plan's figures.

Rules:
- The training graph is built once up to its execution order (the expensive part: rules, tensors,
  steps); each plan forks it and runs the rematerialization and aliasing passes, so a plan costs a
  few milliseconds to score.
- Candidates are `passes.rematerialize.candidates` (ops that can run again and whose results a later
  step reads), in forward order; `narrow` the subset whose results backward reads (Chen's segments
  run over those). A plan (`passes/rematerialize.py`) recomputes each dropped op once
  or before every use; its added FLOPs are the forward FLOPs (`passes/cost.py`) of every recompute
  step the pass inserts (chains and repeats included).
- One model of the step: the problem runs the memplan profile's own pipeline
  (`passes.pipeline.memplan_pipeline`): its graph and training stages once, and its memory stage
  (rematerialization with the plan, cheap recompute, aliasing, cast copies) once per plan, on a
  fork of that step that copies every field the memory stage writes. So a plan's figures
  here are those of the step `analyze --budget` reports and `verify --budget` runs, and the plain
  step (no plan) is memplan's own plan without a budget.
- A plan's added FLOPs are every recompute step's forward FLOPs (`passes/cost.py` counts a recompute
  step like a forward step) less those of the plain step's own cheap recomputes.
- A plan's memory figure here is the lower bound of its buffer list (most bytes live at one step);
  the solver plans the arena and checks it against the budget itself.
- The relaxation (`full.py`) is built on `relaxed_step()`, the step without any recompute: every
  plan above (cheap recomputes included) is that step with forward ops run again, so what the
  relaxation proves of that space holds for the step memplan runs.
"""
from __future__ import annotations

import bisect
import copy
from dataclasses import replace

from memplan_cli.passes.cost import op_flops, step_flops
from memplan_cli.passes.pipeline import GRAPH, MEMORY, TRAINING, finish, memplan_pipeline
from memplan_cli.passes.policy import Policy
from memplan_cli.passes.rematerialize import candidates, droppable, each_ok, forward_end
from memplan_cli.passes.rules import default_rules
from memplan_cli.passes.training_graph import TrainingGraph, align_up
from memplan_cli.planners.bound import lower_bound


RECENT = 8  # plans whose training graphs stay cached for `holders`


class RematProblem:
    def __init__(self, graph, config, policy: Policy | None = None, align: int = 16, planner: str | None = None):
        self.graph = graph
        self.config = config
        self.policy = policy or Policy()
        self.align = align
        self.planner = planner
        self._rules = default_rules()
        tg = TrainingGraph(graph, config)
        ran = self._pipeline(()).run(tg, stages=(GRAPH, TRAINING))
        finish(tg, ran, self.policy)
        self._base = tg
        self.candidates: list[int] = candidates(tg)
        self.narrow: list[int] = droppable(tg)
        self.each_ok: set[int] = each_ok(tg) & set(self.candidates)
        self._added: dict[frozenset, int] = {}
        self._profiles: dict[frozenset, list] = {}
        self._steps_built = 0
        self._recent: dict[frozenset, tuple] = {}  # the last RECENT plans scored: (graph, intervals)
        self.graph = g = tg.graph  # the training graph's forward ops (LoRA adapters and the loss included)
        self._op_cost: dict[int, int | None] = {}
        self.cost: dict[int, int | None] = {k: self.op_cost(k) for k in self.candidates}
        plain = self.build(())
        self.flops = step_flops(plain)  # of memplan's own step without a budget (None figures when unavailable)
        self._plain_rerun = self._rerun_flops(plain)  # what its own cheap recomputes cost
        self._bounds: dict[frozenset, int] = {}
        self._spans: dict[frozenset, dict] = {}
        writer = {t: s.op for s in tg.steps if s.kind == "forward" for t in s.writes}
        # op -> the candidates whose results its forward step reads (for chains)
        self.fwd_reads: dict[int, list[int]] = {
            s.op: sorted({writer[t] for t in s.reads if writer.get(t) in self.cost and writer[t] != s.op})
            for s in tg.steps if s.kind == "forward"}
        self.block: dict[int, list[int]] = _blocks(tg, self.candidates)
        self._full = None

    def _pipeline(self, drop, cheap: bool = True):
        """The memplan profile's own pipeline for plan `drop` (`cheap`: False leaves cheap recompute
        out, for the relaxation's step only)."""
        policy = self.policy if cheap else replace(self.policy, cheap_recompute=False)
        return memplan_pipeline(policy, self._rules, remat=drop, config=self.config)

    def op_cost(self, k: int) -> int | None:
        """Forward FLOPs of op k (what one recompute step of it costs)."""
        if k not in self._op_cost:
            f = op_flops(self.graph.operations[k], self.graph.operands)
            self._op_cost[k] = None if f is None else f[0]
        return self._op_cost[k]

    def _rerun_flops(self, tg) -> int:
        """Forward FLOPs of every step after the forward pass that runs a forward op again."""
        f = forward_end(tg)
        return sum(self.op_cost(s.op) or 0 for s in tg.steps[f:] if s.kind == "forward" and s.op >= 0)

    @property
    def full(self):
        """The relaxation of the whole remat space (`full.py`), built once."""
        if self._full is None:
            from memplan_cli.remat import full

            self._full = full.build(self)
        return self._full

    @property
    def flops_available(self) -> bool:
        return self.flops.available and all(v is not None for v in self.cost.values())

    @property
    def cheap_flops(self) -> int:
        """FLOPs the plain step's own cheap recomputes add to the step without any recompute (the
        relaxation's step): its bounds on added FLOPs are rebased by this much."""
        return self._plain_rerun

    def build(self, drop, cheap: bool = True) -> TrainingGraph:
        """The training graph of plan `drop` (a fork of the base: the base is never changed), through
        the rest of the profile's own pass list."""
        pipeline = self._pipeline(frozenset(drop), cheap)
        tg = fork(self._base, pipeline.stage(MEMORY))
        ran = pipeline.run(tg, stages=(MEMORY,))
        tg.ran = tg.ran + ran
        return tg

    def relaxed_step(self) -> TrainingGraph:
        """The step without any recompute (no plan, no cheap recompute): what `full.py` relaxes."""
        return self.build((), cheap=False)

    def buffer_list(self, drop):
        return self.build(drop).to_buffer_list(align=self.align)

    def bound(self, drop) -> int:
        """Lower bound (peak live bytes) of plan `drop`, cached."""
        key = frozenset(drop)
        v = self._bounds.get(key)
        if v is None:
            tg = self.build(key)
            self._steps_built += len(tg.steps)
            vals = self._intervals(tg)
            self._remember(key, tg, vals)  # the greedy asks for these plans' holders next
            prof = _live_bytes(vals, len(tg.steps))
            self._profiles[key] = prof
            v = self._bounds[key] = max(prof, default=0)
            self._added[key] = self._rerun_flops(tg) - self._plain_rerun
            self._spans[key] = self._held_spans(tg, vals)
        return v

    def _remember(self, key, tg, vals) -> None:
        """Keep plan `key`'s training graph and intervals among the RECENT last ones."""
        self._recent[key] = (tg, vals)
        while len(self._recent) > RECENT:
            self._recent.pop(next(iter(self._recent)))

    def _intervals(self, tg):
        """(aligned size, first, last, members) per buffer of `tg.to_buffer_list(align)`, without
        building the Buffer objects: alias groups' unions, persistent over every step, live-out to
        the end; the largest member sizes the buffer."""
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
                iv[r] = [a, b, n, [t]]
            else:
                cur[0], cur[1], cur[2] = min(cur[0], a), max(cur[1], b), max(cur[2], n)
                cur[3].append(t)
        for t, r in al.items():  # a member no step touches still sizes its group's buffer
            if r in iv and t not in first:
                iv[r][2] = max(iv[r][2], tg.tensors[t].nbytes)
        return [(align_up(v[2], self.align), v[0], v[1], v[3]) for v in iv.values()]

    def _lean_bound(self, tg) -> int:
        """`lower_bound` of `tg.to_buffer_list(align)` (tests/remat checks the two agree)."""
        vals = self._intervals(tg)
        return lower_bound([v[0] for v in vals], [v[1] for v in vals], [v[2] for v in vals])

    def holders(self, drop, target: int) -> dict[int, int]:
        """Candidate ops whose results (originals or copies) plan `drop` holds, untouched, at a step
        where more than `target` bytes are live: op -> bytes x such steps (where to cut next)."""
        key = frozenset(drop)
        if key not in self._recent:
            tg = self.build(key)
            self._remember(key, tg, self._intervals(tg))
        tg, vals = self._recent[key]
        prof = self._profiles.get(key) or _live_bytes(vals, len(tg.steps))
        over = [t for t, live in enumerate(prof) if live > target]
        if not over:
            return {}
        writer = {w: s.op for s in tg.steps if s.kind == "forward" for w in s.writes}
        overset = set(over)
        touching: dict[int, set] = {}  # tensor -> the over-target steps that touch it
        for t in over:
            for u in tg.steps[t].touched():
                touching.setdefault(u, set()).add(t)
        out: dict[int, int] = {}
        cost = self.cost
        for size, a, b, mem in vals:
            ks = {k for k in (writer.get(u) for u in mem) if k in cost}
            if not ks:
                continue
            lo, hi = bisect.bisect_left(over, a), bisect.bisect_right(over, b)
            if lo == hi:
                continue
            busy = set().union(*(touching.get(u, ()) for u in mem)) & overset
            hits = hi - lo - sum(1 for t in busy if a <= t <= b)
            if hits:
                for k in ks:
                    out[k] = out.get(k, 0) + size * hits
        return out

    def spans(self, drop) -> dict[int, int]:
        """Candidate op -> bytes x steps its results' buffers (originals or copies) are held under
        plan `drop`, steps counted as in the step without recomputes (a recompute step counts with
        the step it runs before), so two plans' figures compare: what a change made held longer.
        Cached with the plan's bound."""
        key = frozenset(drop)
        if key not in self._spans:
            self.bound(key)
        return self._spans[key]

    def _held_spans(self, tg, vals) -> dict[int, int]:
        orig, n = [], 0
        for st in tg.steps:
            orig.append(n)
            if not st.label.endswith("(recompute)"):
                n += 1
        writer = {w: st.op for st in tg.steps if st.kind == "forward" for w in st.writes}
        out: dict[int, int] = {}
        for size, a, b, mem in vals:
            for k in {writer.get(u) for u in mem} & self.cost.keys():
                out[k] = out.get(k, 0) + size * (orig[b] - orig[a] + 1)
        return out

    def excess(self, drop, target: int) -> int:
        """Bytes over `target` summed over the steps of plan `drop` (how far it is from fitting)."""
        key = frozenset(drop)
        self.bound(key)
        return sum(v - target for v in self._profiles[key] if v > target)

    def added_flops(self, drop) -> int:
        """FLOPs of every recompute step plan `drop` inserts (cached with its bound)."""
        key = frozenset(drop)
        if key not in self._added:
            self.bound(key)
        return self._added[key]

    @property
    def steps_built(self) -> int:
        """Work spent scoring plans, in training steps built (deterministic, not time)."""
        return self._steps_built

    @property
    def effort(self) -> float:
        """Work spent scoring plans, in plans the size of the plain step (deterministic, not time)."""
        return self._steps_built / max(len(self._base.steps), 1)

    @property
    def evaluations(self) -> int:
        return len(self._bounds)


def fork(base: TrainingGraph, stage) -> TrainingGraph:
    """A copy of `base` that `stage`'s passes can run on without changing it: a new container for
    every field they declare they write (the items are shared: passes replace an item they change)."""
    tg = copy.copy(base)
    for name in sorted({f for p in stage.passes for f in p.writes}):
        value = getattr(base, name)
        if isinstance(value, (list, dict, set)):
            setattr(tg, name, copy.copy(value))
    return tg


def _live_bytes(vals, n: int) -> list[int]:
    """Bytes live at each of `n` steps, from (size, first, last, members) intervals: one sweep."""
    delta = [0] * (n + 1)
    for size, a, b, _ in vals:
        delta[a] += size
        delta[b + 1] -= size
    out, cur = [], 0
    for t in range(n):
        cur += delta[t]
        out.append(cur)
    return out


def _blocks(tg, cands) -> dict[int, list[int]]:
    """Candidate -> the candidates of its block: the forward pass cut where a single value (not
    persistent) carries everything later forward steps read from earlier ones (a ResNet or
    MobileNet block's output), each block the candidates between two cuts. Dropped together, a
    block is recomputed from the cut before it (Chen's segments on the graph's own joints)."""
    from memplan_cli.passes.rematerialize import forward_end

    f = forward_end(tg)
    steps = tg.steps[:f]
    pers = set(tg.persistent) | set(tg.fed)
    last_read: dict[int, int] = {}
    for i, s in enumerate(steps):
        for t in s.reads:
            last_read[t] = i
    open_: set[int] = set()
    cuts = []
    for i, s in enumerate(steps):
        open_ = {t for t in open_ if last_read.get(t, -1) > i}
        open_.update(t for t in s.writes if t not in pers and last_read.get(t, -1) > i)
        if len(open_) == 1:
            cuts.append(i)
    cset = set(cands)
    out: dict[int, list[int]] = {}
    lo = -1
    for hi in cuts + [f]:
        members = [s.op for s in steps[lo + 1:hi] if s.op in cset]
        for k in members:
            out[k] = members
        lo = hi
    return out
