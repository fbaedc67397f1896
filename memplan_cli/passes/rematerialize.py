"""Pass (stage memory, first; only with a plan): rematerialization.

A remat plan is a set of forward ops whose results are dropped after the forward pass and computed
again, by running the op's forward step once more, before the backward pass (or another recompute)
needs them. The recompute steps are ordinary forward steps of the execution order, so the buffer
list, the planners, the lower bound, the reports and `memplan verify` see nothing new.

A plan is a collection of ints: `k` drops op k and recomputes it once, its copy living to its last
reader; `each(k)` (= -1 - k) drops op k and recomputes it before every step that reads it, the copy
dying after that step (several recomputes, least memory). `plan_ops(plan)` gives the op indices.

Rules:
- A dropped op's forward step keeps writing its results (outputs, and the extras it writes for its
  backward, such as a ReLU mask or a pool's window index); forward readers read those, so they die
  after their last forward reader. Every later access goes to a copy (a new tensor named
  `<name>@remat`, `@remat2`, ... for later recomputes) that a recompute step writes.
- Recompute steps are inserted lazily, right before the step after the forward pass that needs
  them: the dropped ops it reads without a live copy, and recursively the dropped ops those read
  without one, each once, in forward order (a chain, or a diamond, recomputes from its kept inputs:
  a kept op's original tensor simply lives on to this read). A copy of a once-op lives to its last
  reader; a copy of an each-op dies after its last reader among these recomputes and the step, so
  the next step reading it recomputes it again.
- `StepSpec.subst` maps the original tensors to their copies for the steps that read copies, so a
  kernel asking for an op's operand gets the copy.
- An op can be dropped only when running its forward again changes nothing but its own results: its
  forward step writes no persistent, fed or live-out tensor (the loss, running statistics, weights)
  and reads none of its own writes. `candidates(tg)` lists the ops some later step reads a result
  of; `droppable(tg)` those whose results a step after the forward pass reads. An op can be
  recomputed before each use only when no step after the forward pass writes its results.
- Runs before the aliasing pass, so in-place and view decisions see the recompute reads (an input
  a recompute step reads again is not overwritten in place by its forward reader).
"""
from __future__ import annotations
from memplan_cli.passes.infra import Pass
from memplan_cli.passes.training_graph import Recomputation


def each(k: int) -> int:
    """The plan entry: drop op k and recompute it before every step that reads it."""
    return -1 - k


def plan_ops(plan) -> list[int]:
    """The ops a plan drops, sorted."""
    return sorted({k if k >= 0 else -1 - k for k in plan})


def forward_end(tg) -> int:
    """Number of leading forward steps (the forward pass, before any backward or recompute step)."""
    n = 0
    for s in tg.steps:
        if s.kind != "forward":
            break
        n += 1
    return n


def _recomputable(tg, s) -> bool:
    pinned = tg.persistent | tg.fed | tg.live_out
    return s.op >= 0 and not (set(s.writes) & pinned) and not (set(s.writes) & set(s.reads))


def droppable(tg) -> list[int]:
    """Ops (in forward order) whose forward results some step after the forward pass reads and that
    can run again (see the module rules)."""
    f = forward_end(tg)
    later: set[int] = set()
    for s in tg.steps[f:]:
        later.update(s.touched())
    return [s.op for s in tg.steps[:f] if _recomputable(tg, s) and set(s.writes) & later]


def candidates(tg) -> list[int]:
    """Ops (in forward order) that can run again and whose results a later step reads: dropping one
    that backward does not read pays off when a recompute would otherwise keep its result."""
    f = forward_end(tg)
    out = []
    read_after: set[int] = set()
    for s in reversed(tg.steps):
        if s.index < f and _recomputable(tg, s) and set(s.writes) & read_after:
            out.append(s.op)
        read_after.update(s.reads)
        for a, _, _ in s.accumulate:
            read_after.add(a)
    return out[::-1]


