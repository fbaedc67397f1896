"""The work behind `memplan analyze`: load, build the training buffers with a profile, plan every
pool, verify every plan, and collect the figures reports print. Knows nothing about output formats.
"""
from __future__ import annotations

import functools

import inspect
import time
from dataclasses import dataclass, field

from memplan_cli.buffers import CATEGORIES, Buffer, BufferList, Pool
from memplan_cli.config import TrainConfig
from memplan_cli.errors import MemplanError, UnsupportedOpError, naming
from memplan_cli.loaders import file_object_sha256
from memplan_cli.opgraph.outputs import loss_output_names, loss_outputs
from memplan_cli.planners import Plan, get_planner
from memplan_cli.profiles import get_profile
# for comparison and api (compare, sweep), which reach the profiles through this module
from memplan_cli.profiles import shared_training_graphs  # noqa: F401


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
    # per time domain, the peak of live bytes under this profile's lifetimes, summed over the domains
    # (`domain_lower_bound`): one domain (memplan) = all buffers as one arena; onert = its pools' own
    lower_bound: int
    # profile-specific figures (e.g. onert's ALLOC lines), filled by the profile's `figures` hook
    extras: dict = field(default_factory=dict)
    # the onert profile's figures for the same model and configuration (see `compare_with_onert`)
    onert: OnertComparison | None = None
    # wall-clock seconds per phase (load, build, plan, figures): for people, never in JSON reports
    timings: dict = field(default_factory=dict)
    # the user's --time-limit in seconds, when given: the plans may then depend on the machine's
    # speed and load (without it every planner budget counts work and the plans are reproducible)
    time_limit: float | None = None

    @property
    def loss_outputs(self) -> list[str]:
        """The outputs that carry a loss, by name (the report's config.loss_outputs)."""
        return loss_output_names(self.graph, self.config)

    @property
    def planned_by_category(self) -> dict[str, int]:
        """Each pool's arena under the ALLOC row it reports to. A pool holding several categories
        (memplan's single arena) is split by what is live at its own peak step, and the gap between
        that and the arena (fragmentation, if any) stays with the pool's category, so the rows
        always add up to `planned_total`."""
        out = {c: 0 for c in CATEGORIES}
        for p in self.pools:
            cats = {b.category for b in p.buffers}
            if len(cats) <= 1:
                out[p.pool.category] += p.plan.arena
                continue
            at_peak = _peak_composition(p.buffers)
            for c, v in at_peak.items():
                out[c] += v
            out[p.pool.category] += p.plan.arena - sum(at_peak.values())
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


@dataclass
class OnertComparison:
    """onert's figures for the model memplan analysed: `total` is the sum of its ALLOC lines.
    `reason` says why there are none (onert cannot train the model, or the profile is missing)."""

    total: int | None = None
    by_category: dict[str, int] | None = None
    reason: str = ""

    @property
    def available(self) -> bool:
        return self.total is not None


def _peak_composition(buffers: list[Buffer]) -> dict[str, int]:
    """Bytes per category live at the first step where the most bytes are live."""
    events: dict[int, int] = {}
    for b in buffers:
        events[b.first] = events.get(b.first, 0) + b.size
        events[b.last + 1] = events.get(b.last + 1, 0) - b.size
    best, best_step, live = -1, 0, 0
    for t in sorted(events):
        live += events[t]
        if live > best:
            best, best_step = live, t
    out = {c: 0 for c in CATEGORIES}
    for b in buffers:
        if b.first <= best_step <= b.last:
            out[b.category] += b.size
    return out


def file_sha256(path: str) -> str:
    with open(path, "rb") as f:
        return file_object_sha256(f)


def model_sha256(graph, path: str) -> str:
    """The file's sha256: the loader's (it hashed the file in the open it sniffed the format with),
    else read again."""
    return (getattr(graph, "metadata", None) or {}).get("sha256") or file_sha256(path)


@functools.lru_cache(maxsize=None)
def _takes(fn, name: str) -> bool:
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def checked_by(profile: str, extras: dict | None = None) -> str:
    """How a profile's figures were checked (its `checked` line), for reports that name it; a profile
    that can say it for this model (its `checked_for(extras)`, from the figures of its analysis) does."""
    prof = get_profile(profile)
    line = prof.checked_for(extras) if extras is not None and hasattr(prof, "checked_for") else ""
    return line or getattr(prof, "checked", "")


def plan_buffer_list(bl: BufferList, *, planner_override: str | None = None,
                     time_limit: float | None = None) -> list[PoolPlan]:
    """Plan each pool with its planner and verify the result independently. A failed check is a bug.
    `time_limit` (seconds, the user's --time-limit) replaces the planners' work budgets by the
    clock; None (the default) keeps every plan independent of timing."""
    from memplan_cli.check.overlap import check_plan  # lazy: `memplan analyze -p nntrainer` does not load it
    from memplan_cli.planners.bound import lower_bound  # lazy: `memplan analyze -p nntrainer` does not load it

    out = []
    pooled = bl.by_pool()
    for pool in bl.pools:
        bufs = pooled[pool.name]
        name = planner_override or pool.planner
        sizes = [b.size for b in bufs]
        firsts = [b.first for b in bufs]
        lasts = [b.last for b in bufs]
        fn = get_planner(name)
        # a planner that treats some buffers apart (nntrainer-v2: weight gradients) takes their kinds
        extra = {"kinds": [b.category for b in bufs]} if _takes(fn, "kinds") else {}
        plan = fn(sizes, firsts, lasts, time_limit=time_limit, **extra)
        check_plan(sizes, firsts, lasts, plan.offsets, plan.arena, names=[b.name for b in bufs])
        out.append(PoolPlan(pool, bufs, plan, lower_bound(sizes, firsts, lasts)))
    return out


