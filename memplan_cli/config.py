"""The training setup: what a step trains and how. Filled from circle training metadata, then flags (flags win).

The training flags are declared once, in TRAINING_FLAGS (the end of this module): each row gives a
flag's click declaration, its API keyword, its TrainConfig field, its JSON key, its metadata key and
its parser; the commands' click options, the API's argument checks, the merge of flags, metadata and
defaults (`merge_setup`), the JSON `config` (`config_json`) and `diff`'s reading of a baseline's
setup back into flags are all made from it (tests/test_training_flags.py checks it against the
schemas).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Callable

from memplan_cli.errors import INSPECT_HINT, ConfigError
from fnmatch import fnmatchcase

OPTIMIZERS = ("sgd", "momentum", "adam")
# optimizer state tensors per trainable weight
OPTIMIZER_STATE_COUNT = {"sgd": 0, "momentum": 1, "adam": 2}
LOSSES = ("mse", "cce")
# BatchNormalization in a training step: batch statistics, or the stored ones (affine, fine-tuning)
BATCHNORM_MODES = ("train", "frozen")
# Dropout in a training step: drop with its ratio (train), or an identity (off)
DROPOUT_MODES = ("train", "off")
# fine-tuning selectors: --train biases | ops:GLOB | params:GLOB, --freeze ops:GLOB | params:GLOB
TRAIN_SELECTORS = ("biases", "ops:", "params:")
FREEZE_SELECTORS = ("ops:", "params:")
# numeric precision of the step, PyTorch Lightning's names: N-true (every tensor in that dtype) or
# N-mixed (float32 parameters, gradients and optimizer state; the forward in the low dtype where
# autocast would run it, passes/precision.py)
PRECISIONS = ("32-true", "bf16-mixed", "16-mixed", "bf16-true", "16-true")
LOW_DTYPE = {"bf16": "bfloat16", "16": "float16", "32": "float32"}


def check_selector(flag: str, item: str) -> str:
    """`item` if it is a valid value of `flag` (--train or --freeze), else ConfigError."""
    allowed = TRAIN_SELECTORS if flag == "--train" else FREEZE_SELECTORS
    if not any((item == a and not a.endswith(":")) or (a.endswith(":") and item.startswith(a) and len(item) > len(a))
               for a in allowed):
        raise ConfigError(f"{flag} {item!r}: expected {' | '.join(a + 'GLOB' if a.endswith(':') else a for a in allowed)}")
    return item


@dataclass(frozen=True)
class TrainConfig:
    """Defaults follow onert's `nnfw_train_info` (batch 1, SGD, MSE, lr 0.001, all ops trainable here)."""

    batch_size: int | None = None  # None: the model's own batch (or the metadata's)
    # symbolic dimensions other than the batch, bound by name (--dim NAME=VALUE), sorted by name
    dims: tuple[tuple[str, int], ...] = ()
    optimizer: str = "sgd"
    loss: str = "mse"
    learning_rate: float = 0.001
    # "all", "none", an int N (the last N ops, counting every op, as onert does) or explicit indices
    trainable: str | int | tuple[int, ...] = "all"
    batchnorm: str = "train"
    dropout: str = "train"
    # fine-tuning modes: "biases" (only biases train), "ops:GLOB" (only the ops matching train),
    # "params:GLOB" (only the weights so named train)
    train: tuple[str, ...] = ()
    # "ops:GLOB" (these ops train nothing), "params:GLOB" (these weights stay frozen)
    freeze: tuple[str, ...] = ()
    # LoRA adapters of this rank on the targeted projections (0: none); targets: op types or globs
    lora_rank: int = 0
    lora_targets: tuple[str, ...] = ()
    # the model outputs that carry a loss (names or globs); empty: every float output
    loss_outputs: tuple[str, ...] = ()
    # PRECISIONS: 32-true (float32 everywhere, the default), bf16-/16-mixed, bf16-/16-true
    precision: str = "32-true"
    # where each field came from ("default", "metadata", "flag"), for reports
    sources: dict = field(default_factory=dict, compare=False)

    def __post_init__(self):
        if self.optimizer not in OPTIMIZERS:
            raise ConfigError(f"unknown optimizer {self.optimizer!r} (choose from {', '.join(OPTIMIZERS)})")
        if self.loss not in LOSSES:
            raise ConfigError(f"unknown loss {self.loss!r} (choose from {', '.join(LOSSES)})")
        if self.batchnorm not in BATCHNORM_MODES:
            raise ConfigError(f"unknown batchnorm mode {self.batchnorm!r} (choose from {', '.join(BATCHNORM_MODES)})")
        if self.dropout not in DROPOUT_MODES:
            raise ConfigError(f"unknown dropout mode {self.dropout!r} (choose from {', '.join(DROPOUT_MODES)})")
        if self.precision not in PRECISIONS:
            raise ConfigError(f"unknown precision {self.precision!r} (choose from {', '.join(PRECISIONS)})")
        if self.batch_size is not None and self.batch_size < 1:
            raise ConfigError(f"batch size must be >= 1, got {self.batch_size}")
        for name, value in self.dims:
            if not name or isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"--dim {name}={value}: expected NAME=N with N >= 1")
        lr = self.learning_rate
        if lr is not None and not (isinstance(lr, (int, float)) and -1e30 < lr < 1e30):  # also NaN, inf
            raise ConfigError(f"--learning-rate must be a finite number, got {lr!r}")
        if isinstance(self.lora_rank, bool) or not isinstance(self.lora_rank, int) or self.lora_rank < 0:
            raise ConfigError(f"--lora must be a rank >= 1, got {self.lora_rank!r}")
        if self.lora_targets and not self.lora_rank:
            raise ConfigError("--lora-targets needs --lora RANK")
        for it in self.train:
            check_selector("--train", it)
        for it in self.freeze:
            check_selector("--freeze", it)

    @property
    def param_level(self) -> bool:
        """Whether some weights of a trained op stay frozen (bias-only, frozen by name): runtimes that
        train whole ops (onert, nntrainer) cannot express it."""
        return ("biases" in self.train or any(f.startswith("params:") for f in (*self.train, *self.freeze))
                or self.lora_rank > 0)

    def selected_ops(self, graph) -> set[int]:
        """The forward ops whose weights may train: `trainable` (all | none | last N | indices), then
        narrowed to the ops matching `--train ops:GLOB` and without those matching `--freeze ops:GLOB`.
        A glob matches an op's name, its exporter's module scope, its type (canonical, the file's, or
        one of the file's ops a loader fused into it: `op_types`, `op_names`) or `#INDEX`; a glob that
        matches no op is an error (a typo would otherwise train nothing)."""
        ops = graph.operations
        selected = self.trainable_ops(len(ops))
        keep = _globs(self.train, "ops:")
        drop = _globs(self.freeze, "ops:")
        if keep:
            selected &= _matching(ops, keep, "--train")
        if drop:
            selected -= _matching(ops, drop, "--freeze")
        return selected

    def frozen_params(self, graph, biases: set[int]) -> set[int]:
        """Operand indices of the weights that stay frozen: every one but `biases` (the op registry's
        `bias_operands`) with `--train biases`, every one whose name matches no `--train params:GLOB`
        when some are given, and those whose name matches `--freeze params:GLOB`."""
        frozen: set[int] = set()
        consts = [o for o in graph.operands if o.is_const]
        records = _folded_records(graph)
        if "biases" in self.train:
            if not biases:
                raise ConfigError("--train biases: the model has no biases (no op's bias input is a constant): "
                                  "nothing would train")
            frozen |= {o.index for o in consts if o.index not in biases}
        keep = _globs(self.train, "params:")
        if keep:
            trained: set[int] = set()
            for g in keep:
                hit = _named(consts, g, records)
                if not hit:
                    raise ConfigError(f"--train params:{g} matches no weight of the model ({INSPECT_HINT} "
                                      "lists them)")
                trained |= hit
            frozen |= {o.index for o in consts} - trained
        for g in _globs(self.freeze, "params:"):
            hit = _named(consts, g, records)
            if not hit:
                raise ConfigError(f"--freeze params:{g} matches no weight of the model")
            frozen |= hit
        return frozen

    @property
    def compute_dtype(self) -> str:
        """The float dtype the forward computes in where autocast casts down (float32 at 32-true)."""
        return LOW_DTYPE[self.precision.split("-")[0]]

    @property
    def mixed(self) -> bool:
        """Whether parameters, gradients and optimizer state stay float32 beside a low-precision forward."""
        return self.precision.endswith("-mixed")

    @property
    def optimizer_state_count(self) -> int:
        return OPTIMIZER_STATE_COUNT[self.optimizer]

    def with_(self, **kw) -> "TrainConfig":
        return replace(self, **kw)

    def trainable_ops(self, num_ops: int) -> set[int]:
        """Indices of the forward ops whose weights are updated."""
        t = self.trainable
        if t == "all":
            return set(range(num_ops))
        if t == "none":
            return set()
        if isinstance(t, int):
            if t < 0:
                return set(range(num_ops))  # onert: -1 means all
            if t > num_ops:
                raise ConfigError(f"--trainable-ops {t} is more than the model's {num_ops} ops")
            return set(range(num_ops - t, num_ops))
        bad = [i for i in t if not 0 <= i < num_ops]
        if bad:
            raise ConfigError(f"trainable op index {bad[0]} is out of range (the model has {num_ops} ops)")
        return set(t)


