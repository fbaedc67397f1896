"""The work behind `memplan verify`: load a model, analyse it with a profile, build the training step
it planned (for onert, `onert_map` rebuilds it and maps onert's buffers onto it), then have the
executor (`memplan_cli.execute`, which only runs a given step in a given layout) run it inside the
plan, and report whether it holds."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from memplan_cli.errors import MemplanError, printable
from memplan_cli.execute.executor import VerifyResult, execute
from memplan_cli.execute.layout import layout_from_pools


@dataclass
class VerifyReport:
    model: str
    profile: str
    config: object
    pools: list[dict]
    buffers: int
    steps: int
    result: VerifyResult
    unmapped: list[str] = field(default_factory=list)
    timings: dict = field(default_factory=dict)
    model_batch: int | None = None  # the batch the graph was run at when no flag chose one
    # sizes the data decides, run at the sizes the loader took (loaders/data_sized.py)
    data_sized: dict | None = None

    def to_json(self) -> dict:
        """The run's part of `verify`'s JSON document (the API writes its header: model, profile, config)."""
        r = self.result
        return {
            "passed": r.passed, "steps": self.steps, "steps_run": r.steps_run, "buffers": self.buffers,
            "pools": self.pools, "arena_bytes": r.arena_bytes, "reference_bytes": r.reference_bytes,
            "tensors_compared": r.compared, "max_difference": r.max_diff, "max_difference_at": r.max_diff_at,
            "loss": {"arena": r.loss[0], "reference": r.loss[1]} if r.loss else None,
            "weights_updated": r.weights_updated,
            "frozen_weights_unchanged": r.frozen_unchanged,
            "seeded_sources": list(r.sources),
            "failure": None if r.passed else {"step": r.failed_step, "message": r.message, "buffers": r.buffers,
                                              "overlapping_live_buffers": [{"step": st, "buffers": [a, b]}
                                                                           for st, a, b in r.conflicts]},
            "unmapped_buffers": self.unmapped, "seconds": self.timings,
            **({"data_sized": {"rule": self.data_sized["rule"], "dims": len(self.data_sized["dims"])}}
               if self.data_sized else {}),
        }

    def text(self, level: int = 1) -> str:
        r = self.result
        c = self.config
        verdict = "PASS" if r.passed else "FAIL"
        if level <= 0:
            tail = (f"largest difference {r.max_diff:.3g}" if r.passed
                    else f"step {r.failed_step}: {', '.join(r.buffers)}")
            return f"{verdict} {printable(self.model)} ({self.profile}): {tail}\n"
        batch = c.batch_size if c.batch_size is not None else f"{self.model_batch or '?'} (the model's)"
        precision = "" if getattr(c, "precision", "32-true") == "32-true" else f", {c.precision}"
        lines = [f"memplan verify {printable(self.model)}: profile {self.profile}, batch {batch}{precision}, "
                 f"{c.optimizer}, {c.loss}, learning rate {c.learning_rate:g}"]
        lines.append(f"  plan      {len(self.pools)} pool(s), {self.buffers} buffers, "
                     f"{sum(p['arena'] for p in self.pools):,d} B: {_pool_summary(self.pools, level)}")
        lines.append(f"  ran       {r.steps_run} of {self.steps} steps in the arena ({r.arena_bytes:,d} B) and with "
                     f"one allocation per tensor ({r.reference_bytes:,d} B)"
                     + (f", {r.seconds:.2f} s" if level >= 2 else ""))  # seconds vary: only with -v
        where = f" ({r.max_diff_at})" if r.max_diff_at else ""
        lines.append(f"  compared  {r.compared} tensor values step by step; largest difference {r.max_diff:.3g}{where}")
        if r.loss:
            lines.append(f"  loss      {r.loss[0]:.6g} in the arena, {r.loss[1]:.6g} in the reference")
        if r.passed:
            lines.append(f"  weights   {r.weights_updated} updated, all equal to the reference"
                         + (f"; {r.frozen_unchanged} frozen, bit-identical before and after" if r.frozen_unchanged
                            else ""))
        if r.sources:
            lines.append(f"  sources   {len(r.sources)} op(s) without a reference kernel, outside the backward region, "
                         "wrote seeded values of their outputs' shapes: " + ", ".join(r.sources[:3])
                         + (" ..." if len(r.sources) > 3 else ""))
        if self.data_sized:
            # the Split takes its pieces' sizes from the graph as analysed, and a NonZero (no reference
            # kernel) writes seeded indices of the count analysed: the step runs at the sizes assumed,
            # whatever the data computed
            lines.append(f"  assumed   {len(self.data_sized['dims'])} data-sized dims at the sizes analysed "
                         f"({self.data_sized['rule']}): the step ran at those sizes")
        if self.unmapped:
            lines.append(f"  note      {len(self.unmapped)} buffer(s) of the plan hold no tensor the schedule touches: "
                         + ", ".join(self.unmapped[:5]) + (" ..." if len(self.unmapped) > 5 else ""))
        if level >= 2:
            for k, v in self.timings.items():
                lines.append(f"  time      {k:8s} {v:.2f} s")
        if r.passed:
            lines.append("PASS: the plan holds for one training step")
        else:
            # the message names its step ("step 16 (calcGradient of #7 FullyConnected) reads ...") unless
            # the failure is found after the last step
            head = "FAIL: " if r.message.startswith(f"step {r.failed_step} ") else f"FAIL at step {r.failed_step}: "
            lines.append(head + r.message)
            if r.buffers:
                lines.append(f"  buffers involved: {', '.join(r.buffers)}")
            if r.conflicts:
                pairs = "; ".join(f"{a} and {b} from step {st}" for st, a, b in r.conflicts[:3])
                more = f" (and {len(r.conflicts) - 3} more)" if len(r.conflicts) > 3 else ""
                lines.append(f"  the plan puts {len(r.conflicts)} pair(s) of live buffers on shared bytes: "
                             f"{pairs}{more}")
        return "\n".join(lines) + "\n"


def _pool_summary(pools: list[dict], level: int) -> str:
    """Pools by name; past a handful (onert's one pool per kernel buffer), the rest summed by category."""
    if len(pools) <= 8 or level >= 2:
        return ", ".join(f"{p['name']} {p['arena']:,d} B" for p in pools)
    head = [p for p in pools if p["category"] != "extra"][:7]
    rest = [p for p in pools if p not in head]
    by: dict[str, list[int]] = {}
    for p in rest:
        by.setdefault(p["category"], []).append(p["arena"])
    tail = [f"{len(v)} more {c} pools {sum(v):,d} B" for c, v in by.items()]
    return ", ".join([f"{p['name']} {p['arena']:,d} B" for p in head] + tail)


def verify_model(path: str, config, *, profile: str = "memplan", planner: str | None = None,
                 time_limit: float | None = None, profile_options: dict | None = None, seed: int = 0,
                 threads: int | None = 1, check_live: bool = True, graph=None) -> VerifyReport:
    """`graph`: `path` already loaded at `config.batch_size` (the file is then not read again)."""
    from memplan_cli.analysis import analyze_graph
    from memplan_cli.loaders import load_model

    t0 = time.perf_counter()
    from memplan_cli.errors import naming

    if graph is None:
        graph = load_model(path, batch_size=config.batch_size, dims=config.dims)
    try:
        a = analyze_graph(graph, config, profile=profile, planner=planner, time_limit=time_limit,
                          profile_options=profile_options, path=path)
    except MemplanError as e:  # about this model: say which file, as analyze does
        raise naming(path, e) from None
    t1 = time.perf_counter()
    return verify_analysis(a, path, seed=seed, threads=threads, check_live=check_live,
                           timings={"plan": t1 - t0})


# dtypes the reference run has no array type for: analyze sizes them, verify cannot run them
_NOT_RUNNABLE = {"string": "strings are not numbers"}
NUMPY_MAX_RANK = 64  # NumPy 2's limit on an array's dimensions (32 before 2.0)


def _check_dtypes(tg, path: str) -> None:
    """MemplanError (exit 2) naming the first tensor the reference kernels cannot hold: a dtype NumPy
    lacks, or more dimensions than a NumPy array may have."""
    import numpy as np

    max_rank = 32 if int(np.__version__.split(".")[0]) < 2 else NUMPY_MAX_RANK
    for spec in tg.tensors:
        if len(spec.shape) > max_rank:
            raise MemplanError(f"cannot verify {path or 'the model'}: tensor {spec.name!r} has {len(spec.shape)} "
                               f"dimensions, more than a NumPy array holds ({max_rank}); `memplan analyze` still "
                               "sizes it")
        why = _NOT_RUNNABLE.get(spec.dtype)
        if why is None and spec.dtype not in ("int4", "uint4", "bfloat16"):  # execute/memory.py maps these
            try:
                np.dtype(spec.dtype)
            except TypeError:
                why = "NumPy has no such type"
        if why:
            raise MemplanError(f"cannot verify {path or 'the model'}: tensor {spec.name!r} is {spec.dtype} ({why}); "
                               "`memplan analyze` still sizes it")


def _memory_limits() -> list[tuple[int, str]]:
    """What this process may allocate, each with what sets it: the machine's memory, a container's
    limit (cgroup v2 memory.max, v1 memory.limit_in_bytes) and `ulimit -v` / `-d` less what the
    process maps already. Limits only, never current use by others, so the answer does not depend
    on the load of the machine."""
    import os
    import resource

    out = []
    try:
        out.append((os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "this machine's memory"))
    except (ValueError, OSError, AttributeError):
        pass
    for f in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(f) as fh:
                text = fh.read().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 2**60:
            out.append((int(text), "the container's memory limit (cgroup)"))
    mapped = 0
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmSize:"):
                    mapped = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    for name, flag in (("RLIMIT_AS", "ulimit -v"), ("RLIMIT_DATA", "ulimit -d")):
        try:
            soft = resource.getrlimit(getattr(resource, name))[0]
        except (AttributeError, ValueError, OSError):
            continue
        if soft != resource.RLIM_INFINITY:
            out.append((max(0, soft - mapped), f"what `{flag}` leaves this process"))
    return out


def _check_memory(need: int, path: str) -> None:
    """Refuse before allocating when the run cannot fit in the memory this process may use: filling
    arrays that overcommit allowed would end in the OOM killer (or, under a limit, a MemoryError
    after minutes of filling), not an error."""
    limits = _memory_limits()
    if not limits:
        return
    limit, what = min(limits)
    if need > limit:
        raise MemplanError(f"cannot verify {path or 'the model'}: the step needs {need:,d} bytes (the planned "
                           f"arenas plus a reference copy of every tensor), more than {what} ({limit:,d} "
                           "bytes); `memplan analyze` still sizes it")


def verify_analysis(a, path: str = "", *, seed: int = 0, threads: int | None = 1, check_live: bool = True,
                    layout=None, timings: dict | None = None, feeds: dict | None = None) -> VerifyReport:
    """Run the step of an `Analysis` (its profile must expose the training graph it planned) in its
    plan, or in `layout` when given (tests inject faults this way). `feeds`: {tensor name: array}
    for inputs, label or weights that should not be seeded random values."""
    from memplan_cli.ops.base import UnsupportedKernel

    tg = a.buffers.training_graph
    if tg is None and a.profile == "onert":
        from memplan_cli.verification import onert_map

        tg = onert_map.onert_training_graph(a.graph, a.config, a.buffers.info.get("backward_order"))
        if layout is None:
            layout = layout_from_pools(tg, a.pools, a.profile, locate=onert_map.locator(tg))
            layout = onert_map.step_intervals(tg, layout, a.buffers.info.get("event_ops"))
    if tg is None:
        # nntrainer's plan is of its own layer graph and tensor pool, which memplan does not run
        raise MemplanError(f"cannot verify {path or 'the model'}: the {a.profile} profile reproduces a plan of "
                           "that runtime's own graph, which memplan does not run (verify runs the memplan, "
                           "onert and singa plans)")
    _check_dtypes(tg, path)
    if layout is None:
        layout = layout_from_pools(tg, a.pools, a.profile)
    need = sum(layout.arenas.values()) + sum(spec.nbytes for spec in tg.tensors)
    _check_memory(need, path)
    t1 = time.perf_counter()
    cfg = a.config
    try:
        res = execute(tg, layout, optimizer=cfg.optimizer, learning_rate=cfg.learning_rate, seed=seed,
                      check_live=check_live, threads=threads, feeds=feeds)
    except UnsupportedKernel as e:
        raise MemplanError(f"cannot verify {path or 'the model'}: {e}") from None
    except MemoryError:
        raise MemplanError(f"cannot verify {path or 'the model'}: the step needs {need:,d} bytes (the planned "
                           "arenas plus a reference copy of every tensor), more than could be allocated") from None
    timings = dict(timings or {})
    timings["run"] = time.perf_counter() - t1
    pools = [{"name": p.pool.name, "category": p.pool.category, "planner": p.plan.planner, "arena": p.plan.arena,
              "buffers": len(p.buffers)} for p in a.pools]
    return VerifyReport(path, a.profile, cfg, pools, len(a.buffers.buffers), len(tg.steps), res,
                        list(layout.unmapped), timings, a.graph.input_batch(),
                        (a.graph.metadata or {}).get("data_sized"))
