"""The work behind `memplan inspect`: what memplan read from a model file, as lines for people and
as the `inspect` JSON document (schemas/inspect.schema.json)."""
from __future__ import annotations

from memplan_cli.analysis import model_sha256
from memplan_cli.errors import printable
from memplan_cli.opgraph.outputs import output_label
from memplan_cli.report.document import document_header, model_head


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
        lines.append(f"  batch (symbolic: {symbol}): shapes shown at batch {g.input_batch()}; -b N shows another")
    elif "batch_size" in md:
        said = f"symbolic: {symbol}" if symbol else f"the file has {md.get('source_batch_size')}"
        lines.append(f"  batch size {md['batch_size']} ({said})")
    elif md.get("dynamic_batch"):
        lines.append(f"  batch (symbolic): shapes shown at batch {g.input_batch()}; -b N shows another")
    if md.get("dynamic_dims") or (md.get("dynamic_batch") and not symbol):
        lines.append("  the file marks the batch dimension as dynamic")
    for name, inp, k, value, bound in md.get("symbolic_dims") or ():  # --dim NAME=N binds them
        lines.append(f"  {name} (symbolic: dim {k} of graph input '{inp}'): " +
                     (f"{value}, bound by --dim {name}={value}" if bound else
                      f"shapes shown at {value}; --dim {name}=N binds it (needed to analyse the model)"))
    by_op: dict = {}
    for d in (md.get("data_sized") or {}).get("dims", ()):  # --dim NAME=N binds them too
        by_op.setdefault(d["op"], []).append(d)
    for op_name, ds in by_op.items():
        sizes = ", ".join(f"{d['name']}={d['size']}" for d in ds)
        rule = ds[0].get("rule", "equal pieces")
        what = "pieces" if "bound" not in ds[0] else f"count (at most {ds[0]['bound']:,d})"
        how = "assumed " + rule if all(d["set_by"] == "assumed" for d in ds) else \
            "set by --dim" + (" where given, the rest equal" if len(ds) > 1 else "")
        lines.append(f"  data-sized {what} of {op_name!r}: {sizes} ({how}; --dim NAME=N sets one)")
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
    md = g.metadata
    kind = lambda o: "const" if o.is_const else ("input" if o.is_input else ("output" if o.is_output else "act"))  # noqa: E731
    return {
        **document_header("inspect", model_head(model, model_sha256(g, model), format=g.source_format,
                                                name=g.name or None)),
        "batch": {"size": g.input_batch(), "symbol": md.get("batch_symbol"),
                  "dynamic": bool(md.get("dynamic_batch") or md.get("dynamic_dims"))},
        "dims": [{"name": name, "input": inp, "position": k, "size": int(value), "bound": bound}
                 for name, inp, k, value, bound in md.get("symbolic_dims") or ()],
        **({"data_sized": {"rule": md["data_sized"]["rule"],
                           "dims": [{k: d[k] for k in ("name", "size", "set_by", "op", "tensor", "rule", "bound") if k in d}
                                    for d in md["data_sized"]["dims"]],
                           "tensors": len(dict.fromkeys(md["data_sized"]["tensors"]))}}
           if md.get("data_sized") else {}),
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