def _named(consts, glob: str, records: dict | None = None) -> set[int]:
    """Indices of the constants `glob` names: by their own name, by a parameter a constant folded
    at load was computed from (`Operand.sources`), or by a parameter the dynamo exporter's record
    says it (or what it was folded from) was computed from (`records`: constant -> parameters; the
    sin and cos halves of RoFormer's frozen table, `val_88` and `val_98`, by the table's name)."""
    records = records or {}
    return {o.index for o in consts
            if any(fnmatchcase(n, glob) for n in (o.name, *o.sources,
                                                  *(t for s in (o.name, *o.sources) for t in records.get(s, ()))))}


def _folded_records(graph) -> dict:
    """{constant: the graph signature's parameters the dynamo exporter's optimizer records it was folded
    from} (`pkg.onnxscript.optimizer.folded_from`); {} for other files."""
    params = graph.signature_parameters()
    return {name: tuple(t for t in srcs if t in params) for name, srcs in graph.folded_from().items()}


def _globs(items, prefix: str) -> list[str]:
    return [it[len(prefix):] for it in items if it.startswith(prefix)]


def op_types(op) -> tuple[str, ...]:
    """Every type a user may call the op by: memplan's canonical type, the file's (ONNX MatMul, Gemm;
    TFLite FULLY_CONNECTED) and each op a loader fused into it (`MatMul+Add` -> MatMul, Add)."""
    fused = [t for s in (op.source_type, str(op.attrs.get("fused_from") or "")) for t in s.split("+")]
    return tuple(t for t in dict.fromkeys((op.type, op.source_type, *fused)) if t)


