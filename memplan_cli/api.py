"""The Python API: `from memplan_cli import analyze, compare, plan`.

Each function does what its command does and returns a typed result that holds the command's JSON
document itself (`result.report`, the same dict `--format json` writes, so `result.to_json()` is
byte-identical to the command's output) with typed accessors for the common figures. Every figure
is an integer number of bytes.

Rules:
- the same errors as the CLI, as exceptions: bad input (a missing or unreadable model, an unknown
  optimizer, an op with no backward rule) raises `memplan_cli.errors.MemplanError` or a subclass
  (`ModelError`, `UnsupportedOpError`, `ConfigError`), whose message is the CLI's one line;
  anything else is a bug in memplan and propagates as it is;
- the training setup follows the CLI's precedence: arguments > the circle file's training
  metadata > defaults (`result.report["config"]["sources"]` says which);
- nothing is printed and nothing is written.

The CLI commands are thin layers over these functions (`commands/analyze.py`, `compare.py`,
`plan.py`).
"""
from __future__ import annotations

import functools
import inspect as _inspect
import itertools
import json
import os
import time
from dataclasses import dataclass, field
from typing import Iterable, Sequence, Union

from memplan_cli.config import FLAG_BY_NAME, TRAINING_FLAGS, check_positive as _positive, check_training_arguments, \
    config_json, merge_setup, parse_dims, training_words
from memplan_cli.errors import ConfigError, MemplanError, naming, shell_path
from memplan_cli.profiles import ONERT_SIMD_WIDTHS, PROFILE_MODULES

# the modules that do the work (analysis, loaders, remat, the report's documents, ...) are imported
# inside the functions that use them: `memplan --help` imports this module and loads none of them

__all__ = ["analyze", "compare", "plan", "verify", "fit", "sweep", "diff", "inspect", "FitResult", "SweepResult",
           "DiffResult", "InspectResult",
           "AnalysisResult", "ComparisonResult", "PlanSummary", "VerificationResult",
           "CategoryFigures", "Peak", "PoolFigures", "SystemColumn"]

PathLike = Union[str, "os.PathLike[str]"]


# ---- results -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class CategoryFigures:
    """One category's row (`categories.<name>` in the JSON report)."""

    planned: int
    naive: int


@dataclass(frozen=True)
class Peak:
    """The step with the most live bytes and what is live there (`peak`)."""

    step: int
    step_label: str
    op: str
    bytes: int
    categories: dict[str, int]


@dataclass(frozen=True)
class PoolFigures:
    """One planned pool (`pools[i]`)."""

    name: str
    category: str
    planner: str
    status: str
    buffers: int
    arena: int
    lower_bound: int


@dataclass(frozen=True)
class AnalysisResult:
    """What `memplan analyze` finds: `report` is its JSON document (schemas/analysis.schema.json)."""

    report: dict
    # the work behind the report (buffers, plans, the graph); not part of the stable API
    analysis: object = field(repr=False, compare=False, default=None)

    @property
    def profile(self) -> str:
        return self.report["profile"]

    @property
    def planned(self) -> int:
        """The planned total: the sum of the profile's pools (`totals.planned`)."""
        return self.report["totals"]["planned"]

    @property
    def naive(self) -> int:
        """Naive total (`totals.naive`); what it counts for this profile: `naive_means`."""
        return self.report["totals"]["naive"]

    @property
    def naive_means(self) -> str:
        return self.report.get("naive_means", "")

    @property
    def folded(self) -> int:
        """The part of naive - planned that in-place updates and views save (`totals.folded`)."""
        return self.report["totals"].get("folded", 0)

    @property
    def lower_bound(self) -> int:
        """The most bytes live at one step under this profile's lifetimes (`totals.lower_bound`)."""
        return self.report["totals"]["lower_bound"]

    @property
    def onert(self) -> int | None:
        """onert's total for the same model and setup (`totals.onert`); None when not computed or
        when onert cannot train the model (`onert_reason` says why)."""
        return self.report["totals"].get("onert")

    @property
    def onert_reason(self) -> str:
        return (self.report.get("onert") or {}).get("reason", "")

    @property
    def categories(self) -> dict[str, CategoryFigures]:
        return {c: CategoryFigures(v["planned"], v["naive"]) for c, v in self.report["categories"].items()}

    @property
    def peak(self) -> Peak:
        p = self.report["peak"]
        return Peak(p["step"], p.get("step_label", ""), p.get("op", ""), p["bytes"], dict(p["categories"]))

    @property
    def pools(self) -> list[PoolFigures]:
        return [PoolFigures(p["name"], p["category"], p["planner"], p.get("status", ""), p["buffers"],
                            p["arena"], p["lower_bound"]) for p in self.report["pools"]]

    def to_json(self) -> str:
        """The report as `memplan analyze --format json` writes it."""
        from memplan_cli.report.jsonfmt import dumps

        return dumps(self.report)


@dataclass(frozen=True)
class SystemColumn:
    """One system's column in a comparison (`columns.<name>`); figures are None when unavailable."""

    name: str
    available: bool
    reason: str
    total: int | None
    lower_bound: int | None
    categories: dict[str, int] | None
    ratio_to_memplan: float | None
    ratio_to_lower_bound: float | None


@dataclass(frozen=True)
class ComparisonResult:
    """What `memplan compare` finds: `report` is its JSON document (schemas/compare.schema.json)."""

    report: dict
    comparison: object = field(repr=False, compare=False, default=None)

    @property
    def lower_bound(self) -> int:
        """memplan's lower bound: the peak of live bytes under memplan's lifetimes."""
        return self.report["lower_bound"]

    @property
    def columns(self) -> dict[str, SystemColumn]:
        """One column per system, in the report's order (naive, onert, nntrainer, singa, memplan)."""
        out = {}
        for name in self.report["profiles"]:
            c = self.report["columns"][name]
            out[name] = SystemColumn(name, c["available"], c["reason"], c["total"], c["lower_bound"],
                                     dict(c["categories"]) if c["categories"] is not None else None,
                                     c["ratio_to_memplan"], c["ratio_to_lower_bound"])
        return out

    def to_json(self) -> str:
        """The comparison as `memplan compare --format json` writes it."""
        from memplan_cli.report.jsonfmt import dumps

        return dumps(self.report)


