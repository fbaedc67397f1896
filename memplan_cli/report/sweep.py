"""Batch sweeps: totals per batch size for each profile, and the largest batch under a budget."""
from __future__ import annotations

from typing import Callable

from memplan_cli.errors import ConfigError
from memplan_cli.report.document import document_header

# doubling stops here when searching for the largest batch under a budget
MAX_SEARCH_BATCH = 1 << 16


MAX_SWEEP_BATCHES = 1024


def parse_batch_sizes(text: str) -> list[int]:
    """"1,2,4,8" -> [1, 2, 4, 8] (sorted, unique); ranges "1-4" allowed."""
    out: set[int] = set()
    try:
        for part in text.split(","):
            part = part.strip()
            if not part:
                continue
            if "-" in part:
                a, b = part.split("-", 1)
                if int(b) - int(a) >= MAX_SWEEP_BATCHES:
                    raise ConfigError.about("batch_sizes", f" {text!r}: a range of more than {MAX_SWEEP_BATCHES} "
                                            "batch sizes (each is one analysis)")
                out.update(range(int(a), int(b) + 1))
            else:
                out.add(int(part))
    except ValueError:
        raise ConfigError.about("batch_sizes", f" {text!r}: expected a list like 1,2,4,8 or a range like 1-16") from None
    if not out:
        raise ConfigError.about("batch_sizes", f" {text!r} names no batch size")
    if min(out) < 1:
        raise ConfigError.about("batch_sizes", f" {text!r}: batch sizes must be >= 1")
    return sorted(out)


def search_largest(fits: Callable[[int], bool], limit: int = MAX_SEARCH_BATCH) -> tuple[int | None, list[int]]:
    """The largest batch b with fits(b), assuming memory grows with the batch: double from 1 until
    a batch does not fit, then bisect. Returns (answer or None, every batch tried in order)."""
    tried = []

    def probe(b):
        tried.append(b)
        return fits(b)

    if not probe(1):
        return None, tried
    lo, hi = 1, None
    b = 2
    while b <= limit:
        if probe(b):
            lo = b
            b *= 2
        else:
            hi = b
            break
    if hi is None:
        return lo, tried  # fits up to the search limit
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if probe(mid):
            lo = mid
        else:
            hi = mid
    return lo, tried


def swept_value(row: dict, swept: str | None) -> int:
    """The value a sweep row was analysed at: its batch, or the swept dimension's size (--dim NAME=LIST)."""
    return row["dims"][swept] if swept else row["batch_size"]


def sweep_document(model: dict, config: dict, profiles: list[str], rows: list[dict], budget: int | None,
                   swept: str | None = None) -> dict:
    """rows: {"profile", "batch_size", "naive", "planned", "lower_bound", "error"} (figures None on error),
    and "dims" when a symbolic dimension `swept` is swept instead of the batch."""
    rows = sorted(rows, key=lambda r: (profiles.index(r["profile"]), swept_value(r, swept)))
    largest: dict[str, int | None] = {}
    for r in rows:
        if budget is not None:
            r["fits"] = None if r["planned"] is None else r["planned"] <= budget
    if budget is not None:
        for p in profiles:
            ok = [swept_value(r, swept) for r in rows if r["profile"] == p and r.get("fits")]
            largest[p] = max(ok) if ok else None
    status = "ok"
    if budget is not None and largest.get(profiles[0]) is None:
        status = "over_budget"
    return {
        **document_header("sweep", model, config=config),
        "profiles": profiles,
        "budget": budget,
        "largest_fitting": largest if budget is not None else {},
        "status": status,
        "rows": rows,
    }
