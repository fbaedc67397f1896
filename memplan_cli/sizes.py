"""Sizes given as text (`parse_size("64MiB")` -> 67108864) and the one parser of a memory budget
that every command taking `--budget` uses (analyze, verify, fit, sweep, and the API's `budget=`).

A leaf: the flags' parsing needs it below the commands and the API; `report/` formats sizes
(`report/units.human`) but parses none of its own except through here.
"""
from __future__ import annotations

import re
from fractions import Fraction

from memplan_cli.errors import ConfigError

_UNITS = {
    "": 1, "b": 1,
    "kb": 1000, "mb": 1000**2, "gb": 1000**3, "tb": 1000**4,
    "ki": 1024, "kib": 1024, "mi": 1024**2, "mib": 1024**2, "gi": 1024**3, "gib": 1024**3,
    "ti": 1024**4, "tib": 1024**4,
}
# a bare k / M / G / T is refused: SI to some, binary to others (and memplan's compact tables write
# M for MiB), so `--budget 64M` would be 64,000,000 B to one reader and 67,108,864 B to the next
_AMBIGUOUS = {"k": 1, "m": 2, "g": 3, "t": 4}
_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str) -> int:
    """Bytes from "1048576", "64MiB", "1.5 GB", "512KB" (SI for kB/MB/GB, binary for KiB/MiB/GiB and
    Ki/Mi/Gi; a bare k/M/G/T is refused as ambiguous).

    Bytes are whole: a fraction of a byte without a unit ("5.5") is refused; with a unit, a
    fraction of a byte is dropped ("1.1KiB" is 1126 B, never rounded up past what was given).
    Raises ValueError naming the text when it is not a size.
    """
    m = _SIZE_RE.match(text)
    if m and m.group(2).lower() in _AMBIGUOUS:
        n, u = m.group(1), m.group(2)
        raise ValueError(f"{text!r} is ambiguous: write {n}{u.upper()}B ({n} x 1000^{_AMBIGUOUS[u.lower()]} bytes) "
                         f"or {n}{u.upper()}iB ({n} x 1024^{_AMBIGUOUS[u.lower()]} bytes); memplan's own tables "
                         f"write {u.upper()} for {u.upper()}iB")
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


def parse_budget(budget) -> int:
    """A memory budget in bytes from an int or a size text ("192MiB"), or ConfigError (exit 2).

    A budget of 0 bytes (or one that rounds down to 0: "0.0001KiB") is bad input, not a budget
    that nothing fits: no training step runs in no memory, so the answer would be
    known before any search, and a 0 mostly comes from an empty or mistyped value. Every command
    answers it alike: one line, exit 2 (README, exit status)."""
    if isinstance(budget, bool) or not isinstance(budget, (int, str)):
        raise ConfigError(f"budget must be a size (bytes or text such as '192MiB'), got {budget!r}")
    try:
        limit = parse_size(budget) if isinstance(budget, str) else budget
    except ValueError as e:
        raise ConfigError.about("budget", f": {e}") from None
    if limit < 1:
        raise ConfigError.about("budget", f" must be > 0 bytes, got {budget!r}")
    return limit
