"""Run one training step inside a planned arena and, in lockstep, with one allocation per tensor.

The two runs share their inputs and initial weights (seeded random; model weight bytes are never
read). At every step the executor
1. checks that every tensor the step touches lies in a buffer the plan keeps live at that step,
2. checks that every tensor the step reads still holds, in the arena, what the reference holds
   (a buffer overwritten by a neighbour, or poisoned when its planned lifetime ended, fails here),
3. runs the step's kernel on both memories, then compares what the step wrote,
4. poisons (fills with 0xFF, a NaN) every arena buffer whose planned lifetime ends at the step.
Values from outside (inputs, label, weights) are written into both memories right before their first
use. At the end it compares the loss and every updated weight. The first failure stops the run and
is reported with the step and the buffers involved. `_LockstepRun` has one method per check.
"""
from __future__ import annotations

import time
import zlib
from dataclasses import dataclass, field

import numpy as np

from memplan_cli.execute.blas import blas_threads
from memplan_cli.execute.memory import ArenaMemory, Layout, SeparateMemory
from memplan_cli.execute.ops import AccessError, StepContext, UnsupportedKernel, is_float, run_step, seeded_source

SOURCE_ROLES = ("input", "label", "weight", "frozen-weight", "constant", "opt-state")


class VerifyFailure(Exception):
    def __init__(self, message: str, step: int | None = None, buffers: list[str] | None = None):
        super().__init__(message)
        self.step = step
        self.buffers = buffers or []


@dataclass
class VerifyResult:
    passed: bool
    steps: int
    steps_run: int
    compared: int  # tensor comparisons made
    max_diff: float
    max_diff_at: str
    loss: tuple[float, float] | None  # (arena, reference)
    weights_updated: int
    message: str = ""
    failed_step: int | None = None
    buffers: list[str] = field(default_factory=list)
    seconds: float = 0.0
    arena_bytes: int = 0
    reference_bytes: int = 0
    updated: dict = field(default_factory=dict)  # weight name -> its value after the step (arena run)
    frozen_unchanged: int = 0  # weights no step updates, checked bit-identical before and after
    # (step, buffer, buffer): placements of one pool sharing bytes while both are live, earliest first
    conflicts: list = field(default_factory=list)
    # ops without a reference kernel, outside the backward region, run as seeded sources (ops.seeded_source)
    sources: list = field(default_factory=list)


def _diff(a: np.ndarray, b: np.ndarray) -> float:
    """Largest absolute difference; inf when NaN patterns differ or a value is NaN in one run only."""
    if a.dtype.kind in "iub":
        return 0.0 if np.array_equal(a, b) else float(np.max(np.abs(a.astype(np.int64) - b.astype(np.int64))))
    an, bn = np.isnan(a), np.isnan(b)
    if an.any() or bn.any():
        if not np.array_equal(an, bn):
            return float("inf")
        a, b = a[~an], b[~bn]
    if a.size == 0:
        return 0.0
    a, b = a.astype(np.float64), b.astype(np.float64)
    with np.errstate(invalid="ignore"):  # inf - inf: equal infinities differ by 0
        d = np.where(a == b, 0.0, np.abs(a - b))
    return float(np.nan_to_num(d, nan=np.inf).max())


def _scale_of(arrays) -> float:
    """The largest finite magnitude among float arrays (0 for none)."""
    out = 0.0
    for a in arrays:
        if not is_float(a) or a.size == 0:
            continue
        m = np.abs(a)
        m = m[np.isfinite(m)]
        if m.size:
            out = max(out, float(m.max()))
    return out


