"""A one-line picture of live memory over the steps: `▁▂▄▆█▆▃▁`."""
from __future__ import annotations

BARS = "▁▂▃▄▅▆▇█"


def sparkline(values, width: int = 60) -> str:
    """`values` squeezed into at most `width` characters (each the max of its bucket)."""
    vals = [int(v) for v in values]
    if not vals:
        return ""
    if len(vals) > width:
        n = len(vals)
        vals = [max(vals[i * n // width:max((i + 1) * n // width, i * n // width + 1)]) for i in range(width)]
    top = max(vals)
    if top <= 0:
        return BARS[0] * len(vals)
    return "".join(BARS[min(len(BARS) - 1, v * len(BARS) // (top + 1))] if v < top else BARS[-1] for v in vals)
