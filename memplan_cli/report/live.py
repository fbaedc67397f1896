"""Live bytes per step, by category: the timeline, the peak and what the peak is made of.

Works from the buffer list alone (sizes, inclusive lifetimes, categories), so every profile gets
the same views. Steps with no buffer live count as zero.

Rules for time domains (`Pool.domain`): a timeline, a peak and what is live at it exist within one
domain; a profile with several (onert: each pool counts its own events) gets one per domain, and its
peak bytes and "live at peak" are the domains' own, added up (the lower bound split by category).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

from memplan_cli.buffers import CATEGORIES, Buffer, BufferList


@dataclass(frozen=True)
class Timeline:
    """`live[c][t]`: bytes of category CATEGORIES[c] live at step t (one list per category; plain
    Python, so reports on the onert path never import NumPy)."""

    live: tuple

    @property
    def num_steps(self) -> int:
        return len(self.live[0]) if self.live else 0

    @property
    def total(self) -> list[int]:
        return [sum(col) for col in zip(*self.live)]

    @property
    def peak_step(self) -> int:
        """The first step holding the most live bytes (-1 when there are no steps)."""
        tot = self.total
        return tot.index(max(tot)) if tot else -1

    @property
    def peak_bytes(self) -> int:
        tot = self.total
        return max(tot) if tot else 0

    def at(self, step: int) -> dict[str, int]:
        """Bytes per category live at `step`."""
        if step < 0:
            return {c: 0 for c in CATEGORIES}
        return {c: self.live[k][step] for k, c in enumerate(CATEGORIES)}


def timeline(bl: BufferList, buffers: list[Buffer] | None = None) -> Timeline:
    """Live bytes per category at every step of `bl` (difference arrays: O(buffers + steps)).
    `buffers`: a subset (one time domain), over its own steps."""
    if buffers is None:
        buffers = bl.buffers
        n = max([len(bl.steps)] + [b.last + 1 for b in buffers])
    else:
        n = max([0] + [b.last + 1 for b in buffers])
    diff = [[0] * (n + 1) for _ in CATEGORIES]
    index = {c: k for k, c in enumerate(CATEGORIES)}
    for b in buffers:
        row = diff[index[b.category]]
        row[b.first] += b.size
        row[b.last + 1] -= b.size
    return Timeline(tuple(list(itertools.accumulate(row))[:n] for row in diff))


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


def domain_timelines(bl: BufferList) -> list[tuple[str, Timeline, list[Buffer]]]:
    """(domain, its timeline, its buffers) for every time domain holding buffers; one domain: the
    whole list over `bl.steps`."""
    doms = [(d, b) for d, b in bl.domains() if b]
    if len(doms) <= 1:
        return [(doms[0][0] if doms else "steps", timeline(bl), bl.buffers)]
    return [(d, timeline(bl, b), b) for d, b in doms]


def peak_summary(bl: BufferList, graph) -> dict:
    """The report's `peak`: step, label, op, bytes and bytes per category live there. With several
    time domains there is no one step: `step` is -1, bytes and categories are the sums of each
    domain's own peak, and `domains` lists each (its step counts its own time)."""
    doms = domain_timelines(bl)
    if len(doms) == 1:
        tl = doms[0][1]
        step = tl.peak_step
        desc, op = step_label(bl, graph, step)
        return {"step": step, "step_label": desc, "op": op, "bytes": tl.peak_bytes, "categories": tl.at(step)}
    cats = {c: 0 for c in CATEGORIES}
    per = []
    for d, tl, _ in doms:
        at = tl.at(tl.peak_step)
        for c, v in at.items():
            cats[c] += v
        per.append({"domain": d, "step": tl.peak_step, "bytes": tl.peak_bytes,
                    "categories": {c: v for c, v in at.items() if v}})
    return {"step": -1, "step_label": "", "op": "", "bytes": sum(p["bytes"] for p in per), "categories": cats,
            "domains": per}


def live_at_peak(bl: BufferList) -> set[int]:
    """Positions in `bl.buffers` of the buffers live at their own time domain's peak step."""
    pos = {id(b): k for k, b in enumerate(bl.buffers)}
    out = set()
    for _, tl, bufs in domain_timelines(bl):
        p = tl.peak_step
        out.update(pos[id(b)] for b in bufs if b.first <= p <= b.last)
    return out


def live_series(bl: BufferList) -> list[tuple[str, list[int]]]:
    """Total live bytes per step of each time domain, for sparklines."""
    return [(d, tl.total) for d, tl, _ in domain_timelines(bl)]
