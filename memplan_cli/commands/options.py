"""Flags shared by every command that analyses a model, and how they become a TrainConfig.

Precedence: flags > circle training metadata (`CIRCLE_TRAINING`) > defaults.
"""
from __future__ import annotations

import click

# the work the commands share lives in the API; re-exported under their old names here
from memplan_cli.api import check_planner, config_from_flags, nntrainer_options, onert_options  # noqa: F401
from memplan_cli.config import BATCHNORM_MODES, DROPOUT_MODES, LOSSES, OPTIMIZERS


DIM_HELP = ("NAME=N: a symbolic dimension other than the batch, bound by name before shape inference "
            "(ONNX Runtime's free-dimension override), e.g. --dim seq=512. Repeatable; every symbolic "
            "dimension but the batch (-b) must be bound (`memplan inspect MODEL` names them).")


def dim_option():
    return click.option("--dim", "dims", multiple=True, metavar="NAME=N", help=DIM_HELP)


def training_options(f):
    """Adds --batch-size, --dim, --optimizer, --loss, --learning-rate, --trainable-ops, --train,
    --freeze, --batchnorm, --dropout."""
    f = training_options_without_batch(f)
    f = dim_option()(f)
    return click.option("-b", "--batch-size", type=click.IntRange(min=1), default=None,
                        help="Batch size (default: the metadata's, else the model's own).")(f)


def training_options_without_batch(f):
    """training_options but --batch-size (sweep takes a list of them)."""
    opts = [
        click.option("-O", "--optimizer", type=click.Choice(OPTIMIZERS), default=None,
                     help="Optimizer: sgd (no state), momentum (1 state tensor per weight), adam (2). Default sgd."),
        click.option("-l", "--loss", type=click.Choice(LOSSES), default=None,
                     help="Loss appended after each output that carries one (see --loss-outputs); the step's "
                     "loss is their sum. Default mse."),
        click.option("--loss-outputs", "loss_outputs", default=None, metavar="LIST",
                     help="The model outputs that carry a loss: names or globs, comma-separated "
                          "(`memplan inspect MODEL` lists the outputs). Default: every float output."),
        click.option("--learning-rate", type=float, default=None, help="Learning rate (used by `verify`)."),
        click.option("-t", "--trainable-ops", "trainable", default=None, metavar="SPEC",
                     help="all | none | N (the last N ops, counting every op) | -1 (all, onert's "
                          "convention) | a list like 3,5,8-10. Default: the metadata's list, else all."),
        click.option("--train", "train", multiple=True, metavar="WHAT",
                     help="Fine-tuning: biases (only biases train, TinyTL) | ops:GLOB (only the ops whose "
                          "name, module scope, type or #INDEX matches train) | params:GLOB (only the weights "
                          "so named train). Repeatable; combines with --trainable-ops and --freeze. Default: "
                          "the adapters of a file with peft's LoRA weights (lora_A / lora_B), else all."),
        click.option("--freeze", "freeze", multiple=True, metavar="WHAT",
                     help="ops:GLOB (these ops train nothing) | params:GLOB (the weights so named stay "
                          "frozen). Repeatable."),
        click.option("--lora", "lora_rank", type=click.IntRange(min=1), default=None, metavar="RANK",
                     help="LoRA: adapters of rank RANK beside the targeted projections train; every model "
                          "weight stays frozen (see --lora-targets)."),
        click.option("--lora-targets", "lora_targets", default=None, metavar="LIST",
                     help="Ops that get adapters: op types (MatMul) or globs over op names, module scopes "
                          "and weight names, comma-separated. Default: the attention query and value "
                          "projections (*q_proj*, *v_proj*, *query*, *value*, *c_attn*, T5's q / v)."),
        click.option("--batchnorm", type=click.Choice(BATCHNORM_MODES), default=None,
                     help="BatchNormalization: train (batch statistics, default) or frozen (stored "
                          "statistics: trains only scale and bias)."),
        click.option("--dropout", type=click.Choice(DROPOUT_MODES), default=None,
                     help="Dropout: train (drops with its ratio and keeps a 1-byte-per-element mask for "
                          "backward, default) or off (an identity, as with dropout disabled)."),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


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
SIMD_WIDTHS = ("4", "8", "16")


def output_options(f):
    """Adds --format, --output, --color, -q, -v. The format choices come from the reporter registry."""
    from memplan_cli.report import REPORTER_BY_NAME

    opts = [
        click.option("-f", "--format", "fmt", type=click.Choice(tuple(REPORTER_BY_NAME)), default="table",
                     show_default=True, help="table for people; json (memplan_cli/schemas/analysis.schema.json) or csv for scripts."),
        click.option("-o", "--output", type=output_path(writable=True), default=None, metavar="FILE",
                     help="Write the report to FILE (atomically: a failed run leaves FILE as it was)."),
        click.option("--color", type=click.Choice(COLOR_CHOICES), default="auto", show_default=True,
                     help="Colour in the table view. auto: only on a terminal and when NO_COLOR is unset."),
        click.option("-q", "--quiet", count=True, help="Less output: -q one line, -qq nothing (exit status only)."),
        click.option("-v", "--verbose", count=True, help="More output: pools, planners and timings."),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


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
    from memplan_cli.profiles import PROFILE_MODULES

    if help:
        return click.option("-p", "--profile", type=click.Choice(tuple(PROFILE_MODULES)), default=None, help=help)

    if multiple:
        return click.option("-p", "--profile", "profiles", type=click.Choice(tuple(PROFILE_MODULES)), multiple=True,
                            default=default, show_default=True,
                            help="Profiles to compare (repeatable); the first one decides --budget's answer.")
    return click.option("-p", "--profile", type=click.Choice(tuple(PROFILE_MODULES)), default=default[0],
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
        from memplan_cli.errors import ConfigError

        raise ConfigError("-q/--quiet and -v/--verbose together: choose one")
    return 1 + verbose - quiet


def config_json(cfg) -> dict:
    """A TrainConfig under analyze's JSON names (memplan_cli/report/document.py: config_dict), for
    the commands that build their own document (verify, fit, sweep)."""
    trainable = list(cfg.trainable) if isinstance(cfg.trainable, tuple) else cfg.trainable
    return {"batch_size": cfg.batch_size, "dims": dict(cfg.dims), "optimizer": cfg.optimizer, "loss": cfg.loss,
            "learning_rate": cfg.learning_rate, "trainable_ops": trainable, "batchnorm": cfg.batchnorm,
            "dropout": cfg.dropout, "train": list(cfg.train), "freeze": list(cfg.freeze),
            "lora": {"rank": cfg.lora_rank, "targets": list(cfg.lora_targets)} if cfg.lora_rank else None}
