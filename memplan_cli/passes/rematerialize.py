"""Pass (optional, between execution order and aliasing): rematerialization.

A remat plan is a set of forward ops whose results are dropped after the forward pass and computed
again, by running the op's forward step once more, right before the backward pass first needs them.
The recompute steps are ordinary forward steps of the execution order, so the buffer list, the
planners, the lower bound, the reports and `memplan verify` see nothing new.

Rules:
- A dropped op's forward step keeps writing its results (outputs, and the extras it writes for its
  backward, such as a ReLU mask or a pool's window index); forward readers read those, so they die
  after their last forward reader. Every later access goes to a copy (a new tensor named
  `<name>@remat`) that a recompute step writes.
- Recompute steps are inserted lazily: right before the first backward step that reads a copy, in
  the order their inputs need them. A recompute step reads the same operands as the forward step:
  the original tensor when its op is kept (a checkpoint: its lifetime simply extends to this read),
  or the copy of a dropped op (recomputed first, recursively). Each dropped op runs again at most
  once; its copies then live from the recompute step to their last reader.
- `StepSpec.subst` maps the original tensors to their copies for the steps that read copies, so a
  kernel asking for an op's operand gets the copy.
- An op can be dropped only when running its forward again changes nothing but its own results: its
  forward step writes no persistent, fed or live-out tensor (the loss, running statistics, weights)
  and reads none of its own writes. `droppable(tg)` lists the ops whose results backward needs.
- Runs before the aliasing pass, so in-place and view decisions see the recompute reads (an input
  a recompute step reads again is not overwritten in place by its forward reader).
"""
from __future__ import annotations


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
    can run again (see the module rules): the candidates of a remat plan."""
    f = forward_end(tg)
    later: set[int] = set()
    for s in tg.steps[f:]:
        later.update(s.touched())
    out = []
    for s in tg.steps[:f]:
        if _recomputable(tg, s) and set(s.writes) & later:
            out.append(s.op)
    return out


class Rematerialization:
    name = "rematerialization"

    def __init__(self, drop):
        self.drop = frozenset(drop or ())

    def run(self, tg) -> bool:
        if not self.drop:
            return False
        f = forward_end(tg)
        fwd_step = {s.op: s for s in tg.steps[:f]}
        bad = sorted(k for k in self.drop if k not in fwd_step or not _recomputable(tg, fwd_step[k]))
        if bad:
            raise ValueError(f"remat plan drops op(s) {bad} that cannot run again")
        owner: dict[int, int] = {}  # original tensor -> dropped op whose forward writes it
        for k in sorted(self.drop):
            for t in fwd_step[k].writes:
                owner[t] = k
        copy: dict[int, int] = {}  # original tensor -> its copy, once recomputed
        old_steps, tg.steps = tg.steps, list(tg.steps[:f])

        def ensure(t):
            """Recompute the dropped op writing t (and what it needs) unless already done."""
            k = owner[t]
            if t in copy:
                return
            s0 = fwd_step[k]
            for r in s0.reads:
                if r in owner:
                    ensure(r)
            for w in s0.writes:
                spec = tg.tensors[w]
                copy[w] = tg.add_tensor(f"{spec.name}@remat", spec.category, spec.shape, spec.dtype, spec.role,
                                        spec.op, spec.operand)
            reads = [copy.get(r, r) for r in s0.reads]
            writes = [copy[w] for w in s0.writes]
            st = tg.add_step("forward", k, reads, writes)
            st.label = f"{st.label} (recompute)"
            st.subst = {o: copy[o] for o in list(s0.reads) + list(s0.writes) if o in copy}

        for s in old_steps[f:]:
            for t in s.touched():
                if t in owner:
                    ensure(t)
            sub = {t: copy[t] for t in s.touched() if t in copy}
            st = tg.add_step(s.kind, s.op, [sub.get(t, t) for t in s.reads], [sub.get(t, t) for t in s.writes],
                             [(sub.get(a, a), sub.get(b, b), first) for a, b, first in s.accumulate])
            st.label = s.label
            if sub:
                st.subst = sub
        tg.info["remat"] = {"dropped": sorted(self.drop),
                            "recomputed_tensors": [tg.tensors[t].name for t in sorted(copy)]}
        return True
