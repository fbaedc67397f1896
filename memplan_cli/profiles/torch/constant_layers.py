"""Trained layers whose data input is a constant of a batch's shape, not anything computed from the
model's input: the module made that tensor itself each step, and the file cannot say how. A tensor
made with `requires_grad_()` is a leaf of autograd's graph: backward accumulates its gradient into
`.grad` and the graph (alive while the loss is) holds both through the optimizer step. transformers'
MRA does so when its CUDA kernel is absent (`mra2_attention` returns
`torch.zeros_like(query).requires_grad_()`), and neither exporter keeps the flag. Named, not
counted (docs/torchprof.md, "After the seventh draw"). Its bytes are those of the tensor a chain of
views folded at load started from (`ir.graph.FOLDED_FROM`): the dynamo exporter stores MRA's
`zeros_like(query)` whole (its head size padded to 32) and slices it; the leaf eager holds is the
whole tensor ("The MRA leaf at its own size")."""
from __future__ import annotations

from memplan_cli.ir.graph import FOLDED_FROM


def constant_layers(g, trained) -> list[dict]:
    """Each op reading a trained weight (or a value computed from weights only) and a floating
    constant (or a view of one) whose leading dimension is the batch's (more than one row), or whose
    shape is that of a tensor computed from the input with a multiple of the batch's rows (the rows
    regrouped), with no input computed from the model's input: the constant's name and bytes at the
    file's batch, those of the constant its folded views started from when larger (named `view_of`)."""
    data = [v for v in g.inputs if v >= 0 and not g.operands[v].is_const]
    batches = {g.operands[v].shape[0] for v in data if g.operands[v].shape}
    if not batches or max(batches) <= 1:  # a batch of one row cannot be told from any constant
        return []
    regrouped = _regrouped(g, data, batches)
    from_input, from_weights = set(data), set(trained)
    origin: dict[int, int] = {}  # a value computed from constants only -> the batch-shaped one it came from
    for v, o in enumerate(g.operands):
        # only floating tensors can require grad (an embedding's index constant cannot); a broadcast
        # to the batch (ConViT's relative positions expanded) is a view of a smaller tensor, no leaf
        if o.is_const and v not in trained and o.dtype.startswith(("float", "bfloat")) and len(o.shape) >= 2 \
                and (o.shape[0] in batches or tuple(o.shape) in regrouped) and o.shape[0] > 1 \
                and o.broadcast_of is None:
            origin[v] = v
    out: dict[str, dict] = {}
    by_name = {o.name: o for o in g.operands}
    for op in g.operations:
        reads = [v for v in op.inputs if v >= 0]
        if any(v in from_input for v in reads):
            from_input.update(v for v in op.outputs if v >= 0)
        elif any(v in from_weights for v in reads):
            from_weights.update(v for v in op.outputs if v >= 0)
            for v in reads:
                if v in origin:
                    o = g.operands[origin[v]]
                    whole = _whole(g, o, by_name)
                    out.setdefault(o.name, {"constant": o.name, "op": op.type, "bytes": whole.nbytes,
                                            **({"view_of": whole.name} if whole is not o else {})})
        else:  # constants only: a view or copy of a batch-shaped constant is one still
            first = next((origin[v] for v in reads if v in origin), None)
            if first is not None:
                origin.update((v, first) for v in op.outputs if v >= 0)
    return list(out.values())


def _regrouped(g, data, batches) -> set[tuple]:
    """Shapes of tensors computed from the model's input whose leading dimension is a multiple of its
    batch: the rows regrouped (a multiple-choice head's batch x choices, transformers'
    `view(-1, length)`). A made leaf (`zeros_like(query)`) has its tensor's whole shape."""
    from_input, shapes = set(data), set()
    for op in g.operations:
        if any(v in from_input for v in op.inputs if v >= 0):
            for v in op.outputs:
                if v >= 0:
                    from_input.add(v)
                    shape = g.operands[v].shape
                    if shape and isinstance(shape[0], int) and any(
                            shape[0] > b > 1 and shape[0] % b == 0 for b in batches):
                        shapes.add(tuple(shape))
    return shapes


def _whole(g, o, by_name):
    """The constant a chain of views folded at load (a Slice, Transpose, Reshape...) started from,
    when it holds more bytes: the tensor the module made, of which `o` is a view."""
    came = (g.metadata or {}).get(FOLDED_FROM) or {}
    seen, whole = {o.name}, o
    name = came.get(o.name)
    while name is not None and name not in seen and name in by_name:
        seen.add(name)
        if by_name[name].nbytes > whole.nbytes:
            whole = by_name[name]
        name = came.get(name)
    return whole
