"""The training setup: what a step trains and how. Filled from circle training metadata, then flags (flags win)."""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from memplan_cli.errors import ConfigError

OPTIMIZERS = ("sgd", "momentum", "adam")
# optimizer state tensors per trainable weight
OPTIMIZER_STATE_COUNT = {"sgd": 0, "momentum": 1, "adam": 2}
LOSSES = ("mse", "cce")
# BatchNormalization in a training step: batch statistics, or the stored ones (affine, fine-tuning)
BATCHNORM_MODES = ("train", "frozen")
# Dropout in a training step: drop with its ratio (train), or an identity (off)
DROPOUT_MODES = ("train", "off")


@dataclass(frozen=True)
class TrainConfig:
    """Defaults follow onert's `nnfw_train_info` (batch 1, SGD, MSE, lr 0.001, all ops trainable here)."""

    batch_size: int | None = None  # None: the model's own batch (or the metadata's)
    optimizer: str = "sgd"
    loss: str = "mse"
    learning_rate: float = 0.001
    # "all", "none", an int N (the last N ops, counting every op, as onert does) or explicit indices
    trainable: str | int | tuple[int, ...] = "all"
    batchnorm: str = "train"
    dropout: str = "train"
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
        if self.batch_size is not None and self.batch_size < 1:
            raise ConfigError(f"batch size must be >= 1, got {self.batch_size}")

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


def parse_trainable(text: str) -> str | int | tuple[int, ...]:
    """`all`, `none`, `N` (last N ops) or a comma list of op indices `3,5,7` (ranges `3-7` allowed)."""
    s = text.strip().lower()
    if s in ("all", "none"):
        return s
    if s.lstrip("-").isdigit() and "," not in s:
        n = int(s)
        if n < -1:  # -1 is onert's "all"; other negatives mean nothing
            raise ConfigError(f"--trainable-ops {text!r}: N must be >= 0 (or -1, onert's 'all')")
        return n
    out: list[int] = []
    try:
        for part in s.split(","):
            part = part.strip()
            if "-" in part[1:]:
                a, b = part.split("-", 1)
                out.extend(range(int(a), int(b) + 1))
            elif part:
                out.append(int(part))
    except ValueError:
        raise ConfigError(f"--trainable-ops {text!r}: expected all, none, N or a list like 3,5,8-10") from None
    if not out:
        raise ConfigError(f"--trainable-ops {text!r} names no op")
    return tuple(sorted(set(out)))
