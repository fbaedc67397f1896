"""Binding training-graph steps to reference kernels.

For each op, its registry entry's `kernels[kind](ctx)` (memplan_cli/ops/) runs one step (forward,
calcGradient, calcDerivative) through a `StepContext`, which hands out only the views of tensors the step declares (reads, writes,
accumulations): asking for anything else is an `AccessError`, so a kernel cannot silently depend on a
tensor the plan did not keep alive. Optional forward tensors (a fused activation's output, a MaxPool
input) are used when the step reads them; the kernels pick another route when they are absent.
applyGradient is generic (the optimizer over every gradient the step reads).
"""
from __future__ import annotations

import zlib

import numpy as np

from memplan_cli.kernels import activation, optim
from memplan_cli.kernels.activation import MASK_BOUNDS, between
from memplan_cli.kernels.common import store
from memplan_cli import ops as registry
from memplan_cli.ops.base import AccessError, UnsupportedKernel  # noqa: F401  (raised here and by the registry's kernels)


class StepContext:
    def __init__(self, tg, step, memory, optimizer: str = "sgd", lr: float = 0.001, t: int = 1,
                 state: dict | None = None):
        self.tg = tg
        self.state = {} if state is None else state  # per-run facts shared by steps (which dz are done)
        self.step = step
        self.mem = memory
        self.op = tg.graph.operations[step.op] if step.op >= 0 else None
        self.attrs = self.op.attrs if self.op is not None else {}
        self.optimizer = optimizer
        self.lr = lr
        self.t = t
        self._reads = set(step.reads)
        self._writes = set(step.writes)
        self.touched = set(step.touched())
        # a recompute step, or a backward step reading recomputed results, uses copies in place of
        # the original tensors (passes/rematerialize.py)
        self.subst = getattr(step, "subst", None) or {}
        self.handed: list[int] = []  # tensor ids given to kernels, in order (for diagnostics)
        # the cast copies the step makes of its inputs (passes/precision.py); float32 working copies of
        # 16-bit tensors: the kernels compute in float32 and what the step writes is rounded back into
        # the tensor's own bytes (`flush`), as a 16-bit kernel accumulating in float32 does
        self.casts = getattr(step, "casts", None) or {}
        self._work: dict[int, np.ndarray] = {}
        # float16 files ran natively before --precision: only a 16-bit precision setting widens them
        self._widen = ("bfloat16",) if getattr(tg.config, "precision", "32-true") == "32-true" else ("bfloat16", "float16")

    # ---- access --------------------------------------------------------------------------
    def tensor(self, t: int) -> np.ndarray:
        t = self.subst.get(t, t)
        if t not in self.touched:
            raise AccessError(f"step {self.step.index} ({self.step.kind} of {self.step.label}) needs "
                              f"{self.tg.tensors[t].name}, which the step does not declare")
        c = self.casts.get(t)
        if c is not None:  # the op computes on its copy of t in its own dtype: make it, hand it over
            self.mem.view(c)[...] = self.mem.view(t)
            self._work.pop(c, None)
            t = c
        self.handed.append(t)
        v = self.mem.view(t)
        if v.dtype.name in self._widen:
            w = self._work.get(t)
            if w is None:
                w = self._work[t] = v.astype(np.float32)
            return w
        return v

    def flush(self) -> None:
        """Round what the kernel wrote into float32 working copies back into the 16-bit tensors."""
        written = set(self.step.writes) | {d for _, d, _ in self.step.accumulate}
        for t, w in self._work.items():
            if t in written:
                self.mem.view(t)[...] = w

    def _opt(self, t: int | None, where: set[int]) -> np.ndarray | None:
        t = self.subst.get(t, t)
        if t is None or t not in where:
            return None
        return self.tensor(t)

    def _need(self, t: int | None, what: str) -> np.ndarray:
        if t is None:
            raise AccessError(f"step {self.step.index} ({self.step.kind} of {self.step.label}): "
                              f"the training graph has no {what}")
        return self.tensor(t)

    def operand_in(self, k: int) -> int:
        return self.op.inputs[k] if k < len(self.op.inputs) else -1

    def x(self, k: int, optional: bool = False) -> np.ndarray | None:
        """Forward value of input k (None for an absent optional input)."""
        o = self.operand_in(k)
        if o < 0:
            return None
        t = self.tg.fwd.get(o)
        if optional:
            return self._opt(t, self._reads)
        return self._need(t, f"forward tensor for input {k} of {self.op.label}")

    def y(self, k: int = 0, optional: bool = False) -> np.ndarray | None:
        t = self.tg.fwd.get(self.op.outputs[k])
        if optional:
            return self._opt(t, self.touched)
        return self._need(t, f"forward tensor for output {k} of {self.op.label}")

    def dy(self, k: int = 0) -> np.ndarray:
        return self._need(self.tg.bp.get(self.op.outputs[k]), f"back-prop of output {k} of {self.op.label}")

    def dx(self, k: int) -> np.ndarray | None:
        """Where back-prop to input k goes: this op's contribution tensor, else the operand's
        back-prop; None when the step writes neither (nobody needs it)."""
        return self._written_for(k, self.tg.bp)

    def grad(self, k: int) -> np.ndarray | None:
        """Where the gradient of input k goes: this op's contribution to a shared weight's gradient,
        else the gradient; None when the step writes neither."""
        return self._written_for(k, self.tg.grad)

    def _written_for(self, k: int, tensors: dict) -> np.ndarray | None:
        """This op's contribution for input k when the step writes it, else the operand's tensor in
        `tensors` (back-props or gradients) when the step writes that; None for an absent input."""
        o = self.operand_in(k)
        if o < 0:
            return None
        c = self.tg.contributions.get((self.op.index, o))
        if c is not None and c in self._writes:
            return self.tensor(c)
        return self._opt(tensors.get(o), self._writes)

    def extra(self, what: str) -> np.ndarray | None:
        """The op's auxiliary tensor whose role is `extra:<what>`, if this step touches it."""
        for t in self.tg.extras.get(self.op.index, []):
            t = self.subst.get(t, t)
            if self.tg.tensors[t].role == f"extra:{what}" and t in self.touched:
                return self.tensor(t)
        return None

    def act(self) -> str:
        return activation.normalize(self.attrs.get("activation", "NONE"))

    def extra_id(self, what: str) -> int | None:
        for t in self.tg.extras.get(self.op.index, []):
            if self.tg.tensors[t].role == f"extra:{what}":
                return self.subst.get(t, t)
        return None

    def dz(self) -> np.ndarray:
        """dL/d(pre-activation) of output 0: the incoming back-prop through the fused activation.

        The training graph computes it once, in the op's first backward step, either into the extra
        `act_back_prop` (|Y|, onert) or over dY in place (memplan); later steps read that. A step that
        reads Y but does neither computes it in a temporary.
        """
        act = self.act()
        if act == "NONE":
            return self.dy()
        out = self.op.outputs[0]
        done = self.state.setdefault("act_done", set())
        e = self.extra_id("act_back_prop")
        if e is not None and e in self.touched:
            v = self.tensor(e)
            if e in self._writes:
                store(v, self.through_activation(self.dy(), act))
                done.add(self.op.index)
            elif self.op.index not in done:
                raise AccessError(f"{self.where()} reads {self.tg.tensors[e].name} before any step computed it")
            return v
        bp = self.tg.bp.get(out)
        if bp is not None and bp in self._writes and bp in self._reads:
            v = self.tensor(bp)
            store(v, self.through_activation(v, act))
            done.add(self.op.index)
            return v
        if self.op.index in done:
            return self.dy()
        return self.through_activation(self.dy(), act)

    def through_activation(self, dy: np.ndarray, act) -> np.ndarray:
        """dy through the derivative of `act` (a fused name, or (lo, hi) for Clip), from the kept
        output, or from the packed 1-bit mask (`extra:relu_mask`) forward wrote instead of keeping it."""
        y = self.y(optional=True)
        if y is not None:
            if isinstance(act, tuple):
                return dy * between(y, act)
            return activation.grad(y, dy, act)
        m = self.extra("relu_mask")
        if m is not None:
            n = int(np.prod(dy.shape))
            bits = np.unpackbits(m.reshape(-1), count=n).reshape(dy.shape)
            return dy * bits
        m = self.extra("clip_mask")
        if m is not None:
            return dy * m.reshape(dy.shape)
        z = self.extra("relu_input")
        if z is not None and not isinstance(act, tuple):
            return dy * between(z.reshape(dy.shape), MASK_BOUNDS[activation.normalize(act)])
        raise AccessError(f"{self.where()}: the {act} of {self.op.label} needs its output or its mask, "
                          "which the step does not read")

    def writes_extra(self, what: str) -> bool:
        """Whether this step writes the op's auxiliary tensor `extra:<what>`."""
        t = self.extra_id(what)
        return t is not None and t in self.step.writes

    def standalone_activation(self):
        """The activation this op is by itself (a fused name, or (lo, hi) for a Clip), or None."""
        d = registry.get(self.op.type)
        kind = d.activation if d is not None else None
        if kind == "CLIP":
            return self.attrs.get("min"), self.attrs.get("max")
        return kind

    def where(self) -> str:
        return f"step {self.step.index} ({self.step.kind} of {self.step.label})"


