"""The buffer list: the narrow waist between training-graph construction and planning/reporting.

Passes and profiles produce a `BufferList`; planners see only (size, first, last); reports see
only buffers, steps and pools. Nothing here knows about models or file formats.
"""
from __future__ import annotations

from dataclasses import dataclass, field

# ONE's memory categories (ALLOC table rows), in the order memplan prints them.
CATEGORIES = ("non-const", "trainable", "back-prop", "gradient", "opt-variable", "disposable", "extra")

# nntrainer's four-part execution order; forward steps come first, then per op in reverse.
STEP_KINDS = ("forward", "calcGradient", "calcDerivative", "applyGradient")


@dataclass(frozen=True, slots=True)
class Step:
    """One step of the execution order. `op` is the op index in the training graph (-1: none)."""

    index: int
    kind: str
    op: int
    label: str = ""


@dataclass(frozen=True, slots=True)
class Buffer:
    """One memory request: `size` bytes live over steps [first, last], both inclusive.

    `size` is what the planner places (alignment already applied by the profile); `nbytes` is the
    tensor's own byte size. Buffers of one `pool` share one arena and are planned together.

    `name` is for display. `key` is the buffer's identity (what it holds and in which role, e.g.
    `back-prop:o12:k7`): schedule checks and verify match buffers to tensors by it, so two tensors a
    model names alike stay apart. A profile that sets no key falls back to the name (`ident`).
    """

    name: str
    category: str
    size: int
    first: int
    last: int
    owner: str = ""
    pool: str = "arena"
    nbytes: int | None = None
    key: str = ""

    @property
    def ident(self) -> str:
        return self.key or self.name

    def __post_init__(self):
        if self.category not in CATEGORIES:
            raise ValueError(f"unknown category {self.category!r}")
        if self.first > self.last:
            raise ValueError(f"buffer {self.name}: first step {self.first} > last step {self.last}")
        if self.size < 0:
            raise ValueError(f"buffer {self.name}: negative size")


@dataclass(frozen=True)
class Pool:
    """An arena: the buffers with this `name` are planned together by `planner` (a registry name).

    `category` names the ALLOC row the pool's capacity is reported under. onert has one pool per
    category plus one per kernel-private buffer; memplan's own profile has a single pool.

    `domain` names the pool's time axis. Pools of one domain count the same steps, so their buffers
    can be live at the same time; pools of different domains count time apart (onert: each category
    its own claim/release events), so reports take peaks, "live at peak" and lower bounds per domain
    and add them up, never across domains.
    """

    name: str
    category: str
    planner: str
    domain: str = "steps"


NAIVE_BUFFERS = "every buffer its own bytes"
NAIVE_TENSORS = "every tensor of the training step its own bytes: no reuse, no in-place updates, no views"


@dataclass
class BufferList:
    buffers: list[Buffer]
    steps: list[Step]
    pools: list[Pool] = field(default_factory=lambda: [Pool("arena", "non-const", "best")])
    # free-form facts for reports (profile name, configuration echo); never read by planners
    info: dict = field(default_factory=dict)
    # bytes per category with every tensor its own memory, when the profile folds several tensors
    # into one buffer (in-place updates, views); None: every buffer is one tensor
    naive: dict[str, int] | None = None
    # what "naive" counts for this profile, one line for reports
    naive_means: str = NAIVE_BUFFERS
    # the training step the buffers come from (passes' TrainingGraph), when the profile built one:
    # reports read which weights train, the per-layer figures and the FLOPs off it; never serialised,
    # never read by planners
    training_graph: object = field(default=None, repr=False, compare=False)
    # what a profile keeps from its build for its own `figures` hook (torch: the per-layer columns,
    # each buffer's part, the rules' coverage); never serialised as is, never read by planners
    profile_data: dict = field(default_factory=dict, repr=False, compare=False)

    def in_pool(self, pool: str) -> list[Buffer]:
        return [b for b in self.buffers if b.pool == pool]

    def by_pool(self) -> dict[str, list[Buffer]]:
        """Every pool's buffers (in list order), in one pass: onert has a pool per kernel buffer."""
        out: dict[str, list[Buffer]] = {p.name: [] for p in self.pools}
        for b in self.buffers:
            out.setdefault(b.pool, []).append(b)
        return out

    def domains(self) -> list[tuple[str, list[Buffer]]]:
        """(time domain, its buffers) in pool order; a buffer of no listed pool counts the steps."""
        of = {p.name: p.domain for p in self.pools}
        out: dict[str, list[Buffer]] = {p.domain: [] for p in self.pools}
        for b in self.buffers:
            out.setdefault(of.get(b.pool, "steps"), []).append(b)
        return list(out.items())

    def naive_by_category(self) -> dict[str, int]:
        """Naive per category: `naive` when the profile gave it (every tensor its own bytes, with
        no reuse, no in-place, no views), else every buffer its own bytes. `naive_means` says which."""
        if self.naive is not None:
            return {c: int(self.naive.get(c, 0)) for c in CATEGORIES}
        out = {c: 0 for c in CATEGORIES}
        for b in self.buffers:
            out[b.category] += b.size
        return out

    def naive_total(self) -> int:
        return sum(self.naive_by_category().values())

    def folded_total(self) -> int:
        """What in-place updates and views save: naive minus every buffer its own bytes."""
        return self.naive_total() - sum(b.size for b in self.buffers)