class _Inputs:
    """Seeded random data for every tensor whose value comes from outside the step, unless `feeds`
    gives it by tensor name (an input, the label, a weight: used to compare with a real runtime)."""

    def __init__(self, tg, seed: int, feeds: dict | None = None):
        self.tg = tg
        self.seed = seed
        self.feeds = feeds or {}
        self.loss = str(getattr(tg.config, "loss", "mse")).lower()

    def rng(self, t: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, zlib.crc32(self.tg.tensors[t].name.encode())])

    def value(self, t: int, dtype) -> np.ndarray:
        """Its stored values: a broadcast constant's (`TensorSpec.stored`) are the values it repeats."""
        spec = self.tg.tensors[t]
        shape, role = spec.shape if spec.stored is None else spec.stored, spec.role
        fed = self.feeds.get(spec.name)
        if fed is not None:
            fed = np.asarray(fed)
            if fed.size != int(np.prod(shape, dtype=np.int64)):
                raise ValueError(f"feed for {spec.name} has {fed.size} elements, the tensor {shape}")
            return fed.astype(dtype, copy=False).reshape(shape)
        rng = self.rng(t)
        if role == "opt-state" or 0 in tuple(shape):  # an empty tensor has no value to draw
            return np.zeros(shape, dtype)
        operand = self.tg.graph.operands[spec.operand] if spec.operand is not None else None
        if np.dtype(dtype).kind in "iub":
            v = getattr(operand, "value", None) if operand is not None else None
            if v is not None and int(np.prod(shape, dtype=np.int64)) == len(v):
                return np.asarray(v, dtype=dtype).reshape(shape)
            return np.zeros(shape, dtype)
        if is_float(np.empty(0, dtype)) and role not in ("label", "input"):
            v = getattr(operand, "value", None) if operand is not None else None
            if v is not None and int(np.prod(shape, dtype=np.int64)) == len(v):
                return np.asarray(v, dtype=dtype).reshape(shape)  # the file's own values (scalars, buffers)
        if role == "label":
            if self.loss == "cce" and shape:
                k = shape[-1]
                cls = rng.integers(0, k, size=shape[:-1])
                return np.eye(k, dtype=dtype)[cls]
            return rng.uniform(0, 1, size=shape).astype(dtype)
        if role == "input":
            return rng.uniform(0, 1, size=shape).astype(dtype)
        if role in ("weight", "frozen-weight"):
            if int(np.prod(shape, dtype=np.int64)) == 1:
                # a scalar constant in an export is an epsilon, a scale or an exponent (RMSNorm's
                # sqrt(mean + eps)): positive, so that sqrt / log / division stay defined
                return rng.uniform(0.5, 1.5, size=shape).astype(dtype)
            if len(shape) <= 1:  # biases
                return rng.uniform(-0.1, 0.1, size=shape).astype(dtype)
            # variance 1/fan_in keeps activations bounded through deep stacks; depthwise [1,KH,KW,C]
            n = int(np.prod(shape))
            fan_in = int(np.prod(shape[1:3])) if shape[0] == 1 else n // shape[0]
            a = np.sqrt(3.0 / max(fan_in, 1))
            return rng.uniform(-a, a, size=shape).astype(dtype)
        # float constants that are not weights (an Add's constant operand, a Mul scale): away from 0
        return rng.uniform(0.5, 1.5, size=shape).astype(dtype)


def conflicts(layout: Layout) -> list[tuple[int, str, str]]:
    """(step, buffer, buffer) for every two placements of one pool that share bytes while both are
    live, earliest step first. A valid plan has none; the run may survive one (the reference kernels
    compute into temporaries before they store), a real runtime need not."""
    out = []
    by_pool: dict[str, list] = {}
    for p in layout.placements.values():
        if p.size:
            by_pool.setdefault(p.pool, []).append(p)
    for ps in by_pool.values():
        ps.sort(key=lambda p: p.offset)
        for i, a in enumerate(ps):
            for b in ps[i + 1:]:
                if b.offset >= a.end:
                    break
                if a.first <= b.last and b.first <= a.last:
                    out.append((max(a.first, b.first), a.name, b.name))
    return sorted(out)


