"""Byte figures for people: `human(12345678)` -> "11.77 MiB" (sizes given as text are parsed by
memplan_cli/sizes.py).

Figures stay exact integers everywhere else; units exist only in text views and in flags.
"""
from __future__ import annotations


def human(n: int | None) -> str:
    """Binary units with two decimals (B below 1 KiB). None -> "n/a"."""
    if n is None:
        return "n/a"
    sign = "-" if n < 0 else ""
    v = abs(n)
    if v < 1024:
        return f"{sign}{v} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        v /= 1024
        if v < 1024 or unit == "TiB":
            return f"{sign}{v:.2f} {unit}"
    raise AssertionError("unreachable")


def percent(new: int, old: int) -> float | None:
    """Relative change in percent; None when old is 0 (undefined)."""
    if old == 0:
        return None if new != 0 else 0.0
    return (new - old) * 100.0 / old
