"""The `memplan` profile (the default): memplan's own plan.

One arena for every buffer, planned together (activations freed during backward are reused by
back-props, gradients and extras), with the shortest lifetimes that keep the same computation. The
saving rules are the `passes.policy.Policy` flags, all on by default; each can be switched off as a
profile option (`build(graph, config, inplace=False)`) to measure what it saves.

Rules beyond the per-op ones (see the op registry, `memplan_cli/ops/`, for those):
- every tensor lives from its first to its last access (gradients from their calcGradient to the
  applyGradient right after; back-props until their last reader; extras only in their steps);
- graph inputs and the label are copied in right before their first reader;
- weights and optimizer state are persistent; optimizer state only for trained float weights.
"""
from __future__ import annotations

import math

from memplan_cli.buffers import CATEGORIES, Pool
from memplan_cli.errors import ConfigError
from memplan_cli.ir.dtypes import dtype_size
from memplan_cli.passes.cost import op_flops, step_flops
from memplan_cli.passes.pipeline import build_training_graph
from memplan_cli.passes.policy import Policy
from memplan_cli.planners import planner_names

PLANNER_PREFERENCE = ("best", "greedy", "wic", "firstfit", "naive")


def pick_planner(preferred: str | None = None) -> str:
    """The best planner that is registered (the planners are built in parallel with this profile)."""
    names = set(planner_names())
    if preferred:
        if preferred not in names:
            raise ConfigError(f"unknown planner {preferred!r} (known: {', '.join(sorted(names))})")
        return preferred
    for p in PLANNER_PREFERENCE:
        if p in names:
            return p
    return sorted(names)[0]


class MemplanProfile:
    name = "memplan"
    # how its figures were checked (`memplan compare` prints it)
    checked = "provable for this model by `memplan verify` (a step run inside the plan; compare does not run it)"
    OPTIONS = ("align", "planner", "one_arena", "remat")
    # every --precision (passes/precision.py)
    precisions = ("32-true", "bf16-mixed", "16-mixed", "bf16-true", "16-true")

    def policy(self, options: dict):
        flags = {k: v for k, v in options.items() if k not in self.OPTIONS}
        bad = sorted(set(flags) - set(Policy.names()))
        if bad:
            raise ConfigError(f"unknown memplan profile option {bad[0]!r} "
                              f"(known: {', '.join(list(self.OPTIONS) + Policy.names())})")
        return Policy(**{k: bool(v) for k, v in flags.items()})

    def training_graph(self, graph, config, **options):
        """The TrainingGraph behind `build` (steps with exact reads and writes, for executors)."""
        return build_training_graph(graph, config, policy=self.policy(options), remat=options.get("remat") or ())

    def build(self, graph, config, **options):
        """BufferList for one training step. Options: any `Policy` flag, `align` (bytes, default
        16), `planner` (a registered planner name), `one_arena` (False: one pool per category, as
        separate arenas, to measure what sharing saves), `remat` (forward op indices whose results are
        dropped and recomputed before backward, passes/rematerialize.py)."""
        from memplan_cli.check.schedule import check_schedule  # lazy: `memplan analyze -p torch` does not load it

        tg = self.training_graph(graph, config, **options)
        planner = pick_planner(options.get("planner"))
        align = int(options.get("align", 16))
        if options.get("one_arena", True):
            pools, pool_of = [Pool("arena", "non-const", planner)], None
        else:
            pools = [Pool(c, c, planner) for c in CATEGORIES]

            def pool_of(t):
                return t.category
        bl = tg.to_buffer_list(pools=pools, pool_of=pool_of, align=align)
        if pool_of is not None:
            used = {b.pool for b in bl.buffers}
            bl.pools = [p for p in bl.pools if p.name in used]
        check_schedule(tg, bl)
        bl.info.update({"profile": self.name, "planner": planner, "align": align,
                        "policy": {k: getattr(tg.policy, k) for k in tg.policy.names()},
                        "steps": len(tg.steps)})
        return bl

    def figures(self, analysis) -> dict:
        """What the peak is made of: the step with the most live bytes (under this profile's
        lifetimes), its op, and the live bytes per category there; the step's FLOPs."""
        out = peak_figures(analysis.buffers)
        out.update(flops_figures(analysis.buffers))
        out.update(own_rule_figures(analysis.buffers, out.get("flops")))
        return out


def own_rule_figures(bl, flops: dict | None) -> dict:
    """What the plan does that an eager runtime does not, named: {"recomputed": the forward results
    cheap recompute computes again before backward instead of keeping them (passes/cheap_recompute.py),
    the forward FLOPs that adds and its share of the step's} and {"broadcast_views": the constants
    folded from a broadcast held as the values they repeat, and the bytes that saves}; each only
    when it happened."""
    tg = bl.training_graph
    if tg is None:
        return {}

    out: dict = {}
    names = list(tg.cheap_recomputed)
    if names:
        added = 0
        for s in tg.steps:
            if s.kind == "forward" and any(t in tg.cheap_copies for t in s.writes):
                fig = op_flops(tg.graph.operations[s.op], tg.graph.operands)
                added += fig[0] if fig is not None else 0
        rec = {"results": names, "flops": added}
        if flops and flops.get("available") and flops.get("step"):
            rec["share"] = round(added / flops["step"], 6)
        out["recomputed"] = rec
    views = [t for t in tg.tensors if t.stored is not None]
    if views:
        out["broadcast_views"] = {
            "constants": [t.name for t in views],
            "saved": sum((t.num_elements - math.prod(t.stored)) * dtype_size(t.dtype) for t in views)}
    return out


def flops_figures(bl) -> dict:
    """{"flops": ...}: the training step's FLOPs (passes/cost.py) in the report's terms: totals, and
    per op label its forward (every run) and backward FLOPs; withheld with the reason when some op
    has no figure."""
    tg = bl.training_graph
    if tg is None:
        return {}

    f = step_flops(tg)
    out = {"available": f.available, "reason": f.reason}
    if f.available:
        out.update({"forward": f.forward, "backward": f.backward, "optimizer": f.optimizer, "step": f.total,
                    "by_op": {o.label: {"forward": o.forward, "backward": o.backward}
                              for o in f.ops.values()}})
    return {"flops": out}


def peak_step(bufs, n: int) -> tuple[int, int]:
    """(step, bytes) of the first step with the most live bytes among `bufs` over steps 0..n-1
    (bytes -1 when n is 0)."""
    delta = [0] * (n + 1)
    for b in bufs:
        delta[b.first] += b.size
        delta[b.last + 1] -= b.size
    live, best, at = 0, -1, 0
    for s in range(n):
        live += delta[s]
        if live > best:
            best, at = live, s
    return at, best


def peak_figures(bl) -> dict:
    n = len(bl.steps)
    if not n or not bl.buffers:
        return {}
    at, best = peak_step(bl.buffers, n)
    by_cat = {c: 0 for c in CATEGORIES}
    for b in bl.buffers:
        if b.first <= at <= b.last:
            by_cat[b.category] += b.size
    st = bl.steps[at]
    return {"peak_step": at, "peak_kind": st.kind, "peak_op": st.label, "peak_live_bytes": best,
            "peak_by_category": by_cat}


PROFILE = MemplanProfile()
