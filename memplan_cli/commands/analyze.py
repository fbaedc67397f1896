"""`memplan analyze MODEL`: the training memory of MODEL, by category, naive vs planned."""
from __future__ import annotations

import click

from memplan_cli.commands.options import config_from_flags, training_options


@click.command("analyze")
@click.argument("model", type=click.Path(dir_okay=True))
@training_options
def command(model, **flags):
    """How much memory one training step of MODEL takes, and what it is made of."""
    from memplan_cli.loaders import load_model

    g = load_model(model)
    cfg = config_from_flags(g.metadata, **flags)
    if cfg.batch_size is not None:
        g = load_model(model, batch_size=cfg.batch_size)
    click.echo(f"{model}: {g.source_format}, {len(g.operations)} ops, {g.parameter_count():,d} parameters")
    click.echo(f"  activations  {g.activation_bytes():>14,d} B")
    click.echo(f"  constants    {g.constant_bytes():>14,d} B")
