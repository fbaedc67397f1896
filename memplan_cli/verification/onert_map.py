"""Executing the onert profile's plan: its buffers mapped onto the tensors of an onert-like training graph.

The onert profile reproduces onert's allocator (one pool per category, lifetimes in claim/release
events of each category's own timeline) from its own training IR; it has no executable steps. To run
its plan, memplan builds the training graph with every saving rule off (`Policy.baseline()`: the
rules onert follows: back-prop for x' and y_true', transposed copies in FC / Conv backward, the
activation back-prop buffer, an int32 argmax, Add keeping its inputs, Reshape copying, optimizer
state for every constant, every branch contribution in its own disposable buffer) and maps each
onert buffer onto the tensor it holds, through the graph operand its name gives and its role (the
training graph's fwd / bp / grad / opt_state / contributions maps; `locator`):

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


def role_of(buffer) -> tuple | None:
    """What an onert buffer holds, as (graph operand name, role[, op]): role "fwd", "m", "v", "bp",
    "grad", "bp@" (a branch contribution of op K) or "kernel" (op K's private buffer `what`, given
    as the name). None: no counterpart. Names are the graph's (unique: `Graph` keeps them apart)."""
    pool, name = buffer.pool, buffer.name
    if pool == "onert:non-const":
        return (None, "label") if name == "y_true'" else (name, "fwd")
    if pool == "onert:trainable":
        return (name, "fwd")
    if pool == "onert:opt-variable":
        base, _, var = name.rpartition(" var")
        return (base, OPT_SUFFIX[int(var)]) if var.isdigit() and int(var) < 2 else None
    if pool == "onert:back-prop" and name.startswith("d"):
        return (None, "label:bp") if name == "dy_true'" else (name[1:], "bp")
    if pool == "onert:gradient" and name.startswith("grad "):
        return (name[5:], "grad")
    if pool == "onert:disposable" and name.startswith("d") and "@" in name:
        n, _, k = name[1:].rpartition("@")
        return ((None, "label:bp@", int(k)) if n == "y_true" else (n, "bp@", int(k))) if k.isdigit() else None
    if pool.startswith("onert:kernel:") and buffer.owner.startswith("#"):
        what = name[len(buffer.owner):].strip() if name.startswith(buffer.owner) else name
        k = buffer.owner.split()[0][1:]
        return (KERNEL_BUFFERS[what], "kernel", int(k)) if what in KERNEL_BUFFERS and k.isdigit() else None
    return None


def locator(tg):
    """`buffer -> tensor id | None` for `layout_from_pools`: an onert buffer's tensor found through
    the graph operand it belongs to and its role (the training graph's own maps), never by matching
    derived names, so a model naming a tensor `w:bp` or two tensors alike still maps right."""
    index = {o.name: o.index for o in tg.graph.operands}

    def locate(buffer):
        r = role_of(buffer)
        if r is None:
            return None
        name, role = r[0], r[1]
        v = tg.label if name is None else index.get(name)
        role = role.removeprefix("label:") if name is None and role != "label" else role
        if v is None:
            return None
        if role in ("fwd", "label"):
            return tg.fwd.get(v)
        if role in ("m", "v"):
            states = tg.opt_state.get(v, [])
            j = OPT_SUFFIX.index(role)
            return states[j] if j < len(states) else None
        if role == "bp":
            return tg.bp.get(v)
        if role == "grad":
            return tg.grad.get(v)
        if role == "bp@":
            return tg.contributions.get((r[2], v))
        return None

    def locate_kernel(buffer):
        r = role_of(buffer)
        if r is not None and r[1] == "kernel":
            want = f"#{r[2]}:{r[0]}"
            return next((t for t in tg.extras.get(r[2], []) if tg.tensors[t].name == want), None)
        return locate(buffer)

    return locate_kernel


def onert_training_graph(graph, config, backward_order: list[int] | None = None):
    """The training graph whose steps run onert's plan: every saving rule off, backward in onert's
    order (`backward_order`: the profile's `info["backward_order"]`, TrainableGraph::
    btopolSortOperations cut to the essential ops), so branch contributions accumulate in onert's
    order too and every tensor's access interval is the one onert's lifetimes must cover."""
    from memplan_cli.passes.pipeline import build_training_graph
    from memplan_cli.passes.policy import Policy

    return build_training_graph(untied(graph), config, policy=Policy.baseline(), backward_order=backward_order)


def untied(graph):
    """`graph` with each float constant that several ops read copied once per op after the first, named
    NAME_copy, as onert's ConstantInsertionPass does (profiles/onert/trainir.py): onert trains each
    copy as a weight of its own (its own gradient and optimizer state), so the step that runs onert's
    plan must too (integer constants train nothing: they stay shared). The copies are named as
    trainir names them: NAME_copy, NAME_copy2, ... A name the graph already has leaves the graph as
    it is (its plan then names what it misses)."""
    import copy

    readers: dict[int, list] = {}
    for op in graph.operations:
        for i in dict.fromkeys(op.inputs):
            if 0 <= i < len(graph.operands) and graph.operands[i].is_const \
                    and graph.operands[i].dtype.startswith(("float", "bfloat")):
                readers.setdefault(i, []).append(op)
    shared = {i: ops for i, ops in readers.items() if len(ops) > 1}
    names = {o.name for o in graph.operands}
    copies = {i: [graph.operands[i].name + ("_copy" if k == 1 else f"_copy{k}") for k in range(1, len(ops))]
              for i, ops in shared.items()}
    if not shared or any(n in names for c in copies.values() for n in c):
        return graph
    g = copy.deepcopy(graph)
    for i, ops in shared.items():
        for reader, name in zip(ops[1:], copies[i]):
            new = replace(g.operands[i], index=len(g.operands), name=name)
            g.operands.append(new)
            op = g.operations[reader.index]
            op.inputs = [new.index if j == i else j for j in op.inputs]
    return g


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
