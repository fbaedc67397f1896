"""The `onert` profile: the training memory onert 0.1.0 allocates, ALLOC line by ALLOC line.

One pool per onert category (non-const, trainable, opt-variable, back-prop, gradient,
disposable), one per kernel-private buffer and the (empty) layer-scope pool, in the order onert
prints them. Buffer lifetimes are onert's claim/release events (see `tensorplan`), so onert's
Bump / FirstFit / WIC planners reproduce its capacities exactly. Each category's pool is its
own time domain (its events are not another pool's); the kernel-private pools share one, the
session, in which they are all live.
"""
from __future__ import annotations

from memplan_cli.buffers import Buffer, BufferList, Pool, Step
from memplan_cli.errors import MemplanError, UnsupportedOpError
from memplan_cli.profiles.onert import kernels, tensorplan
from memplan_cli.profiles.onert.trainir import build_train_ir

PLANNERS = ("wic", "bump", "firstfit")
UINT32_MAX = 2**32 - 1
# onert's print order of the planned categories: (pool name, memplan category, label)
PLANNED = (("onert:non-const", "non-const"), ("onert:trainable", "trainable"),
           ("onert:opt-variable", "opt-variable"), ("onert:back-prop", "back-prop"),
           ("onert:gradient", "gradient"), ("onert:disposable", "disposable"))
LAYER_SCOPE = "onert:layer-scope"
# the time domain of the kernel-private buffers: allocated when the kernels are configured and
# held for the whole session, so all of them are live together
SESSION = "onert:session"
NAIVE_ONERT = ("every tensor onert allocates its own bytes (onert's tensors and kernel buffers; "
               "onert folds none into another)")


