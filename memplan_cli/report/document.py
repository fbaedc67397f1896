"""The report document: every figure of an Analysis as plain JSON data (integers in bytes).

Every reporter renders this one document (plus, for the timeline, the buffer list), so the table,
the CSV and the JSON can never disagree. The document is deterministic: the same model and flags
give the same document (no timestamps, no timings, no absolute paths).
"""
from __future__ import annotations

import os

from memplan_cli.version import __version__
from memplan_cli.buffers import CATEGORIES
from memplan_cli.config import config_json
from memplan_cli.report.live import peak_summary, timeline

SCHEMA_VERSION = 1


def document_header(kind: str, model: dict | None = None, **fields) -> dict:
    """What every JSON document of memplan starts with: schema_version, kind, memplan_version; then
    `model` (`model_head`: the file's name and sha256, and what the document says of the model) when
    the document is about one model file; then `fields`, the document's own leading keys in order
    (its profile, its `config` ...). The one place these keys are written."""
    head = {"schema_version": SCHEMA_VERSION, "kind": kind, "memplan_version": __version__}
    if model is not None:
        head["model"] = model
    return {**head, **fields}


def model_head(path: str, sha256: str, **more) -> dict:
    """A document's `model` object: the file's name (never a path: documents are the same on any
    machine), its sha256, then `more` (format, op count, ...)."""
    return {"file": os.path.basename(path), "sha256": sha256, **more}


def config_dict(analysis, *, planner: str | None = None, profile_options: dict | None = None) -> dict:
    return {
        # the training setup (config.TRAINING_FLAGS); loss_outputs: the model outputs that carry a
        # loss (the step's loss is their sum), in the file's order
        **config_json(analysis.config, loss_outputs=getattr(analysis, "loss_outputs", None) or []),
        "planner": planner,
        # seconds, when the user gave --time-limit: the plans may then depend on the machine's
        # speed and load; null otherwise (budgets count work: the same input gives the same plan)
        "time_limit": getattr(analysis, "time_limit", None),
        "profile_options": {k: v for k, v in sorted((profile_options or {}).items()) if v is not None},
        "sources": dict(sorted(analysis.config.sources.items())),
    }


def normalise_alloc_lines(raw) -> tuple[list[str], list[int]]:
    """onert's ALLOC lines as (labels, capacities). A profile may give ints, (label, int) pairs or
    {"label"|"name": ..., "capacity"|"bytes": ...} dicts."""
    labels, caps = [], []
    for k, item in enumerate(raw or []):
        if isinstance(item, dict):
            label = item.get("label") or item.get("name") or f"line {k + 1}"
            cap = item.get("capacity", item.get("bytes"))
        elif isinstance(item, (tuple, list)):
            label, cap = item[0], item[1]
        else:
            label, cap = f"line {k + 1}", item
        labels.append(str(label))
        caps.append(int(cap))
    return labels, caps


def normalise_one_style(raw) -> dict[str, int]:
    """ONE's published grouping (non-const, trainable, ... extra tensors) as an ordered dict."""
    if not raw:
        return {}
    items = raw.items() if isinstance(raw, dict) else raw
    return {str(k): int(v) for k, v in items}


def _plain(value):
    """JSON-safe copy of a profile's free-form figure (ints stay ints; tuples become lists)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (bool, str)) or value is None:
        return value
    if isinstance(value, int) or hasattr(value, "__index__"):
        return int(value)
    if isinstance(value, float):
        return value
    return str(value)


def pool_label(p) -> str:
    """A pool's ALLOC line label: the buffer's name for a one-buffer kernel pool, else the pool's name."""
    if len(p.buffers) == 1 and p.pool.category == "extra":
        return p.buffers[0].name
    return p.pool.name


_KNOWN_EXTRAS = ("alloc_lines", "one_style", "per_layer_extra", "flops")


def _layer_columns(analysis) -> dict | None:
    """The profile's per-layer columns; for a profile built from a training graph that gives none,
    the ColossalAI-style figures read off that graph (report/colossal.py)."""
    cols = analysis.extras.get("per_layer_extra")
    if cols is None and analysis.buffers.training_graph is not None:
        from memplan_cli.report.colossal import per_layer_extra

        cols = per_layer_extra(analysis.buffers.training_graph)
    return cols