def op_names(op) -> tuple[str, ...]:
    """Every name of the op in the file: its own, its exporter's module scope and the names of the
    nodes a loader fused into it (an ONNX MatMul folded into a FullyConnected with its Add)."""
    return tuple(s for s in (op.name, op.scope, *(op.attrs.get("fused_names") or ())) if s)


def _matching(ops, globs, flag: str) -> set[int]:
    out: set[int] = set()
    for g in globs:
        hit = {op.index for op in ops
               if any(fnmatchcase(s, g) for s in (*op_names(op), *op_types(op), f"#{op.index}"))}
        if not hit:
            raise ConfigError(f"{flag} ops:{g} matches no op (globs match op names, module scopes, op types "
                              f"and #INDEX; {INSPECT_HINT} lists them)")
        out |= hit
    return out


def parse_selectors(values) -> tuple[str, ...]:
    """--train / --freeze values: repeatable, each may hold a comma list (`ops:*q_proj*,ops:*v_proj*`)."""
    out: list[str] = []
    prefix = ""
    for v in values or ():
        for p in (p.strip() for p in str(v).split(",")):
            if not p:
                continue
            head = p.split(":", 1)[0] + ":" if ":" in p else ""
            if p == "biases" or head in ("ops:", "params:"):
                prefix = head
            elif prefix:
                p = prefix + p  # `ops:*q_proj*,*v_proj*`: the prefix carries over
            out.append(p)
    return tuple(dict.fromkeys(out))


MAX_DIM_VALUE = 1 << 40  # a dimension beyond this sizes no tensor memplan could plan


