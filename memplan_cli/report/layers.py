"""The per-layer view: for each op (a buffer's `owner`), the bytes it brings, by role, and its share
of the peak (its buffers live at their own time domain's peak). Derived from the buffer list only,
so it works for every profile.

A profile may add columns through its `figures` hook: `extras["per_layer_extra"]` maps an owner to
`{column: int}` (e.g. ColossalAI-style fwd_mem_out / bwd_mem_tmp); those columns are appended.
"""
from __future__ import annotations

from memplan_cli.buffers import BufferList
from memplan_cli.report.live import Timeline, live_at_peak

# column -> the categories it sums ("kept" is special: activations alive after the forward pass)
LAYER_COLUMNS = ("activations", "kept_for_backward", "weights", "back-prop", "gradient", "opt-variable",
                 "other", "at_peak")
_BY_CATEGORY = {"non-const": "activations", "trainable": "weights", "back-prop": "back-prop",
                "gradient": "gradient", "opt-variable": "opt-variable", "disposable": "other", "extra": "other"}
NO_OWNER = "(no op)"


def _op_order(graph) -> dict[str, int]:
    """Owner strings a profile may use for op k (label, name, "#k", "k") -> k."""
    out: dict[str, int] = {}
    for op in getattr(graph, "operations", None) or []:
        for key in (op.label, op.name, f"#{op.index}", str(op.index), f"#{op.index} {op.type}"):
            if key:
                out.setdefault(key, op.index)
    return out


SHORT_DTYPE = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "float64": "fp64"}


def add_dtypes(by_layer: dict, graph) -> None:
    """Each row of an op with a float output gets `dtype`: the dtype of that output as the training
    graph types it (under mixed precision, float32 where autocast keeps it, the low dtype where it
    casts down; `graph` is the training graph's)."""
    order = _op_order(graph)
    for row in by_layer["rows"]:
        k = order.get(row["op"])
        if k is None:
            continue
        outs = [graph.operands[i].dtype for i in graph.operations[k].outputs if i >= 0]
        dt = next((SHORT_DTYPE[d] for d in outs if d in SHORT_DTYPE), None)
        if dt:
            row["dtype"] = dt


def last_forward_step(bl: BufferList) -> int:
    """The last step of the forward pass: of the leading run of forward steps (a rematerialized
    schedule runs forward steps again later, before backward needs their results)."""
    last = -1
    for s in bl.steps:
        if s.kind != "forward":
            break
        last = s.index
    return last


def per_layer(bl: BufferList, graph, tl: Timeline, extra_columns: dict | None = None) -> dict:
    """{"peak": {...}, "columns": [...], "rows": [{"op": owner, column: bytes, ...}, ...]}.

    Rows follow the graph's op order where the owner names an op, then first appearance.
    """
    order = _op_order(graph)
    fwd_end = last_forward_step(bl)
    at_peak = live_at_peak(bl)  # each buffer at its own time domain's peak
    rows: dict[str, dict] = {}
    first_seen: dict[str, int] = {}
    for pos, b in enumerate(bl.buffers):
        owner = b.owner or NO_OWNER
        row = rows.get(owner)
        if row is None:
            row = rows[owner] = {"op": owner, **{c: 0 for c in LAYER_COLUMNS}}
            first_seen[owner] = pos
        row[_BY_CATEGORY[b.category]] += b.size
        if b.category == "non-const" and b.last > fwd_end >= 0:
            row["kept_for_backward"] += b.size
        if pos in at_peak:
            row["at_peak"] += b.size
    extra_cols: list[str] = []
    for cols in (extra_columns or {}).values():
        for c in cols:
            if c not in extra_cols and c not in LAYER_COLUMNS:
                extra_cols.append(c)
    for owner, cols in (extra_columns or {}).items():
        row = rows.setdefault(owner, {"op": owner, **{c: 0 for c in LAYER_COLUMNS}})
        first_seen.setdefault(owner, len(bl.buffers))
        row.update({c: int(v) for c, v in cols.items()})
    for row in rows.values():
        for c in extra_cols:
            row.setdefault(c, 0)

    def key(owner):
        if owner == NO_OWNER:
            return (2, 0, 0)
        k = order.get(owner)
        return (0, k, 0) if k is not None else (1, first_seen[owner], 0)

    ordered = [rows[o] for o in sorted(rows, key=key)]
    top = max(ordered, key=lambda r: r["at_peak"], default=None)
    return {
        "columns": list(LAYER_COLUMNS) + extra_cols,
        "rows": ordered,
        "largest_at_peak": top["op"] if top and top["at_peak"] > 0 else None,
    }
