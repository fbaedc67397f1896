"""The planner interface and registry."""
from __future__ import annotations

from dataclasses import dataclass
import importlib
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


# planner modules: the runtimes' (pure Python, cheap to import) and the searches (compiled kernels)
LIGHT = ("naive", "onert", "singa", "nntrainer")
SEARCH = ("greedy", "exact", "best")


def load_modules(names) -> None:
    for n in names:
        importlib.import_module(f"memplan_cli.planners.{n}")


def get_planner(name: str) -> Planner:
    if name not in _REGISTRY:  # the light modules first: the onert profile never loads the searches
        load_modules(LIGHT)
        if name not in _REGISTRY:
            load_modules(SEARCH)
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown planner {name!r}; known: {', '.join(sorted(_REGISTRY))}") from None


def planner_names() -> list[str]:
    load_modules(LIGHT + SEARCH)
    return sorted(_REGISTRY)
