"""Executing the onert profile's plan: its buffers mapped onto the tensors of an onert-like training graph.

The onert profile reproduces onert's allocator (one pool per category, lifetimes in claim/release
events of each category's own timeline) from its own training IR; it has no executable steps. To run
its plan, memplan builds the training graph with every saving rule off (`Policy.baseline()`: the
rules onert follows: back-prop for x' and y_true', transposed copies in FC / Conv backward, the
activation back-prop buffer, an int32 argmax, Add keeping its inputs, Reshape copying, optimizer
state for every constant, every branch contribution in its own disposable buffer) and maps each
onert buffer onto the tensor it holds, by name:

    non-const  NAME / y_true'          -> NAME / label
    trainable  NAME                    -> NAME (a shared constant's `_copy` holds nothing here)
    opt var    NAME var0 / var1        -> NAME:m / NAME:v
    back-prop  dNAME                   -> NAME:bp
    gradient   grad NAME               -> NAME:grad
    disposable dNAME@K                 -> NAME:bp@K
    kernel     #K ... W^T, X^T, dY^T, dW^T, act dY, argmax -> #K:W^T, ..., #K:act_back_prop, #K:arg_max

onert buffers with no counterpart (Conv's never-used `conv dY`, the DepthwiseConv2D scratch buffers,
shared-constant copies) are reported as unmapped. Event lifetimes are not steps: when the profile
records at which op each event happens (`BufferList.info["event_ops"]`), placements get those step
intervals and the liveness check applies; otherwise each placement gets its tensors' access interval
and the run checks onert's offsets against what the schedule actually keeps live at once.
"""
from __future__ import annotations

from dataclasses import replace

from memplan_cli.execute.memory import Layout

OPT_SUFFIX = ("m", "v")
KERNEL_BUFFERS = {"W^T": "W^T", "X^T": "X^T", "dY^T": "dY^T", "dW^T": "dW^T", "act dY": "act_back_prop",
                  "argmax": "arg_max"}


def tensor_name(buffer) -> str | None:
    """The training-graph tensor name an onert buffer holds (None: no counterpart)."""
    pool, name = buffer.pool, buffer.name
    if pool == "onert:non-const":
        return "label" if name == "y_true'" else name
    if pool == "onert:trainable":
        return name
    if pool == "onert:opt-variable":
        base, _, var = name.rpartition(" var")
        return f"{base}:{OPT_SUFFIX[int(var)]}" if var.isdigit() and int(var) < 2 else None
    if pool == "onert:back-prop" and name.startswith("d"):
        n = name[1:]
        return ("label" if n == "y_true'" else n) + ":bp"
    if pool == "onert:gradient" and name.startswith("grad "):
        return name[5:] + ":grad"
    if pool == "onert:disposable" and name.startswith("d") and "@" in name:
        n, _, k = name[1:].rpartition("@")
        return f"{'label' if n == 'y_true' else n}:bp@{k}"
    if pool.startswith("onert:kernel:") and buffer.owner.startswith("#"):
        what = name[len(buffer.owner):].strip() if name.startswith(buffer.owner) else name
        k = buffer.owner.split()[0][1:]
        return f"#{k}:{KERNEL_BUFFERS[what]}" if what in KERNEL_BUFFERS and k.isdigit() else None
    return None


def onert_training_graph(graph, config, backward_order: list[int] | None = None):
    """The training graph whose steps run onert's plan: every saving rule off, backward in onert's
    order (`backward_order`: the profile's `info["backward_order"]`, TrainableGraph::
    btopolSortOperations cut to the essential ops), so branch contributions accumulate in onert's
    order too and every tensor's access interval is the one onert's lifetimes must cover."""
    from memplan_cli.passes.pipeline import build_training_graph
    from memplan_cli.passes.policy import Policy

    return build_training_graph(graph, config, policy=Policy.baseline(), backward_order=backward_order)


def step_intervals(tg, layout: Layout, event_ops: dict | None) -> Layout:
    """Give every placement a step interval: from the profile's event -> op record when there is one,
    else the access interval of the tensors it holds."""
    first_bwd: dict[int, int] = {}
    last_bwd: dict[int, int] = {}
    fwd: dict[int, int] = {}
    for s in tg.steps:
        if s.kind == "forward":
            fwd[s.op] = s.index
        else:
            first_bwd.setdefault(s.op, s.index)
            last_bwd[s.op] = s.index
    end = len(tg.steps) - 1

    def at(where, claim: bool):
        op, phase = where
        if phase == "start":
            return 0
        if phase == "end":
            return end
        if phase == "forward":
            return fwd[op]
        return first_bwd[op] if claim else last_bwd[op]

    glt = tg.group_lifetimes()
    out = {}
    for r, p in layout.placements.items():
        rec = (event_ops or {}).get(p.name)
        if rec is not None:
            a, b = at(rec[0], True), at(rec[1], False)
        else:
            a, b = glt.get(r, (0, end))
        out[r] = replace(p, first=a, last=b)
    return Layout(out, layout.arenas, layout.profile, layout.unmapped)
