"""Pass (stage memory, after cheap recompute): views and in-place updates (tensors that share memory)."""
from __future__ import annotations

from memplan_cli.passes.execution_order import inplace_pairs
from memplan_cli.passes.infra import Pass


class Aliasing(Pass):
    """Rules:
    - A rule's `view` (output, input) makes the output share the input's memory (Reshape / Flatten):
      the same bytes seen with another shape, so overlapping lifetimes are fine.
    - A rule's in-place pair (src, dst) makes dst share src's memory when the kernel may compute dst
      over src. It is accepted only when every tensor already sharing src's memory is dead after the
      step that writes dst (no later read), every tensor sharing dst's memory starts at that step and
      none of them is read by it, no other tensor the step writes shares src's memory (unless the rule says all its in-place
      outputs hold equal values: an Add's dA = dB = dY), both have the
      same byte size, and neither is persistent or read after the training step.
    - Candidates are taken in step order, so earlier decisions constrain later ones (an Add's two
      input back-props cannot both take over dY).
    """

    name = "aliasing"
    reads = frozenset({"graph", "tensors", "steps", "rules", "fwd", "bp", "grad", "contributions", "extras", "persistent",
             "live_out"})
    writes = frozenset({"aliases"})

    def run(self, tg) -> bool:
        lt = tg.lifetimes()
        iv: dict[int, tuple[int, int]] = {}
        for t, (a, b) in lt.items():
            r = tg.root(t)
            iv[r] = (min(a, iv[r][0]), max(b, iv[r][1])) if r in iv else (a, b)
        pinned = {tg.root(t) for t in tg.persistent | tg.live_out}

        def merge(dst, src):
            rd, rs = tg.root(dst), tg.root(src)
            tg.aliases[rd] = rs
            if rd in iv:
                a, b = iv.pop(rd)
                iv[rs] = (min(a, iv[rs][0]), max(b, iv[rs][1])) if rs in iv else (a, b)

        changed = False
        for k, rule in tg.rules.items():
            if rule.view is not None:
                y, x = rule.view
                if y in tg.fwd and x in tg.fwd and tg.root(tg.fwd[x]) != tg.root(tg.fwd[y]):
                    merge(tg.fwd[y], tg.fwd[x])
                    changed = True
        for s, rule, src, dst in inplace_pairs(tg, tg.steps):
            rs, rd = tg.root(src), tg.root(dst)
            if rs in pinned or rd in pinned:
                continue
            if tg.tensors[src].nbytes != tg.tensors[dst].nbytes:
                continue
            if rs not in iv or rd not in iv or iv[rs][1] > s.index or iv[rd][0] < s.index:
                continue
            # dst's memory must be new at this step: not also an input the step reads (two graph
            # inputs both start at step 0; after y took x0's memory, x1 must not take it too)
            if any(tg.root(t) == rd for t in s.reads):
                continue
            # nor may another output of the step already hold src's memory (a Mul's dA, a
            # contribution accumulated at this very step, took over dY: dB must not take it too)
            if not rule.inplace_equal and any(tg.root(t) == rs for t in s.writes if t != dst):
                continue
            merge(dst, src)
            changed = True
        # point every alias straight at its root: long in-place chains stay cheap to resolve
        tg.aliases = {t: tg.root(t) for t in tg.aliases}
        return changed