def write_relu_mask(ctx) -> None:
    """Forward: pack lo < y < hi of the op's output into its `relu_mask` extra (1 bit per element)."""
    m = ctx.extra("relu_mask")
    if m is None or m.size == 0 or ctx.extra_id("relu_mask") not in ctx.step.writes:
        return
    own = ctx.standalone_activation()
    if isinstance(own, tuple):
        bounds = own
    else:
        bounds = MASK_BOUNDS.get(own or ctx.act())
    if bounds is None:
        raise UnsupportedKernel(f"a relu mask for {ctx.op.label}, whose activation is not ReLU-like")
    packed = np.packbits(between(ctx.y(), bounds).reshape(-1))
    m.reshape(-1)[...] = packed[:m.size]


def forward_keeping_pre_activation(ctx, fn) -> bool:
    """Forward of an op with a fused ReLU-family activation whose step writes what SINGA keeps
    instead of Y: the pre-activation (`extra:relu_input`, ReLU) or a float 0/1 mask of it
    (`extra:clip_mask`). Runs the kernel without the activation, keeps that, then applies it.
    False when the step writes neither (the caller runs the kernel as is)."""
    if ctx.standalone_activation() is not None:
        return False
    act = ctx.act()
    if act == "NONE" or not (ctx.writes_extra("relu_input") or ctx.writes_extra("clip_mask")):
        return False
    if act not in MASK_BOUNDS:
        raise UnsupportedKernel(f"a kept pre-activation for {ctx.op.label}, whose activation {act} is not ReLU-like")
    saved = ctx.attrs
    ctx.attrs = dict(saved, activation="NONE")
    try:
        fn(ctx)
    finally:
        ctx.attrs = saved
    z = ctx.y()
    if ctx.writes_extra("relu_input"):
        store(ctx.extra("relu_input"), z)
    if ctx.writes_extra("clip_mask"):
        store(ctx.extra("clip_mask"), between(z, MASK_BOUNDS[act]))
    activation.apply(z, act, z)
    return True