def analyze(path: str, config: TrainConfig, *, profile: str = "memplan",
            planner: str | None = None, time_limit: float | None = None,
            profile_options: dict | None = None, compare_onert: bool = False,
            onert_options: dict | None = None, graph=None) -> Analysis:
    """Analyse `path` under `profile`. With `compare_onert` (and a profile other than onert), also
    build and plan the onert profile for the same model and configuration and keep its totals in
    `Analysis.onert`; when onert cannot train the model, `Analysis.onert.reason` says why.
    `graph`: `path` already loaded at `config.batch_size` (the file is then not read again)."""
    from memplan_cli.loaders import load_model

    t0 = time.perf_counter()
    if graph is None:
        graph = load_model(path, batch_size=config.batch_size, dims=config.dims)
    t1 = time.perf_counter()
    onert, onert_seconds = None, 0.0
    if compare_onert and profile != "onert":
        # before the main analysis: its training graph is kept for the report, onert's is not, so
        # the peak memory is the larger of the two rather than their sum
        onert = compare_with_onert(graph, config, onert_options)
        onert_seconds = time.perf_counter() - t1
    try:
        a = analyze_graph(graph, config, profile=profile, planner=planner, time_limit=time_limit,
                          profile_options=profile_options, path=path, onert=onert)
    except MemplanError as e:
        raise naming(path, e) from None
    a.timings = {"load": t1 - t0, **a.timings}
    if onert is not None:
        a.timings["onert"] = onert_seconds
    return a


def analyze_graph(graph, config: TrainConfig, *, profile: str = "memplan", planner: str | None = None,
                  time_limit: float | None = None, profile_options: dict | None = None,
                  path: str = "", onert: OnertComparison | None = None) -> Analysis:
    """The same as `analyze` on a graph already loaded (and re-batched to `config.batch_size`);
    `onert`: onert's figures for the same setup (`compare_with_onert`), kept in `Analysis.onert`."""
    if not graph.operations or not graph.outputs:  # for every profile: nothing to train
        from memplan_cli.errors import ConfigError

        raise ConfigError("the model has no output to attach a loss to" if not graph.outputs else
                          "the model has no ops (its output is an input); there is nothing to train")
    t0 = time.perf_counter()
    loss_outputs(graph, config.loss_outputs)  # a --loss-outputs name no output has is an error, whatever the profile
    prof = get_profile(profile)
    refuse_precision(prof, config)
    bl = prof.build(graph, config, **(profile_options or {}))
    t1 = time.perf_counter()
    pools = plan_buffer_list(bl, planner_override=planner, time_limit=time_limit)
    lb = domain_lower_bound(bl)
    t2 = time.perf_counter()
    a = Analysis(path, model_sha256(graph, path) if path else "", graph, config, profile, bl, pools, lb,
                 onert=onert, time_limit=time_limit)
    figures = getattr(prof, "figures", None)
    if figures:
        a.extras.update(figures(a))
    a.timings = {"build": t1 - t0, "plan": t2 - t1, "figures": time.perf_counter() - t2}
    return a


def domain_lower_bound(bl: BufferList) -> int:
    """Rules: within a time domain, the most bytes live at one step (what any placement of its
    buffers needs); domains count time apart, so nothing is live "together" across them and their
    bounds add up. With one domain this is the peak of all buffers as one arena."""
    from memplan_cli.planners.bound import lower_bound  # lazy: `memplan analyze -p nntrainer` does not load it

    return sum(lower_bound([x.size for x in b], [x.first for x in b], [x.last for x in b])
               for _, b in bl.domains() if b)


def refuse_precision(prof, config) -> None:
    """One line, UnsupportedOpError, when the profile plans no step in `config.precision`: the
    profile's `precisions` (default float32 only) and `precision_note` (why)."""
    p = getattr(config, "precision", "32-true")
    if p in getattr(prof, "precisions", ("32-true",)):
        return

    note = getattr(prof, "precision_note", "modelled for float32 training only")
    raise UnsupportedOpError(f"{prof.name} profile: {note}; --precision {p} needs the memplan profile")


def compare_with_onert(graph, config: TrainConfig, onert_options: dict | None = None) -> OnertComparison:
    """onert's totals for `graph`, or the reason there are none (a MemplanError from the onert
    profile: an op onert cannot train, a capacity over its 32-bit limit, the profile not built)."""
    try:
        o = analyze_graph(graph, config, profile="onert", profile_options=onert_options)
    except MemplanError as e:
        return OnertComparison(reason=str(e))
    return OnertComparison(total=o.planned_total, by_category=o.planned_by_category)