def parse_dims(values, *, lists: bool = False) -> tuple[tuple[str, int | tuple[int, ...]], ...]:
    """--dim NAME=VALUE (repeatable; ONNX Runtime's free-dimension override by name) as
    ((name, value), ...) sorted by name. `lists`: a value may be a comma list (sweep's
    `--dim seq=128,256`), given as a tuple. A name given twice is refused."""
    out: dict[str, int | tuple[int, ...]] = {}
    for v in values or ():
        # a (name, value) pair: the API's dims mapping, or a setup parsed already
        text = f"{v[0]}={','.join(map(str, v[1])) if isinstance(v[1], tuple) else v[1]}" \
            if isinstance(v, tuple) and len(v) == 2 else str(v)
        name, sep, val = text.partition("=")
        name = name.strip()
        parts = [p.strip() for p in val.split(",")] if lists else [val.strip()]
        if not sep or not name or not all(_INT_RE.fullmatch(p) for p in parts):
            raise ConfigError(f"--dim {_cut(text)!r}: expected NAME=N" + (" or NAME=N1,N2,..." if lists else "")
                              + " (a symbolic dimension of the model and a whole number)")
        nums = tuple(int(p) for p in parts)
        bad = [n for n in nums if not 1 <= n <= MAX_DIM_VALUE]
        if bad:
            raise ConfigError(f"--dim {_cut(text)!r}: a dimension must be between 1 and {MAX_DIM_VALUE:,d}")
        if name in out:
            raise ConfigError(f"--dim {name} is given twice")
        out[name] = nums if lists else nums[0]
    return tuple(sorted(out.items()))


MAX_OP_RANGE = 1_000_000  # op indices one --trainable-ops list may name (LLM exports have 10^4-10^5 ops)
_INT_RE = re.compile(r"-?[0-9]{1,24}")  # ASCII digits only: str.isdigit() takes '²', which int() refuses


def _cut(text: str, n: int = 60) -> str:
    return text if len(text) <= n else text[:n] + "..."


def parse_trainable(text: str) -> str | int | tuple[int, ...]:
    """`all`, `none`, `N` (last N ops) or a comma list of op indices `3,5,7` (ranges `3-7` allowed)."""
    s = text.strip().lower()
    if s in ("all", "none"):
        return s
    if len(s) > 100_000:
        raise ConfigError(f"--trainable-ops: {len(s):,d} characters is more than a list of op indices needs")
    expected = f"--trainable-ops {_cut(text)!r}: expected all, none, N or a list like 3,5,8-10"
    if s.lstrip("-").isdigit() and "," not in s:
        if not _INT_RE.fullmatch(s):
            raise ConfigError(f"{expected} (a number of at most 24 digits)")
        n = int(s)
        if n < -1:  # -1 is onert's "all"; other negatives mean nothing
            raise ConfigError(f"--trainable-ops {text!r}: N must be >= 0 (or -1, onert's 'all')")
        return n
    out: set[int] = set()
    for part in s.split(","):
        part = part.strip()
        a, b = part.split("-", 1) if "-" in part[1:] else (part, part)
        if not part:
            continue
        if not (_INT_RE.fullmatch(a.strip()) and _INT_RE.fullmatch(b.strip())):
            raise ConfigError(expected)
        lo, hi = int(a), int(b)
        # a range is materialised: bounded, as no model has this many ops (0-999999999 ate all memory)
        if hi - lo >= MAX_OP_RANGE:
            raise ConfigError(f"--trainable-ops {_cut(text)!r}: the range {lo}-{hi} names more than "
                              f"{MAX_OP_RANGE:,d} ops")
        out.update(range(lo, hi + 1))
        if len(out) > MAX_OP_RANGE:
            raise ConfigError(f"--trainable-ops {_cut(text)!r} names more than {MAX_OP_RANGE:,d} ops")
    if not out:
        raise ConfigError(f"--trainable-ops {_cut(text)!r} names no op")
    return tuple(sorted(set(out)))


# ---- the training flags, declared once ----------------------------------------------------------

def check_positive(name: str, v):
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ConfigError(f"{name} must be an int >= 1, got {v!r}")
    return v


def _number(name: str, v):
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ConfigError(f"{name} must be a number, got {v!r}")
    return float(v)