# ---- applyGradient ------------------------------------------------------------------------------
def apply_gradient(ctx):
    """Update every weight whose gradient this step reads, with its optimizer state."""
    by_grad = {g: w for w, g in ctx.tg.grad.items()}
    done = 0
    for g in ctx.step.reads:
        w_operand = by_grad.get(g)
        if w_operand is None:
            continue
        w = ctx.tensor(ctx.tg.fwd[w_operand])
        states = [ctx.tensor(s) for s in ctx.tg.opt_state.get(w_operand, [])]
        need = optim.STATE_COUNT[ctx.optimizer]
        if len(states) < need:
            raise AccessError(f"{ctx.where()}: {ctx.optimizer} needs {need} state tensors for "
                              f"{ctx.tg.tensors[ctx.tg.fwd[w_operand]].name}, the graph has {len(states)}")
        optim.apply(ctx.optimizer, w, ctx.tensor(g), states, ctx.lr, ctx.t)
        done += 1
    return done


def _kernels_of(op_type: str) -> dict | None:
    d = registry.get(op_type)
    return d.kernels if d is not None and d.kernels else None


def seeded_source(tg, op) -> bool:
    """Whether verify runs `op`'s forward as a seeded source: it has no reference kernel (a custom
    op) and lies outside the backward region, so no gradient passes through it and its outputs are
    inputs to the trained part, as a graph input is. The plan is checked all the same: the step still
    reads its inputs from their buffers and writes its outputs into theirs."""
    h = _kernels_of(op.type)
    return (h is None or h.get("forward") is None) and op.index not in tg.backward_ops


def _seeded_forward(ctx) -> None:
    """Outputs filled with values seeded by the tensor's name: the same in both runs and every run."""
    for k, o in enumerate(ctx.op.outputs):
        y = ctx.y(k, optional=True) if o >= 0 else None
        if y is None:
            continue
        rng = np.random.default_rng(zlib.crc32(ctx.tg.graph.operands[o].name.encode()))
        y[...] = rng.uniform(0, 1, size=y.shape).astype(y.dtype) if y.dtype.kind == "f" else 0


def run_step(ctx) -> None:
    """Run one step's kernel, then its accumulations (dst = src, or dst += src)."""
    s = ctx.step
    if s.kind == "applyGradient":
        apply_gradient(ctx)
    else:
        h = _kernels_of(ctx.op.type)
        fn = h.get(s.kind) if h else None
        if fn is None:
            if s.kind == "calcGradient" and h is not None:
                fn = None  # an op without weights: nothing to compute
            elif s.kind == "forward" and seeded_source(ctx.tg, ctx.op):
                fn = _seeded_forward
            else:
                raise UnsupportedKernel(f"no reference kernel for {s.kind} of {ctx.op.type} ({ctx.op.label})")
        if fn is _seeded_forward:
            # an op memplan has no kernel for: its `activation` attribute (ONNX CausalConvWithState's
            # "silu") is its own business, not a fused activation memplan applies or masks
            fn(ctx)
        elif fn is not None and not (s.kind == "forward" and forward_keeping_pre_activation(ctx, fn)):
            fn(ctx)
        if s.kind == "forward" and fn is not _seeded_forward:
            write_relu_mask(ctx)
    for src, dst, first in s.accumulate:
        a, d = ctx.tensor(src), ctx.tensor(dst)
        if first:
            d[...] = a.reshape(d.shape)
        else:
            d += a.reshape(d.shape)
    ctx.flush()


def is_float(a: np.ndarray) -> bool:
    """A float array, bfloat16 (ml_dtypes: not a NumPy kind "f") included."""
    return a.dtype.kind == "f" or a.dtype.name == "bfloat16"