def execute(tg, layout: Layout, *, optimizer: str = "sgd", learning_rate: float = 0.001, seed: int = 0,
            check_live: bool = True, poison: bool = True, rtol: float = 1e-5, atol: float = 1e-7,
            threads: int | None = 1, progress=None, feeds: dict | None = None) -> VerifyResult:
    """Run `tg`'s steps in the arena of `layout` and in separate allocations; compare at every step.

    `check_live=False` skips the up-front liveness check so that a lifetime bug has to show in the
    data (poisoned memory); `threads` is the BLAS thread count during the run (None: unchanged);
    `feeds` ({tensor name: array}) replaces the seeded random value of an input, label or weight."""
    with blas_threads(threads):
        return _execute(tg, layout, optimizer, learning_rate, seed, check_live, poison, rtol, atol, progress,
                        feeds)


def _execute(tg, layout, optimizer, learning_rate, seed, check_live, poison, rtol, atol, progress,
             feeds=None) -> VerifyResult:
    run = _LockstepRun(tg, layout, optimizer, learning_rate, seed, check_live, poison, rtol, atol, feeds)
    if not run.every_touched_tensor_has_a_buffer():
        return run.res
    try:
        for s in tg.steps:
            if progress:
                progress(s)
            run.step(s)
        run.check_the_end()
        run.res.passed = True
    except VerifyFailure as e:
        run.res.message = str(e)
        run.res.failed_step = e.step
        run.res.buffers = e.buffers
    return run.finish()


