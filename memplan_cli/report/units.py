"""Byte figures for people: `human(12345678)` -> "11.77 MiB"; `parse_size("64MiB")` -> 67108864.

Figures stay exact integers everywhere else; units exist only in text views and in flags.
"""
from __future__ import annotations

import re

_UNITS = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3, "gb": 1000**3, "t": 1000**4, "tb": 1000**4,
    "ki": 1024, "kib": 1024, "mi": 1024**2, "mib": 1024**2, "gi": 1024**3, "gib": 1024**3,
    "ti": 1024**4, "tib": 1024**4,
}
_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([a-zA-Z]*)\s*$")


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


def parse_size(text: str) -> int:
    """Bytes from "1048576", "64MiB", "1.5 GB", "512k" (SI for k/M/G, binary for Ki/Mi/Gi).

    Bytes are whole: a fraction of a byte without a unit ("5.5") is refused; with a unit, a
    fraction of a byte is dropped ("1.1KiB" is 1126 B, never rounded up past what was given).
    Raises ValueError naming the text when it is not a size.
    """
    from fractions import Fraction

    m = _SIZE_RE.match(text)
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"{text!r} is not a size (examples: 1048576, 64MiB, 1.5GB)")
    unit = _UNITS[m.group(2).lower()]
    if len(m.group(1)) > 40:  # 2^80 has 25 digits; a longer number is refused before it is parsed
        raise ValueError(f"{text[:40]!r}... is too large a size")
    value = Fraction(m.group(1)) * unit
    if unit == 1 and value.denominator != 1:
        raise ValueError(f"{text!r} is not a whole number of bytes")
    if value >= 2**80:  # no memory is that large; a float of it would overflow downstream
        raise ValueError(f"{text!r} is too large a size")
    return int(value)  # exact, rounded down


def percent(new: int, old: int) -> float | None:
    """Relative change in percent; None when old is 0 (undefined)."""
    if old == 0:
        return None if new != 0 else 0.0
    return (new - old) * 100.0 / old
