"""`memplan fit`: the ways to make one training step fit a memory budget, each with its memory and
compute, and which of them are on the memory / compute Pareto front.

Options (each planned by memplan's own profile, every figure its planned arena):
- "as asked": the setup as given;
- "largest batch": the largest batch that fits without remat (doubling, then bisection);
- "longest dim" (`--max-dim NAME`): the largest size of the symbolic dimension NAME (a sequence
  length) that fits without remat at the requested batch, searched the same way; a size the model
  cannot take (its shapes stop agreeing) counts as not fitting, and the option says where;
- "remat": at the requested batch, the cheapest remat plan that fits (`remat/solve.py`);
- "frozen prefix": the most trainable ops (the last N, onert's -t N) that fit without remat, i.e. the
  smallest frozen prefix;
- "bias-only" (`--train biases`) and "lora" (`--lora 8` on the default targets, the attention query
  and value projections), when the setup asked for neither and the model has biases / targets:
  fine-tuning modes, listed beside full training;
- "sgd": SGD instead of the requested Adam / momentum (no optimizer state), and "sgd + remat" when
  SGD alone does not fit.
- compute: FLOPs per sample of the option's step / FLOPs per sample of the step as asked (a batch
  change keeps it near 1, remat raises it, freezing lowers it and trains less).
- Pareto: among the options that fit and train what was asked (the same batch and trainable ops: as
  asked, remat, sgd, sgd + remat), those that no other such option beats on memory and compute (no
  more of either, less of one). A smaller batch, a frozen prefix or a fine-tuning mode trains
  something else, so it is listed but never on the front.
"""
from __future__ import annotations

from memplan_cli.analysis import analyze_graph
from memplan_cli.errors import MemplanError
from memplan_cli.passes.cost import step_flops
from memplan_cli.remat.problem import RematProblem
from memplan_cli.remat.solve import solve


def _flops(a) -> int | None:
    tg = a.buffers.training_graph
    return step_flops(tg).total if tg is not None else None


def _largest(fits, lo: int, hi: int) -> int | None:
    """The largest n in [lo, hi] with fits(n), assuming fits is monotone (True then False)."""
    if not fits(lo):
        return None
    if fits(hi):
        return hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo


MAX_DIM_SEARCH = 1 << 20  # the longest dimension `--max-dim` tries


class _Sizes:
    """The step at the sizes of one knob (the batch, a symbolic dimension), analysed once each: a
    size the model cannot take (its shapes stop agreeing: a position table, a batch fixed inside
    the graph) does not fit, and `refused` keeps why."""

    def __init__(self, analyse, budget: int, known: dict | None = None):
        self.analyse, self.budget = analyse, budget
        self.cache: dict[int, object] = dict(known or {})
        self.refused: dict[int, str] = {}

    def at(self, v: int):
        if v not in self.cache:
            try:
                self.cache[v] = self.analyse(v)
            except MemplanError as e:
                self.cache[v], self.refused[v] = None, e.message
        return self.cache[v]

    def fits(self, v: int) -> bool:
        return self.at(v) is not None and self.at(v).planned_total <= self.budget

    def largest(self, asked: int, cap: int) -> int | None:
        """The largest size <= cap that fits: doubling up from `asked` when it fits, then bisection;
        else bisection below it."""
        if self.fits(asked):
            hi = asked
            while hi * 2 <= cap and self.fits(hi * 2):
                hi *= 2
            return _largest(self.fits, hi, min(hi * 2, cap))
        return _largest(self.fits, 1, asked) if asked > 1 else None

    def stop(self, name: str, above: int) -> tuple[str, dict]:
        """(" (NAME N does not load)", {"note": why}) for the smallest refused size above `above`."""
        stop = min((v for v in self.refused if v > above), default=None)
        if stop is None:
            return "", {}
        return f" ({name} {stop} does not load)", {"note": f"at {name} {stop}: {self.refused[stop]}"}


