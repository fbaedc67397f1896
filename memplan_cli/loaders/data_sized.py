"""Sizes computed from the data, under a stated assumption instead of a refusal (issue 39).

A mixture of experts splits its routed tokens by each expert's count (`split_with_sizes` of
`counts.tolist()`): the file records no size for the pieces. What the op guarantees is a bound: an
op family declares it (`data_sized_pieces`, ONNX Split: the pieces, one per output, sum to the
input's length along an axis). The loader sizes such pieces by a general rule taken from the graph,
never from a model's name, and says so:

- by default the pieces are equal (balanced routing): length // n rows each, the remainder one row
  each on the first pieces;
- each piece has a name, which `memplan inspect` lists and `--dim NAME=N` binds (ONNX Runtime's
  free-dimension override): the file's own where it gives one (the dynamo exporter names each
  data-dependent size after torch's unbacked symbol: u0, u1, ...), else `<sizes tensor>_<k>`; the
  pieces not bound share what is left equally. Pieces of two Splits reading the same sizes share
  their names (the same counts).

Bound pieces must sum to the length; a piece may get no row (an expert with no token: its tensors
are empty, 0 bytes, as eager's are).

A count whose op guarantees only an upper bound (`data_sized_count`, ONNX NonZero: at most every
element of its input) is taken at that bound (`at the bound`: every element selected), the most
the op can return, so the tensors it sizes are at their largest. It is named like a piece (the file's own name where the
dynamo exporter gives one, on the transposed indices it reads: `u0`; else `<output>_count`) and
`--dim NAME=N` sets it, up to the bound. Where the family finds more (NonZero of one class's
slice of a one-hot: a mixture of experts' `torch.where(one_hot(...)[e])`), the classes' counts sum
to at most the one-hot's rows, and are taken as equal pieces of them (`share`). Data-sized ops with
no bound (Unique, a Loop's trip count) are left to the loader's refusal. A Range whose length is
the largest count of a mask along an axis (Longformer's `arange(num_global.max())`, when the mask
is the model's input) is bounded by that axis's length, and taken at it.
"""
from __future__ import annotations

import re

from memplan_cli.loaders.dims import DimsError

RULE = "equal pieces"
COUNT_RULE = "at the bound"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def file_names(model) -> dict[str, tuple]:
    """Each value_info's dim names (dim_param or None per dim), read before shape inference
    replaces them: the dynamo exporter's names for data-dependent sizes."""
    out = {}
    for vi in list(model.graph.value_info) + list(model.graph.output):
        t = vi.type.tensor_type
        if vi.type.HasField("tensor_type") and t.HasField("shape"):
            out[vi.name] = tuple(d.dim_param if d.HasField("dim_param") else None for d in t.shape.dim)
    return out


def _shapes(model) -> dict[str, tuple | None]:
    """Static shapes after shape inference (None: not static)."""
    out = {}
    for vi in list(model.graph.input) + list(model.graph.value_info) + list(model.graph.output):
        t = vi.type.tensor_type
        if not vi.type.HasField("tensor_type") or not t.HasField("shape"):
            out[vi.name] = None
            continue
        dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in t.shape.dim]
        out[vi.name] = None if None in dims else tuple(dims)
    for t in model.graph.initializer:
        out[t.name] = tuple(int(d) for d in t.dims)
    return out


def _splits(model, shapes):
    """(node, axis, length, sizes input position) of each op whose pieces the data sizes."""
    from onnx import helper

    from memplan_cli import ops as registry

    consts = {t.name for t in model.graph.initializer}
    consts |= {n.output[0] for n in model.graph.node if n.op_type == "Constant" and n.output}
    for node in model.graph.node:
        if node.domain not in ("", "ai.onnx"):
            continue
        fact = registry.source_facts("onnx", node.op_type).get("data_sized_pieces")
        x = shapes.get(node.input[0]) if fact is not None and node.input else None
        if x is None:
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        f = fact(attrs, len(node.input), len(node.output), len(x))
        if f is None:
            continue
        k = f["sizes_input"]
        sizes = node.input[k] if k < len(node.input) else ""
        if not sizes or sizes in consts or all(shapes.get(o) is not None for o in node.output if o):
            continue
        yield node, f["axis"], x[f["axis"]], k