def _trainable_spec(name: str, v) -> str | None:
    """The --trainable-ops text for an API argument: "all", "none", N, or a list of op indices."""
    if v is None or isinstance(v, str):
        return v
    if isinstance(v, bool):
        raise ConfigError(f"{name} must be 'all', 'none', an int or op indices, not {v!r}")
    if isinstance(v, int):
        return str(v)
    try:
        idx = list(v)
    except TypeError:
        raise ConfigError(f"{name} must be 'all', 'none', an int or op indices, not {v!r}") from None
    if not idx or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in idx):
        raise ConfigError(f"{name}: op indices must be non-negative ints, got {v!r}")
    return ",".join(str(i) for i in idx)


def _dims(name: str, v) -> tuple[str, ...] | None:
    """--dim's value: the CLI's NAME=N texts, or the API's mapping {name: size}, checked, as NAME=N texts."""
    if v is None:
        return None
    if isinstance(v, dict):
        if not all(isinstance(k, str) for k in v):
            raise ConfigError(f"{name} must map dimension names to sizes, got {v!r}")
        for k, n in v.items():
            check_positive(f"{name}[{k!r}]", n)
        v = v.items()
    elif isinstance(v, str) or not all(isinstance(x, (str, tuple)) for x in v):
        raise ConfigError(f"{name} must be a mapping of dimension names to sizes, got {v!r}")
    return tuple(f"{k}={n}" for k, n in parse_dims(v))


def _strings(name: str, v) -> tuple[str, ...] | None:
    if v is None:
        return None
    if isinstance(v, str):
        return (v,)
    try:
        items = tuple(v)
    except TypeError:
        raise ConfigError(f"{name} must be a string or a list of strings, got {v!r}") from None
    if not all(isinstance(i, str) for i in items):
        raise ConfigError(f"{name} must be a string or a list of strings, got {v!r}")
    return items


@dataclass(frozen=True)
class FlagKind:
    """How a kind of training flag is typed and read. `check`: (API keyword, argument) -> the flag's
    value, checked as click checks the flag (ConfigError otherwise); `parse`: the flag's value ->
    the TrainConfig field's. The click type is the commands' (commands/options.py CLICK_TYPES), the
    reading of a baseline's JSON value back into a flag value diff's (baseline.py)."""

    check: Callable
    parse: Callable = lambda v: v
    # the TrainConfig field's value as JSON (a tuple as a list)
    to_json: Callable = lambda v: list(v) if isinstance(v, tuple) else v


FLAG_KINDS = {
    "count": FlagKind(check_positive),  # an int >= 1
    "choice": FlagKind(lambda name, v: v),  # one of `choices` (TrainConfig refuses others)
    "number": FlagKind(_number),  # a float
    "trainable": FlagKind(_trainable_spec, lambda v: parse_trainable(v)),  # all | none | N | 3,5,8-10
    "selectors": FlagKind(_strings, lambda v: parse_selectors(v)),  # repeatable: biases | ops:GLOB | params:GLOB
    "names": FlagKind(_strings, lambda v: parse_selectors([v] if isinstance(v, str) else v)),  # a comma list of globs
    # repeatable NAME=N: symbolic dimensions bound by name; JSON {name: size}
    "dims": FlagKind(_dims, lambda v: parse_dims(v), lambda v: dict(v)),
}


@dataclass(frozen=True)
class TrainingFlag:
    """One training flag. `name` is the API keyword and the click destination (the long flag's name,
    dashes as underscores); `field` the TrainConfig field and the key of `config.sources`;
    `json_key` its key in the JSON `config` ("lora.rank": a member of the object `lora`, null when
    the first member is unset); `metadata_key` its key in circle training metadata
    (Graph.metadata["training"]; None: flags and defaults only)."""

    name: str
    decls: tuple[str, ...]
    kind: str
    field: str
    json_key: str
    help: str
    metavar: str | None = None
    choices: tuple[str, ...] = ()
    metadata_key: str | None = None
    # a flag that, when given, makes the metadata's value of this one ignored
    metadata_unless: str | None = None
    # `config.sources` says "default" when neither the flag nor the metadata gave it
    records_default: bool = True
    # the JSON holds what the flag resolved to (the outputs --loss-outputs picked, by default every
    # float one), so `diff` takes a baseline's value back only when a flag gave it
    json_resolved: bool = False
    # acts only on a step that runs (the learning rate): no memory figure depends on it, so only
    # `verify` offers the flag and `diff` notes no difference of it
    step_only: bool = False
    # what a report written before the flag existed meant by leaving its key out (`diff` compares it
    # as this value); None: nothing, the key was always there
    absent: object = None

    def check(self, value):
        return FLAG_KINDS[self.kind].check(self.name, value)

    def parse(self, value):
        return FLAG_KINDS[self.kind].parse(value)

    @property
    def multiple(self) -> bool:
        return self.kind in ("selectors", "dims")