@dataclass(frozen=True)
class PlanSummary:
    """What `memplan plan` finds: `report` is its JSON summary; `offsets[i]` is buffer i's offset."""

    report: dict
    offsets: list[int]
    # the CSV the buffers came from, when they did (for `offsets_csv`)
    table: object = field(repr=False, compare=False, default=None)
    seconds: float = field(compare=False, default=0.0)  # the planner's, on this machine

    @property
    def arena(self) -> int:
        return self.report["arena"]

    @property
    def lower_bound(self) -> int:
        return self.report["lower_bound"]

    @property
    def naive(self) -> int:
        """Every buffer its own bytes."""
        return self.report["naive"]

    @property
    def planner(self) -> str:
        return self.report["planner"]

    @property
    def status(self) -> str:
        """The planner's status, "optimal" when the arena equals the lower bound."""
        return self.report["status"]

    def offsets_json(self) -> list[dict]:
        """Every buffer with its offset, in input order: id, half-open [lower, upper) and size as given."""
        if self.table is None:
            return [{"id": str(k), "offset": int(o)} for k, o in enumerate(self.offsets)]
        t = self.table
        return [{"id": i, "lower": f, "upper": l + 1, "size": s, "offset": int(o)}
                for i, f, l, s, o in zip(t.ids, t.firsts, t.lasts, t.sizes, self.offsets)]

    def offsets_csv(self) -> str:
        """The input CSV's rows with an `offset` column (`memplan plan -o`); only for CSV input."""
        from memplan_cli.plancsv import format_plan_csv

        if self.table is None:
            raise ConfigError("offsets_csv: the buffers did not come from a CSV file")
        return format_plan_csv(self.table, self.offsets)


# ---- the functions ------------------------------------------------------------------------------

def _with_training_keywords(fn):
    """`fn` takes the training flags' keywords (config.TRAINING_FLAGS: batch_size, optimizer, ...,
    lora, lora_targets) as **training; its signature shows them, for help() and editors."""
    from memplan_cli.config import TRAINING_FLAGS

    sig = _inspect.signature(fn)
    params = [p for p in sig.parameters.values() if p.kind is not _inspect.Parameter.VAR_KEYWORD]
    params += [_inspect.Parameter(f.name, _inspect.Parameter.KEYWORD_ONLY, default=None) for f in TRAINING_FLAGS]
    fn.__signature__ = sig.replace(parameters=params)
    return fn


def _setup(training: dict, time_limit=None, onert_threads=None, onert_simd_width=None) -> dict:
    """The CLI's flag values for these arguments (checked the way click checks them)."""
    from memplan_cli.config import check_training_arguments

    if time_limit is not None and not (isinstance(time_limit, (int, float)) and time_limit > 0):
        raise ConfigError(f"time_limit must be a number of seconds > 0, got {time_limit!r}")
    if onert_simd_width is not None and onert_simd_width not in ONERT_SIMD_WIDTHS:
        raise ConfigError(f"onert_simd_width must be 4, 8 or 16, got {onert_simd_width!r}")
    return {**check_training_arguments(training), "time_limit": time_limit,
            "onert_threads": _positive("onert_threads", onert_threads), "onert_simd_width": onert_simd_width}


def _model_path(model: PathLike) -> str:
    try:
        return os.fspath(model)
    except TypeError:
        raise ConfigError(f"model must be a path, got {type(model).__name__}") from None


# ---- shared with the commands (sweep, verify, diff use them through commands/options) -----------

def config_from_flags(graph_metadata: dict, **flags) -> "TrainConfig":
    """Merge circle training metadata (a dict the loader put in `Graph.metadata["training"]`) with
    flags (the API's training keywords: batch_size, optimizer, ..., lora). Precedence: flags >
    metadata > defaults; `sources` records which gave each value (config.merge_setup)."""
    from memplan_cli.config import check_training_arguments, merge_setup

    return merge_setup(graph_metadata, check_training_arguments(flags))


def onert_options(onert_threads=None, onert_simd_width=None) -> dict:
    """The onert profile's build options (`threads`, `simd_width`): the flags given, else the fixed
    defaults of the stated device (never this machine's), so reports always record both."""
    from memplan_cli.profiles.onert.kernels import DEFAULT_SIMD_WIDTH, DEFAULT_THREADS

    return {"threads": int(onert_threads) if onert_threads is not None else DEFAULT_THREADS,
            "simd_width": int(onert_simd_width) if onert_simd_width is not None else DEFAULT_SIMD_WIDTH}


def nntrainer_options(memory_optimization=None) -> dict:
    """The nntrainer profile's build options: `memory_optimization` (nntrainer's model property; the
    flag's "on" / "off" or a bool, default on as in nntrainer)."""
    if memory_optimization in (None, "on", True):
        return {"memory_optimization": True}
    if memory_optimization in ("off", False):
        return {"memory_optimization": False}
    raise ConfigError(f"nntrainer_memory_optimization must be on or off, got {memory_optimization!r}")


def check_planner(name: str | None, profile: str = "memplan") -> None:
    """onert's planners (wic, bump, firstfit) are the onert profile's to check; others are registry names."""
    from memplan_cli.planners import planner_names

    if name is not None and profile != "onert" and name not in planner_names():
        raise ConfigError(f"unknown planner {name!r} (choose from {', '.join(planner_names())})")


# the training flags' names: API keywords and keys of the commands' flags (config.TRAINING_FLAGS)
TRAINING_KEYS = tuple(FLAG_BY_NAME)
# the profiles by name, in the registry's order (the commands' --profile choices)
PROFILE_NAMES = tuple(PROFILE_MODULES)


def planner_kernels() -> str:
    """Which planner kernels run here: compiled at install, or the pure-Python fallback (`-v`)."""
    from memplan_cli.planners._native import kernels_note

    return kernels_note()


@dataclass
class Setup:
    """What one command works on, built once: the model loaded once (and hashed in the same pass as
    its format sniff), its flags, and the training setup merged once (flags > the file's training
    metadata > defaults) at the batch it trains at."""

    path: str
    flags: dict
    graph: object
    config: object
    model: object = None  # with build_setup(rebatchable=True): the load, at other batches (loaders.Rebatchable)
    load_seconds: float = 0.0  # what `analyze -v` prints as load: the load is done before analysis.analyze


