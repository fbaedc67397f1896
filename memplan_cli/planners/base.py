"""The planner interface and registry."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol, Sequence


@dataclass(frozen=True)
class Plan:
    offsets: tuple[int, ...]
    arena: int
    planner: str
    # "optimal" when arena is proven minimal (e.g. equals the lower bound); else "feasible"
    status: str = "feasible"
    seconds: float = 0.0


class Planner(Protocol):
    """Budgets count work (placements, search nodes) so that a plan never depends on timing;
    `time_limit` (seconds) is only for a user who asks for it, and replaces them by the clock.
    Searching planners (best, exact) also take `rounds`, their work budget."""

    def __call__(self, sizes: Sequence[int], firsts: Sequence[int], lasts: Sequence[int],
                 *, time_limit: float | None = None) -> Plan: ...


_REGISTRY: dict[str, Planner] = {}


def register(name: str) -> Callable[[Planner], Planner]:
    def deco(fn: Planner) -> Planner:
        _REGISTRY[name] = fn
        return fn
    return deco


def get_planner(name: str) -> Planner:
    import memplan_cli.planners.all  # noqa: F401  (registers every planner module)
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown planner {name!r}; known: {', '.join(sorted(_REGISTRY))}") from None


def planner_names() -> list[str]:
    import memplan_cli.planners.all  # noqa: F401
    return sorted(_REGISTRY)
