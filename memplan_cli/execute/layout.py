"""Turning a plan (a BufferList and its planned offsets) into an executor `Layout` over a training graph.

Buffers are matched to tensors by identity, never by display name: a buffer holds the tensor whose
alias root has its key (`Buffer.ident`, `TrainingGraph.buffer_key`); a profile whose buffers name
tensors its own way passes `rename`. A buffer of the plan that no tensor maps to is listed as unmapped;
a tensor some step touches that maps to no buffer makes the run fail (reported by the executor).
"""
from __future__ import annotations

from memplan_cli.execute.memory import Layout, Placement


def layout_from_pools(tg, pools, profile: str = "", locate=None) -> Layout:
    """`pools`: `analysis.PoolPlan`s (pool, buffers, plan). `locate(buffer) -> tensor id | None`
    finds the tensors of a profile whose buffers carry no training-graph key (onert's)."""
    by_key = {}
    for t in tg.tensors:
        r = tg.root(t.id)
        by_key.setdefault(tg.tensor_key(r), r)
    placements: dict[int, Placement] = {}
    arenas: dict[str, int] = {}
    unmapped: list[str] = []
    for pp in pools:
        arenas[pp.pool.name] = pp.plan.arena
        for b, off in zip(pp.buffers, pp.plan.offsets):
            if locate:
                r = locate(b)
                r = None if r is None else tg.root(r)
            else:
                r = by_key.get(b.ident)
            if r is None:
                unmapped.append(b.name)
                continue
            if r in placements:
                raise ValueError(f"tensor {tg.tensors[r].name} is held by two buffers: {placements[r].name} and {b.name}")
            placements[r] = Placement(b.name, pp.pool.name, int(off), int(b.size), int(b.first), int(b.last),
                                      b.category)
    return Layout(placements, arenas, profile, unmapped)


def layout_from_offsets(tg, buffer_list, offsets: dict[str, int], arenas: dict[str, int], profile: str = "") -> Layout:
    """A layout from explicit {buffer name: offset} (tests, hand-made plans)."""
    by_key = {tg.buffer_key(t.id): tg.root(t.id) for t in tg.tensors}
    placements = {}
    for b in buffer_list.buffers:
        r = by_key[b.ident]
        placements[r] = Placement(b.name, b.pool, offsets[b.name], b.size, b.first, b.last, b.category)
    return Layout(placements, arenas, profile)