def build_setup(path: str, flags: dict, *, rebatchable: bool = False, opened=None) -> Setup:
    """Load `path` once at the flag's batch (an ONNX model with a symbolic batch cannot load without
    it) and merge its setup; a batch the training metadata names re-batches the loaded graph.
    `rebatchable`: keep the load for other batches (Setup.model). `opened`: `path` already open
    (loaders.load_model)."""
    from memplan_cli.loaders import batched, load_model

    t0 = time.perf_counter()
    loaded = load_model(path, batch_size=flags.get("batch_size"), dims=parse_dims(flags.get("dim")), sha256=True,
                        rebatchable=rebatchable, opened=opened)
    graph = loaded.graph if rebatchable else loaded
    cfg = merge_setup(graph.metadata, flags)
    if cfg.batch_size != flags.get("batch_size"):
        graph = loaded.at(cfg.batch_size) if rebatchable else batched(graph, cfg.batch_size, path)
    return Setup(path, flags, graph, cfg, loaded if rebatchable else None, time.perf_counter() - t0)


def profile_build_options(flags: dict) -> dict:
    """The build options of the profile `flags` names: onert's threads and SIMD width, nntrainer's
    memory optimization, none for the others."""
    profile = flags.get("profile") or "memplan"
    if profile == "onert":
        return onert_options(flags.get("onert_threads"), flags.get("onert_simd_width"))
    if profile == "nntrainer":
        return nntrainer_options(flags.get("nntrainer_memory_optimization"))
    return {}


def run_analysis(model: str, flags: dict, *, compare_onert: bool = True, progress: bool = False,
                 setup: Setup | None = None, opened=None):
    """Load MODEL, merge its training metadata with `flags` (the CLI's flag names), analyse it
    (`opened`: MODEL already open, build_setup).

    Returns (Analysis, the profile options to echo in the report). For the onert profile,
    `planner` is onert's own CPU_MEMORY_PLANNER (wic, bump, firstfit) and goes to the profile;
    for the others it replaces every pool's planner.
    """
    from memplan_cli.analysis import analyze as analyze_model
    from memplan_cli.report.progress import spinner

    profile = flags.get("profile") or "memplan"
    planner = flags.get("planner")
    check_planner(planner, profile)
    setup = setup or build_setup(model, flags, opened=opened)
    onert = onert_options(flags.get("onert_threads"), flags.get("onert_simd_width"))
    build_options = None
    if profile == "onert":
        build_options = {**onert, **({"planner": planner} if planner else {})}
        planner = None
    elif profile == "nntrainer":
        build_options = nntrainer_options(flags.get("nntrainer_memory_optimization"))
    with spinner(f"analysing {model} ({profile})", progress):
        a = analyze_model(model, setup.config, profile=profile, planner=planner, time_limit=flags.get("time_limit"),
                          profile_options=build_options, compare_onert=compare_onert and profile == "memplan",
                          onert_options=onert, graph=setup.graph)
    a.timings["load"] = setup.load_seconds  # analyze_model was handed the graph: its own load took 0 s
    return a, (onert if profile == "onert" else build_options if profile == "nntrainer" else {})


def _budget_limit(budget, flags: dict) -> int:
    """The budget in bytes (sizes.parse_budget), for memplan's own profile only."""
    from memplan_cli.sizes import parse_budget

    limit = parse_budget(budget)
    if (flags.get("profile") or "memplan") != "memplan":
        raise ConfigError.worded("budget plans memplan's own profile with rematerialization: leave profile "
                                 "\"memplan\"", "--budget plans memplan's own profile with rematerialization: "
                                 "drop --profile")
    return limit


def solve_budget(setup: Setup, limit: int, *, planner=None, onert=None):
    """The cheapest remat plan of the setup whose planned arena fits `limit` bytes: (RematResult,
    the memplan profile's options for that plan, the Analysis of the step as run, RematProblem);
    the analysis is of the plain step when nothing fits. `onert`: onert's figures for the setup, for
    the analysis to keep (analysis.compare_with_onert)."""
    from memplan_cli.remat.problem import RematProblem
    from memplan_cli.remat.solve import solve_as_run

    graph, cfg, model = setup.graph, setup.config, setup.path
    try:
        problem = RematProblem(graph, cfg, planner=planner)
        res, opts, a = solve_as_run(graph, cfg, problem, limit, path=model, onert=onert)
    except MemplanError as e:
        raise naming(model, e) from None
    return res, opts, a, problem


def run_budgeted(model: str, flags: dict, budget, *, progress: bool = False):
    """`budget` (bytes, or a size text such as "192MiB"): the cheapest remat plan whose planned arena
    fits, then the analysis of that plan. Returns (Analysis, remat section); the analysis is of the
    plain step when nothing fits."""
    from memplan_cli.analysis import compare_with_onert
    from memplan_cli.remat.section import remat_section
    from memplan_cli.report.progress import spinner

    limit = _budget_limit(budget, flags)
    check_planner(flags.get("planner"))
    setup = build_setup(model, flags)
    with spinner(f"searching a remat plan for {model} under {budget}", progress):
        onert = compare_with_onert(setup.graph, setup.config, onert_options(flags.get("onert_threads"),
                                                                            flags.get("onert_simd_width")))
        res, _, a, problem = solve_budget(setup, limit, planner=flags.get("planner"), onert=onert)
    return a, remat_section(res, problem, a.buffers.training_graph)