class OnertProfile:
    name = "onert"
    precisions = ("32-true",)
    precision_note = "onert 0.1.0 trains float32 only"
    # benchmarks/onert_match.py: mnist 48 + MobileNetV2 48 + test-zoo 72 configurations
    checked = ("byte-exact against onert 0.1.0 on its 168 measured configurations (benchmarks/onert_match.py, "
               "tests/onert/); not run on this model (devtools/onert_runtime.py runs it)")

    def build(self, graph, config, planner: str = "wic", threads: int | None = None,
              simd_width: int | None = None, stage: str = "train") -> BufferList:
        planner = (planner or "wic").lower()
        if planner not in PLANNERS:
            raise MemplanError(f"onert has no planner {planner!r} (onert's CPU_MEMORY_PLANNER: "
                               f"{', '.join(PLANNERS)})")
        threads = threads or kernels.default_threads()
        simd_width = simd_width or kernels.default_simd_width()
        if threads < 1 or simd_width < 1:
            raise MemplanError("--onert-threads and --onert-simd-width must be >= 1")
        if config.param_level:
            raise UnsupportedOpError("onert 0.1.0 trains whole ops (every weight of a trainable op): the weight-level "
                                     "modes (--train biases | params:GLOB, --freeze params:GLOB, --lora, a file's "
                                     "peft adapters) need the memplan profile")
        ir = build_train_ir(graph, config.selected_ops(graph), stage)
        trainable = tensorplan.plan_trainable(ir)
        per_cat = {
            "onert:non-const": tensorplan.plan_nonconst(ir),
            "onert:trainable": trainable,
            "onert:opt-variable": _opt_variables(trainable, config.optimizer_state_count),
            "onert:back-prop": tensorplan.plan_backprop(ir),
            "onert:gradient": tensorplan.plan_gradient(ir),
            "onert:disposable": tensorplan.plan_disposable(ir),
        }
        ppool = _planner_name(planner)
        buffers, pools = [], []
        for pool_name, cat in PLANNED:
            # trainable tensors all interfere and the opt-variable block is one allocation:
            # any planner gives the sum; onert plans both with its configured planner too
            # each category counts its own events: its own time domain
            pools.append(Pool(pool_name, cat, ppool, domain=pool_name))
            for ev in per_cat[pool_name]:
                buffers.append(Buffer(ev.name, cat, ev.size, ev.first, ev.last, ev.owner, pool_name,
                                      ev.nbytes))
        kb = kernels.kernel_buffers(ir, threads=threads, simd_width=simd_width)
        for n, (name, size, owner) in enumerate(kb):
            pool_name = f"onert:kernel:{n}"
            pools.append(Pool(pool_name, "extra", "naive", domain=SESSION))
            buffers.append(Buffer(f"{owner} {name}", "extra", size, 0, 0, owner, pool_name, size))
        pools.append(Pool(LAYER_SCOPE, "extra", "naive", domain=SESSION))
        nsteps = max([b.last for b in buffers] + [0]) + 1
        steps = [Step(i, "event", -1, "") for i in range(nsteps)]
        info = {"profile": "onert", "planner": planner, "threads": threads, "simd_width": simd_width,
                "backward_order": list(ir.backward_order), "forward_order": list(ir.forward_order),
                "kernel_order": list(ir.kernel_order),
                "kernel_buffers": len(kb)}
        # onert plans every tensor as its own buffer (none folded into another), so naive is their sum
        return BufferList(buffers, steps, pools, info, naive_means=NAIVE_ONERT)

    def figures(self, analysis) -> dict:
        caps = [(p.pool, p.plan.arena) for p in analysis.pools]
        for pool, cap in caps:
            if cap > UINT32_MAX:
                raise MemplanError(
                    f"onert cannot hold this: its {pool.category} arena ({pool.name}) needs {cap:,d} "
                    f"bytes, over onert's 32-bit allocation limit ({UINT32_MAX:,d}; onert 0.1.0's "
                    f"planners wrap their uint32 offsets and plan overlapping tensors)")
        lines = [cap for _, cap in caps]
        by = {}
        for pool, cap in caps:
            by[pool.name] = cap
        extra = sum(cap for pool, cap in caps if pool.category == "extra")
        one_style = {
            "non-const": by["onert:non-const"], "trainable": by["onert:trainable"],
            "back-prop": by["onert:back-prop"], "gradient": by["onert:gradient"],
            "opt variable": by["onert:opt-variable"], "disposable": by["onert:disposable"],
            "extra tensors": extra,
        }
        return {"alloc_lines": lines, "one_style": one_style}


def _planner_name(planner: str) -> str:
    """The registry planner with onert's semantics (the planners package's when present)."""
    from memplan_cli.planners import get_planner

    try:
        get_planner(planner)  # loads the runtimes' planners first, the searches only if needed
        return planner
    except KeyError:
        pass
    from memplan_cli.profiles.onert import replay  # noqa: F401  (registers onert-* fallbacks)

    return "onert-" + planner


def _opt_variables(trainable, count: int) -> list:
    """Adam's m and v: `count` copies of the trainable arena, all live for the whole session."""
    out = []
    t = 0
    for c in range(count):
        for ev in trainable:
            out.append(tensorplan.Event(f"{ev.name} var{c}", ev.size, ev.nbytes, t, -1, ev.owner))
            t += 1
    for ev in out:
        ev.last = t
        t += 1
    return out


PROFILE = OnertProfile()


def predict_alloc_lines(graph, config, planner: str = "wic", threads: int | None = None,
                        simd_width: int | None = None, stage: str = "train") -> list[int]:
    """onert's ALLOC capacities, in print order, without the analysis pipeline (tests, benchmarks).
    `stage="compile"`: also for a model onert compiles but cannot train (see `support`)."""
    from memplan_cli.planners import get_planner

    bl = PROFILE.build(graph, config, planner=planner, threads=threads, simd_width=simd_width, stage=stage)
    out = []
    pooled = bl.by_pool()
    for pool in bl.pools:
        bufs = pooled[pool.name]
        plan = get_planner(pool.planner)([b.size for b in bufs], [b.first for b in bufs],
                                         [b.last for b in bufs])
        out.append(plan.arena)
    return out
