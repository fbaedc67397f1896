"""`--format csv`: one figure per row, `section,name,field,bytes`, so a CI script can `grep` a row
and a spreadsheet can pivot it. Integers only in the bytes column (percentages in diff rows are
written with two decimals)."""
from __future__ import annotations

import csv
import io

from memplan_cli.buffers import CATEGORIES
from memplan_cli.report.base import Reporter


def _write(rows) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    for r in rows:
        w.writerow(r)
    return buf.getvalue()


class CsvReporter(Reporter):
    name = "csv"

    def analysis(self, doc, opts):
        rows = [("section", "name", "field", "bytes")]
        for c in CATEGORIES:
            for f in ("naive", "planned"):
                rows.append(("category", c, f, doc["categories"][c][f]))
            rows.append(("category", c, "at_peak", doc["peak"]["categories"].get(c, 0)))
        for c, v in (doc.get("onert") or {}).get("categories", {}).items():
            rows.append(("category", c, "onert", v))
        for k, v in doc["totals"].items():
            rows.append(("total", k, "bytes", v))
        rows.append(("peak", doc["peak"]["op"] or str(doc["peak"]["step"]), "bytes", doc["peak"]["bytes"]))
        labels = doc.get("alloc_labels") or []
        for k, cap in enumerate(doc.get("alloc_lines", [])):
            rows.append(("alloc_line", labels[k] if k < len(labels) else f"line {k + 1}", str(k + 1), cap))
        for name, v in (doc.get("one_style") or {}).items():
            rows.append(("one_style", name, "bytes", v))
        if "by_layer" in doc:
            for r in doc["by_layer"]["rows"]:
                for col in doc["by_layer"]["columns"]:
                    rows.append(("layer", r["op"], col, r.get(col, 0)))
        return _write(rows)

    def diff(self, doc, opts):
        rows = [("section", "name", "old", "new", "delta", "percent", "status")]
        for r in doc["rows"]:
            pct = "" if r["percent"] is None else f"{r['percent']:.2f}"
            rows.append((r["section"], r["name"], _n(r["old"]), _n(r["new"]), _n(r["delta"]), pct, r["status"]))
        return _write(rows)

    def sweep(self, doc, opts):
        swept = doc["config"].get("swept_dim")  # --dim NAME=LIST: a column of NAME's sizes
        rows = [("profile", "batch_size", *((swept,) if swept else ()), "naive", "planned", "lower_bound", "fits")]
        for r in doc["rows"]:
            fits = "" if r.get("fits") is None else str(r["fits"]).lower()
            rows.append((r["profile"], r["batch_size"], *((r["dims"][swept],) if swept else ()), _n(r.get("naive")),
                         _n(r.get("planned")), _n(r.get("lower_bound")), fits))
        return _write(rows)

    def compare(self, doc, opts):
        from memplan_cli.report.compare import csv_rows  # lazy: `memplan analyze --by-layer -f csv` does not load it

        return _write(csv_rows(doc))


def _n(v):
    return "" if v is None else v