@_with_training_keywords
def analyze(model: PathLike, *, profile: str = "memplan", planner: str | None = None,
            time_limit: float | None = None, onert_threads: int | None = None,
            onert_simd_width: int | None = None, compare_onert: bool = True, by_layer: bool = False,
            budget: int | str | None = None, progress: bool = False,
            nntrainer_memory_optimization: bool | str | None = None, **training) -> AnalysisResult:
    """The training memory of `model` (a circle, tflite or ONNX file): `memplan analyze`.

    batch_size, optimizer ("sgd", "momentum", "adam"), loss ("mse", "cce"), learning_rate,
    trainable_ops ("all", "none", N: the last N ops, or a list of op indices), batchnorm ("train",
    "frozen"), dropout ("train", "off"), train ("biases", "ops:GLOB"; a list allowed) and freeze
    ("ops:GLOB", "params:GLOB"), lora (a rank) and lora_targets (op types or globs): the training
    setup (fine-tuning modes as `--train`, `--freeze`, `--lora`, `--lora-targets`); loss_outputs
    (output names or globs, `--loss-outputs`): the outputs that carry a loss (default: every float one);
    precision ("32-true", the default, "bf16-mixed", "16-mixed", "bf16-true", "16-true": `--precision`);
    None takes the model's metadata, else the default. profile:
    "memplan", "onert", "nntrainer" or "singa"; planner replaces the profile's planners (with
    profile="onert": onert's own wic, bump or firstfit). nntrainer_memory_optimization (True / "on",
    the default, or False / "off"): nntrainer's memory_optimization property under profile="nntrainer". time_limit (seconds) stops the planners on
    the clock instead of their work budgets (the plan may then depend on the machine).
    compare_onert: with the memplan profile, also compute onert's total (`result.onert`).
    by_layer adds the per-layer view (`report["by_layer"]`). budget (bytes, or "192MiB"): plan with
    the cheapest rematerialization whose planned arena fits (memplan profile only; `report["remat"]`
    says what is recomputed, or that nothing fits). progress shows the CLI's spinner.
    """
    from memplan_cli.report.document import build_document

    path = _model_path(model)
    flags = {**_setup(training, time_limit, onert_threads, onert_simd_width), "profile": profile, "planner": planner,
             "nntrainer_memory_optimization": nntrainer_memory_optimization}
    remat = None
    if budget is not None:
        a, remat = run_budgeted(path, flags, budget, progress=progress)
        prof_opts = {}
    else:
        a, prof_opts = run_analysis(path, flags, compare_onert=compare_onert, progress=progress)
    return AnalysisResult(build_document(a, planner=planner, profile_options=prof_opts, by_layer=by_layer,
                                         remat=remat), a)


@dataclass(frozen=True)
class VerificationResult:
    """What `memplan verify` finds: `report` is its JSON document (schemas/verify.schema.json; with a
    budget its `remat` object); `verification` the run (None when no remat plan fits the budget, and
    nothing ran)."""

    report: dict
    verification: object = field(repr=False, compare=False, default=None)
    # with a budget: whether the step with remat equals the step without it, bit for bit (None when
    # not compared), and what differs
    same_as_plain: tuple | None = field(compare=False, default=None)

    @property
    def passed(self) -> bool | None:
        """Whether the plan held (None: nothing to verify, no remat plan fits the budget)."""
        return self.report.get("passed")

    @property
    def fits(self) -> bool:
        return (self.report.get("remat") or {}).get("fits", True)

    def to_json(self) -> str:
        return json.dumps(self.report, indent=2) + "\n"


@_with_training_keywords
def verify(model: PathLike, *, profile: str = "memplan", planner: str | None = None,
           time_limit: float | None = None, onert_threads: int | None = None,
           onert_simd_width: int | None = None, nntrainer_memory_optimization: bool | str | None = None,
           seed: int = 0, threads: int = 1, check_live: bool = True, budget: int | str | None = None,
           timings: bool = False, progress: bool = False, **training) -> VerificationResult:
    """Run one training step of `model` inside its planned arena and compare it with the same step
    run with a separate allocation per tensor: `memplan verify`. The training setup and profile
    arguments are `analyze`'s; seed: of the random inputs, labels and weights; threads: BLAS
    threads; check_live: check up front that every buffer a step touches is live. budget: verify
    the cheapest remat plan that fits (memplan profile only) and compare its loss and updated
    weights with the step without remat. timings adds `seconds` to the report (then not the same
    bytes from run to run). The model is loaded once."""
    from memplan_cli.analysis import model_sha256
    from memplan_cli.remat.section import remat_section
    from memplan_cli.report.document import document_header, model_head
    from memplan_cli.report.progress import spinner
    from memplan_cli.verification import verify_analysis, verify_model

    path = _model_path(model)
    if profile == "torch":
        # the torch profile replays eager's tensors through a model of PyTorch's allocator: a figure
        # to compare with, not an arena whose offsets the step's tensors could be run in
        raise ConfigError.worded(
            "verify runs a step inside a plan memplan made; the torch profile models PyTorch's allocator "
            "and makes none: leave profile \"memplan\" (or onert, singa)",
            "verify runs a step inside a plan memplan made; --profile torch models PyTorch's allocator "
            "and makes none: drop it (or use onert, singa)", str(path))
    flags = {**_setup(training, time_limit, onert_threads, onert_simd_width), "profile": profile,
             "planner": planner, "nntrainer_memory_optimization": nntrainer_memory_optimization}
    check_planner(planner)
    limit = _budget_limit(budget, flags) if budget is not None else None
    setup = build_setup(path, flags)
    cfg = setup.config
    header = document_header("verify", model_head(path, model_sha256(setup.graph, path)), profile=profile,
                             config=config_json(cfg))
    popts = profile_build_options(flags)
    remat = None
    if limit is not None:
        with spinner(f"searching a remat plan for {path} under {budget}", progress):
            t0 = time.perf_counter()
            res, _, a, problem = solve_budget(setup, limit, planner=planner)
            solved = time.perf_counter() - t0
        remat = remat_section(res, problem, a.buffers.training_graph if res.fits else None)
        if not res.fits:
            return VerificationResult({**header, "passed": None, "remat": remat})
    run = dict(profile=profile, planner=planner, time_limit=time_limit, seed=seed, threads=threads,
               check_live=check_live, graph=setup.graph)
    with spinner(f"verifying {path} ({profile})", progress):
        if remat is not None:
            # the solver's analysis of its plan is the step to run, planned on the work budget (never the
            # clock): run it as it is rather than build and plan the same step again
            rep = verify_analysis(a, path, seed=seed, threads=threads, check_live=check_live,
                                  timings={"plan": solved})
        else:
            rep = verify_model(path, cfg, profile_options=popts, **run)
        same = None
        if remat is not None and res.drop and rep.result.passed:
            same = _same_step(rep.result, verify_model(path, cfg, **run).result)
    body = rep.to_json()
    seconds = body.pop("seconds", None)
    doc = {**header, **body}
    if timings:  # seconds differ from run to run: only when asked
        doc["seconds"] = seconds
    if remat is not None:
        doc["remat"] = {**remat, "equal_to_plain_step": same is None or same[0],
                        "compared_to_plain_step": same is not None}
    return VerificationResult(doc, rep, same)


