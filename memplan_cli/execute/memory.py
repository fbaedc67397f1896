"""Where each tensor's bytes live during a verification run.

`Layout` is the plan under test: every memory-owning tensor (alias root) placed at an offset in one
pool's arena, with the interval the plan believes it is live over. `ArenaMemory` realises a layout as
one `numpy.uint8` buffer per pool and hands out typed views; `SeparateMemory` gives every tensor its own
allocation (the reference run). Both poison bytes with 0xFF (a NaN in every float type) so that a
read of memory nobody wrote, or of a buffer whose lifetime has ended, shows up as NaN.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

POISON = 0xFF


@dataclass(frozen=True)
class Placement:
    """One buffer of the plan: `size` bytes at `offset` in `pool`, live over steps [first, last]."""

    name: str
    pool: str
    offset: int
    size: int
    first: int
    last: int
    category: str = ""

    @property
    def end(self) -> int:
        return self.offset + self.size

    def overlaps(self, other: "Placement") -> bool:
        return self.pool == other.pool and self.offset < other.end and other.offset < self.end

    def live_at(self, step: int) -> bool:
        return self.first <= step <= self.last


@dataclass
class Layout:
    """A plan in executor terms: tensor root id -> Placement, and each pool's arena size."""

    placements: dict[int, Placement]
    arenas: dict[str, int]
    profile: str = ""
    # buffers of the plan no tensor maps to (reported, never an error: e.g. onert's unused buffers)
    unmapped: list[str] = field(default_factory=list)

    def neighbours(self, root: int) -> list[tuple[int, Placement]]:
        """Other placements sharing bytes with `root`'s."""
        p = self.placements[root]
        return [(r, q) for r, q in self.placements.items() if r != root and q.overlaps(p)]


def _typed_view(raw: np.ndarray, shape, dtype) -> np.ndarray:
    dt = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64)) if len(shape) else 1
    return raw[: n * dt.itemsize].view(dt).reshape(shape)


def _tensor_view(raw: np.ndarray, spec) -> np.ndarray:
    """A tensor over its bytes: a broadcast (`spec.stored`) is a read-only stride-0 view of the values
    it repeats, as kernels read PyTorch's `expand`."""
    if spec.stored is None:
        return _typed_view(raw, spec.shape, _np_dtype(spec.dtype))
    return np.broadcast_to(_typed_view(raw, spec.stored, _np_dtype(spec.dtype)), spec.shape)


class _Memory:
    """Typed views of tensors over raw byte storage; aliases share their root's bytes."""

    def __init__(self, tg):
        self.tg = tg
        self._views: dict[int, np.ndarray] = {}

    def raw(self, root: int) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def view(self, t: int) -> np.ndarray:
        v = self._views.get(t)
        if v is None:
            v = self._views[t] = _tensor_view(self.raw(self.tg.root(t)), self.tg.tensors[t])
        return v

    def storage(self, t: int) -> np.ndarray:
        """The values tensor t's bytes hold, writable: its view, or a broadcast's repeated values."""
        spec = self.tg.tensors[t]
        if spec.stored is None:
            return self.view(t)
        self.view(t)  # the reference memory allocates on first view
        return _typed_view(self._raw_of(t), spec.stored, _np_dtype(spec.dtype))

    def _raw_of(self, t: int) -> np.ndarray:
        return self.raw(self.tg.root(t))

    def poison(self, root: int) -> None:
        self.raw(root)[...] = POISON

    def is_poison(self, root: int) -> bool:
        r = self.raw(root)
        return bool(r.size) and bool(np.all(r == POISON))


class ArenaMemory(_Memory):
    """One byte buffer per pool, tensors as views at their planned offsets."""

    def __init__(self, tg, layout: Layout):
        super().__init__(tg)
        self.layout = layout
        self.arenas = {p: np.full(max(n, 1), POISON, dtype=np.uint8) for p, n in layout.arenas.items()}
        groups = tg.groups()
        for r, p in layout.placements.items():
            need = max(tg.tensors[m].nbytes for m in groups.get(r, [r]))
            if p.offset < 0 or p.offset + need > layout.arenas.get(p.pool, -1):
                raise ValueError(f"buffer {p.name} ({need} B at offset {p.offset}) does not fit pool "
                                 f"{p.pool!r} of {layout.arenas.get(p.pool)} B")
            if need > p.size:
                raise ValueError(f"buffer {p.name} holds {need} B but the plan gives it {p.size} B")

    def raw(self, root: int) -> np.ndarray:
        p = self.layout.placements[root]
        return self.arenas[p.pool][p.offset:p.offset + p.size]


class SeparateMemory(_Memory):
    """Every tensor in its own allocation, aliases included (a Reshape view is a copy here, an
    in-place update writes a fresh array): the reference the arena run must match, so a wrong alias
    shows up as well as a wrong offset or lifetime."""

    def __init__(self, tg):
        super().__init__(tg)
        self._raw: dict[int, np.ndarray] = {}

    def view(self, t: int) -> np.ndarray:
        v = self._views.get(t)
        if v is None:
            spec = self.tg.tensors[t]
            raw = self._raw[t] = np.full(spec.nbytes, POISON, dtype=np.uint8)
            v = self._views[t] = _tensor_view(raw, spec)
        return v

    def _raw_of(self, t: int) -> np.ndarray:
        return self._raw[t]

    @property
    def nbytes(self) -> int:
        return sum(r.size for r in self._raw.values())


def _np_dtype(name: str):
    if name == "bfloat16":  # NumPy has none: ml_dtypes' (a dependency of onnx), loaded only here
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    if name in ("int4", "uint4"):
        return np.int8 if name == "int4" else np.uint8
    return np.dtype(name)