def model_dict(path: str, sha256: str, graph) -> dict:
    """The report's `model` object: file name, hash, format, op count, the input's batch."""
    return model_head(path, sha256, format=getattr(graph, "source_format", "") or "",
                      operations=len(getattr(graph, "operations", None) or []),
                      batch_size=graph.input_batch() if graph is not None else None)


def build_document(analysis, *, planner: str | None = None, profile_options: dict | None = None,
                   by_layer: bool = False, remat: dict | None = None) -> dict:
    """The JSON report of `analysis` (see schemas/analysis.schema.json); `remat`: the remat section of
    a budgeted analysis (remat/section.py), last."""
    from memplan_cli.report.layers import add_dtypes, per_layer  # lazy: `memplan compare` does not load it

    bl = analysis.buffers
    naive = analysis.naive_by_category
    planned = analysis.planned_by_category
    tl = timeline(bl)
    graph = analysis.graph
    doc: dict = {
        **document_header("analysis", model_dict(analysis.model_path, analysis.model_sha256, graph),
                          profile=analysis.profile,
                          config=config_dict(analysis, planner=planner, profile_options=profile_options)),
        "categories": {c: {"planned": int(planned[c]), "naive": int(naive[c])} for c in CATEGORIES},
        "naive_means": bl.naive_means,
        "totals": {
            "naive": int(analysis.naive_total),
            "folded": int(bl.folded_total()),
            "planned": int(analysis.planned_total),
            "lower_bound": int(analysis.lower_bound),
        },
        # per time domain, summed (onert's pools each count their own events): see report.live
        "peak": peak_summary(bl, graph),
        "pools": [
            {
                "name": p.pool.name,
                "category": p.pool.category,
                "planner": p.plan.planner,
                "status": p.plan.status,
                "buffers": len(p.buffers),
                "arena": int(p.plan.arena),
                "lower_bound": int(p.lower_bound),
            }
            for p in analysis.pools
        ],
        "steps": len(bl.steps),
        "buffers": len(bl.buffers),
        # no weight gets a gradient (--trainable-ops none, everything frozen): forward pass and loss only
        "forward_only": not any(b.category == "gradient" for b in bl.buffers),
    }
    tg = bl.training_graph
    if tg is not None and tg.frozen_weights is not None:
        # weights the setup would train that get no gradient, with the reason (outputs without a loss)
        doc["frozen_weights"] = [dict(w) for w in tg.frozen_weights]
    params = parameters_dict(analysis)
    if params is not None:
        doc["parameters"] = params
    sized = data_sized_dict(graph)
    if sized is not None:
        doc["data_sized"] = sized
    on = analysis.onert
    if on is not None:
        doc["onert"] = {"available": on.available, "reason": on.reason}
        if on.available:
            doc["totals"]["onert"] = int(on.total)
            doc["onert"]["categories"] = {c: int((on.by_category or {}).get(c, 0)) for c in CATEGORIES}
    ex = analysis.extras
    if "alloc_lines" in ex:
        labels, caps = normalise_alloc_lines(ex["alloc_lines"])
        if all(lab.startswith("line ") for lab in labels) and len(caps) == len(analysis.pools):
            labels = [pool_label(p) for p in analysis.pools]  # one ALLOC line per pool, in pool order
        doc["alloc_lines"] = caps
        doc["alloc_labels"] = labels
    if "one_style" in ex:
        doc["one_style"] = normalise_one_style(ex["one_style"])
    rest = {k: _plain(v) for k, v in sorted(ex.items()) if k not in _KNOWN_EXTRAS}
    if rest:
        doc["figures"] = rest
    fl = ex.get("flops")
    if fl is not None:
        doc["flops"] = {k: _plain(v) for k, v in fl.items() if k != "by_op"}
    if by_layer:
        doc["by_layer"] = per_layer(bl, graph, tl, _layer_columns(analysis))
        tg = bl.training_graph
        if tg is not None and getattr(analysis.config, "mixed", False):  # dtypes differ op to op
            add_dtypes(doc["by_layer"], tg.graph)
        if fl is not None and fl.get("available"):
            add_flops_columns(doc["by_layer"], fl["by_op"])
    if remat is not None:
        doc["remat"] = remat
    return doc