class _View:
    """What an op family's `data_sized_count` may read of the graph around an op: each value's
    producer (type, attributes, inputs), a small constant's value, a static shape."""

    def __init__(self, model, shapes):
        from onnx import helper, numpy_helper

        self._nodes, self._values, self._shapes, self._readers = {}, {}, shapes, {}
        for t in model.graph.initializer:
            if len(t.raw_data) + 8 * len(t.int64_data) + 4 * len(t.int32_data) <= 1 << 15:
                try:
                    self._values[t.name] = numpy_helper.to_array(t)
                except Exception:  # noqa: BLE001 - stripped or odd data: no value
                    pass
        for n in model.graph.node:
            attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
            if n.op_type == "Constant" and n.output and "value" in attrs:
                try:
                    self._values[n.output[0]] = numpy_helper.to_array(attrs["value"])
                except Exception:  # noqa: BLE001
                    pass
                continue
            node = {"type": n.op_type, "attrs": attrs, "inputs": list(n.input), "outputs": list(n.output)}
            for o in n.output:
                self._nodes[o] = node
            for i in dict.fromkeys(n.input):
                self._readers.setdefault(i, []).append(node)

    def node(self, name):
        return self._nodes.get(name)

    def readers(self, name) -> list:
        """The nodes reading `name`, in the graph's order."""
        return self._readers.get(name, [])

    def value(self, name):
        return self._values.get(name)

    def shape(self, name):
        return self._shapes.get(name)

    def rank(self, name):
        s = self._shapes.get(name)
        return None if s is None else len(s)


def _counts(model, shapes):
    """(node, fact) of each op whose output count the data decides, with a bound."""
    from onnx import helper

    from memplan_cli import ops as registry

    view = None
    for node in model.graph.node:
        if node.domain not in ("", "ai.onnx") or not node.input or not node.output:
            continue
        fact = registry.source_facts("onnx", node.op_type).get("data_sized_count")
        x = shapes.get(node.input[0]) if fact is not None else None
        if x is None or shapes.get(node.output[0]) is not None:
            continue
        view = view or _View(model, shapes)
        f = fact({a.name: helper.get_attribute_value(a) for a in node.attribute}, x, view, node.input[0],
                 inputs=list(node.input), outputs=list(node.output))
        if f is not None:  # None: the family finds no bound (left to the loader's refusal)
            yield node, f


def _count_name(model, node, given) -> str:
    """The file's name for a count: the dynamo exporter names it on the transposed indices that
    `torch.nonzero` returns (NonZero, then Transpose), not on NonZero's own output."""
    out = node.output[0]
    dims = given.get(out) or ()
    if len(dims) > 1 and dims[1] and _NAME.match(dims[1]):
        return dims[1]
    readers = [n for n in model.graph.node if out in n.input]
    if len(readers) == 1 and readers[0].output:
        dims = given.get(readers[0].output[0]) or ()
        if dims and dims[0] and _NAME.match(dims[0]):
            return dims[0]
    return f"{out}_count"


def _assume_counts(model, dims, given, value, counts) -> list:
    """Each data-sized count (`counts`: _counts()) at its bound (or --dim's size): its output's shape
    written into the model's value_info, for inference to follow. Returns the records."""
    from onnx import TensorProto, helper

    records = []
    for node, f in counts:
        name = _count_name(model, node, given)
        n = dims.get(name, value.get(name, f.get("traced", f.get("share", f["bound"]))))
        what = f"{node.op_type} {node.name or node.output[0]!r}"
        if not 0 <= n <= f["bound"]:
            raise DimsError(f"--dim {name}={n}: {what} selects at most {f['bound']:,d} elements of "
                            f"'{f.get('of', node.input[0])}'")
        shape = list(f["leading"])
        shape.insert(f["dim"], n)
        for vi in list(model.graph.value_info):
            if vi.name in (node.output[0], f.get("value_of")):
                model.graph.value_info.remove(vi)
        if f.get("value_of"):
            # the count is a value the graph reads elsewhere too (a size): it becomes that constant,
            # and what it sizes is inferred from it
            import numpy as np
            from onnx import numpy_helper

            for src in [m for m in model.graph.node if f["value_of"] in m.output]:
                model.graph.node.remove(src)
            model.graph.initializer.append(numpy_helper.from_array(
                np.array(n, dtype=f["value_dtype"]).reshape(f.get("value_shape") or ()), f["value_of"]))
        else:
            model.graph.value_info.append(helper.make_tensor_value_info(node.output[0], TensorProto.INT64, shape))
        if name not in value and ("traced" not in f or name in dims):  # a traced count is the file's own
            records.append({"name": name, "size": n, "set_by": "--dim" if name in dims else "assumed",
                            "op": node.name or node.output[0], "tensor": node.output[0],
                            "rule": RULE if "share" in f else COUNT_RULE, "bound": f["bound"]})
        value[name] = n
    return records


