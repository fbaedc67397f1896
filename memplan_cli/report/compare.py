"""The compare document (schemas/compare.schema.json) and its table and CSV views.

One column per system (naive, onert, nntrainer, singa, torch, memplan), one row per category, then the
totals and their ratios to memplan's plan and to the lower bound (the peak of live bytes under
memplan's lifetimes). Every figure is an integer number of bytes; ratios are floats rounded to six
decimals; an unavailable column has null figures and a reason.
"""
from __future__ import annotations


from memplan_cli import __version__
from memplan_cli.buffers import CATEGORIES
from memplan_cli.report.units import human

SCHEMA_VERSION = 1


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

# how each column's figures were checked: a profile named after a real system says whether it was
# matched against that system or only modelled from its source
CHECKED = {
    "naive": "definition (no checking needed)",
    "onert": "byte-exact against onert 0.1.0's ALLOC lines (benchmarks/onert_match.py, tests/onert/)",
    "nntrainer": ("modelled from nntrainer's source, not matched against the library: on the mnist "
                  "sample its real tensor pool was measured 1.24-2.46x smaller (issue 18)"),
    "singa": "modelled from SINGA's source, not matched against the library",
    "torch": ("matched against torch 2.14's CPU allocator peak on a zoo of exported modules "
              "(devtools/torch_oracle.py, docs/torchprof.md)"),
    "memplan": "proved by `memplan verify` (a step run inside the plan)",
}


def compare_document(cmp) -> dict:
    """The JSON document of a `comparison.Comparison`."""
    from memplan_cli.report.document import _plain, config_dict, model_dict

    graph = cmp.graph
    columns = {}
    for col in cmp.columns:
        c = {
            "available": col.available,
            "reason": col.reason,
            "description": DESCRIPTIONS.get(col.profile, ""),
            "checked": CHECKED.get(col.profile, ""),
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
        "schema_version": SCHEMA_VERSION,
        "kind": "compare",
        "memplan_version": __version__,
        "model": model_dict(cmp.model_path, cmp.model_sha256, graph),
        "config": config_dict(cmp, profile_options=cmp.onert_options),
        "profiles": [c.profile for c in cmp.columns],
        "lower_bound": int(cmp.lower_bound),
        "columns": columns,
    }


# ---- views -----------------------------------------------------------------------------------

def _ratio(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f} x"


def quiet_line(doc: dict) -> str:
    parts = []
    for p in doc["profiles"]:
        t = doc["columns"][p]["total"]
        parts.append(f"{p} {t} B" if t is not None else f"{p} n/a")
    return f"{doc['model']['file']}: " + ", ".join(parts) + f", lower bound {doc['lower_bound']} B\n"


def render_table(doc: dict, opts) -> str:
    from rich.table import Table
    from rich.text import Text

    from memplan_cli.report.table import LABELS, _config_line, _console, fig, time_limit_note

    if opts.verbosity <= -1:
        return ""
    if opts.verbosity == 0:
        return quiet_line(doc)
    exact = opts.verbosity >= 2
    cell = fig if exact else human
    con = _console(opts)
    line = _config_line({**doc, "profile": "all"}).replace(" · profile all", "")
    con.print(Text(line, style="bold"))
    if time_limit_note(doc):
        con.print(Text(f"note: {time_limit_note(doc)}", style="yellow"))
    profiles = doc["profiles"]
    cols = doc["columns"]
    table = Table(header_style="bold")
    table.add_column("category")
    for p in profiles:
        table.add_column(p, justify="right", style="bold green" if p == "memplan" else None)
    for c in CATEGORIES:
        table.add_row(LABELS[c], *(cell(cols[p]["categories"][c]) if cols[p]["available"] else "n/a"
                                   for p in profiles))
    table.add_section()
    table.add_row(Text("total", style="bold"), *(Text(cell(cols[p]["total"]), style="bold") for p in profiles))
    table.add_row("own lower bound", *(cell(cols[p]["lower_bound"]) if cols[p]["lower_bound"] is not None else "-"
                                       for p in profiles))
    table.add_row("× memplan plan", *(_ratio(cols[p]["ratio_to_memplan"]) for p in profiles))
    table.add_row("× lower bound", *(_ratio(cols[p]["ratio_to_lower_bound"]) for p in profiles))
    con.print(table)
    lb = doc["lower_bound"]
    con.print(f"lower bound: {lb:,d} B ({human(lb)}), the peak of live bytes under memplan's lifetimes; "
              "own lower bound: each system's own pools and lifetimes, perfectly placed")
    for p in profiles:
        c = cols[p]
        if not c["available"]:
            con.print(Text(f"{p}: n/a ({c['reason']})", style="yellow"))
    for p in profiles:
        c = cols[p]
        if c["available"] and c.get("checked", "").startswith("modelled"):
            con.print(Text(f"{p}: {c['checked']}", style="dim"))
    s = (cols.get("singa") or {}).get("figures", {}).get("singa")
    if s:
        con.print(f"singa pool: high-water {human(s['high_water'])}, fragmentation {s['fragmentation']:.4f} "
                  f"(high-water / its lower bound, {human(s['lost_bytes'])} lost to holes)")
    if exact:
        for p in profiles:
            c = cols[p]
            planners = f" [planner {', '.join(c['planners'])}]" if c["planners"] else ""
            con.print(Text(f"{p}: {c['description']}{planners}", style="dim"))
    return con.file.getvalue()


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
