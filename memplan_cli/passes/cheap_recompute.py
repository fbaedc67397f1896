"""Pass (stage memory, after rematerialization, before aliasing): cheap forward results recomputed from what backward
keeps anyway instead of being kept across the forward/backward boundary."""
from __future__ import annotations

from memplan_cli import ops
from memplan_cli.passes.cost import op_flops
from memplan_cli.passes.infra import Pass
from memplan_cli.passes.rematerialize import forward_end

# forward FLOPs per output element at most for a recompute to count as cheap (GELU, exact: 24)
CHEAP_FLOPS = 32


class CheapRecompute(Pass):
    """Rules (`policy.cheap_recompute`):
    - A forward result Y that some step after the forward pass reads (another op's backward: a
      GELU output as the next MatMul's input for dW, a BatchNorm output as a GELU's or Mul's input)
      is not kept from forward to backward when it can be computed again from tensors that are kept
      anyway: Y dies after its last forward reader, and a recompute step (a forward step of its op,
      label `(recompute)`) writes a copy `<name>@recompute` right before the first later step that
      reads Y; those steps read the copy.
    - Candidates: a training-mode BatchNormalization or a LayerNormalization (Y from its input and
      the mean and inverse std its own backward keeps, 2 FLOPs per element; frozen BN: from its
      input and the stored statistics), and any op whose forward step writes Y alone (no extras, no fused
      activation, not random, not a view), reads no input larger than Y and costs at most CHEAP_FLOPS forward
      FLOPs per element of Y (elementwise ops: GELU, Sigmoid, Mul, Add, ...).
    - Only when it costs no memory: every tensor the recompute reads is persistent or read at or
      after that point anyway (by the op's own backward, typically), none is written between the
      forward pass and that point, and Y is no view's input, not persistent, fed or read after the
      step.
    - A recompute may read another recomputable result that is not kept (a ReLU over a BatchNorm's
      output, a GELU over a recomputed BN output): that one is recomputed first, at the same point
      (each at most once; chains of at most 8).
    - With a remat plan (`--budget`) too: it runs after rematerialization, on the plan's steps, and
      the remat solver scores every plan through this same pass list (remat/problem.py).
    - Runs after rematerialization and before aliasing (an op may now compute its output over Y in
      place).
    """

    name = "cheap-recompute"
    reads = frozenset({"graph", "config", "extras", "fwd", "rules", "persistent", "fed", "live_out"})
    writes = frozenset({"steps", "tensors", "cheap_recomputed"})

    def __init__(self, policy, enabled: bool = True):
        self.policy = policy
        self.enabled = enabled

    def _reads(self, tg, k, s):
        """What a recompute of op k's forward step s reads, or None when k is no candidate."""
        g = tg.graph
        op = g.operations[k]
        d = ops.get(op.type)
        if d is not None and d.recompute_stats:  # a normalisation: see OpDef.recompute_stats
            roles = [f"extra:{w}" for w in d.recompute_stats]
            stats = [t for t in tg.extras.get(k, []) if tg.tensors[t].role in roles]
            if len(stats) == 2:
                return [tg.fwd[i] for i in op.inputs[:3] if i >= 0] + stats
            if d.recompute_frozen_inputs and getattr(tg.config, "batchnorm", "train") == "frozen":
                return [tg.fwd[i] for i in op.inputs[:d.recompute_frozen_inputs]]
            return None
        if tg.rules[k].view is not None:  # a view shares its input's memory: nothing to save
            return None
        if len(s.writes) != 1 or ops.is_random(op.type) or (op.attrs.get("activation") or "NONE") != "NONE":
            return None
        y = s.writes[0]
        n = tg.tensors[y].num_elements
        if any(tg.tensors[t].num_elements > n for t in s.reads):
            return None
        try:
            fl = op_flops(op, g.operands)
        except (KeyError, ValueError, TypeError, IndexError):  # a hand-built op without its loader's attrs
            return None
        if fl is None or fl[0] > CHEAP_FLOPS * n:
            return None
        return list(s.reads)

    def run(self, tg) -> bool:
        if not self.enabled or not getattr(self.policy, "cheap_recompute", False):
            return False
        g = tg.graph
        f = forward_end(tg)
        _, last = tg.accesses()
        viewed = {r.view[1] for r in tg.rules.values() if r.view is not None}
        pinned = tg.persistent | tg.fed | tg.live_out
        written_at: dict[int, int] = {}  # tensor -> first step after the forward pass that writes it
        first_read: dict[int, int] = {}  # tensor -> first step after the forward pass that touches it
        for s in tg.steps[f:]:
            for t in s.writes:
                written_at.setdefault(t, s.index)
            for t in s.touched():
                first_read.setdefault(t, s.index)
        cand: dict[int, tuple] = {}  # Y -> (op, reads): recomputable, whether or not read later
        for s in tg.steps[:f]:
            if s.op < 0 or s.op >= len(g.operations):
                continue
            op = g.operations[s.op]
            if not op.outputs or op.outputs[0] in viewed or op.outputs[0] not in tg.fwd:
                continue
            y = tg.fwd[op.outputs[0]]
            if y in pinned or y not in s.writes:
                continue
            reads = self._reads(tg, s.op, s)
            if reads is not None:
                cand[y] = (s.op, reads)

        def ok(t, at, seen):
            """t can be had at step `at`: kept anyway and not yet overwritten, or recomputed from such."""
            if written_at.get(t, at) < at:
                return False
            if t in tg.persistent or last.get(t, -1) >= at:
                return True
            if t not in cand or t in seen or len(seen) > 8:  # short chains only
                return False
            return all(ok(r, at, seen | {t}) for r in cand[t][1])

        plans: dict[int, tuple] = {}
        for y in cand:
            at = first_read.get(y)
            if at is not None and all(ok(t, at, {y}) for t in cand[y][1]):
                plans[y] = cand[y]
        if not plans:
            return False
        old, tg.steps = tg.steps, []
        copy: dict[int, int] = {}
        recomputed = []

        def ensure(y):
            if y in copy:
                return
            k, reads = cand[y]
            for t in reads:
                if t in plans or (t in cand and not (t in tg.persistent or last.get(t, -1) >= at_now[0])):
                    ensure(t)
            spec = tg.tensors[y]
            c = tg.add_tensor(f"{spec.name}@recompute", spec.category, spec.shape, spec.dtype, spec.role, spec.op,
                              spec.operand)
            copy[y] = c
            st = tg.add_step("forward", k, [copy.get(t, t) for t in reads], [c])
            st.label = f"{st.label} (recompute)"
            st.subst = {t: copy[t] for t in [*reads, y] if t in copy}
            recomputed.append(spec.name)

        at_now = [0]
        for i, s in enumerate(old):
            at_now[0] = i
            if i >= f:
                for t in s.touched():
                    if t in plans:
                        ensure(t)
            sub = {t: copy[t] for t in s.touched() if t in copy}
            st = tg.add_step(s.kind, s.op, [sub.get(t, t) for t in s.reads], [sub.get(t, t) for t in s.writes],
                             [(sub.get(a, a), sub.get(b, b), fst) for a, b, fst in s.accumulate])
            st.label = s.label
            st.subst = {**(getattr(s, "subst", None) or {}), **sub}
        tg.cheap_recomputed = recomputed
        return True
