"""Flags shared by every command that analyses a model, and how they become a TrainConfig.

Precedence: flags > circle training metadata (`CIRCLE_TRAINING`) > defaults.
"""
from __future__ import annotations

import click

from memplan_cli.errors import ConfigError

# the work the commands share lives in the API; re-exported under their old names here
from memplan_cli.api import (ONERT_SIMD_WIDTHS, PROFILE_NAMES, TRAINING_FLAGS, check_planner,  # noqa: F401
                             config_from_flags, nntrainer_options, onert_options)


# the click type of each kind of training flag (config.FLAG_KINDS)
CLICK_TYPES = {"count": lambda f: click.IntRange(min=1), "choice": lambda f: click.Choice(f.choices),
               "number": lambda f: float, "trainable": lambda f: None, "selectors": lambda f: None,
               "names": lambda f: None, "dims": lambda f: None}


def training_option(flag):
    """The click option of one training flag (config.TRAINING_FLAGS)."""
    kwargs = {"type": CLICK_TYPES[flag.kind](flag), "help": flag.help}
    if flag.metavar:
        kwargs["metavar"] = flag.metavar
    if flag.multiple:
        kwargs["multiple"] = True
    else:
        kwargs["default"] = None
    return click.option(*flag.decls, flag.name, **kwargs)


# flags that act only on a step that runs: offered by `verify` alone (elsewhere they would be accepted
# and change nothing)
STEP_ONLY = tuple(f.name for f in TRAINING_FLAGS if f.step_only)


def dim_option():
    """--dim alone (inspect binds symbolic dimensions too, and trains nothing)."""
    return training_option(next(f for f in TRAINING_FLAGS if f.name == "dim"))


def training_options(f=None, *, exclude: tuple[str, ...] = (), runs_a_step: bool = False):
    """Adds the training flags (config.TRAINING_FLAGS: --batch-size, --optimizer, ..., --lora-targets)
    but those named in `exclude` (sweep takes a list of batch sizes) and, unless the command
    `runs_a_step` (verify), STEP_ONLY's: `@training_options` or `@training_options(exclude=("batch_size",))`."""
    skip = set(exclude) | (set() if runs_a_step else set(STEP_ONLY))

    def add(f):
        for flag in reversed(TRAINING_FLAGS):
            if flag.name not in skip:
                f = training_option(flag)(f)
        return f

    return add(f) if f is not None else add


# what the training flags' help says of their defaults, and what a command that takes its setup from
# a baseline report (diff) says instead
_DEFAULT_RE = __import__("re").compile(r"(?:\s*\(default: [^)]*\)|\s*Default[: ][^.]*(?:\.[^ ][^.]*)*\.)")


def defaults_from(source: str):
    """A decorator (applied after the options) that restates every option's default as `source`'s
    ("Default: the baseline's."): `diff` analyses TARGET with the baseline's setup, not the defaults."""
    def apply(cmd):
        for p in cmd.params:
            if isinstance(p, click.Option) and p.help and (_DEFAULT_RE.search(p.help) or ", default)" in p.help):
                p.help = _DEFAULT_RE.sub("", p.help.replace(", default)", ")")).rstrip(".") + f". Default: {source}."
                p.show_default = False
        return cmd
    return apply


# ---- output and profile flags (shared by analyze, diff, sweep) ------------------------------


class OutputPath(click.Path):
    """A file to write (`-o`, `--timeline`): click's Path, and an empty name is refused (exit 2)
    instead of being taken for "no file" and sending the report to stdout."""

    def convert(self, value, param, ctx):
        if isinstance(value, str) and value == "":
            self.fail("an empty path names no file", param, ctx)
        return super().convert(value, param, ctx)


def output_path(**kw) -> OutputPath:
    return OutputPath(dir_okay=False, **kw)


COLOR_CHOICES = ("auto", "always", "never")
SIMD_WIDTHS = tuple(map(str, ONERT_SIMD_WIDTHS))


ANALYSIS_FORMAT_HELP = "table for people; json (memplan_cli/schemas/analysis.schema.json) or csv for scripts."
ATOMIC_OUTPUT_HELP = "Write the report to FILE (atomically: a failed run leaves FILE as it was)."


