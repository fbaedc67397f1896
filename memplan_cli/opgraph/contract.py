"""What each canonical op needs to be meaningful: its required operands and the attribute values
memplan's rules understand. The loaders check every op against it (`verify`: `Graph.verify` with
this check), so a corrupt or unusual file is refused at load with the op named, instead of reaching
a rule that would misread it or fail inside (a two-input Add with one input, a padding code no
converter writes).

Ops the registry does not define (types memplan has no rules for) are only index-checked: they are fine
outside the backward region, and the backward pass names them when they are inside it.
"""
from __future__ import annotations

from memplan_cli import ops
from memplan_cli.ir.vocab import ACTIVATIONS


def problems(op, operands) -> str | None:
    """The first reason `op` cannot be trained or sized, or None. The op's own contract (required
    inputs, attribute values) is its registry entry's (`OpDef.required_inputs`, `OpDef.check`)."""
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


def verify(graph) -> None:
    """`graph.verify` with every op checked against its registry entry (`problems`), where the
    structural checks put it: what the loaders run on every graph they make."""
    graph.verify(op_check=problems)