def _same_step(a, b) -> tuple[bool, str]:
    """Whether two runs of the step gave the same loss and updated weights, bit for bit."""
    import numpy as np

    if a.loss and b.loss and a.loss[0] != b.loss[0]:
        return False, f"loss {a.loss[0]!r} vs {b.loss[0]!r}"
    if a.updated.keys() != b.updated.keys():
        return False, "different weights updated"
    for k in sorted(a.updated):
        if not np.array_equal(a.updated[k], b.updated[k]):
            return False, f"weight {k} differs"
    return True, ""


@dataclass(frozen=True)
class FitResult:
    """What `memplan fit` finds: `report` is its JSON document (schemas/fit.schema.json): the options,
    each with its memory, compute and the `memplan analyze` command that applies it."""

    report: dict

    @property
    def fits(self) -> bool:
        return self.report["fits"]

    def to_json(self) -> str:
        return json.dumps(self.report, indent=2) + "\n"


@_with_training_keywords
def fit(model: PathLike, *, budget: int | str, max_dim: str | None = None, progress: bool = False,
        **training) -> FitResult:
    """How to make one training step of `model` fit `budget` (bytes or "64MiB"): `memplan fit`. The
    training setup arguments are `analyze`'s; max_dim: also find the largest size of that symbolic
    dimension that fits without remat (its own size given in dim). The commands the report prints
    carry the setup arguments given."""
    from memplan_cli.analysis import model_sha256
    from memplan_cli.remat.fit import fit_options
    from memplan_cli.report.document import document_header, model_head
    from memplan_cli.report.progress import spinner
    from memplan_cli.sizes import parse_budget

    path = _model_path(model)
    flags = _setup(training)
    limit = parse_budget(budget)
    setup = build_setup(path, flags, rebatchable=True)
    cfg = setup.config

    def load(b, dims):
        if b == cfg.batch_size and tuple(dims) == tuple(cfg.dims):
            return setup.graph
        return setup.model.at(b, dims)

    try:
        with spinner(f"looking for ways to fit {path} in {budget}", progress):
            out = fit_options(load, cfg, limit, max_dim=max_dim)
    except MemplanError as e:
        raise naming(path, e) from None
    given = {k: v for k, v in training.items() if v is not None and v != ()}
    # one value of a repeatable flag given alone (train="biases") is printed as that flag once
    given = {k: (v,) if isinstance(v, str) and FLAG_BY_NAME[k].multiple else v for k, v in given.items()}
    dim = given.get("dim")
    if isinstance(dim, dict) or (dim and not all(isinstance(d, str) for d in dim)):
        # a dims mapping or (name, size) pairs: printed as the --dim NAME=N words they stand for
        given["dim"] = tuple(f"{k}={n}" for k, n in parse_dims(dim.items() if isinstance(dim, dict) else dim))
    options, listed = [], set()
    for o in out["options"]:
        changes = option_changes(o, budget, dict(cfg.dims))
        command = None if changes is None else analyze_command(path, given, changes)
        # an option whose command an earlier one already gives applies nothing of its own (the largest
        # batch where no batch but the one asked loads): no second copy of that command
        options.append({**o, "command": None if command in listed else command})
        listed.add(command)
    doc = {**document_header("fit", model_head(path, model_sha256(setup.graph, path)), budget=limit,
                             config={**config_json(cfg), "batch_size": out["batch_size"]}),
           "fits": out["fits"], "options": options}
    return FitResult(doc)


def option_changes(o: dict, budget: str, dims: dict | None = None) -> dict | None:
    """The flags (parameter -> value) that apply option `o` on top of the setup as asked (`dims`: its
    --dim bindings); None when there is no setup to apply (no remat plan fits)."""
    dims = dims or {}
    name = o["option"]
    if name in ("remat", "sgd + remat") and not o["fits"]:
        return None
    return {"as asked": {}, "largest batch": {"batch_size": o["batch_size"]}, "remat": {"budget": budget},
            "frozen prefix": {"trainable_ops": o["trainable_ops"]}, "bias-only": {"train": ("biases",)},
            "lora": {"lora": 8}, "sgd": {"optimizer": "sgd"},
            "sgd + remat": {"optimizer": "sgd", "budget": budget},
            # --dim NAME=N with the size found, beside the other dims as given
            "longest dim": {"dim": tuple(f"{k}={v}" for k, v in sorted({**dims, **o.get("dims", {})}.items()))},
            }.get(name)


def analyze_command(model: str, given: dict, changes: dict) -> str:
    """`memplan analyze MODEL ...`: the flags the user gave, with `changes` applied, shell-quoted."""
    import shlex

    flags = {**given, **changes}
    words = ["memplan", "analyze", shell_path(model), *map(shlex.quote, training_words(flags))]
    if flags.get("budget") is not None:
        words += ["--budget", shlex.quote(str(flags["budget"]))]
    return " ".join(words)


DEFAULT_BATCHES = "1,2,4,8,16,32"


@dataclass(frozen=True)
class SweepResult:
    """What `memplan sweep` finds: `report` is its JSON document (schemas/sweep.schema.json)."""

    report: dict

    @property
    def over_budget(self) -> bool:
        return self.report["status"] == "over_budget"

    def to_json(self) -> str:
        return json.dumps(self.report, indent=2) + "\n"