def output_options(f=None, *, formats: tuple[str, ...] | None = None, format_help: str = ANALYSIS_FORMAT_HELP,
                   output_help: str | None = ATOMIC_OUTPUT_HELP, output_type=True, color: bool = True,
                   verbose_help: str = "More output: pools, planners and timings."):
    """Adds -f/--format, -o/--output, --color, -q/--quiet, -v/--verbose: every command's, declared here
    only. `formats`: the -f choices (default: the reporter registry's); `output_help` None: no -o
    (the command declares none); `output_type` False: -o need not be writable yet (plan's "-"); `color`
    False: no --color (the command prints no table colours). `@output_options` or
    `@output_options(formats=..., ...)`."""
    def add(f):
        from memplan_cli.report import REPORTER_BY_NAME

        opts = [click.option("-f", "--format", "fmt", type=click.Choice(formats or tuple(REPORTER_BY_NAME)),
                             default="table", show_default=True, help=format_help)]
        if output_help is not None:
            opts.append(click.option("-o", "--output", default=None, metavar="FILE", help=output_help,
                                     type=output_path(writable=True) if output_type else output_path()))
        if color:
            opts.append(click.option("--color", type=click.Choice(COLOR_CHOICES), default="auto", show_default=True,
                                     help="Colour in the table view. auto: only on a terminal and when NO_COLOR is unset."))
        opts += [click.option("-q", "--quiet", count=True, help="Less output: -q one line, -qq nothing (exit status only)."),
                 click.option("-v", "--verbose", count=True, help=verbose_help)]
        for o in reversed(opts):
            f = o(f)
        return f

    return add(f) if f is not None else add


# onert sizes DepthwiseConv2D's buffers by its host; memplan's defaults describe one stated device
ONERT_THREADS_HELP = ("onert's thread count (sizes DepthwiseConv2D buffers: threads + 1 per-thread copies). "
                      "Default 4: a 4-core CPU with 128-bit SIMD, never this machine's.")
ONERT_SIMD_HELP = ("onert's SIMD packet width in floats (4 SSE/NEON, 8 AVX, 16 AVX-512). Default 4: "
                   "a 4-core CPU with 128-bit SIMD (onert 0.1.0's x86-64 wheel packs 4).")


NNTRAINER_MEMOPT_HELP = ("nntrainer's `memory_optimization` property (with --profile nntrainer): on (its "
                         "default) plans with OptimizedV1 and in-place layers; off with BasicPlanner, no "
                         "in-place layers and backwarding down to the input layer.")


def nntrainer_option():
    return click.option("--nntrainer-memory-optimization", type=click.Choice(("on", "off")), default=None,
                        help=NNTRAINER_MEMOPT_HELP)


def planner_options(f):
    """Adds --planner, --time-limit, --onert-threads, --onert-simd-width, --nntrainer-memory-optimization."""
    opts = [
        click.option("--planner", default=None, metavar="NAME",
                     help="Plan every pool with this planner instead of the profile's choice (a registered "
                          "planner: naive, greedy, wic, ...). With --profile onert: onert's own planner, "
                          "wic (its default), bump or firstfit."),
        click.option("--time-limit", type=click.FloatRange(min=0, min_open=True), default=None, metavar="SECONDS",
                     help="Stop the planners on the clock after SECONDS instead of their work budgets. The "
                          "plan may then depend on the machine's speed and load (the report says so); "
                          "without it the same input gives the same plan everywhere."),
        click.option("--onert-threads", type=click.IntRange(min=1), default=None, metavar="N",
                     help=ONERT_THREADS_HELP),
        click.option("--onert-simd-width", type=click.Choice(SIMD_WIDTHS), default=None,
                     help=ONERT_SIMD_HELP),
        nntrainer_option(),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def profile_option(*, multiple: bool = False, default=("memplan",), help: str | None = None):
    """--profile/-p, its choices from the profile registry; repeatable when `multiple`."""
    if help:
        return click.option("-p", "--profile", type=click.Choice(PROFILE_NAMES), default=None, help=help)

    if multiple:
        return click.option("-p", "--profile", "profiles", type=click.Choice(PROFILE_NAMES), multiple=True,
                            default=default, show_default=True,
                            help="Profiles to compare (repeatable); the first one decides --budget's answer.")
    return click.option("-p", "--profile", type=click.Choice(PROFILE_NAMES), default=default[0],
                        show_default=True,
                        help="Whose rules: memplan's own plan, a reproduction of onert / nntrainer / singa, "
                             "or PyTorch eager on CPU (torch).")


def profile_options(f):
    """Adds --profile, --planner, --time-limit, --onert-threads, --onert-simd-width."""
    return profile_option()(planner_options(f))


def verbosity(quiet: int, verbose: int) -> int:
    """One integer from -q / -v counts: 1 normal, 0 quiet, -1 silent, 2 verbose. Both together are
    refused: one would silently cancel the other."""
    if quiet and verbose:
        raise ConfigError("-q/--quiet and -v/--verbose together: choose one")
    return 1 + verbose - quiet