# in the JSON `config`'s order (the help lists them so too)
TRAINING_FLAGS = (
    TrainingFlag("batch_size", ("-b", "--batch-size"), "count", "batch_size", "batch_size",
                 "Batch size (default: the metadata's, else the model's own).", metadata_key="batch_size"),
    TrainingFlag("dim", ("--dim",), "dims", "dims", "dims",
                 "NAME=N: a symbolic dimension other than the batch, bound by name before shape inference "
                 "(ONNX Runtime's free-dimension override), e.g. --dim seq=512. Repeatable; every symbolic "
                 "dimension but the batch (-b) must be bound (`memplan inspect MODEL` lists them). Also sets a "
                 "size computed from the data (a mixture of experts' tokens per expert), otherwise taken as "
                 "equal pieces (docs/dims.md).",
                 metavar="NAME=N", records_default=False, absent={}),
    TrainingFlag("optimizer", ("-O", "--optimizer"), "choice", "optimizer", "optimizer",
                 "Optimizer: sgd (no state), momentum (1 state tensor per weight), adam (2). Default sgd.",
                 choices=OPTIMIZERS, metadata_key="optimizer"),
    TrainingFlag("loss", ("-l", "--loss"), "choice", "loss", "loss",
                 "Loss appended after each output that carries one (see --loss-outputs); the step's "
                 "loss is their sum. Default mse.", choices=LOSSES, metadata_key="loss"),
    TrainingFlag("loss_outputs", ("--loss-outputs",), "names", "loss_outputs", "loss_outputs",
                 "The model outputs that carry a loss: names or globs, comma-separated "
                 "(`memplan inspect MODEL` lists the outputs). Default: every float output.",
                 metavar="LIST", records_default=False, json_resolved=True),
    TrainingFlag("learning_rate", ("--learning-rate",), "number", "learning_rate", "learning_rate",
                 "Learning rate of the step verify runs (default: the metadata's, else 0.001).",
                 metadata_key="learning_rate", step_only=True),
    TrainingFlag("trainable_ops", ("-t", "--trainable-ops"), "trainable", "trainable", "trainable_ops",
                 "all | none | N (the last N ops, counting every op) | -1 (all, onert's "
                 "convention) | a list like 3,5,8-10. Default: the metadata's list, else all.",
                 metavar="SPEC", metadata_key="trainable"),
    TrainingFlag("batchnorm", ("--batchnorm",), "choice", "batchnorm", "batchnorm",
                 "BatchNormalization: train (batch statistics, default) or frozen (stored "
                 "statistics: trains only scale and bias).", choices=BATCHNORM_MODES, metadata_key="batchnorm"),
    TrainingFlag("dropout", ("--dropout",), "choice", "dropout", "dropout",
                 "Dropout: train (drops with its ratio and keeps a 1-byte-per-element mask for "
                 "backward, default) or off (an identity, as with dropout disabled).",
                 choices=DROPOUT_MODES, metadata_key="dropout"),
    TrainingFlag("precision", ("--precision",), "choice", "precision", "precision",
                 "Numeric precision, PyTorch Lightning's names: 32-true (float32, default); "
                 "bf16-mixed / 16-mixed (float32 weights, gradients and optimizer state, the "
                 "forward in bfloat16 / float16 where autocast casts down; 16-mixed adds the "
                 "gradient scaler); bf16-true / 16-true (every tensor in that dtype).", choices=PRECISIONS,
                 absent="32-true"),
    TrainingFlag("train", ("--train",), "selectors", "train", "train",
                 "Fine-tuning: biases (only biases train, TinyTL) | ops:GLOB (only the ops whose "
                 "name, module scope, type or #INDEX matches train) | params:GLOB (only the weights "
                 "so named train). Repeatable; combines with --trainable-ops and --freeze. Default: "
                 "the adapters of a file with peft's LoRA weights (lora_A / lora_B), else all.",
                 metavar="WHAT", metadata_key="train", metadata_unless="lora", records_default=False),
    TrainingFlag("freeze", ("--freeze",), "selectors", "freeze", "freeze",
                 "ops:GLOB (these ops train nothing) | params:GLOB (the weights so named stay "
                 "frozen). Repeatable.", metavar="WHAT", records_default=False),
    TrainingFlag("lora", ("--lora",), "count", "lora_rank", "lora.rank",
                 "LoRA: adapters of rank RANK beside the targeted projections train; every model "
                 "weight stays frozen (see --lora-targets).", metavar="RANK", records_default=False),
    TrainingFlag("lora_targets", ("--lora-targets",), "names", "lora_targets", "lora.targets",
                 "Ops that get adapters: op types (MatMul) or globs over op names, module scopes "
                 "and weight names, comma-separated. Default: the attention query and value "
                 "projections (*q_proj*, *v_proj*, *query*, *value*, *c_attn*, T5's q / v).",
                 metavar="LIST", records_default=False),
)
FLAG_BY_NAME = {f.name: f for f in TRAINING_FLAGS}