@_with_training_keywords
def sweep(model: PathLike, *, batch_sizes: str | None = None, budget: int | str | None = None,
          profiles: Sequence[str] = ("memplan", "onert"), planner: str | None = None,
          time_limit: float | None = None, onert_threads: int | None = None, onert_simd_width: int | None = None,
          nntrainer_memory_optimization: bool | str | None = None, progress: bool = False,
          **training) -> SweepResult:
    """Training memory of `model` for several batch sizes (batch_sizes: "1,2,4,8" or "1-16"; default
    DEFAULT_BATCHES), for each profile: `memplan sweep`. budget: the largest batch whose total
    fits (searched when no batch sizes are given). dim (a mapping) may list one dimension's sizes
    ({"seq": (128, 256, 512)}): those are swept instead, at one batch (batch_sizes: one size, default the
    model's). A profile that cannot handle the model shows n/a with the reason, except the first:
    its errors stop the sweep. The other training setup arguments are `analyze`'s but batch_size."""
    from memplan_cli.analysis import analyze, model_sha256, shared_training_graphs
    from memplan_cli.opgraph.outputs import loss_output_names
    from memplan_cli.loaders import load_model
    from memplan_cli.report.document import model_head
    from memplan_cli.report.progress import Bar
    from memplan_cli.report.sweep import parse_batch_sizes, search_largest, sweep_document
    from memplan_cli.sizes import parse_budget

    if training.get("batch_size") is not None:
        raise ConfigError("sweep takes batch_sizes (a list such as \"1,2,4\"), not batch_size")
    path = model = _model_path(model)
    dim = training.pop("dim", None)
    if isinstance(dim, dict):
        dim = tuple(dim.items())
    elif isinstance(dim, str):
        dim = (dim,)
    flags = {**_setup(training, time_limit, onert_threads, onert_simd_width), "planner": planner,
             "nntrainer_memory_optimization": nntrainer_memory_optimization}
    limit = None if budget is None else parse_budget(budget)
    for p in profiles:
        check_planner(flags.get("planner"), p)
    profiles = list(dict.fromkeys(profiles))
    dim_lists = dict(parse_dims(dim, lists=True))
    listed = [k for k, v in dim_lists.items() if len(v) > 1]
    if len(listed) > 1:
        raise ConfigError.worded(f"dim {listed[0]!r} and dim {listed[1]!r} both list sizes: sweep one at a time",
                                 f"--dim {listed[0]} and --dim {listed[1]} both list sizes: sweep one at a time")
    swept = listed[0] if listed else None
    fixed_dims = {k: v[0] for k, v in dim_lists.items()}
    fixed_batch = None
    asked = parse_batch_sizes(batch_sizes) if batch_sizes is not None else []
    if swept:
        if len(asked) > 1:
            sizes = ",".join(map(str, dim_lists[swept]))
            raise ConfigError.worded(f"dim {swept!r} lists sizes ({sizes}): it is swept at one batch, give one in "
                                     "batch_sizes, not a list",
                                     f"--dim {swept}={sizes} sweeps {swept}: give one batch size (-b N), not a list")
        fixed_batch = asked[0] if asked else None
    # for the training metadata, at the first batch asked for (else 1, so that a symbolic ONNX batch loads
    # too): a file that fixes its batch inside loads at the batches asked for only
    if swept:
        load_batch = fixed_batch
    else:
        load_batch = asked[0] if asked else 1
    loaded = load_model(model, batch_size=load_batch, dims=fixed_dims, sha256=True, rebatchable=True)
    graph = loaded.graph
    if swept and fixed_batch is None:
        fixed_batch = graph.input_batch() or 1
    base_cfg = config_from_flags(graph.metadata, **{k: flags.get(k) for k in TRAINING_KEYS if k in flags},
                                 dim=fixed_dims)
    ont = onert_options(flags.get("onert_threads"), flags.get("onert_simd_width"))
    done: dict[tuple[str, int], dict] = {}
    # one graph per batch and dims, which every profile then analyses; the file loads once but for a
    # symbolic ONNX batch or a swept dimension (loaders.Rebatchable), and is hashed once, above
    graphs = {} if load_batch is None else {(load_batch, tuple(sorted(fixed_dims.items()))): graph}

    def graph_at(cfg):
        key = (cfg.batch_size, tuple(sorted(dict(cfg.dims).items())))
        if key not in graphs:
            graphs[key] = loaded.at(cfg.batch_size, cfg.dims)
        return graphs[key]

    def run(profile: str, v: int) -> dict:
        """One analysis: at batch v, or (sweeping a dimension) at its size v and the fixed batch."""
        b = fixed_batch if swept else v
        cfg = base_cfg.with_(batch_size=b, dims=tuple(sorted({**fixed_dims, swept: v}.items())) if swept
                             else base_cfg.dims)
        if (profile, v) in done:
            return done[(profile, v)]
        try:
            if profile == "onert":  # --planner is onert's own planner there (see run_analysis)
                popts, planner = {**ont, **({"planner": flags["planner"]} if flags.get("planner") else {})}, None
            elif profile == "nntrainer":
                popts, planner = nntrainer_options(flags.get("nntrainer_memory_optimization")), flags.get("planner")
            else:
                popts, planner = None, flags.get("planner")
            a = analyze(model, cfg, profile=profile, planner=planner,
                        time_limit=flags.get("time_limit"), profile_options=popts, graph=graph_at(cfg))
        except MemplanError as e:
            if profile == profiles[0]:
                raise
            row = {"profile": profile, "batch_size": b, "naive": None, "planned": None, "lower_bound": None,
                   "error": e.message}
        else:
            row = {"profile": profile, "batch_size": b, "naive": a.naive_total, "planned": a.planned_total,
                   "lower_bound": a.lower_bound, "error": ""}
        if swept:
            row["dims"] = dict(cfg.dims)
        done[(profile, v)] = row
        return row

    searching = limit is not None and batch_sizes is None and not swept
    batches: set[int] = set()
    if searching:
        # each profile searches its own answer; then every profile fills the batches any of them tried
        with Bar(0, f"searching the largest batch under {budget}", progress) as bar:
            for p in profiles:
                def fits(b, p=p):
                    bar.advance(f"{p} batch {b}")
                    row = run(p, b)
                    return row["planned"] is not None and row["planned"] <= limit
                batches.update(search_largest(fits)[1])
    elif swept:
        batches.update(dim_lists[swept])
    else:
        batches.update(asked or parse_batch_sizes(DEFAULT_BATCHES))
    batches = sorted(batches)
    # batch by batch, so that the profiles that build the same step (memplan's and the torch profile's
    # on a file it does not rewrite) build it once, and no batch's step outlives its turn; the document
    # orders the rows by profile
    todo = [(p, b) for b in batches for p in profiles if (p, b) not in done]
    with Bar(len(todo), "sweeping", progress) as bar:
        for b, at_b in itertools.groupby(todo, key=lambda pb: pb[1]):
            with shared_training_graphs():
                for p, _ in at_b:
                    bar.advance(f"{p} {swept or 'batch'} {b}")
                    run(p, b)
    rows = list(done.values())
    cfg = {**{k: v for k, v in config_json(base_cfg).items() if k != "batch_size"},
           "loss_outputs": loss_output_names(graph, base_cfg),  # sweep's place for it: after the setup
           "planner": flags.get("planner"), "time_limit": flags.get("time_limit"), "profile_options": ont,
           "batch_sizes": [fixed_batch] if swept else batches, "searched": searching}
    if swept:  # the sizes of the swept dimension (rows' dims), its name in config.swept_dim
        cfg.update({"dims": {k: v for k, v in fixed_dims.items() if k != swept}, "swept_dim": swept,
                    "dim_sizes": batches})
    return SweepResult(sweep_document(model_head(path, model_sha256(graph, path)), cfg, profiles, rows, limit, swept))


