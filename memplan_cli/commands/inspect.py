"""`memplan inspect MODEL`: list ops and operands with shapes."""
from __future__ import annotations

import os

import click

from memplan_cli.commands.options import dim_option, output_path
from memplan_cli.errors import printable


def _fmt_value(v, shown: int = 8) -> str:
    """A constant's values; a long one (a traced buffer) shows its first few and its length."""
    if len(v) <= shown:
        return "[" + ", ".join(str(x) for x in v) + "]"
    return "[" + ", ".join(str(x) for x in v[:shown]) + f", ... ({len(v)} values)]"


def describe(g, model: str, values: int = 8) -> list[str]:
    """The lines `inspect` prints for graph `g` loaded from `model` (constants: their first `values` values)."""
    lines = []
    name = f" '{g.name}'" if g.name else ""
    lines.append(f"{model}: {g.source_format}{name}, {len(g.operations)} ops, {len(g.operands)} operands, "
                 f"{g.parameter_count():,d} float parameters")
    md = g.metadata
    symbol = md.get("batch_symbol")
    if symbol and "batch_size" not in md:
        lines.append(f"  batch (symbolic: {symbol}): shapes shown at batch {_input_batch(g)}; -b N shows another")
    elif "batch_size" in md:
        said = f"symbolic: {symbol}" if symbol else f"the file has {md.get('source_batch_size')}"
        lines.append(f"  batch size {md['batch_size']} ({said})")
    elif md.get("dynamic_batch"):
        lines.append(f"  batch (symbolic): shapes shown at batch {_input_batch(g)}; -b N shows another")
    if md.get("dynamic_dims") or (md.get("dynamic_batch") and not symbol):
        lines.append("  the file marks the batch dimension as dynamic")
    for name, inp, k, value, bound in md.get("symbolic_dims") or ():  # --dim NAME=N binds them
        lines.append(f"  {name} (symbolic: dim {k} of graph input '{inp}'): " +
                     (f"{value}, bound by --dim {name}={value}" if bound else
                      f"shapes shown at {value}; --dim {name}=N binds it (needed to analyse the model)"))
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
        rule = md["parameter_rule"]
        by = (f"by {rule}" if rule and not rule.startswith("none for ") else
              "by weight slots (no naming rule for a file that names no producer)" if rule in ("", "none for producer ''")
              else f"by weight slots (no naming rule for {rule[len('none for '):]})")
        line = f"  parameters {by}: {len(floats) - len(buffers)} of {len(floats)} float constants"
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
        # a tuple without spaces, so a wrapped line never splits one attribute
        attrs = " ".join(f"{k}={str(v).replace(', ', ',') if isinstance(v, tuple) else v}"
                         for k, v in sorted(op.attrs.items()))
        src = f" [{op.source_type}]" if op.source_type and op.source_type != op.type else ""
        lines.append(f"  {op.index:4d} {op.type:16s} ({ins}) -> ({outs}){src} {attrs}".rstrip())
    lines.append("operands:")
    for o in g.operands:
        kind = "const" if o.is_const else ("input" if o.is_input else ("output" if o.is_output else "act"))
        val = f" = {_fmt_value(o.value, values)}" if o.value is not None else ""
        lines.append(f"  %{o.index:<4d} {kind:6s} {o.dtype:8s} {str(list(o.shape)):22s} {o.nbytes:>14,d} B  "
                     f"{o.name}{val}")
    for w in g.warnings:
        lines.append(f"warning: {w}")
    # every line quotes the file (names, custom op codes, signature names, the producer, string
    # attributes): shown with errors.printable's escapes, one line each
    return [printable(line) for line in lines]


def _input_batch(g) -> int | None:
    try:
        return int(g.operands[g.inputs[0]].shape[0])
    except (AttributeError, IndexError, TypeError, ValueError):
        return None