def check_training_arguments(values: dict) -> dict:
    """The API's training arguments (keyword -> value; None: not given) checked as click checks the
    flags: keyword -> the flag's value."""
    unknown = sorted(set(values) - set(FLAG_BY_NAME))
    if unknown:
        raise TypeError(f"unexpected keyword argument {unknown[0]!r}")
    return {name: FLAG_BY_NAME[name].check(v) for name, v in values.items()}


def merge_setup(graph_metadata: dict | None, flags: dict) -> TrainConfig:
    """The training setup of a model: `flags` (API keyword -> the flag's value; None or an empty list:
    not given) over the circle training metadata (`Graph.metadata["training"]`; an ONNX file's peft
    adapters, loaders/params.py) over the defaults. `sources` records which gave each value."""
    md = (graph_metadata or {}).get("training") or {}
    values, sources = {}, {}
    given = {}
    for f in TRAINING_FLAGS:
        v = flags.get(f.name)
        v = None if v is None else f.parse(v)
        given[f.name] = v is not None and v != ()
        if given[f.name]:
            values[f.field], sources[f.field] = v, "flag"
    for f in TRAINING_FLAGS:
        if given[f.name]:
            continue
        mv = md.get(f.metadata_key) if f.metadata_key else None
        if f.multiple:
            mv = tuple(mv) if mv else None
        if mv is not None and not (f.metadata_unless and given[f.metadata_unless]):
            values[f.field], sources[f.field] = mv, "metadata"
        elif f.records_default:
            sources[f.field] = "default"
    return TrainConfig(**values, sources=sources)


def config_json(cfg: TrainConfig, *, loss_outputs=None) -> dict:
    """The training setup under the JSON `config`'s keys, in TRAINING_FLAGS' order. `loss_outputs`:
    the outputs the setup resolved to (opgraph/outputs.loss_output_names); without it the key is left out."""
    out: dict = {}
    for f in TRAINING_FLAGS:
        if f.json_resolved:
            if loss_outputs is not None:
                out[f.json_key] = list(loss_outputs)
            continue
        value = FLAG_KINDS[f.kind].to_json(getattr(cfg, f.field))
        if "." in f.json_key:
            parent, member = f.json_key.split(".", 1)
            if parent not in out:  # the first member decides whether the object is there
                out[parent] = {member: value} if value else None
            elif out[parent] is not None:
                out[parent][member] = value
        else:
            out[f.json_key] = value
    return out


def training_words(values: dict) -> list[str]:
    """The command-line words that give `values` (training flag name -> the flag's value; None or an
    empty list: not given), in TRAINING_FLAGS' order, each flag by its first declaration (-b, -O,
    --train ...); a repeatable flag once per value, a list of op indices as 3,5,8."""
    words: list[str] = []
    for flag in TRAINING_FLAGS:
        v = values.get(flag.name)
        if v is None or v == ():
            continue
        if flag.kind == "trainable" and isinstance(v, (list, tuple)):
            v = ",".join(map(str, v))
        for one in (v if flag.multiple else (v,)):
            words += [flag.decls[0], str(one)]
    return words
