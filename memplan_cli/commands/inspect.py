"""`memplan inspect MODEL`: list ops and operands with shapes."""
from __future__ import annotations

import click

from memplan_cli.commands.options import dim_option
from memplan_cli.errors import printable


def _fmt_value(v, shown: int = 8) -> str:
    """A constant's values; a long one (a traced buffer) shows its first few and its length."""
    if len(v) <= shown:
        return "[" + ", ".join(str(x) for x in v) + "]"
    return "[" + ", ".join(str(x) for x in v[:shown]) + f", ... ({len(v)} values)]"


def describe(g, model: str) -> list[str]:
    """The lines `inspect` prints for graph `g` loaded from `model`."""
    lines = []
    name = f" '{g.name}'" if g.name else ""
    lines.append(f"{model}: {g.source_format}{name}, {len(g.operations)} ops, {len(g.operands)} operands, "
                 f"{g.parameter_count():,d} float parameters")
    md = g.metadata
    if "batch_size" in md:
        lines.append(f"  batch size {md['batch_size']} (the file has {md.get('source_batch_size')})")
    if md.get("dynamic_dims") or md.get("dynamic_batch"):
        lines.append("  the file marks the batch dimension as dynamic")
    if md.get("symbolic_dims"):  # bound by --dim before shape inference
        lines.append("  symbolic dimensions bound: " + ", ".join(
            f"{name}={value} (graph input '{inp}', position {k})" for name, inp, k, value in md["symbolic_dims"]))
    tr = md.get("training")
    if tr:
        shown = " ".join(f"{k}={v if not isinstance(v, tuple) else _fmt_value(v)}"
                         for k, v in tr.items() if v is not None)
        label = "training metadata (CIRCLE_TRAINING)" if g.source_format != "onnx" else \
            "what trains, by the file's peft LoRA adapter names (--train overrides)"
        lines.append(f"  {label}: {shown}")
    lines.append(f"  activations {g.activation_bytes():,d} B, constants {g.constant_bytes():,d} B")
    if md.get("parameter_rule") is not None:
        floats = [o for o in g.operands if o.is_const and o.shape and o.dtype.startswith(("float", "bfloat"))]
        buffers = [o.name for o in floats if o.computed]
        assumed = [o.name for o in floats if o.assumed and not o.computed]
        line = f"  parameters by {md['parameter_rule']}: {len(floats) - len(buffers)} of {len(floats)} float constants"
        if buffers:
            line += f"; not parameters: {_fmt_value(buffers, 4)}"
        if assumed:
            line += f"; assumed trainable (the file does not tell): {_fmt_value(assumed, 4)}"
        lines.append(line)
    if len(g.outputs) > 1 or md.get("output_names"):
        from memplan_cli.ir.outputs import output_label

        def shown(o):  # the name --loss-outputs takes (a TF Lite signature's, else the tensor's)
            op, name = g.operands[o], output_label(g, o)
            return f"{name} (%{o} {op.dtype})" if name == op.name else f"{name} (%{o} {op.name}, {op.dtype})"

        lines.append(f"  outputs: {', '.join(shown(o) for o in g.outputs)}")
    lines.append("ops:")
    for op in g.operations:
        ins = ", ".join("-" if i < 0 else f"%{i}" for i in op.inputs)
        outs = ", ".join(f"%{i}" for i in op.outputs)
        attrs = " ".join(f"{k}={v}" for k, v in sorted(op.attrs.items()))
        src = f" [{op.source_type}]" if op.source_type and op.source_type != op.type else ""
        lines.append(f"  {op.index:4d} {op.type:16s} ({ins}) -> ({outs}){src} {attrs}".rstrip())
    lines.append("operands:")
    for o in g.operands:
        kind = "const" if o.is_const else ("input" if o.is_input else ("output" if o.is_output else "act"))
        val = f" = {_fmt_value(o.value)}" if o.value is not None else ""
        lines.append(f"  %{o.index:<4d} {kind:6s} {o.dtype:8s} {str(list(o.shape)):22s} {o.nbytes:>14,d} B  "
                     f"{o.name}{val}")
    for w in g.warnings:
        lines.append(f"warning: {w}")
    # every line quotes the file (names, custom op codes, signature names, the producer, string
    # attributes): shown with errors.printable's escapes, one line each
    return [printable(line) for line in lines]


@click.command("inspect")
@click.argument("model", type=click.Path(dir_okay=True))
@click.option("-b", "--batch-size", type=click.IntRange(min=1), default=None, help="Re-batch the model first.")
@dim_option()
def command(model, batch_size, dims):
    """List the ops and operands of MODEL with shapes, dtypes and sizes.

    Shows what memplan read from the file: canonical op types (the file's name in brackets when it
    differs), attributes, each operand's kind (input, output, act, const), and the values of the
    small integer constants that decide shapes. Weights are never read.
    """
    from memplan_cli.loaders import load_model
    from memplan_cli.report.output import write_stdout

    from memplan_cli.config import parse_dims

    g = load_model(model, batch_size=batch_size, dims=parse_dims(dims))
    write_stdout("\n".join(describe(g, model)) + "\n")