def data_sized_dict(graph) -> dict | None:
    """Sizes the data decides, taken under a stated assumption (loaders/data_sized.py): the rule, each
    named dim with its size and whether --dim set it, and the tensors whose shapes follow from them."""
    sized = (getattr(graph, "metadata", None) or {}).get("data_sized")
    if not sized:
        return None
    return {"rule": sized["rule"],
            "dims": [{k: d[k] for k in ("name", "size", "set_by", "op", "tensor", "rule", "bound") if k in d}
                     for d in sized["dims"]],
            "tensors": len(dict.fromkeys(sized["tensors"]))}


def parameters_dict(analysis) -> dict | None:
    """Which float constants train as parameters by the file's naming rule (loaders/params.py):
    `assumed_trainable` names those that get a gradient although the file could not tell whether
    they are parameters of the source model; `not_parameters` counts the computed ones left frozen;
    `merged_normalizations` lists the normalisations whose scale and shift a converter merged into
    the next layer's trained weight (no gradient of their own)."""
    graph = analysis.graph
    rule = (getattr(graph, "metadata", None) or {}).get("parameter_rule")
    if rule is None:
        return None
    tg = analysis.buffers.training_graph
    trained = set(tg.grad) if tg is not None else None
    floats = [o for o in graph.operands if o.is_const and len(o.shape) > 0 and o.dtype.startswith(("float", "bfloat"))]
    assumed = [o.name for o in floats if o.assumed and not o.computed and (trained is None or o.index in trained)]
    out = {"rule": rule, "assumed_trainable": assumed, "not_parameters": sum(1 for o in floats if o.computed)}
    computed_from = _assumed_from(graph, [o for o in floats if o.name in set(assumed)])
    if computed_from:
        out["assumed_from"] = computed_from
    fixed = list((graph.metadata or {}).get("fixed_row_tables", ())) if assumed else []
    if fixed:
        out["read_at_fixed_rows"] = fixed
    merged = [{"norm": m["norm"], "op": m["op"], "into": list(m["into"]),
               "weights": [graph.operands[w].name for w in m["weights"]]}
              for m in graph.metadata.get("merged_parameters", ())
              if trained is None or any(w in trained for w in m["weights"])]
    if merged:
        out["merged_normalizations"] = merged
    return out


def _assumed_from(graph, assumed: list) -> dict:
    """{assumed weight: the parameters it was computed from}: a constant the load folded from the file's
    named weights (`Operand.sources`: a TorchScript lookup of a table at fixed positions), or one whose
    record (`pkg.onnxscript.optimizer.folded_from`, its own or that of the constant it was folded from)
    names parameters of the dynamo graph signature, which the rules could not tell it is (a frozen
    position table's rows at fixed positions: RoFormer's `sin_pos` / `cos_pos`). Names them so the user
    can tell what trains; the file does not say whether those parameters train."""
    folded, params = graph.folded_from(), graph.signature_parameters()
    out = {}
    for o in assumed:
        found = set()
        for s in o.sources or (o.name,):
            if s in folded:
                found.update(t for t in folded[s] if t in params)
            elif s != o.name:
                found.add(s)  # a weight of the file's own the load folded this from
        if found:
            out[o.name] = sorted(found)
    return out


FLOPS_COLUMNS = ("fwd_flops", "bwd_flops")


def add_flops_columns(layers: dict, by_op: dict) -> None:
    """Each per-layer row gains its op's forward and backward FLOPs (0 for a row naming no op)."""
    layers["columns"] = list(layers["columns"]) + list(FLOPS_COLUMNS)
    for row in layers["rows"]:
        f = by_op.get(row["op"], {})
        row["fwd_flops"] = int(f.get("forward", 0))
        row["bwd_flops"] = int(f.get("backward", 0))