class _LockstepRun:
    """One step of the training graph at a time, in the arena and in the reference memory, with the
    checks of the module docstring as named methods."""

    def __init__(self, tg, layout, optimizer, learning_rate, seed, check_live, poison, rtol, atol, feeds):
        self.t0 = time.perf_counter()
        self.tg, self.layout = tg, layout
        self.optimizer, self.learning_rate = optimizer, learning_rate
        self.check_live, self.poison, self.rtol, self.atol = check_live, poison, rtol, atol
        self.arena = ArenaMemory(tg, layout)
        self.ref = SeparateMemory(tg)
        self.inputs = _Inputs(tg, seed, feeds)
        self.pl = layout.placements
        self.groups = tg.groups()
        self.res = VerifyResult(False, len(tg.steps), 0, 0, 0.0, "", None, 0,
                                arena_bytes=sum(layout.arenas.values()), conflicts=conflicts(layout))
        self.res.sources = [op.label for op in tg.graph.operations[:tg.model_ops] if seeded_source(tg, op)]
        self.sources = self._sources()
        self.last_write: dict[int, int] = {}  # root -> arena step that last wrote it
        self.last_write_t: dict[int, int] = {}  # tensor -> step that last wrote it
        self.ends: dict[int, list[int]] = {}  # step -> roots whose planned lifetime ends there
        for r, p in self.pl.items():
            if not any(m in tg.persistent for m in self.groups.get(r, [r])):
                self.ends.setdefault(p.last, []).append(r)
        self.ref_state: dict = {}
        self.arena_state: dict = {}
        self.loss_ids = [t.id for t in tg.tensors if t.role == "loss"]
        self.updated: set[int] = set()
        self.initial: dict[int, np.ndarray] = {}  # weight -> its value before the step
        self.best = [0.0, ""]
        self.write_scale: dict[int, float] = {}  # tensor -> the scale of the inputs it was computed from

    # ---- naming ----------------------------------------------------------------------------------
    def name(self, t) -> str:
        return self.tg.tensors[t].name

    @staticmethod
    def where(s) -> str:
        return f"step {s.index} ({s.kind} of {s.label or 'op ' + str(s.op)})"

    def describe(self, root) -> str:
        p = self.pl[root]
        return f"{p.name} [{p.pool} bytes {p.offset}..{p.end}, live {p.first}..{p.last}]"

    # ---- set-up ----------------------------------------------------------------------------------
    def every_touched_tensor_has_a_buffer(self) -> bool:
        for s in self.tg.steps:
            for t in s.touched():
                if self.tg.root(t) not in self.pl:
                    self.res.message = (f"{self.where(s)} touches {self.name(t)}, which has no buffer in the "
                                        f"{self.layout.profile} plan")
                    self.res.failed_step, self.res.buffers = s.index, [self.name(t)]
                    return False
        return True

    def _sources(self) -> dict[int, list[int]]:
        """step -> tensors whose value comes from outside (weights, inputs, label, state, constants),
        written right before their first use."""
        tg = self.tg
        first_access, _ = tg.accesses()
        sources: dict[int, list[int]] = {}
        for t, s_first in first_access.items():
            if tg.tensors[t].role in SOURCE_ROLES or t in tg.fed or t in tg.persistent:
                sources.setdefault(s_first, []).append(t)
        for t in tg.persistent:
            if t not in first_access and tg.root(t) in self.pl:  # state nobody touches (e.g. of a frozen constant)
                sources.setdefault(0, []).append(t)
        return sources

    # ---- comparisons -----------------------------------------------------------------------------
    def compare(self, t, s, what, scale: float = 0.0) -> float:
        """Check tensor t against the reference within rtol of its own magnitude or of `scale` (what it
        was computed from); returns its own magnitude."""
        a, b = self.arena.view(t), self.ref.view(t)
        d = _diff(a, b)
        self.res.compared += 1
        if d > self.best[0]:
            self.best[0], self.best[1] = d, f"{self.name(t)} at step {s.index}"
        own = _scale_of([b])
        tol = 0.0 if b.size == 0 or b.dtype.kind in "iub" else self.atol + self.rtol * own
        if d > max(tol, self.atol + self.rtol * scale):
            raise VerifyFailure(what(d), s.index)
        return own

    def culprits(self, t, since, upto):
        """What changed tensor t's bytes in the arena between steps since..upto: another tensor
        sharing its buffer (an alias) written meanwhile, an overlapping buffer written meanwhile, or
        an overlapping buffer poisoned when its planned lifetime ended."""
        root = self.tg.root(t)
        out, names = [], []
        for u in self.groups.get(root, []):
            w = self.last_write_t.get(u)
            if u != t and w is not None and since < w <= upto:
                out.append(f"{self.name(u)} (sharing its buffer) written at step {w}")
                names.append(self.name(u))
        for r, q in self.layout.neighbours(root):
            w = self.last_write.get(r)
            if w is not None and since <= w <= upto:
                out.append(f"{self.describe(r)} written at step {w}")
                names.append(q.name)
            elif self.poison and since <= q.last < upto:
                out.append(f"{self.describe(r)} poisoned when its lifetime ended after step {q.last}")
                names.append(q.name)
        return out, names

    # ---- one step --------------------------------------------------------------------------------
    def step(self, s) -> None:
        if self.check_live:
            self.check_buffers_live(s)
        self.write_sources(s)
        in_scale = self.check_reads_intact(s)
        written = self.run_kernels(s)
        self.check_writes_agree(s, written, in_scale)
        self.res.steps_run += 1
        if self.poison and s.index < len(self.tg.steps) - 1:  # what lives to the end is read after it
            for r in self.ends.get(s.index, []):
                self.arena.poison(r)

    def check_buffers_live(self, s) -> None:
        """Every buffer handed to the kernel is live at this step in the plan."""
        for t in s.touched():
            p = self.pl[self.tg.root(t)]
            if not p.live_at(s.index):
                raise VerifyFailure(f"{self.where(s)} touches {self.name(t)}, but its buffer "
                                    f"{self.describe(self.tg.root(t))} is not live at step {s.index}",
                                    s.index, [p.name])

    def write_sources(self, s) -> None:
        """Values from outside, written into both memories right before their first use."""
        for t in self.sources.get(s.index, []):
            v = self.inputs.value(t, self.ref.view(t).dtype)
            self.ref.storage(t)[...] = v
            self.arena.storage(t)[...] = v
            if self.tg.tensors[t].role in ("weight", "frozen-weight") and t in self.tg.persistent:
                self.initial[t] = np.array(self.ref.view(t), copy=True)
            self.last_write[self.tg.root(t)] = self.last_write_t[t] = s.index

    def check_reads_intact(self, s) -> float:
        """What the step reads still holds, in the arena, what was written (accumulation sources are
        the step's own contributions, written by its kernel). Returns the largest magnitude the step
        computes from (its reads' and what those were computed from): an output near zero from
        cancelling terms carries their rounding."""
        in_scale = 0.0
        for t in s.reads:
            r = self.tg.root(t)
            w = self.last_write_t.get(t, 0)
            found, involved = self.culprits(t, w, s.index)

            def msg(d, t=t, r=r, w=w, found=found):
                p = self.pl[r]
                head = (f"{self.where(s)} reads {self.name(t)}, which no longer holds what step {w} wrote "
                        f"(differs by {d:.3g}); its buffer is {self.describe(r)}")
                if not p.live_at(s.index):
                    head += f", whose planned lifetime {p.first}..{p.last} does not cover step {s.index}"
                return head + (": overwritten by " + "; ".join(found) if found else "")
            try:
                own = self.compare(t, s, msg, self.write_scale.get(t, 0.0))
            except VerifyFailure as e:
                e.buffers = list(dict.fromkeys([self.pl[r].name] + involved))
                raise
            in_scale = max(in_scale, own, self.write_scale.get(t, 0.0))
        return in_scale

    def run_kernels(self, s) -> list[int]:
        """The kernel, reference first (a failure there is a bug in memplan, not in the plan).
        Returns what the step wrote."""
        ctx_ref = StepContext(self.tg, s, self.ref, self.optimizer, self.learning_rate, state=self.ref_state)
        try:
            with np.errstate(over="ignore", invalid="ignore"):  # checked on the values (check_writes_agree)
                run_step(ctx_ref)
        except AccessError as e:
            raise VerifyFailure(f"the training graph is inconsistent: {e}", s.index) from None
        except (TypeError, ValueError) as e:
            # NumPy refusing an op on bool / int tensors (Relu of a bool): the reference kernels do not
            # run that op on those dtypes. On floats only it is a bug: raise it as one.
            odd = sorted({self.tg.tensors[t].dtype for t in s.touched()} - {"float16", "float32", "float64"})
            if not odd:
                raise
            raise UnsupportedKernel(f"{self.where(s)} on {', '.join(odd)} tensors: the NumPy reference kernels "
                                    f"cannot run it ({type(e).__name__}: {str(e)[:120]})") from None
        ctx = StepContext(self.tg, s, self.arena, self.optimizer, self.learning_rate, state=self.arena_state)
        with np.errstate(all="ignore"):
            try:
                run_step(ctx)
            except UnsupportedKernel:
                raise
            except Exception as e:  # garbage in the arena can make a kernel fail
                names = sorted({self.pl[self.tg.root(t)].name for t in s.touched()})
                raise VerifyFailure(f"{self.where(s)} failed in the arena run ({type(e).__name__}: {e}); "
                                    f"buffers: {', '.join(names)}", s.index, names) from None
        written = list(dict.fromkeys(list(s.writes) + [d for _, d, _ in s.accumulate]))
        for t in written:
            self.last_write[self.tg.root(t)] = self.last_write_t[t] = s.index
            if s.kind == "applyGradient" and self.tg.tensors[t].role == "weight":
                self.updated.add(t)
        return written

    def reads_nonfinite(self, s) -> bool:
        """Whether a float value the step reads in the reference run is inf or NaN."""
        for t in s.reads:
            v = self.ref.view(t)
            if is_float(v) and not np.isfinite(v).all():
                return True
        return False

    def check_writes_agree(self, s, written, in_scale) -> None:
        """What the step wrote agrees with the reference (and the reference wrote no NaN)."""
        tg, pl = self.tg, self.pl
        touched = s.touched()
        for t in written:
            rv = self.ref.view(t)
            if is_float(rv) and np.isnan(rv).any() and self.reads_nonfinite(s):
                # inf in, NaN out (inf - inf, 0 * inf): the seeded values overflowed float32 upstream (a deep
                # net without normalisation) or a row is fully masked: not a kernel or plan bug
                raise UnsupportedKernel(f"{self.where(s)} reads inf in the reference run (seeded values that "
                                        "overflowed float32, or a -inf mask over a whole row), so it wrote NaN into "
                                        f"{self.name(t)}: nothing can be compared from here on")
            if is_float(rv) and np.isnan(rv).any():
                raise VerifyFailure(f"{self.where(s)}: the reference run wrote NaN into {self.name(t)} (a bug in "
                                    "the training graph or a kernel, not in the plan)", s.index, [self.name(t)])
            shared = list(dict.fromkeys(tg.root(u) for u in touched
                                        if tg.root(u) != tg.root(t) and pl[tg.root(u)].overlaps(pl[tg.root(t)])))

            def wmsg(d, t=t, shared=shared):
                tail = ("; it shares bytes with " + "; ".join(self.describe(u) for u in shared) + " in the same step"
                        if shared else "")
                return (f"{self.where(s)} wrote {self.name(t)} differently in the arena (differs by {d:.3g}); its "
                        f"buffer is {self.describe(tg.root(t))}{tail}")
            self.write_scale[t] = in_scale
            try:
                self.compare(t, s, wmsg, in_scale)
            except VerifyFailure as e:
                e.buffers = [pl[tg.root(t)].name] + [pl[u].name for u in shared]
                raise
            if t in self.loss_ids:
                self.res.loss = (float(np.asarray(self.arena.view(t)).reshape(-1)[0]),
                                 float(np.asarray(self.ref.view(t)).reshape(-1)[0]))

    # ---- after the last step ---------------------------------------------------------------------
    def check_the_end(self) -> None:
        """What is read after the step (the loss value) is still there; every updated weight agrees;
        a frozen weight came out bit-identical; no two live buffers shared bytes."""
        tg, pl, res = self.tg, self.pl, self.res
        end = tg.steps[-1] if tg.steps else None
        for t in sorted(getattr(tg, "live_out", ())):
            r = tg.root(t)
            if r not in pl or t not in self.last_write_t:
                continue
            p = pl[r]
            if self.check_live and p.last < end.index:
                raise VerifyFailure(f"{self.name(t)} is read after the last step, but its buffer {self.describe(r)} "
                                    f"is freed after step {p.last}", end.index, [p.name])
            w = self.last_write_t[t]
            found, involved = self.culprits(t, w, end.index + 1)
            try:
                self.compare(t, end, lambda d, t=t, w=w, found=found: (
                    f"{self.name(t)}, read after the step, no longer holds what step {w} wrote (differs by {d:.3g})"
                    + (": overwritten by " + "; ".join(found) if found else "")))
            except VerifyFailure as e:
                e.buffers = list(dict.fromkeys([p.name] + involved))
                raise
        for t in sorted(self.updated):
            self.compare(t, end, lambda d, t=t: f"updated weight {self.name(t)} differs by {d:.3g} at the end")
            res.updated[self.name(t)] = np.array(self.arena.view(t))
        res.weights_updated = len(self.updated)
        # a frozen weight (fine-tuning modes, frozen ops) must come out of the step bit-identical
        for t in sorted(set(self.initial) - self.updated):
            if not np.array_equal(self.arena.view(t), self.initial[t]):
                raise VerifyFailure(f"frozen weight {self.name(t)} changed during the step", end.index, [self.name(t)])
            res.frozen_unchanged += 1
        clash = res.conflicts
        if clash:
            st, a, b = clash[0]
            more = f" (and {len(clash) - 1} more such pairs)" if len(clash) > 1 else ""
            raise VerifyFailure(f"{self.where(tg.steps[st])}: buffers {a} and {b} share bytes while both are live"
                                f"{more}; the reference kernels survived it, a runtime that writes before it reads "
                                "would not", st, [a, b])

    def finish(self) -> VerifyResult:
        self.res.max_diff, self.res.max_diff_at = self.best
        self.res.reference_bytes = self.ref.nbytes
        self.res.seconds = time.perf_counter() - self.t0
        return self.res
