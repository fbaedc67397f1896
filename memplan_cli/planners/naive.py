"""naive: every buffer its own bytes, laid out one after another in list order."""
from __future__ import annotations

from memplan_cli.planners.base import Plan, register


@register("naive")
def plan_naive(sizes, firsts, lasts, *, time_limit=None) -> Plan:
    offsets, top = [], 0
    for s in sizes:
        offsets.append(top)
        top += s
    return Plan(tuple(offsets), top, "naive")