def each_ok(tg) -> set[int]:
    """Candidates whose results no step after the forward pass writes (recomputable before each use)."""
    f = forward_end(tg)
    written: set[int] = set()
    for s in tg.steps[f:]:
        written.update(s.writes)
        written.update(d for _, d, _ in s.accumulate)
    return {s.op for s in tg.steps[:f] if not (set(s.writes) & written)}


class Rematerialization(Pass):
    name = "rematerialization"
    reads = frozenset({"graph", "persistent", "fed", "live_out"})
    writes = frozenset({"steps", "tensors", "remat"})

    def __init__(self, drop):
        self.drop = frozenset(drop or ())

    def run(self, tg) -> bool:
        if not self.drop:
            return False
        f = forward_end(tg)
        fwd_step = {s.op: s for s in tg.steps[:f]}
        every = {-1 - k for k in self.drop if k < 0}
        ops = plan_ops(self.drop)
        bad = sorted(k for k in ops if k not in fwd_step or not _recomputable(tg, fwd_step[k]))
        bad += sorted(every - each_ok(tg))
        if bad:
            raise ValueError(f"remat plan drops op(s) {bad} that cannot run again")
        owner: dict[int, int] = {}  # original tensor -> dropped op whose forward writes it
        for k in ops:
            for t in fwd_step[k].writes:
                owner[t] = k
        copy: dict[int, int] = {}  # original tensor -> its current copy
        made: dict[int, int] = {}  # original tensor -> copies made so far
        recomputes: list[int] = []
        names: list[str] = []
        old_steps, tg.steps = tg.steps, list(tg.steps[:f])

        def recompute(k):
            s0 = fwd_step[k]
            reads = [copy.get(r, r) for r in s0.reads]
            sub = {o: copy[o] for o in s0.reads if o in copy}
            for w in s0.writes:
                spec = tg.tensors[w]
                n = made[w] = made.get(w, 0) + 1
                copy[w] = tg.add_tensor(f"{spec.name}@remat" + (str(n) if n > 1 else ""), spec.category,
                                        spec.shape, spec.dtype, spec.role, spec.op, spec.operand)
                names.append(tg.tensors[copy[w]].name)
                sub[w] = copy[w]
            st = tg.add_step("forward", k, reads, [copy[w] for w in s0.writes])
            st.label = f"{st.label} (recompute)"
            st.subst = sub
            recomputes.append(k)

        for s in old_steps[f:]:
            # the recomputes this step needs: dropped ops without a live copy, and theirs, in forward
            # order (each op at most once per step: a chain or a diamond recomputes once)
            need: set[int] = set()
            stack = [owner[t] for t in s.touched() if t in owner and t not in copy]
            while stack:
                k = stack.pop()
                if k not in need:
                    need.add(k)
                    stack += [owner[r] for r in fwd_step[k].reads if r in owner and r not in copy]
            order = sorted(need, key=lambda k: fwd_step[k].index)
            last: dict[int, int] = {}  # each-op -> index (in order, then the step) of its copy's last reader
            for i, k in enumerate(order):
                for r in fwd_step[k].reads:
                    if owner.get(r) in every:
                        last[owner[r]] = i
            for t in s.touched():
                if owner.get(t) in every:
                    last[owner[t]] = len(order)

            def forget(i):
                for k in [k for k, j in last.items() if j == i]:
                    for w in fwd_step[k].writes:
                        copy.pop(w, None)

            for i, k in enumerate(order):
                recompute(k)
                forget(i)
            sub = {t: copy[t] for t in s.touched() if t in copy}
            st = tg.add_step(s.kind, s.op, [sub.get(t, t) for t in s.reads], [sub.get(t, t) for t in s.writes],
                             [(sub.get(a, a), sub.get(b, b), first) for a, b, first in s.accumulate])
            st.label = s.label
            if sub:
                st.subst = sub
            forget(len(order))
        tg.remat = Recomputation(ops, names, recomputes)
        return True