def _json_value(v):
    """An attribute or constant value as JSON (tuples as lists; anything else a library made, as text)."""
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    if isinstance(v, (list, tuple)):
        return [_json_value(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _json_value(x) for k, x in sorted(v.items())}
    try:
        return v.item()  # a NumPy scalar
    except (AttributeError, ValueError):
        return str(v)


def inspect_document(g, model: str) -> dict:
    """`inspect -f json` (memplan_cli/schemas/inspect.schema.json): what memplan read."""
    from memplan_cli.analysis import file_sha256
    from memplan_cli.version import __version__

    md = g.metadata
    kind = lambda o: "const" if o.is_const else ("input" if o.is_input else ("output" if o.is_output else "act"))  # noqa: E731
    return {
        "schema_version": 1, "kind": "inspect", "memplan_version": __version__,
        "model": {"file": os.path.basename(model), "sha256": file_sha256(model), "format": g.source_format,
                  "name": g.name or None},
        "batch": {"size": _input_batch(g), "symbol": md.get("batch_symbol"),
                  "dynamic": bool(md.get("dynamic_batch") or md.get("dynamic_dims"))},
        "dims": [{"name": name, "input": inp, "position": k, "size": int(value), "bound": bound}
                 for name, inp, k, value, bound in md.get("symbolic_dims") or ()],
        "float_parameters": g.parameter_count(), "activation_bytes": g.activation_bytes(),
        "constant_bytes": g.constant_bytes(),
        "operations": [{"index": op.index, "type": op.type, "source_type": op.source_type or op.type,
                        "inputs": list(op.inputs), "outputs": list(op.outputs),
                        "attrs": {k: _json_value(v) for k, v in sorted(op.attrs.items())}} for op in g.operations],
        "operands": [{"index": o.index, "kind": kind(o), "dtype": o.dtype, "shape": [int(d) for d in o.shape],
                      "bytes": o.nbytes, "name": o.name,
                      "value": _json_value(list(o.value)) if o.value is not None else None} for o in g.operands],
        "outputs": list(g.outputs),
        "warnings": list(g.warnings),
    }


@click.command("inspect", short_help="The ops and operands of a model: shapes, dtypes and sizes.")
@click.argument("model", type=click.Path(dir_okay=True))
@click.option("-b", "--batch-size", type=click.IntRange(min=1), default=None,
              help="Re-batch the model first (a symbolic batch is shown at batch 1 without it).")
@dim_option()
@click.option("-f", "--format", "fmt", type=click.Choice(("table", "json")), default="table", show_default=True,
              help="table for people; json (memplan_cli/schemas/inspect.schema.json) for scripts.")
@click.option("-o", "--output", type=output_path(writable=True), default=None, metavar="FILE",
              help="Write the listing to FILE (atomically: a failed run leaves FILE as it was).")
@click.option("-q", "--quiet", count=True, help="Less output: -q one line, -qq nothing (exit status only).")
@click.option("-v", "--verbose", count=True, help="More output: every value of the small constants.")
def command(model, batch_size, dim, fmt, output, quiet, verbose):
    """List the ops and operands of MODEL with shapes, dtypes and sizes.

    Shows what memplan read from the file: canonical op types (the file's name in brackets when it
    differs), attributes, each operand's kind (input, output, act, const), and the values of the
    small integer constants that decide shapes. Weights are never read.
    """
    import json

    from memplan_cli.commands.options import verbosity
    from memplan_cli.loaders import load_model
    from memplan_cli.report.output import emit, terminal_width, wrap_text

    from memplan_cli.config import parse_dims

    level = verbosity(quiet, verbose)
    # an unbound symbolic dimension is shown at 1, as the batch is, and said so
    g = load_model(model, batch_size=batch_size, dims=parse_dims(dim), symbolic_default=1)
    to_file = bool(output and output != "-")
    if fmt == "json":
        text = json.dumps(inspect_document(g, model), indent=2) + "\n"
    else:
        lines = describe(g, model, values=1 << 30 if level >= 2 else 8)
        if level == 0:
            lines = lines[:1]
        text = wrap_text("\n".join(lines), terminal_width(to_file=to_file)) + "\n"
    if level >= 0 or to_file:
        emit(text, output, (model,), data="json" if fmt == "json" else "")