def fit_options(load, config, budget: int, *, max_batch: int = 1 << 16, max_dim: str | None = None) -> dict:
    """`load(batch, dims) -> graph` (re-batched, `dims` bound). `max_dim`: also search the largest
    size of that symbolic dimension that fits. Returns {"options": [...], "fits": bool}."""
    if max_dim is not None and max_dim not in dict(config.dims):
        from memplan_cli.errors import ConfigError

        raise ConfigError.worded(f"max_dim {max_dim!r}: give the setup's own size too (dim={{{max_dim!r}: N}}): "
                                 "the other options are planned at it",
                                 f"--max-dim {max_dim}: give the setup's own size too (--dim {max_dim}=N): the "
                                 "other options are planned at it")
    load_dims = load
    load = lambda b: load_dims(b, config.dims)  # noqa: E731
    batch = config.batch_size
    graph = load(batch)
    batch = batch or graph.input_batch() or 1
    config = config.with_(batch_size=batch)
    asked = analyze_graph(graph, config)
    f0 = _flops(asked)
    per0 = f0 / batch if f0 else None
    rows = []

    def row(option, change, a=None, cfg=None, flops=None, extra=None, planned=None, fits=None):
        planned = a.planned_total if planned is None else planned
        r = {"option": option, "change": change, "planned": int(planned),
             "fits": bool(planned <= budget) if fits is None else fits,
             "batch_size": (cfg or config).batch_size, "optimizer": (cfg or config).optimizer,
             "trainable_ops": _trainable(cfg or config),
             "fine_tuning": _fine_tuning(cfg or config),
             "flops_ratio": round((flops / (cfg or config).batch_size) / per0, 6) if flops and per0 else None}
        r.update(extra or {})
        rows.append(r)
        return r

    row("as asked", "nothing", asked, flops=f0)
    batches = _Sizes(lambda b: analyze_graph(load(b), config.with_(batch_size=b)), budget, {batch: asked})
    best = batches.largest(batch, max_batch)
    if best is not None:
        a = batches.at(best)
        why, note = batches.stop("batch", best)
        row("largest batch", f"batch {best} without remat{why}", a, config.with_(batch_size=best), _flops(a),
            extra=note)
    else:  # the figure of the smallest batch that loads (the batch asked always does)
        b = 1 if batches.at(1) is not None else batch
        why, note = batches.stop("batch", 0) if 1 in batches.refused else ("", {})
        row("largest batch", f"no batch fits without remat{why}", batches.at(b), config.with_(batch_size=b), None,
            fits=False, extra=note)

    if max_dim is not None:
        _longest_dim(row, load_dims, config, batch, budget, max_dim)

    problem = RematProblem(graph, config)
    res = solve(problem, budget)
    if res.fits:
        # the step as asked already fits: remat is that step, said so rather than "recompute 0 op(s)"
        change = (f"recompute {len(res.drop)} op(s) at batch {batch}" if res.drop
                  else "nothing to recompute: the step as asked fits")
        row("remat", change, planned=res.arena,
            flops=f0 + res.added_flops if f0 else None,
            extra={"recomputed_ops": len(res.drop), "status": res.status})
    else:
        least = (f", none below {res.reachable_lower_bound:,d} B" if res.reachable_lower_bound is not None
                 else f", floor {res.floor:,d} B")
        what = "no remat plan fits, proven" if res.status == "infeasible" else "no remat plan found"
        row("remat", f"{what} (smallest found {res.reachable:,d} B{least})",
            planned=res.reachable, fits=False, extra={"recomputed_ops": len(res.reachable_drop),
                                                       "status": res.status})

    n_ops = len(graph.operations)
    frozen: dict[int, object] = {}

    def train_last(n):
        if n not in frozen:
            frozen[n] = analyze_graph(graph, config.with_(trainable=n))
        return frozen[n]

    if config.trainable == "all":
        k = _largest(lambda n: train_last(n).planned_total <= budget, 0, n_ops)
        if k is not None and k < n_ops:
            a = train_last(k)
            row("frozen prefix", f"train the last {k} ops (freeze the first {n_ops - k})", a,
                config.with_(trainable=k), _flops(a))
        elif k is None:
            row("frozen prefix", "nothing fits even with every op frozen", train_last(0), config.with_(trainable=0),
                _flops(train_last(0)), fits=False)

    if not (config.train or config.freeze or config.lora_rank):
        from memplan_cli.errors import ConfigError

        for option, change, cfg in (("bias-only", "train only the biases (--train biases)",
                                     config.with_(train=("biases",))),
                                    ("lora", "LoRA r=8 adapters on the attention q / v projections (--lora 8)",
                                     config.with_(lora_rank=8))):
            try:
                a = analyze_graph(graph, cfg)
            except ConfigError:  # no biases, no projection to adapt
                continue
            row(option, change, a, cfg, _flops(a))

    if config.optimizer != "sgd":
        cs = config.with_(optimizer="sgd")
        a = analyze_graph(graph, cs)
        r = row("sgd", f"SGD instead of {config.optimizer}", a, cs, _flops(a))
        if not r["fits"]:
            ps = RematProblem(graph, cs)
            rs = solve(ps, budget)
            if rs.fits:
                fs = _flops(a)
                row("sgd + remat", f"SGD and recompute {len(rs.drop)} op(s)", planned=rs.arena, cfg=cs,
                    flops=fs + rs.added_flops if fs else None, extra={"recomputed_ops": len(rs.drop),
                                                                       "status": rs.status})
    _pareto([r for r in rows if r["batch_size"] == batch and r["trainable_ops"] == _trainable(config)
             and r["fine_tuning"] == _fine_tuning(config) and "dims" not in r], rows)
    return {"options": rows, "fits": any(r["fits"] for r in rows), "batch_size": batch}


def _longest_dim(row, load, config, batch: int, budget: int, name: str) -> None:
    """The "longest dim" option: the largest size of dimension `name` whose step fits without remat,
    searched as the largest batch is."""
    asked = dict(config.dims)[name]

    def cfg_at(v):
        return config.with_(dims=tuple(sorted({**dict(config.dims), name: v}.items())))

    sizes = _Sizes(lambda v: analyze_graph(load(batch, cfg_at(v).dims), cfg_at(v)), budget)
    best = sizes.largest(asked, MAX_DIM_SEARCH)
    if best is None:  # the figure of the smallest size tried that loads (the size asked always does)
        v = 1 if sizes.at(1) is not None else asked
        why, note = sizes.stop(name, 0) if 1 in sizes.refused else ("", {})
        row("longest dim", f"no {name} fits without remat{why}", sizes.at(v), cfg_at(v), None, fits=False,
            extra={"dims": {name: v}, **note})
        return
    why, note = sizes.stop(name, best)
    a = sizes.at(best)
    row("longest dim", f"{name} {best} without remat{why}", a, cfg_at(best), _flops(a),
        extra={"dims": {name: best}, **note})


def _fine_tuning(cfg) -> list[str]:
    return list(cfg.train) + list(cfg.freeze) + ([f"lora:{cfg.lora_rank}"] if cfg.lora_rank else [])


def _pareto(same, rows) -> None:
    ok = [r for r in same if r["fits"] and r["flops_ratio"] is not None]
    for r in rows:
        r["pareto"] = r in ok and not any(
            o is not r and o["planned"] <= r["planned"] and o["flops_ratio"] <= r["flops_ratio"]
            and (o["planned"] < r["planned"] or o["flops_ratio"] < r["flops_ratio"]) for o in ok)


def _trainable(cfg):
    t = cfg.trainable
    return list(t) if isinstance(t, tuple) else t