@dataclass(frozen=True)
class DiffResult:
    """What `memplan diff` finds: `report` is its JSON document (schemas/diff.schema.json): the rows
    baseline -> target, each threshold's verdict and `status` ("ok" or "regression")."""

    report: dict

    @property
    def regression(self) -> bool:
        """Whether some threshold was exceeded (the command's exit 1)."""
        return self.report["status"] != "ok"

    def failure_lines(self) -> list[str]:
        """One line per exceeded threshold (what the command prints to stderr)."""
        from memplan_cli.report.diff import failure_lines

        return failure_lines(self.report)

    def to_json(self) -> str:
        """The diff as `memplan diff --format json` writes it."""
        from memplan_cli.report.jsonfmt import dumps

        return dumps(self.report)


@_with_training_keywords
def diff(baseline: PathLike, target: PathLike, *, fail_on: str | Sequence[str] = (), profile: str | None = None,
         planner: str | None = None, time_limit: float | None = None, onert_threads: int | None = None,
         onert_simd_width: int | None = None, nntrainer_memory_optimization: bool | str | None = None,
         progress: bool = False, **training) -> DiffResult:
    """`target` against the saved analyze report `baseline`: `memplan diff`. `target` is another
    report, or a model analysed with the baseline's setup (profile, planner, training setup, profile
    options), each argument given (not None) replacing the baseline's value. fail_on: thresholds
    such as "total:+5%" or "back-prop:+1MiB" (`--fail-on`); `result.regression` says whether one is
    exceeded."""
    import contextlib

    from memplan_cli.baseline import baseline_flags, looks_like_json, open_target, read_report
    from memplan_cli.report.diff import diff_documents, parse_threshold
    from memplan_cli.report.document import build_document

    base_path, target_path = _model_path(baseline), _model_path(target)
    thresholds = [parse_threshold(t) for t in ((fail_on,) if isinstance(fail_on, str) else fail_on)]
    base = read_report(base_path)
    # TARGET's first bytes tell a report from a model in the open that reads the report, or that a
    # model's format sniff and hash then use (the loader's own read is a model's second open)
    f = open_target(target_path)
    with f if f is not None else contextlib.nullcontext():
        if looks_like_json(f):
            new = read_report(target_path, f)
        else:
            flags = {**_setup(training, time_limit, onert_threads, onert_simd_width), "profile": profile,
                     "planner": planner, "nntrainer_memory_optimization": nntrainer_memory_optimization}
            given = {k for k, v in flags.items() if v is not None and v != ()}
            run_flags = baseline_flags(base, flags, given, base_path)
            # compare onert only when the baseline did, so the same rows exist on both sides
            a, prof_opts = run_analysis(target_path, run_flags, compare_onert="onert" in base.get("totals", {}),
                                        progress=progress, opened=f)
            new = build_document(a, planner=run_flags.get("planner"), profile_options=prof_opts)
    return DiffResult(diff_documents(base, new, thresholds, old_label=base_path, new_label=target_path))


@dataclass(frozen=True)
class InspectResult:
    """What `memplan inspect` finds: the graph memplan read; `report` its JSON document
    (schemas/inspect.schema.json, built on first use: it hashes the file)."""

    path: str
    graph: object = field(repr=False, compare=False, default=None)

    @functools.cached_property
    def report(self) -> dict:
        from memplan_cli.inspection import inspect_document

        return inspect_document(self.graph, self.path)

    def lines(self, values: int = 8) -> list[str]:
        """The lines `memplan inspect` prints (constants: their first `values` values), escaped for a
        terminal."""
        from memplan_cli.inspection import describe

        return describe(self.graph, self.path, values=values)

    def to_json(self) -> str:
        """The document as `memplan inspect --format json` writes it."""
        return json.dumps(self.report, indent=2) + "\n"


def inspect(model: PathLike, *, batch_size: int | None = None, dim=None, sha256: bool = False) -> InspectResult:
    """What memplan reads from `model`: its ops and operands with shapes, dtypes and sizes: `memplan
    inspect`. batch_size re-batches it first; dim binds symbolic dimensions ({"seq": 512}); an
    unbound one is shown at 1, as the batch is. sha256: hash the file in the open that sniffs its
    format (the JSON document names the file by its hash; without it, the document reads the file
    again, the listing never)."""
    from memplan_cli.loaders import load_model

    path = _model_path(model)
    flags = check_training_arguments({"batch_size": batch_size, "dim": dim})
    # an unbound symbolic dimension is shown at 1, as the batch is, and said so
    graph = load_model(path, batch_size=flags["batch_size"], dims=parse_dims(flags["dim"]), symbolic_default=1,
                       sha256=sha256)
    return InspectResult(path, graph)


