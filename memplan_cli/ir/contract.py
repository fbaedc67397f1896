"""What each canonical op needs to be meaningful: its required operands and the attribute values
memplan's rules understand. `Graph.verify` checks every op against it, so a corrupt or unusual
file is refused at load with the op named, instead of reaching a rule that would misread it or
fail inside (a two-input Add with one input, a padding code no converter writes).

Ops not listed here (types memplan has no rules for) are only index-checked: they are fine
outside the backward region, and the backward pass names them when they are inside it.
"""
from __future__ import annotations

from memplan_cli.ir.graph import ACTIVATIONS

# op type -> number of leading inputs that must be present (not -1); every op needs one output
REQUIRED_INPUTS = {
    "Relu": 1, "Relu6": 1, "Sigmoid": 1, "Tanh": 1,
    "Reshape": 1, "Concat": 1,
}


def problems(op, operands) -> str | None:
    """The first reason `op` cannot be trained or sized, or None."""
    need = REQUIRED_INPUTS.get(op.type)
    if need is None:
        from memplan_cli import ops

        d = ops.get(op.type)
        if d is None:
            return None
        if len(op.inputs) < d.required_inputs or any(i < 0 for i in op.inputs[:d.required_inputs]):
            return f"needs {d.required_inputs} input(s), has {sum(1 for i in op.inputs if i >= 0)}"
        if not op.outputs or any(i < 0 for i in op.outputs):
            return "has no output"
        act = op.attrs.get("activation", "NONE")
        if act not in ACTIVATIONS:
            return f"has an unknown fused activation {act!r}"
        return d.check(op, operands) if d.check is not None else None
    if len(op.inputs) < need or any(i < 0 for i in op.inputs[:need]):
        return f"needs {need} input(s), has {sum(1 for i in op.inputs if i >= 0)}"
    if not op.outputs or any(i < 0 for i in op.outputs):
        return "has no output"
    act = op.attrs.get("activation", "NONE")
    if act not in ACTIVATIONS:
        return f"has an unknown fused activation {act!r}"
    if op.type == "Concat":
        why = _concat_problem(op, operands)
        if why:
            return why
    if op.type == "Reshape":
        x, y = operands[op.inputs[0]], operands[op.outputs[0]]
        if x.num_elements != y.num_elements:
            return f"reshapes {tuple(x.shape)} ({x.num_elements} elements) to {tuple(y.shape)} ({y.num_elements})"
    return None


def check_operands_are_defined(graph) -> str | None:
    """A non-constant operand that some op reads must be a graph input or some op's output: an
    operand with neither data nor a producer has no value (a corrupt buffer index, for one)."""
    defined = set(graph.inputs)
    for op in graph.operations:
        defined.update(i for i in op.outputs if i >= 0)
    for op in graph.operations:
        for i in op.inputs:
            if i >= 0 and not graph.operands[i].is_const and i not in defined:
                o = graph.operands[i]
                return (f"op {op.label} reads operand {i} ({o.name}), which is neither constant, "
                        "a graph input, nor any op's output")
    return None


def _concat_problem(op, operands) -> str | None:
    """Concat's inputs agree on every dim but the axis, and the output is their sum along it."""
    ins = [operands[i] for i in op.inputs if i >= 0]
    y = operands[op.outputs[0]]
    rank = len(y.shape)
    if any(len(x.shape) != rank for x in ins) or not rank:
        return None  # ranks that differ are the loaders' to reject; scalars have no axis
    axis = int(op.attrs.get("axis", 0)) % rank
    for k in range(rank):
        dims = [x.shape[k] for x in ins]
        if k == 0 and axis != 0 and op.attrs.get("broadcast_batch"):
            dims = [y.shape[0] if d == 1 else d for d in dims]  # a class token broadcast over the batch
        want = sum(dims) if k == axis else dims[0]
        if (k != axis and any(d != dims[0] for d in dims)) or y.shape[k] != want:
            return (f"concatenates {', '.join(str(tuple(x.shape)) for x in ins)} on axis {axis} into "
                    f"{tuple(y.shape)}: the shapes disagree at dim {k}")
    return None
