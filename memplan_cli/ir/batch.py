"""The shape helpers batch rules are written with: an op keeps the batch at dim 0 (`keep_batch`)
or scales its outputs' dim 0 by its input's growth (`scale_rows`). The registry's families
(memplan_cli/ops/) use them in their `OpDef.batch` rules; re-batching a graph with those rules is
`memplan_cli.opgraph.rebatch`, above the registry.
"""
from __future__ import annotations

import math

from memplan_cli.ir.graph import GraphError


def numel(shape) -> int:
    return math.prod(shape) if shape else 1


# ---- rules: each returns the new shape of every output (None: leave it) ---------------------
def _batched_inputs(op, shapes, batched):
    return [i for i in op.inputs if i >= 0 and i in batched]


def keep_batch(op, graph, shapes, batched):
    ins = _batched_inputs(op, shapes, batched)
    old0 = max(graph.operands[i].shape[0] for i in ins)
    new0 = max(shapes[i][0] for i in ins)
    out = []
    for o in op.outputs:
        s = graph.operands[o].shape
        out.append((new0,) + tuple(s[1:]) if s and s[0] == old0 else None)
    return out


def scale_rows(op, graph, shapes, batched):
    """Dim 0 of each output grows by the factor the op's first batched input grew by."""
    i = _batched_inputs(op, shapes, batched)[0]
    old, new = numel(graph.operands[i].shape), numel(shapes[i])
    out = []
    for o in op.outputs:
        s = graph.operands[o].shape
        if not s:
            out.append(None)
            continue
        rows = s[0] * new
        if rows % old:
            raise GraphError(f"cannot re-batch op {op.label}: dim 0 of operand {o} ({s[0]}) does not scale "
                             f"by {new}/{old}")
        out.append((rows // old,) + tuple(s[1:]))
    return out
