"""The compare document (schemas/compare.schema.json) and its table and CSV views.

One column per system (naive, onert, nntrainer, singa, torch, memplan), one row per category, then the
totals and their ratios to memplan's plan and to the lower bound (the peak of live bytes under
memplan's lifetimes). Every figure is an integer number of bytes; ratios are floats rounded to six
decimals; an unavailable column has null figures and a reason.
"""
from __future__ import annotations

from memplan_cli.buffers import CATEGORIES
from memplan_cli.report.document import _plain, config_dict, document_header, model_dict


def _r(x: float | None) -> float | None:
    return None if x is None else round(float(x), 6)


# one line per system, for the JSON report (reports know systems by profile name only)
DESCRIPTIONS = {
    "naive": "every tensor of memplan's training step its own bytes: no reuse, no in-place updates, no views",
    "onert": "ONE onert train backend: one arena per category, its own planner",
    "nntrainer": "nntrainer: its lifespans and execution orders, tensor and weight pools",
    "singa": "SINGA graph: no plan, online first-fit pool (its high-water mark)",
    "torch": "PyTorch eager on CPU: what autograd saves, .grad held to optimizer.step, its peak of live bytes",
    "memplan": "memplan: shortest lifetimes, one arena, offline plan",
}

# how each column's figures were checked: each profile's own `checked` line (a profile named after a
# real system says whether it was matched against that system or only modelled from it)
NAIVE_CHECKED = "definition (no checking needed)"


def compare_document(cmp) -> dict:
    """The JSON document of a `comparison.Comparison`."""
    graph = cmp.graph
    columns = {}
    for col in cmp.columns:
        c = {
            "available": col.available,
            "reason": col.reason,
            "description": DESCRIPTIONS.get(col.profile, ""),
            "checked": NAIVE_CHECKED if col.profile == "naive" else col.checked,
            "planners": list(col.planners),
            "categories": {k: int(col.by_category.get(k, 0)) for k in CATEGORIES} if col.available else None,
            "total": col.total,
            "lower_bound": col.lower_bound,
            "ratio_to_memplan": _r(cmp.ratio_to_memplan(col)),
            "ratio_to_lower_bound": _r(cmp.ratio_to_lower_bound(col)),
            "over_own_lower_bound": _r(col.total / col.lower_bound) if col.available and col.lower_bound else None,
        }
        if "singa" in col.extras:
            c["figures"] = {"singa": _plain(col.extras["singa"])}
        columns[col.profile] = c
    return {
        **document_header("compare", model_dict(cmp.model_path, cmp.model_sha256, graph),
                          config=config_dict(cmp, profile_options=cmp.onert_options)),
        "profiles": [c.profile for c in cmp.columns],
        "lower_bound": int(cmp.lower_bound),
        "columns": columns,
    }


# ---- views -----------------------------------------------------------------------------------

def csv_rows(doc: dict) -> list[tuple]:
    """`section,name,profile,value`: bytes as integers, ratios with six decimals, empty when n/a."""
    def v(x):
        return "" if x is None else x

    rows = [("section", "name", "profile", "value")]
    for p in doc["profiles"]:
        c = doc["columns"][p]
        for k in CATEGORIES:
            rows.append(("category", k, p, v(c["categories"][k] if c["available"] else None)))
        rows.append(("total", "total", p, v(c["total"])))
        rows.append(("total", "own_lower_bound", p, v(c["lower_bound"])))
        rows.append(("ratio", "to_memplan", p, "" if c["ratio_to_memplan"] is None else f"{c['ratio_to_memplan']:.6f}"))
        rows.append(("ratio", "to_lower_bound", p,
                     "" if c["ratio_to_lower_bound"] is None else f"{c['ratio_to_lower_bound']:.6f}"))
        if not c["available"]:
            rows.append(("unavailable", c["reason"], p, ""))
    rows.append(("total", "lower_bound", "memplan", doc["lower_bound"]))
    return rows
