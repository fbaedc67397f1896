"""What each canonical op needs to be meaningful: its required operands and the attribute values
memplan's rules understand. `Graph.verify` checks every op against it, so a corrupt or unusual
file is refused at load with the op named, instead of reaching a rule that would misread it or
fail inside (a two-input Add with one input, a padding code no converter writes).

Ops the registry does not define (types memplan has no rules for) are only index-checked: they are fine
outside the backward region, and the backward pass names them when they are inside it.
"""
from __future__ import annotations

from memplan_cli.ir.vocab import ACTIVATIONS

def problems(op, operands) -> str | None:
    """The first reason `op` cannot be trained or sized, or None. The op's own contract (required
    inputs, attribute values) is its registry entry's (`OpDef.required_inputs`, `OpDef.check`)."""
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


def check_operands_are_defined(graph) -> str | None:
    """A non-constant operand that some op or the loss reads (a graph output) must be a graph input or
    some op's output: an operand with neither data nor a producer has no value (a corrupt buffer
    index, for one)."""
    defined = set(graph.inputs)
    for op in graph.operations:
        defined.update(i for i in op.outputs if i >= 0)
    for op in graph.operations:
        for i in op.inputs:
            if i >= 0 and not graph.operands[i].is_const and i not in defined:
                o = graph.operands[i]
                return (f"op {op.label} reads operand {i} ({o.name}), which is neither constant, "
                        "a graph input, nor any op's output")
    for i in graph.outputs:  # the loss reads it: an output nothing computes has no value either
        if 0 <= i < len(graph.operands) and not graph.operands[i].is_const and i not in defined:
            return (f"graph output {i} ({graph.operands[i].name}) is neither constant, a graph input, "
                    "nor any op's output")
    return None
