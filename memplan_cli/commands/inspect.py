"""`memplan inspect MODEL`: list ops and operands with shapes."""
from __future__ import annotations

import click


@click.command("inspect")
@click.argument("model", type=click.Path(dir_okay=True))
@click.option("-b", "--batch-size", type=click.IntRange(min=1), default=None, help="Re-batch the model first.")
def command(model, batch_size):
    """List the ops and operands of MODEL with shapes, dtypes and sizes."""
    from memplan_cli.loaders import load_model

    g = load_model(model, batch_size=batch_size)
    click.echo(f"{model}: {g.source_format}, {len(g.operations)} ops, {len(g.operands)} operands")
    for op in g.operations:
        ins = ", ".join("-" if i < 0 else f"%{i}" for i in op.inputs)
        outs = ", ".join(f"%{i}" for i in op.outputs)
        attrs = " ".join(f"{k}={v}" for k, v in sorted(op.attrs.items()))
        click.echo(f"  op {op.index:3d} {op.type:16s} ({ins}) -> ({outs}) {attrs}")
    for o in g.operands:
        kind = "const" if o.is_const else ("input" if o.is_input else ("output" if o.is_output else "act"))
        click.echo(f"  %{o.index:<4d} {kind:6s} {o.dtype:8s} {str(list(o.shape)):22s} {o.nbytes:>12,d} B  {o.name}")