@_with_training_keywords
def compare(model: PathLike, *, time_limit: float | None = None, onert_threads: int | None = None,
            onert_simd_width: int | None = None, progress: bool = False,
            nntrainer_memory_optimization: bool | str | None = None, **training) -> ComparisonResult:
    """`model` under every system memplan reproduces (naive, onert, nntrainer, singa) and memplan's
    own plan: `memplan compare`. The training setup arguments are `analyze`'s."""
    from memplan_cli.comparison import compare_graph
    from memplan_cli.report.compare import compare_document
    from memplan_cli.report.progress import spinner

    path = _model_path(model)
    flags = _setup(training, time_limit, onert_threads, onert_simd_width)
    setup = build_setup(path, flags)  # loaded once (and hashed in the same read)
    ont = onert_options(flags["onert_threads"], flags["onert_simd_width"])
    with spinner(f"comparing {path}", progress):
        try:
            cmp = compare_graph(setup.graph, setup.config, path=path, onert_options=ont,
                                time_limit=flags["time_limit"],
                                nntrainer_options=nntrainer_options(nntrainer_memory_optimization))
        except MemplanError as e:  # memplan's own column failed: the command's error, naming the file
            raise naming(path, e) from None
    return ComparisonResult(compare_document(cmp), cmp)


def plan(buffers: PathLike | Iterable[tuple[int, int, int]], *, planner: str | None = None,
         rounds: int | None = None, time_limit: float | None = None, progress: bool = False) -> PlanSummary:
    """Offsets for a list of buffers: `memplan plan`. `buffers` is a CSV file in MiniMalloc's
    format (see `memplan plan --help`) or an iterable of (size, first step, last step) with the
    last step inclusive. planner: a registered planner (default best, else greedy); rounds: a
    searching planner's work budget; time_limit: the clock instead (the plan may then depend on
    the machine). Every plan is checked by the independent overlap verifier before it is returned."""
    from memplan_cli.planners import planner_names
    from memplan_cli.planrun import default_planner, plan_buffers
    from memplan_cli.report.progress import spinner

    name = planner or default_planner()
    if name not in planner_names():
        raise ConfigError(f"unknown planner {name!r} (choose from {', '.join(planner_names())})")
    if rounds is not None and time_limit is not None:
        raise ConfigError.worded("rounds and time_limit: give one budget, not both",
                                 "--rounds and --time-limit: give one budget, not both")
    _positive("rounds", rounds)
    if time_limit is not None and not (isinstance(time_limit, (int, float)) and time_limit > 0):
        raise ConfigError(f"time_limit must be a number of seconds > 0, got {time_limit!r}")
    table = None
    if isinstance(buffers, (str, os.PathLike)):
        from memplan_cli.plancsv import read_buffers_csv

        source = os.fspath(buffers)
        table = read_buffers_csv(source)
        sizes, firsts, lasts = table.planning_sizes(), table.firsts, table.lasts
        names, aligns, alignment = table.ids, table.alignments or None, table.alignment
    else:
        source = "<buffers>"
        sizes, firsts, lasts = _triples(buffers)
        names, aligns, alignment = None, None, 1
    with spinner(f"planning {len(sizes):,} buffers ({name})", progress):
        result = plan_buffers(name, sizes, firsts, lasts, time_limit=time_limit, rounds=rounds,
                              names=names, alignments=aligns)
    own_lb = None
    if table is not None and list(table.sizes) != list(sizes):
        from memplan_cli.planners.bound import lower_bound

        own_lb = lower_bound(list(table.sizes), firsts, lasts)
    return PlanSummary(plan_report(source, result, alignment, own_lb), list(result.plan.offsets), table,
                       round(result.seconds, 6))


def plan_report(path: str, r, alignment: int, own_lower_bound: int | None = None) -> dict:
    """`memplan plan --format json`'s summary of a `planrun.PlanResult` (no seconds: the same
    buffers give the same bytes; `PlanSummary.seconds` has them). `own_lower_bound`: the lower
    bound of the file's own sizes when the planners saw them rounded up to the alignment: the lower
    bound and "optimal" are then the file's (the rounded problem's optimum can be above the file's:
    two 1-byte buffers aligned to 16 fit in 17 bytes, rounded they need 32), and `rounded` keeps the
    planners' figures for the rounded sizes."""
    from memplan_cli.report.document import document_header

    lb, status, extra = r.lower_bound, r.status, {}
    if own_lower_bound is not None:
        lb = own_lower_bound
        status = "optimal" if r.arena == lb else "feasible"
        extra = {"rounded": {"lower_bound": r.lower_bound, "status": r.status}}
    return {
        **document_header("plan", file=path),
        "buffers": r.buffers,
        "naive": r.naive,
        "lower_bound": lb,
        "arena": r.arena,
        "arena_over_lower_bound": round(r.arena / lb, 6) if lb else None,
        "planner": r.plan.planner,
        "status": status,
        **extra,
        # set when the user gave a time limit: the plan may then depend on speed and load
        "time_limit": r.time_limit,
        "alignment": alignment,
        "verified": True,
    }


def _triples(buffers) -> tuple[list[int], list[int], list[int]]:
    sizes, firsts, lasts = [], [], []
    try:
        rows = list(buffers)
    except TypeError:
        raise ConfigError("buffers must be a CSV path or (size, first, last) triples") from None
    for k, row in enumerate(rows):
        try:
            s, a, b = row
        except (TypeError, ValueError):
            raise ConfigError(f"buffer {k}: expected (size, first, last), got {row!r}") from None
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (s, a, b)):
            raise ConfigError(f"buffer {k}: size, first and last must be ints, got {row!r}")
        if s < 0 or a < 0 or b < a:
            raise ConfigError(f"buffer {k}: needs size >= 0 and 0 <= first <= last, got {row!r}")
        from memplan_cli.plancsv import MAX_SIZE, MAX_STEP

        if s > MAX_SIZE or b > MAX_STEP:
            raise ConfigError(f"buffer {k}: size is at most {MAX_SIZE:,d} bytes and steps at most {MAX_STEP:,d}, "
                              f"got {row!r}")
        sizes.append(s)
        firsts.append(a)
        lasts.append(b)
    from memplan_cli.plancsv import MAX_TOTAL

    if sum(sizes) > MAX_TOTAL:
        raise ConfigError(f"the buffers need {sum(sizes):,d} bytes in all, over the {MAX_TOTAL:,d} (2^62) memplan plans")
    return sizes, firsts, lasts
