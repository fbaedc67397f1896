"""Operands and operations of one model graph, with use-def chains.

Op types are canonical names shared by every loader (the op registry's, `memplan_cli/ops/`), so
passes never look at a file format. `source_type` keeps what the file called the op, for display.
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

from memplan_cli.errors import one_line
from memplan_cli.ir.dtypes import dtype_size


@dataclass(slots=True)  # 10^5 of each for a large graph
class Operand:
    """One tensor of the graph. `shape` is static after loading (dynamic dims resolved)."""

    index: int
    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"
    is_const: bool = False
    is_input: bool = False
    is_output: bool = False
    # values of a small integer constant that decides shapes (Reshape shape, Pad paddings, Mean axes),
    # or of a float scalar (an epsilon, a scale: verify runs with it); None for everything else:
    # loaders never read weights
    value: tuple | None = None
    # a constant the graph computes from shapes, fills and indices (an attention mask built with
    # ConstantOfShape and ScatterND, folded at load): a buffer, never a trainable parameter
    computed: bool = False
    # a float constant whose file could not tell whether it is a parameter of the source model
    # (loaders/params.py): it trains, and reports list it as "assumed trainable"
    assumed: bool = False
    # the file's parameters a constant folded at load was computed from (a weight the exporter
    # transposed: TorchScript's `Transpose_output_0`), so `params:` globs find it by their names
    sources: tuple[str, ...] = ()
    # a constant that is a broadcast (a folded Expand) of values of this smaller shape: the values
    # its storage needs, the rest is a stride-0 view of them (PyTorch's `expand`); None: its own shape
    broadcast_of: tuple[int, ...] | None = None

    @property
    def num_elements(self) -> int:
        return math.prod(self.shape) if self.shape else 1

    @property
    def nbytes(self) -> int:
        return self.num_elements * dtype_size(self.dtype)


def broadcasts_to(src: tuple, dst: tuple) -> bool:
    """Whether values of shape `src` broadcast to shape `dst` (NumPy's and ONNX's rule: trailing
    dimensions aligned, each equal or 1 in `src`) while holding fewer elements."""
    if len(src) > len(dst) or math.prod(src) >= math.prod(dst):
        return False
    return all(a in (1, b) for a, b in zip(reversed(src), reversed(dst)))


# Planners and reports do int64 arithmetic on sums of sizes: a per-operand cap of 2^48 bytes
# keeps any training step's total far below 2^63 for every graph that fits in memory.
MAX_OPERAND_BYTES = 2**48
# A tensor of more dims is refused at load: the product of 100,000 huge dims is a bigint whose
# computation took minutes. No exporter writes more than a few dozen; NumPy stops at 64.
MAX_RANK = 1024
# Graph.metadata key: what the ONNX loader keeps of a dynamo export's own records (Graph.export_record)
TORCH_EXPORT = "torch_export"
# Graph.metadata key: the eager calls a dynamo export recorded that constant folding computed at load
# (opgraph/fold.py: {"op", "type", "outputs", "bytes"} each), which the torch profile does not count
FOLDED_CALLS = "folded_calls"
# Graph.metadata key: constants a file computes with its own ops from fills, shapes, indices and scalars
# (no parameter), folded at load (loaders/onnx_fold.py, opgraph/fold.py): name -> the op type that made
# it. The file stores no such tensor; the source computes it each run (a causal mask, a relative-position
# index)
COMPUTED_CONSTANTS = "computed_constants"
# Graph.metadata key: a constant folded at load from one float constant by an op that only moves or
# narrows its values (a Slice, Transpose, Reshape, Squeeze, Unsqueeze, Cast, Identity; opgraph/fold.py):
# name -> the name of the constant it was folded from, so a chain leads back to the tensor the file
# started from (a module's `zeros_like(query)` the dynamo exporter stores whole, then slices)
FOLDED_FROM = "folded_from_constant"


@dataclass(slots=True)
class Operation:
    """One op. `inputs` may hold -1 for an absent optional input (e.g. no bias)."""

    index: int
    type: str
    inputs: list[int]
    outputs: list[int]
    attrs: dict = field(default_factory=dict)
    source_type: str = ""
    name: str = ""
    # the module path an exporter recorded for the op (torch.onnx's name scopes), for matching by name
    scope: str = ""
    # the eager call torch.onnx's dynamo exporter recorded for the op (`pkg.torch.onnx.fx_node`: the aten
    # target and its arguments), "" when absent; `--profile torch` reads arguments the ONNX ops lost
    call: str = ""

    @property
    def label(self) -> str:
        return f"#{self.index} {self.type}" + (f" ({self.name})" if self.name else "")


class GraphError(ValueError):
    """The graph is not a valid DAG (cycle, dangling index, double definition)."""


class OpContractError(GraphError):
    """An op outside what memplan's rules understand (`verify`'s op_check): said of the op, which a
    valid file may well hold (a PADV2 fill memplan cannot read), not of the file."""


@dataclass
class Graph:
    operands: list[Operand]
    operations: list[Operation]
    inputs: list[int]
    outputs: list[int]
    name: str = ""
    # the format the graph was loaded from ("circle", "tflite", "onnx"), for display only
    source_format: str = ""
    # facts a loader found in the file that training setup may use (e.g. circle training metadata)
    metadata: dict = field(default_factory=dict)
    # things a loader or a rewrite guessed or ignored, for reports (e.g. "3 subgraphs: read subgraph 0")
    warnings: list = field(default_factory=list)

    def __post_init__(self):
        self._printable_names()
        self._unique_operand_names()

    def _printable_names(self) -> None:
        """Names come from the file: control characters in them (a newline, ESC sequences that clear
        or retitle a terminal) are shown escaped (\\n, \\x1b) in every report, and the graph says so once."""
        changed = 0
        for x in [*self.operands, *self.operations, self]:
            for attr in ("name", "source_type", "scope"):
                v = getattr(x, attr, None)
                if isinstance(v, str) and not v.isprintable():
                    new = one_line(v)
                    if new != v:
                        setattr(x, attr, new)
                        changed += 1
        if changed:
            self.warnings.append(f"{changed} name(s) in the file hold control characters: shown escaped (\\n, \\x1b)")

    def _unique_operand_names(self) -> None:
        """Files may name two tensors alike (TFLite and ONNX allow it). Identity inside memplan is
        the index (`Buffer.key`), but reports and runtime mappings show names, so a repeated name
        is shown as `NAME#INDEX` from its second use on, and the graph says so once."""
        seen: set[str] = set()
        renamed = 0
        for o in self.operands:
            if o.name in seen:
                new = f"{o.name}#{o.index}"
                while new in seen:
                    new += "'"
                o.name = new
                renamed += 1
            seen.add(o.name)
        if renamed:
            self.warnings.append(f"{renamed} tensor(s) share a name with an earlier tensor: shown as NAME#INDEX")

    # ---- use-def -------------------------------------------------------------------------
    def defs(self) -> dict[int, int]:
        """operand index -> index of the op that defines it (graph inputs and constants have none)."""
        d: dict[int, int] = {}
        for op in self.operations:
            for o in op.outputs:
                if o in d:
                    raise GraphError(f"operand {o} is defined by ops {d[o]} and {op.index}")
                d[o] = op.index
        return d

    def uses(self) -> dict[int, list[int]]:
        """operand index -> indices of the ops that read it, in op order (a repeated input counts once)."""
        u: dict[int, list[int]] = {o.index: [] for o in self.operands}
        for op in self.operations:
            for i in dict.fromkeys(op.inputs):
                if i >= 0:
                    u[i].append(op.index)
        return u

    # ---- checks --------------------------------------------------------------------------
    def verify(self, op_check=None) -> None:
        """Raise GraphError unless every index is in range, each operand has one def, and the graph is
        acyclic. `op_check(op, operands) -> problem or None`: what each op must also satisfy (the op
        registry's contracts: `memplan_cli.opgraph.contract.verify` passes them; the IR knows no op)."""
        n = len(self.operands)
        for k, o in enumerate(self.operands):
            if o.index != k:
                raise GraphError(f"operand at position {k} has index {o.index}")
            if len(o.shape) > MAX_RANK:
                raise GraphError(f"operand {o.index} ({o.name}) has {len(o.shape):,d} dimensions, over the "
                                 f"{MAX_RANK} memplan reads")
            if any(d < 0 for d in o.shape):
                raise GraphError(f"operand {o.index} ({o.name}) has a negative dimension {list(o.shape)}")
            if o.nbytes > MAX_OPERAND_BYTES:
                raise GraphError(f"operand {o.index} ({o.name}) of shape {list(o.shape)} needs {o.nbytes:,d} bytes, "
                                 f"over the {MAX_OPERAND_BYTES:,d} memplan plans (2^48: no device trains that)")
        for k, op in enumerate(self.operations):
            if op.index != k:
                raise GraphError(f"operation at position {k} has index {op.index}")
            for i in op.inputs + op.outputs:
                if i >= n or i < -1:
                    raise GraphError(f"op {op.label} refers to operand {i}, but the graph has {n}")
        for i in self.inputs + self.outputs:
            if not 0 <= i < n:
                raise GraphError(f"graph input/output {i} is out of range (the graph has {n} operands)")
        for op in self.operations if op_check is not None else ():
            why = op_check(op, self.operands)
            if why:
                raise OpContractError(f"op {op.label} {why}")
        why = check_operands_are_defined(self)
        if why:
            raise GraphError(why)
        self.defs()
        self.topological_order()

    def topological_order(self) -> list[int]:
        """Op indices in a deterministic topological order (Kahn's algorithm, lowest index first).

        Raises GraphError naming the ops on a cycle.
        """
        defs = self.defs()
        # the usual case, in one pass: every op reads only what earlier ops wrote, so lowest index
        # first is the file's own order (Kahn's algorithm below would return it too)
        in_order = True
        for op in self.operations:
            for i in op.inputs:
                d = defs.get(i) if i >= 0 else None
                if d is not None and d >= op.index:
                    in_order = False
                    break
            if not in_order:
                break
        if in_order:
            return list(range(len(self.operations)))
        preds: list[set[int]] = [set() for _ in self.operations]
        succs: list[set[int]] = [set() for _ in self.operations]
        for op in self.operations:
            for i in op.inputs:
                if i >= 0 and i in defs and defs[i] != op.index:
                    preds[op.index].add(defs[i])
                    succs[defs[i]].add(op.index)
                elif i >= 0 and defs.get(i) == op.index:
                    raise GraphError(f"op {op.label} reads its own output (operand {i}): a cycle")
        indeg = [len(p) for p in preds]
        ready = [k for k, d in enumerate(indeg) if d == 0]
        heapq.heapify(ready)
        order: list[int] = []
        while ready:
            k = heapq.heappop(ready)
            order.append(k)
            for s in sorted(succs[k]):
                indeg[s] -= 1
                if indeg[s] == 0:
                    heapq.heappush(ready, s)
        if len(order) != len(self.operations):
            stuck = sorted(set(range(len(self.operations))) - set(order))
            names = ", ".join(self.operations[k].label for k in stuck[:5])
            raise GraphError(f"the graph has a cycle through {names}")
        return order

    def input_batch(self) -> int | None:
        """The first dimension of the first input (the batch the graph is shaped for), if it has one."""
        try:
            shape = self.operands[self.inputs[0]].shape
            return int(shape[0]) if shape else None
        except (IndexError, TypeError, ValueError):
            return None

    # ---- a dynamo export's records (the one reader of Graph.metadata[TORCH_EXPORT]) ---------
    def export_record(self) -> dict | None:
        """What the ONNX loader kept of a dynamo export's own records (the optimizer's rewrites, the
        graph signature, source lines, `folded_from`, ...); None for a file without them (a TorchScript
        export, a flatbuffer)."""
        return (self.metadata or {}).get(TORCH_EXPORT)

    def signature(self) -> dict:
        """The dynamo graph signature: {placeholder: (kind, target)}, kind "PARAMETER", "BUFFER",
        "USER_INPUT", ...; {} for other files."""
        return (self.export_record() or {}).get("signature") or {}

    def signature_parameters(self) -> set[str]:
        """The dynamo graph signature's parameters (their targets: module paths); empty for other files."""
        return {t for kind, t in self.signature().values() if kind == "PARAMETER"}

    def folded_from(self) -> dict:
        """{constant: the signature targets the dynamo exporter's optimizer records it was folded from}
        (`pkg.onnxscript.optimizer.folded_from`); {} for other files."""
        return (self.export_record() or {}).get("folded_from") or {}

    # ---- sizes ---------------------------------------------------------------------------
    def parameter_count(self) -> int:
        """Elements of float constants (weights and biases; not int shape/axes constants, nor the
        buffers an exporter computed: `Operand.computed`)."""
        return sum(o.num_elements for o in self.operands
                   if o.is_const and not o.computed and o.dtype.startswith(("float", "bfloat")))

    def activation_bytes(self) -> int:
        """Bytes of every non-constant operand (graph inputs included)."""
        return sum(o.nbytes for o in self.operands if not o.is_const)

    def constant_bytes(self) -> int:
        return sum(o.nbytes for o in self.operands if o.is_const)


def check_operands_are_defined(graph) -> str | None:
    """A non-constant operand that some op or the loss reads (a graph output) must be a graph input or
    some op's output: an operand with neither data nor a producer has no value (a corrupt buffer
    index, for one)."""
    defined = set(graph.inputs)
    for op in graph.operations:
        defined.update(i for i in op.outputs if i >= 0)
    for op in graph.operations:
        for i in op.inputs:
            if i >= 0 and not graph.operands[i].is_const and i not in defined:
                o = graph.operands[i]
                return (f"op {op.label} reads operand {i} ({o.name}), which is neither constant, "
                        "a graph input, nor any op's output")
    for i in graph.outputs:  # the loss reads it: an output nothing computes has no value either
        if 0 <= i < len(graph.operands) and not graph.operands[i].is_const and i not in defined:
            return (f"graph output {i} ({graph.operands[i].name}) is neither constant, a graph input, "
                    "nor any op's output")
    return None
