"""The work behind `memplan compare MODEL`: the same model and training setup under every system memplan
reproduces, side by side. Knows nothing about output formats (report/compare.py renders it).

Columns, in order:
- naive: every tensor of memplan's training graph its own bytes, with no reuse, no in-place updates
  and no views (`analyze`'s naive column);
- onert, nntrainer, singa: the profiles that reproduce those runtimes, each with its own planner;
- torch: what PyTorch eager holds at its peak for the same step on CPU (live bytes, no planner);
- memplan: memplan's own plan (`analyze`'s planned total).
A profile that cannot handle the model (onert and an op it cannot train, a capacity over its 32-bit
limit) gives an unavailable column with the reason; memplan's own failure is the command's error.

The reference lower bound is memplan's: the peak of live bytes under memplan's lifetimes, what any
plan of the shortest lifetimes needs. Each column also carries its own lower bound: the sum over the
system's pools of each pool's peak live bytes, what its own lifetimes and pools need with a perfect
placement. The gap to memplan's plan splits into lifetimes and pools (own lower bound over memplan's)
and placement (total over own lower bound).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from memplan_cli.analysis import analyze_graph, checked_by, loss_output_names, model_sha256, shared_training_graphs
from memplan_cli.buffers import CATEGORIES
from memplan_cli.config import TrainConfig
from memplan_cli.errors import MemplanError, naming

PROFILES = ("naive", "onert", "nntrainer", "singa", "torch", "memplan")


@dataclass
class Column:
    """One system's figures. `total` is None when the system cannot handle the model (`reason`)."""

    profile: str
    by_category: dict[str, int] | None = None
    total: int | None = None
    # the least this system's own pools could take with a perfect placement: the sum over its pools
    # of each pool's peak live bytes (pools are separate arenas; onert's lifetimes are per pool)
    lower_bound: int | None = None
    planners: list[str] = field(default_factory=list)
    reason: str = ""
    extras: dict = field(default_factory=dict)  # the profile's `figures` (e.g. SINGA's fragmentation)
    checked: str = ""  # how the profile's figures were checked (its `checked` line)

    @property
    def available(self) -> bool:
        return self.total is not None


@dataclass
class Comparison:
    model_path: str
    model_sha256: str
    graph: object
    config: TrainConfig
    columns: list[Column]
    lower_bound: int  # memplan's lifetimes
    onert_options: dict = field(default_factory=dict)
    time_limit: float | None = None  # the user's --time-limit: the plans may depend on timing

    def column(self, profile: str) -> Column:
        return next(c for c in self.columns if c.profile == profile)

    @property
    def loss_outputs(self) -> list[str]:
        """The outputs that carry a loss, by name (the report's config.loss_outputs)."""
        return loss_output_names(self.graph, self.config)

    @property
    def memplan_total(self) -> int:
        return self.column("memplan").total

    def ratio_to_memplan(self, col: Column) -> float | None:
        m = self.memplan_total
        return col.total / m if col.available and m else None

    def ratio_to_lower_bound(self, col: Column) -> float | None:
        return col.total / self.lower_bound if col.available and self.lower_bound else None


def _column(profile: str, a) -> Column:
    return Column(profile, {c: int(a.planned_by_category[c]) for c in CATEGORIES}, int(a.planned_total),
                  sum(int(p.lower_bound) for p in a.pools), sorted({p.plan.planner for p in a.pools}),
                  extras=dict(a.extras))


def compare_graph(graph, config: TrainConfig, *, path: str = "", onert_options: dict | None = None,
                  time_limit: float | None = None, nntrainer_options: dict | None = None) -> Comparison:
    """Every column for `graph` (already loaded and re-batched to `config.batch_size`); the profiles
    that build the same training step build it once."""
    with shared_training_graphs():
        return _compare_graph(graph, config, path, dict(onert_options or {}), time_limit, nntrainer_options)


def _compare_graph(graph, config: TrainConfig, path: str, onert_options: dict, time_limit: float | None,
                   nntrainer_options: dict | None) -> Comparison:
    mem = analyze_graph(graph, config, profile="memplan", time_limit=time_limit)
    cols = {"memplan": _column("memplan", mem)}
    cols["naive"] = Column("naive", {c: int(mem.naive_by_category[c]) for c in CATEGORIES}, int(mem.naive_total),
                           None, ["naive"])
    for prof in ("onert", "nntrainer", "singa", "torch"):
        try:
            a = analyze_graph(graph, config, profile=prof, time_limit=time_limit,
                              profile_options={"onert": onert_options, "nntrainer": nntrainer_options}.get(prof))
        except MemplanError as e:
            cols[prof] = Column(prof, reason=str(e))
        else:
            cols[prof] = _column(prof, a)
    for prof in ("onert", "nntrainer", "singa", "torch", "memplan"):
        cols[prof].checked = checked_by(prof, cols[prof].extras if cols[prof].available else None)
    return Comparison(path, model_sha256(graph, path) if path else "", graph, config, [cols[p] for p in PROFILES],
                      int(mem.lower_bound), onert_options, time_limit)


def compare(path: str, config: TrainConfig, *, onert_options: dict | None = None,
            time_limit: float | None = None, nntrainer_options: dict | None = None) -> Comparison:
    """Load `path` at `config.batch_size` and compare every system on it."""
    from memplan_cli.loaders import load_model

    graph = load_model(path, batch_size=config.batch_size, dims=config.dims)
    try:
        return compare_graph(graph, config, path=path, onert_options=onert_options, time_limit=time_limit,
                             nntrainer_options=nntrainer_options)
    except MemplanError as e:  # memplan's own column failed: the command's error, naming the file
        raise naming(path, e) from None
