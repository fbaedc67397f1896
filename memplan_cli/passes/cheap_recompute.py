"""Pass (stage memory, after rematerialization, before aliasing): cheap forward results recomputed from what backward
keeps anyway instead of being kept across the forward/backward boundary."""
from __future__ import annotations

from memplan_cli import ops
from memplan_cli.passes.cost import op_flops, step_flops
from memplan_cli.passes.infra import Pass
from memplan_cli.passes.rematerialize import forward_end

# forward FLOPs per output element at most for a recompute to count as cheap (GELU, exact: 24)
CHEAP_FLOPS = 32
# a chain dearer than CHEAP_FLOPS per element is recomputed only while the pass's recomputes together
# cost at most this share of the step's FLOPs (issue 44: the own plan at <= 1.05 x the step's FLOPs)
FLOPS_SHARE = 0.04


def _known_flops(op, g):
    """cost.op_flops, or None where it cannot say (a hand-built op without its loader's attrs)."""
    try:
        return op_flops(op, g.operands)
    except (KeyError, ValueError, TypeError, IndexError):
        return None


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
      input and the stored statistics), a Dropout that drops (Y from its input and the mask its own
      backward keeps: attention probabilities after dropout are not held beside the probabilities
      the Softmax's backward keeps), and any op whose forward step writes Y alone (no extras, no fused
      activation, not random, not a view), reads no input larger than Y and costs at most CHEAP_FLOPS forward
      FLOPs per element of Y (elementwise ops: GELU, Sigmoid, Mul, Add, ...).
    - Only when it costs no memory: every tensor the recompute reads is persistent or read at or
      after that point anyway (by the op's own backward, typically), none is written between the
      forward pass and that point, Y is not persistent, fed or read after the step, and every view
      of Y read after the forward pass is recomputed too (a view left kept would keep Y's memory).
    - A view (Reshape, a ratio-0 Dropout, a same-dtype Cast) is a link of such a chain: its copy is a
      view of its input's copy, no new memory and no FLOPs (attention probabilities after dropout,
      reshaped for the MatMul with V).
    - A result whose recompute (its chain included) costs at most CHEAP_FLOPS per element of Y is
      always recomputed; a dearer chain (attention scores and probabilities recomputed from the kept
      queries and keys, as FlashAttention's backward does) only while all the pass's recomputes
      together stay within FLOPS_SHARE of the step's FLOPs, the fewest FLOPs per byte of Y first.
    - A recompute may read another recomputable result that is not kept (a ReLU over a BatchNorm's
      output, a GELU over a recomputed BN output): that one is recomputed first, at the same point
      (each at most once; chains of at most 8).
    - With a remat plan (`--budget`) too: it runs after rematerialization, on the plan's steps, and
      the remat solver scores every plan through this same pass list (remat/problem.py).
    - Runs after rematerialization and before aliasing (an op may now compute its output over Y in
      place).
    """

    name = "cheap-recompute"
    reads = frozenset({"graph", "config", "extras", "fwd", "grad", "rules", "persistent", "fed", "live_out"})
    writes = frozenset({"steps", "tensors", "aliases", "cheap_recomputed", "cheap_copies"})

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
        if tg.rules[k].view is not None:  # a view: its copy shares its input's (a link in a chain)
            return list(s.reads)
        if d is not None and d.recompute_mask:  # Dropout: from its input and the mask it keeps
            mask = [t for t in tg.extras.get(k, []) if tg.tensors[t].role == f"extra:{d.recompute_mask}"]
            if not mask and len(op.outputs) > 1 and op.outputs[1] in tg.fwd:
                mask = [tg.fwd[op.outputs[1]]]
            return [tg.fwd[op.inputs[0]], *mask] if len(mask) == 1 and op.inputs[0] in tg.fwd else None
        if len(s.writes) != 1 or ops.is_random(op.type) or (op.attrs.get("activation") or "NONE") != "NONE":
            return None
        y = s.writes[0]
        n = tg.tensors[y].num_elements
        if any(tg.tensors[t].num_elements > n for t in s.reads):
            return None
        fl = _known_flops(op, g)
        if fl is None or fl[0] > CHEAP_FLOPS * n:
            return None
        return list(s.reads)

    @staticmethod
    def _flops(g, k) -> int:
        fl = _known_flops(g.operations[k], g)
        return fl[0] if fl else 0

    @staticmethod
    def _step_flops(tg) -> int:
        """The step's FLOPs as planned so far (cost.step_flops), else every op's forward and backward."""
        try:
            total = step_flops(tg).total
        except (KeyError, ValueError, TypeError, IndexError):  # a hand-built op without its loader's attrs
            total = None
        if total is not None:
            return total
        g, total = tg.graph, 0
        for op in g.operations:
            fl = _known_flops(op, g)
            total += sum(fl) if fl else 0
        return total

    def run(self, tg) -> bool:
        if not self.enabled or not getattr(self.policy, "cheap_recompute", False):
            return False
        g = tg.graph
        f = forward_end(tg)
        _, last = tg.accesses()
        views: dict[int, list[int]] = {}  # tensor -> the tensors that are views of it
        for r in tg.rules.values():
            if r.view is not None and r.view[0] in tg.fwd and r.view[1] in tg.fwd:
                views.setdefault(tg.fwd[r.view[1]], []).append(tg.fwd[r.view[0]])
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
            if not op.outputs or op.outputs[0] not in tg.fwd:
                continue
            y = tg.fwd[op.outputs[0]]
            if y in pinned or y not in s.writes:
                continue
            reads = self._reads(tg, s.op, s)
            if reads is not None:
                cand[y] = (s.op, reads, self._flops(g, s.op))

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
            if at is None or not all(ok(t, at, {y}) for t in cand[y][1]):
                continue
            view = tg.rules[cand[y][0]].view
            if view is not None:  # a view of a kept tensor: its readers read that memory anyway
                x = tg.fwd[view[1]]
                if x in tg.persistent or last.get(x, -1) >= at or x not in cand:
                    continue
            plans[y] = cand[y][:2]

        def chain(y, at, seen):
            """The recomputes y needs at step `at` (itself and what it reads that is not kept)."""
            seen.add(y)
            for t in cand[y][1]:
                if t in cand and t not in seen and not (t in tg.persistent or last.get(t, -1) >= at):
                    chain(t, at, seen)
            return seen

        # within the FLOPs share: the plans whose chains cost the least per byte of Y first
        budget = FLOPS_SHARE * self._step_flops(tg)
        costs = {y: sum(cand[t][2] for t in chain(y, first_read[y], set())) for y in plans}
        spent: set[int] = set()
        for y in sorted(plans, key=lambda y: (costs[y] / max(tg.tensors[y].nbytes, 1), y)):
            more = chain(y, first_read[y], set()) - spent
            cheap = costs[y] <= CHEAP_FLOPS * tg.tensors[y].num_elements
            if not cheap and sum(cand[t][2] for t in spent | more) > budget:
                del plans[y]
            else:
                spent |= more

        def unshared(y) -> bool:
            """No view of y holds its memory after the forward pass unless that view is recomputed too."""
            return all(v in plans or (v not in pinned and v not in first_read and unshared(v))
                       for v in views.get(y, ()))

        while True:  # a view left kept keeps its input's memory: recomputing the input saves nothing
            drop = [y for y in plans if not unshared(y)]
            if not drop:
                break
            for y in drop:
                del plans[y]
        if not plans:
            return False
        old, tg.steps = tg.steps, []
        copy: dict[int, int] = {}
        recomputed = []

        def ensure(y):
            if y in copy:
                return
            k, reads = cand[y][:2]
            for t in reads:
                if t in plans or (t in cand and not (t in tg.persistent or last.get(t, -1) >= at_now[0])):
                    ensure(t)
            spec = tg.tensors[y]
            c = tg.add_tensor(f"{spec.name}@recompute", spec.category, spec.shape, spec.dtype, spec.role, spec.op,
                              spec.operand)
            copy[y] = c
            if tg.rules[k].view is not None:  # the copy of a view is a view of its input's copy
                tg.aliases[c] = copy.get(tg.fwd[tg.rules[k].view[1]], tg.fwd[tg.rules[k].view[1]])
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
        tg.cheap_copies = {c: y for y, c in copy.items()}
        return True
