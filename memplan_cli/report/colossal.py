"""ColossalAI-style per-node memory figures, computed from memplan's training graph.

ColossalAI's profiler (hpcaitech/ColossalAI, `fx/profiler`, PR #1619) gives every traced node four
figures; here they are read off the training graph's steps instead of a traced execution:

- `fwd_mem_out`: bytes of the op's outputs that its forward step creates (kept for the next ops;
  an output that is a view of an older tensor, such as a Reshape's, creates none);
- `fwd_mem_tmp`: bytes of every other tensor the forward step creates: temporaries and what is
  saved for the backward (a kernel's auxiliary buffers);
- `bwd_mem_tmp`: the peak, over the op's backward steps, of the live bytes of tensors created there
  that die there too (scratch buffers, per-reader back-prop contributions);
- `bwd_mem_out`: bytes the op's backward creates for others: the back-prop of its inputs and the
  gradients of its weights.

Persistent tensors (weights, optimizer state) and fed tensors (inputs, label) are never counted:
they exist before any op runs. Bytes are the tensors' own sizes, without alignment.
"""
from __future__ import annotations

FIELDS = ("fwd_mem_out", "fwd_mem_tmp", "bwd_mem_tmp", "bwd_mem_out")
BACKWARD_KINDS = ("calcGradient", "calcDerivative")


def per_node_figures(tg) -> dict[int, dict[str, int]]:
    """op index -> {fwd_mem_out, fwd_mem_tmp, bwd_mem_tmp, bwd_mem_out} for every op with a step."""
    groups = tg.groups()
    first, last = tg.accesses()
    size = {r: max(tg.tensors[m].nbytes for m in members) for r, members in groups.items()}
    skip = {tg.root(t) for t in set(tg.persistent) | set(tg.fed)}
    # each memory-owning tensor is created by the step of its first access (aliases included)
    born: dict[int, int] = {}
    dies: dict[int, int] = {}
    for t, s in first.items():
        r = tg.root(t)
        born[r] = min(born.get(r, s), s)
    for t, s in last.items():
        r = tg.root(t)
        dies[r] = max(dies.get(r, s), s)
    created_at: dict[int, list[int]] = {}
    for r, s in born.items():
        if r not in skip:
            created_at.setdefault(s, []).append(r)

    out: dict[int, dict[str, int]] = {}
    bwd_steps: dict[int, list[int]] = {}
    for s in tg.steps:
        if s.op < 0:
            continue
        fig = out.setdefault(s.op, dict.fromkeys(FIELDS, 0))
        if s.kind == "forward":
            outputs = {tg.root(tg.fwd[o]) for o in tg.graph.operations[s.op].outputs if o in tg.fwd}
            for r in created_at.get(s.index, ()):
                fig["fwd_mem_out" if r in outputs else "fwd_mem_tmp"] += size[r]
        elif s.kind in BACKWARD_KINDS:
            bwd_steps.setdefault(s.op, []).append(s.index)
    for op, idx in bwd_steps.items():
        lo, hi = min(idx), max(idx)
        fig = out[op]
        tmp = []
        for i in idx:
            for r in created_at.get(i, ()):
                role = tg.tensors[r].category
                if dies[r] <= hi and role not in ("back-prop", "gradient"):
                    tmp.append(r)
                else:
                    fig["bwd_mem_out"] += size[r]
        fig["bwd_mem_tmp"] = max((sum(size[r] for r in tmp if born[r] <= i <= dies[r])
                                  for i in range(lo, hi + 1)), default=0)
    return out


def per_layer_extra(tg) -> dict[str, dict[str, int]]:
    """The reports' `--by-layer` hook (a profile's figures()["per_layer_extra"]): op label (the
    buffers' owner string) -> {column: bytes}."""
    return {tg.op_label(k): fig for k, fig in sorted(per_node_figures(tg).items())}
