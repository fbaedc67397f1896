"""One eager op of the replay, and the order eager runs them."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class EagerOp:
    """One eager op: an IR op, or a fused pair read back as one (`silu`, `linear`)."""

    index: int  # the IR op whose label it reports under
    type: str
    inputs: list
    outputs: list
    attrs: dict = field(default_factory=dict)
    label: str = ""
    members: tuple = ()
    call: str = ""  # the aten call the dynamo exporter recorded for its IR op (Operation.call), if any


def eager_order(g, defs) -> list:
    """The ops in the order eager runs them: the graph's own, except that an op listed after one that
    reads its result (the adapters `--lora` appends) runs just before that reader, after its own
    inputs' producers (PEFT's lora.Linear: the base projection, then A, B, the scale and the sum)."""
    ops = g.operations
    done: set[int] = set()
    order = []
    for top in ops:
        stack = [(top.index, False)]
        while stack:
            i, ready = stack.pop()
            if i in done:
                continue
            if ready:
                done.add(i)
                order.append(ops[i])
                continue
            stack.append((i, True))
            for v in reversed(ops[i].inputs):
                p = defs.get(v) if v >= 0 else None
                if p is not None and p not in done:
                    stack.append((p, False))
    return order
