"""Live bytes per step, by category: the timeline, the peak and what the peak is made of.

Works from the buffer list alone (sizes, inclusive lifetimes, categories), so every profile gets
the same views. Steps with no buffer live count as zero.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from memplan_cli.buffers import CATEGORIES, BufferList


@dataclass(frozen=True)
class Timeline:
    """`live[c][t]`: bytes of category CATEGORIES[c] live at step t (a (7, steps) int64 array)."""

    live: np.ndarray

    @property
    def num_steps(self) -> int:
        return int(self.live.shape[1])

    @property
    def total(self) -> np.ndarray:
        return self.live.sum(axis=0)

    @property
    def peak_step(self) -> int:
        """The first step holding the most live bytes (-1 when there are no steps)."""
        tot = self.total
        return int(tot.argmax()) if tot.size else -1

    @property
    def peak_bytes(self) -> int:
        tot = self.total
        return int(tot.max()) if tot.size else 0

    def at(self, step: int) -> dict[str, int]:
        """Bytes per category live at `step`."""
        if step < 0:
            return {c: 0 for c in CATEGORIES}
        return {c: int(self.live[k, step]) for k, c in enumerate(CATEGORIES)}


def timeline(bl: BufferList) -> Timeline:
    """Live bytes per category at every step of `bl` (difference arrays: O(buffers + steps))."""
    n = max([len(bl.steps)] + [b.last + 1 for b in bl.buffers])
    diff = np.zeros((len(CATEGORIES), n + 1), dtype=np.int64)
    index = {c: k for k, c in enumerate(CATEGORIES)}
    for b in bl.buffers:
        k = index[b.category]
        diff[k, b.first] += b.size
        diff[k, b.last + 1] -= b.size
    return Timeline(np.cumsum(diff, axis=1)[:, :n])


def step_label(bl: BufferList, graph, step: int) -> tuple[str, str]:
    """(step description, op label) for reports: e.g. ("12 (calcGradient)", "#3 Conv2D (conv1)")."""
    if not 0 <= step < len(bl.steps):
        return (str(step), "")
    s = bl.steps[step]
    op = s.label
    ops = getattr(graph, "operations", None) or []
    if not op and 0 <= s.op < len(ops):
        op = ops[s.op].label
    elif not op and s.op >= 0:
        op = f"#{s.op}"
    return f"{step} ({s.kind})", op