def _piece_name(node, k, axis, sizes, given) -> str:
    dims = given.get(node.output[k]) or ()
    name = dims[axis] if axis < len(dims) else None
    return name if name and _NAME.match(name) else f"{sizes}_{k}"


def assume(model, dims: dict, given: dict[str, tuple], value: dict | None = None) -> dict | None:
    """Size every data-sized Split (its sizes input becomes a constant of the sizes taken) and count
    (its output's shape written into value_info) of the inferred `model`, changed in place; `dims`
    the user's --dim values, `given` file_names(). Returns {"rule", "dims": [{"name", "size",
    "set_by", "op", "tensor", "rule"[, "bound"]}], "unsized": [tensor names shape inference left
    unsized]} or None when there is none. `value`: the sizes taken by an earlier
    call (a Split whose input a first one's pieces sized: the next layer of experts)."""
    from onnx import numpy_helper
    import numpy as np

    shapes = _shapes(model)
    found = list(_splits(model, shapes))
    value = {} if value is None else value
    counts = list(_counts(model, shapes))
    records = _assume_counts(model, dims, given, value, counts)
    if not found and not counts:
        return None
    for i, (node, axis, length, k) in enumerate(found):
        sizes_in = node.input[k]
        names = [_piece_name(node, j, axis, sizes_in, given) for j in range(len(node.output))]
        fixed = {n: dims[n] for n in names if n in dims}
        fixed.update({n: value[n] for n in names if n in value and n not in fixed})
        free = [n for n in dict.fromkeys(names) if n not in fixed]
        left = length - sum(fixed[n] for n in names if n in fixed)
        where = (f"Split {node.name or node.output[0]!r} cuts {length:,d} rows (axis {axis} of "
                 f"'{node.input[0]}') into {len(names)} pieces sized from the data")
        if free:
            share = sum(1 for n in names if n in free)  # a name met twice takes two shares
            base, rem = divmod(left, share) if left > 0 else (0, 0)
            for j, n in enumerate(free):
                fixed[n] = base + (j < rem)
        total = sum(fixed[n] for n in names)
        if total != length:
            bound = " ".join(f"--dim {n}={dims[n]}" for n in dict.fromkeys(names) if n in dims)
            raise DimsError(f"{where}: with {bound or 'these sizes'} they sum to {total:,d}, not {length:,d}")
        for j, n in enumerate(names):
            if n not in value:
                records.append({"name": n, "size": fixed[n], "set_by": "--dim" if n in dims else "assumed",
                                "op": node.name or node.output[0], "tensor": node.output[j], "rule": RULE})
            value[n] = fixed[n]
        const = f"{sizes_in}:assumed_{len(value)}_{i}"
        model.graph.initializer.append(numpy_helper.from_array(np.asarray([fixed[n] for n in names],
                                                                          dtype=np.int64), const))
        node.input[k] = const
    unsized = [o for n in model.graph.node for o in n.output if o and shapes.get(o) is None]
    return {"rule": rule_of(records), "dims": records, "unsized": unsized}


def assumed_note(metadata: dict) -> str:
    """For a refusal of a graph whose shapes do not hold: the sizes it took from no file (assumed,
    not set by --dim), which may be why, and the flag that sets each; "" when none was assumed."""
    dims = [d for d in (metadata.get("data_sized") or {}).get("dims", ()) if d.get("set_by") == "assumed"]
    if not dims:
        return ""
    taken = ", ".join(f"{d['name']}={d['size']:,d}" for d in dims)
    flags = " ".join(f"--dim {d['name']}=N" for d in dims)
    return (f" (with {'sizes' if len(dims) > 1 else 'a size'} computed from the data: {taken} assumed "
            f"({rule_of(dims)}); the data's own may make the shapes agree: {flags})")


def rule_of(records) -> str:
    """The assumptions taken, in one phrase: "equal pieces", "at the bound" or both."""
    return " and ".join(dict.fromkeys(r["rule"] for r in records))


def found_dims(sized: dict | None) -> list[tuple]:
    """The data-sized dims as check_dims' (name, where, position, is_batch) entries."""
    return [(r["name"], r["tensor"], 0, False) for r in (sized or {}).get("dims", ())]
