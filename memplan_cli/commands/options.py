"""Flags shared by every command that analyses a model, and how they become a TrainConfig.

Precedence: flags > circle training metadata (`CIRCLE_TRAINING`) > defaults.
"""
from __future__ import annotations

import click

from memplan_cli.config import LOSSES, OPTIMIZERS, TrainConfig, parse_trainable


def training_options(f):
    """Adds --batch-size, --optimizer, --loss, --learning-rate, --trainable-ops."""
    opts = [
        click.option("-b", "--batch-size", type=click.IntRange(min=1), default=None,
                     help="Batch size (default: the metadata's, else the model's own)."),
        click.option("-O", "--optimizer", type=click.Choice(OPTIMIZERS), default=None,
                     help="Optimizer: sgd (no state), momentum (1 state tensor per weight), adam (2). Default sgd."),
        click.option("-l", "--loss", type=click.Choice(LOSSES), default=None,
                     help="Loss appended after the model output. Default mse."),
        click.option("--learning-rate", type=float, default=None, help="Learning rate (used by `verify`)."),
        click.option("-t", "--trainable-ops", "trainable", default=None, metavar="SPEC",
                     help="all | none | N (the last N ops, counting every op) | a list like 3,5,8-10. "
                          "Default: the metadata's list, else all."),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def config_from_flags(graph_metadata: dict, *, batch_size=None, optimizer=None, loss=None,
                      learning_rate=None, trainable=None) -> TrainConfig:
    """Merge circle training metadata (a dict the loader put in `Graph.metadata["training"]`) with flags."""
    md = (graph_metadata or {}).get("training") or {}
    values, sources = {}, {}

    def pick(key, flag_value, convert=lambda v: v):
        if flag_value is not None:
            values[key], sources[key] = convert(flag_value), "flag"
        elif md.get(key) is not None:
            values[key], sources[key] = md[key], "metadata"
        else:
            sources[key] = "default"

    pick("batch_size", batch_size)
    pick("optimizer", optimizer)
    pick("loss", loss)
    pick("learning_rate", learning_rate)
    pick("trainable", trainable, parse_trainable)
    return TrainConfig(**values, sources=sources)

