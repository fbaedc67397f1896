"""The training graph: every tensor one training step touches, and every step's exact reads and writes.

The pass pipeline (`memplan_cli.passes.pipeline`) fills a `TrainingGraph`; profiles turn it into a
`BufferList`; the plan executor (`memplan verify`) runs its steps. Conventions:

- A tensor is a `TensorSpec`. Its `category` is one of `buffers.CATEGORIES`; its `role` says what it
  is: "input", "label", "activation", "loss", "weight" (trainable float constant), "frozen-weight",
  "constant" (non-float constant such as a Reshape shape), "back-prop", "gradient", "opt-state",
  "disposable" (one consumer's back-prop contribution), "extra:<what>" (a kernel's auxiliary buffer).
  `op` is the forward op it belongs to (defining op, or the op whose backward made it); `operand` the
  forward operand it is, or whose back-prop / gradient / optimizer state it is.
- A step is a `StepSpec` of one kind in `buffers.STEP_KINDS`. `reads` and `writes` name every tensor
  the kernel touches in that step, weights, optimizer state and extras included, so an executor can
  hand a kernel exactly the views it may touch. A tensor both read and written (an in-place update,
  an optimizer step) is in both lists. `accumulate` lists (src, dst, first) pairs the step performs
  after its kernel: dst = src when `first`, else dst += src (back-prop accumulation at branch points).
- `aliases[t] = u`: tensor t shares u's memory (a Reshape view, an in-place update). Alias chains are
  followed to a root; a root and its aliases are one buffer whose interval is the union of theirs.
- `persistent` tensors (weights, optimizer state) live over every step. `fed` tensors (graph inputs,
  the label) are copied in from outside right before their first reader, so their interval starts at
  their first access like any other. `live_out` tensors (the loss value) are read after the last step.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from memplan_cli.buffers import CATEGORIES, NAIVE_TENSORS, STEP_KINDS, Buffer, BufferList, Pool, Step
from memplan_cli.ir.dtypes import dtype_size

from memplan_cli.ops.rule import BACKWARD, FORWARD, FORWARD_TO_BACKWARD, LIFETIMES  # noqa: F401


@dataclass(slots=True)  # one per tensor: 10^5 of them for a large graph
class TensorSpec:
    id: int
    name: str
    category: str
    shape: tuple[int, ...]
    dtype: str
    role: str
    op: int | None = None
    operand: int | None = None
    # a broadcast constant's storage shape (`Operand.broadcast_of`, `Policy.broadcast_views`): the
    # tensor is a stride-0 view of that many values; None: its own shape
    stored: tuple[int, ...] | None = None

    def __post_init__(self):
        if self.category not in CATEGORIES:
            raise ValueError(f"tensor {self.name}: unknown category {self.category!r}")

    @property
    def num_elements(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """The bytes its storage holds (a broadcast view's: the values it repeats)."""
        return math.prod(self.shape if self.stored is None else self.stored) * dtype_size(self.dtype)

    @property
    def dense_nbytes(self) -> int:
        """The bytes of its shape (a broadcast materialised): what it takes without views."""
        return self.num_elements * dtype_size(self.dtype)


@dataclass(slots=True)
class StepSpec:
    index: int
    kind: str
    op: int
    reads: list[int] = field(default_factory=list)
    writes: list[int] = field(default_factory=list)
    # (src, dst, first): after the kernel, dst = src (first) or dst += src
    accumulate: list[tuple[int, int, bool]] = field(default_factory=list)
    label: str = ""
    # original tensor -> the tensor this step uses in its place (a rematerialized copy; see
    # passes/rematerialize.py): an executor hands the kernel the copy when it asks for the original
    subst: dict[int, int] = field(default_factory=dict)
    # input tensor -> the `extra:cast` copy of it in the op's compute dtype (passes/precision.py): an
    # executor fills the copy and hands it to the kernel in place of the input
    casts: dict[int, int] = field(default_factory=dict)

    def __post_init__(self):
        if self.kind not in STEP_KINDS:
            raise ValueError(f"unknown step kind {self.kind!r}")

    def touched(self) -> list[int]:
        """Every tensor the step accesses (reads, writes and accumulations), each once, in order."""
        out = [*self.reads, *self.writes]
        for s, d, _ in self.accumulate:
            out += (s, d)
        return list(dict.fromkeys(out))


@dataclass
class LoRAAdapters:
    """What LoRA insertion added: rank, alpha, one {"op", "A", "B", "in", "out"} per adapter, and the
    model's own constants (operand indices: they stay frozen)."""

    rank: int
    alpha: float
    adapters: list[dict]
    frozen: set[int]


@dataclass
class Recomputation:
    """What the rematerialization pass did: the ops dropped, the copies' names, the recompute steps' ops."""

    dropped: list[int]
    recomputed_tensors: list[str]
    recomputes: list[int]


def align_up(n: int, align: int) -> int:
    return -(-n // align) * align if align > 1 else n


@dataclass
class TrainingGraph:
    """The forward graph (with the loss op and label appended) and what training adds to it."""

    graph: object  # memplan_cli.ir.Graph: the model plus the Loss op and the label operand
    config: object  # memplan_cli.config.TrainConfig
    tensors: list[TensorSpec] = field(default_factory=list)
    steps: list[StepSpec] = field(default_factory=list)
    trainable_ops: set[int] = field(default_factory=set)  # ops whose weights are updated
    frozen_params: set[int] = field(default_factory=set)  # weights the setup keeps frozen
    backward_ops: set[int] = field(default_factory=set)  # ops that get backward steps
    aliases: dict[int, int] = field(default_factory=dict)
    persistent: set[int] = field(default_factory=set)
    fed: set[int] = field(default_factory=set)
    live_out: set[int] = field(default_factory=set)  # read after the step (the loss value)
    # set by the passes
    model_ops: int = 0  # number of ops of the model (the loss op comes after them)
    loss_op: int | None = None
    label: int | None = None  # operand index of the (first) label
    labels: list[int] = field(default_factory=list)  # every label, one per output carrying a loss
    fwd: dict[int, int] = field(default_factory=dict)  # operand -> its forward tensor
    bp: dict[int, int] = field(default_factory=dict)  # operand -> its back-prop tensor
    grad: dict[int, int] = field(default_factory=dict)  # weight operand -> its gradient tensor
    opt_state: dict[int, list[int]] = field(default_factory=dict)  # weight operand -> state tensors
    needs_bp: set[int] = field(default_factory=set)  # operands whose back-prop someone needs
    rules: dict[int, object] = field(default_factory=dict)  # op index -> its resolved OpRule
    extras: dict[int, list[int]] = field(default_factory=dict)  # op index -> extra tensor ids
    contributions: dict[tuple[int, int], int] = field(default_factory=dict)  # (op, operand) -> tensor
    # what passes tell each other (each pass declares the fields it reads and writes: passes/infra.py)
    backward_order: list[int] | None = None  # a runtime's own backward op order (the profile's), if any
    lora: LoRAAdapters | None = None  # the adapters LoRA insertion added (passes/lora.py)
    selected_ops: set[int] = field(default_factory=set)  # ops the setup selects to train
    loss_outputs: list[str] = field(default_factory=list)  # the outputs that carry a loss, by label
    defs: dict[int, int] = field(default_factory=dict)  # operand -> its defining op
    order: list[int] = field(default_factory=list)  # the forward ops in topological order
    loss_ancestors: set[int] = field(default_factory=set)  # ops the loss depends on (differentiably)
    # op -> the (src, dst, first) accumulations its calcDerivative / calcGradient step performs
    accumulate: dict[int, list[tuple[int, int, bool]]] = field(default_factory=dict)
    accumulate_grad: dict[int, list[tuple[int, int, bool]]] = field(default_factory=dict)
    remat: Recomputation | None = None  # what a remat plan dropped and recomputed
    cheap_recomputed: list[str] = field(default_factory=list)  # forward results cheap recompute copies
    cheap_copies: dict[int, int] = field(default_factory=dict)  # cheap recompute's copy -> its original
    # set by the pipeline's caller after the passes (passes/pipeline.py)
    ran: list[tuple[str, bool]] = field(default_factory=list)  # (pass name, changed anything)
    policy: object = None  # the passes.policy.Policy the passes ran with
    frozen_weights: list[dict] | None = None  # `loss_insertion.unreached_weights`, once computed

    # ---- building ------------------------------------------------------------------------
    def add_tensor(self, name, category, shape, dtype, role, op=None, operand=None, stored=None) -> int:
        t = TensorSpec(len(self.tensors), name, category, tuple(shape), dtype, role, op, operand,
                       None if stored is None else tuple(stored))
        self.tensors.append(t)
        return t.id

    def add_step(self, kind, op, reads=(), writes=(), accumulate=()) -> StepSpec:
        label = self.op_label(op)
        s = StepSpec(len(self.steps), kind, op, list(dict.fromkeys(reads)), list(dict.fromkeys(writes)),
                     list(accumulate), label)
        self.steps.append(s)
        return s

    def op_label(self, op: int | None) -> str:
        return self.graph.operations[op].label if op is not None and op >= 0 else ""

    # ---- aliases -------------------------------------------------------------------------
    def root(self, t: int) -> int:
        seen = set()
        while t in self.aliases:
            if t in seen:
                raise ValueError(f"alias cycle through tensor {self.tensors[t].name}")
            seen.add(t)
            t = self.aliases[t]
        return t

    def groups(self) -> dict[int, list[int]]:
        """root -> the tensors sharing its memory (root first)."""
        out: dict[int, list[int]] = {}
        for t in self.tensors:
            out.setdefault(self.root(t.id), []).append(t.id)
        for r, members in out.items():
            members.sort(key=lambda m: (m != r, m))
        return out

    # ---- lifetimes -----------------------------------------------------------------------
    def accesses(self) -> tuple[dict[int, int], dict[int, int]]:
        """(first access, last access) step of every tensor that some step touches.

        Last uses come from one reverse walk (the first time a tensor is seen walking backwards is
        its last use, as torch.fx computes it); first uses from one forward walk.
        """
        first: dict[int, int] = {}
        last: dict[int, int] = {}
        touched = [(s.index, s.touched()) for s in self.steps]
        for at, ts in touched:
            for t in ts:
                if t not in first:
                    first[t] = at
        for at, ts in reversed(touched):
            for t in ts:
                if t not in last:
                    last[t] = at
        return first, last

    def lifetimes(self) -> dict[int, tuple[int, int]]:
        """tensor id -> (first, last) inclusive steps. Persistent tensors span every step; tensors
        no step touches are left out (they need no memory)."""
        first, last = self.accesses()
        end = len(self.steps) - 1
        out = {t: (first[t], last[t]) for t in first}
        for t in self.live_out:
            if t in out:
                out[t] = (out[t][0], end)
        for t in self.persistent:
            out[t] = (0, end)
        return out

    def group_lifetimes(self, lt: dict | None = None) -> dict[int, tuple[int, int]]:
        """root -> union of the intervals of the tensors sharing its memory (`lt`: `lifetimes()`,
        when the caller has it)."""
        lt = self.lifetimes() if lt is None else lt
        out: dict[int, tuple[int, int]] = {}
        for t, (a, b) in lt.items():
            r = self.root(t)
            if r in out:
                a0, b0 = out[r]
                out[r] = (min(a, a0), max(b, b0))
            else:
                out[r] = (a, b)
        return out

    # ---- output --------------------------------------------------------------------------
    def buffer_name(self, t: int) -> str:
        """Name of the buffer holding tensor t (its alias root's name)."""
        return self.tensors[self.root(t)].name

    def tensor_key(self, t: int) -> str:
        """Tensor t's identity, independent of display names: role, operand and op
        (`role:o<operand>:k<op>`), with the tensor id added where two tensors would share it."""
        keys = self.__dict__.get("_keys")
        if keys is None or len(keys) != len(self.tensors):
            keys, seen = [], set()
            for spec in self.tensors:
                k = f"{spec.role}:o{'-' if spec.operand is None else spec.operand}:k{'-' if spec.op is None else spec.op}"
                if k in seen:
                    k = f"{k}#{spec.id}"
                seen.add(k)
                keys.append(k)
            self.__dict__["_keys"] = keys
        return keys[t]

    def buffer_key(self, t: int) -> str:
        """Key of the buffer holding tensor t (its alias root's key): `Buffer.key`."""
        return self.tensor_key(self.root(t))

    def to_buffer_list(self, pools: list[Pool] | None = None, pool_of=None, align: int = 16) -> BufferList:
        """One Buffer per memory-owning tensor (alias roots), aliases folded into their root.

        `pool_of(TensorSpec) -> pool name` assigns pools (default: every buffer in the first pool);
        sizes are the largest member's bytes rounded up to `align`; `owner` is the root's op label.
        """
        pools = pools or [Pool("arena", "non-const", "best")]
        lt = self.lifetimes()
        glt = self.group_lifetimes(lt)
        groups = self.groups()
        buffers = []
        for r, (a, b) in sorted(glt.items(), key=lambda kv: (kv[1][0], kv[0])):
            t = self.tensors[r]
            nbytes = max(self.tensors[m].nbytes for m in groups[r])
            pool = pool_of(t) if pool_of else pools[0].name
            buffers.append(Buffer(t.name, t.category, align_up(nbytes, align), a, b,
                                  owner=self.op_label(t.op), pool=pool, nbytes=nbytes, key=self.tensor_key(r)))
        steps = [Step(s.index, s.kind, s.op, s.label) for s in self.steps]
        info = {"tensors": len(self.tensors), "aliases": len(self.aliases)}
        return BufferList(buffers, steps, list(pools), info, naive=self.naive_by_category(align, lt),
                          naive_means=NAIVE_TENSORS, training_graph=self)

    def naive_by_category(self, align: int = 16, lt: dict | None = None) -> dict[str, int]:
        """Every tensor the step touches (and every persistent one) its own aligned bytes, summed per
        category: aliases (in-place updates, views) count like any other tensor, a broadcast view
        its whole shape."""
        out = {c: 0 for c in CATEGORIES}
        for t in self.lifetimes() if lt is None else lt:
            spec = self.tensors[t]
            out[spec.category] += align_up(spec.dense_nbytes, align)
        return out
