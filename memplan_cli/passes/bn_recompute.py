"""Pass (after rematerialization, before aliasing): BatchNorm outputs recomputed from what BN keeps."""
from __future__ import annotations

from memplan_cli.passes.rematerialize import forward_end


class BatchNormRecompute:
    """Rules (`policy.bn_recompute`):
    - A training-mode BatchNormalization keeps its input X and the per-channel batch mean and inverse
      std for its own backward. Its output Y = scale·(X - mean)·invstd + B is a cheap function of
      those (2 FLOPs per element; frozen BN: of X and the stored mean and variance), so when ops after it read Y in backward (a GELU, SiLU or Mul's
      derivative, a Conv's dW), Y is not kept across the forward/backward boundary: it dies after
      its last forward reader, and a recompute step (a forward step of the BN that only applies the
      saved statistics, label `(recompute from saved statistics)`) writes a copy `<name>@bn` right
      before the first step after the forward pass that reads Y; those steps read the copy.
    - Only when it costs no memory elsewhere: X, the statistics, scale and B are each persistent or
      read at or after that point anyway (BN's own backward), none is written between the forward
      pass and that point, and Y is no view's input, not persistent, fed or read after the step.
    - Runs after rematerialization (its recompute steps count as readers) and before aliasing (an op
      after BN may now compute its output over Y in place).
    """

    name = "bn-recompute"

    def __init__(self, policy):
        self.policy = policy

    def run(self, tg) -> bool:
        if not getattr(self.policy, "bn_recompute", False):
            return False
        g = tg.graph
        f = forward_end(tg)
        first, last = tg.accesses()
        viewed = {r.view[1] for r in tg.rules.values() if r.view is not None}
        pinned = tg.persistent | tg.fed | tg.live_out
        written_at: dict[int, int] = {}  # tensor -> first step after the forward pass that writes it
        for s in tg.steps[f:]:
            for t in s.writes:
                written_at.setdefault(t, s.index)
        fwd_step = {s.op: s for s in tg.steps[:f]}
        plans = {}  # first reader step index -> [(op, Y, reads)]
        for k, s in fwd_step.items():
            op = g.operations[k]
            if op.type != "BatchNormalization":
                continue
            stats = [t for t in tg.extras.get(k, []) if tg.tensors[t].role in ("extra:bn_mean", "extra:bn_invstd")]
            frozen = not stats and getattr(tg.config, "batchnorm", "train") == "frozen"
            if (len(stats) != 2 and not frozen) or op.outputs[0] in viewed or op.outputs[0] not in tg.fwd:
                continue
            y = tg.fwd[op.outputs[0]]
            readers = [t.index for t in tg.steps[f:] if y in t.touched()]
            if not readers or y in pinned:
                continue
            at = readers[0]
            reads = [tg.fwd[i] for i in op.inputs[:5 if frozen else 3]] + stats
            if any(written_at.get(t, at) < at or (t not in tg.persistent and last.get(t, -1) < at) for t in reads):
                continue
            plans.setdefault(at, []).append((k, y, reads))
        if not plans:
            return False
        old, tg.steps = tg.steps, []
        copy: dict[int, int] = {}
        recomputed = []
        for s in old:
            for k, y, reads in plans.get(s.index, []):
                spec = tg.tensors[y]
                c = tg.add_tensor(f"{spec.name}@bn", spec.category, spec.shape, spec.dtype, spec.role, spec.op,
                                  spec.operand)
                copy[y] = c
                st = tg.add_step("forward", k, reads, [c])
                st.label = f"{st.label} (recompute from saved statistics)"
                st.subst = {y: c}
                recomputed.append(spec.name)
            sub = {t: copy[t] for t in s.touched() if t in copy}
            st = tg.add_step(s.kind, s.op, [sub.get(t, t) for t in s.reads], [sub.get(t, t) for t in s.writes],
                             [(sub.get(a, a), sub.get(b, b), fst) for a, b, fst in s.accumulate])
            st.label = s.label
            st.subst = {**(getattr(s, "subst", None) or {}), **sub}
        tg.info["bn_recompute"] = recomputed
        return True
