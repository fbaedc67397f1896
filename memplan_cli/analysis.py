"""The work behind `memplan analyze`: load, build the training buffers with a profile, plan every
pool, verify every plan, and collect the figures reports print. Knows nothing about output formats.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from memplan_cli.buffers import CATEGORIES, Buffer, BufferList, Pool
from memplan_cli.config import TrainConfig
from memplan_cli.planners import Plan


@dataclass
class PoolPlan:
    pool: Pool
    buffers: list[Buffer]
    plan: Plan
    lower_bound: int


@dataclass
class Analysis:
    model_path: str
    model_sha256: str
    graph: object  # memplan_cli.ir.Graph (forward graph, re-batched)
    config: TrainConfig
    profile: str
    buffers: BufferList
    pools: list[PoolPlan]
    lower_bound: int  # peak live bytes of all buffers as one arena, under this profile's lifetimes
    # profile-specific figures (e.g. onert's ALLOC lines), filled by the profile's `figures` hook
    extras: dict = field(default_factory=dict)

    @property
    def planned_by_category(self) -> dict[str, int]:
        out = {c: 0 for c in CATEGORIES}
        for p in self.pools:
            out[p.pool.category] += p.plan.arena
        return out

    @property
    def naive_by_category(self) -> dict[str, int]:
        return self.buffers.naive_by_category()

    @property
    def planned_total(self) -> int:
        return sum(p.plan.arena for p in self.pools)

    @property
    def naive_total(self) -> int:
        return self.buffers.naive_total()


def file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def plan_buffer_list(bl: BufferList, *, planner_override: str | None = None,
                     time_limit: float | None = None) -> list[PoolPlan]:
    """Plan each pool with its planner and verify the result independently. A failed check is a bug."""
    from memplan_cli.check.overlap import verify_plan
    from memplan_cli.planners import get_planner
    from memplan_cli.planners.bound import lower_bound

    out = []
    for pool in bl.pools:
        bufs = bl.in_pool(pool.name)
        name = planner_override or pool.planner
        sizes = [b.size for b in bufs]
        firsts = [b.first for b in bufs]
        lasts = [b.last for b in bufs]
        plan = get_planner(name)(sizes, firsts, lasts, time_limit=time_limit)
        verify_plan(sizes, firsts, lasts, plan.offsets, plan.arena, names=[b.name for b in bufs])
        out.append(PoolPlan(pool, bufs, plan, lower_bound(sizes, firsts, lasts)))
    return out


def analyze(path: str, config: TrainConfig, *, profile: str = "memplan",
            planner: str | None = None, time_limit: float | None = None,
            profile_options: dict | None = None) -> Analysis:
    from memplan_cli.loaders import load_model
    from memplan_cli.planners.bound import lower_bound
    from memplan_cli.profiles import get_profile

    graph = load_model(path, batch_size=config.batch_size)
    prof = get_profile(profile)
    bl = prof.build(graph, config, **(profile_options or {}))
    pools = plan_buffer_list(bl, planner_override=planner, time_limit=time_limit)
    b = bl.buffers
    lb = lower_bound([x.size for x in b], [x.first for x in b], [x.last for x in b])
    a = Analysis(path, file_sha256(path), graph, config, profile, bl, pools, lb)
    figures = getattr(prof, "figures", None)
    if figures:
        a.extras.update(figures(a))
    return a
