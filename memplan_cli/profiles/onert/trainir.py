"""onert's training IR, rebuilt from a forward Graph: operands, ops, orders and training use-defs.

Rules (onert 0.1.0, `ir/train/UseDefGenerator.cc`, `TrainableGraph.cc`, `TrainingCompiler.cc`;
checked against the runtime, see tests/onert):
- Each graph input becomes the permuted copy x' (non-const, no def); a label y_true' shaped like
  the single model output and a Loss op (output shape [batch]: measured) are appended.
- A constant used by more than one op is duplicated, one copy per extra use.
- Backward is enabled for every op at or after the first trainable op (and the Loss); the
  essential backward order is the reverse DFS from the Loss, cut to ops reachable forward from a
  backward-enabled op, then to ops reachable forward from Conv2D / DepthwiseConv2D / FC.
- Forward orders come from `stdhash.OnertReplay`: TensorPlanner walks the train backend's partial
  graph in its topological order (`forward_order`), kernels are generated in the whole lowered
  graph's (`kernel_order`); onert picks each among a branching graph's topological orders by
  hash-container iteration order.
- Per-op backward uses/defs follow `UseDefGenerator::visit` (table in the research notes, 1.3).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from memplan_cli import ops as registry
from memplan_cli.errors import UnsupportedOpError
from memplan_cli.ops.loss import LOSS_TYPE
from memplan_cli.profiles.onert import support
from memplan_cli.profiles.onert.stdhash import OnertReplay, reverse_postorder



def activation(op) -> str:
    """The fused activation of `op` as TFLite names it ("NONE" when absent)."""
    a = op.attrs
    for key in ("activation", "fused_activation", "fused_activation_function"):
        if key in a and a[key] is not None:
            v = str(a[key]).upper()
            return "NONE" if v in ("", "LINEAR") else v
    return "NONE"


@dataclass
class TOperand:
    index: int
    name: str
    shape: tuple
    nbytes: int
    is_const: bool
    source: int  # operand index in the forward Graph (-1: added by onert)
    value: tuple | None = None  # a small int constant's values (a Reshape's shape, a Pad's paddings)


@dataclass
class TOp:
    index: int
    type: str
    inputs: list
    outputs: list
    attrs: dict
    label: str
    act: str = "NONE"


@dataclass
class TrainIR:
    operands: list
    ops: list
    forward_order: list
    backward_order: list  # essential backward order
    backward_enabled: set
    weight_update: set
    # (operand, is_forward) -> set of (op, is_forward) (UseDefs: empty when absent)
    uses: dict = field(default_factory=dict)
    defs: dict = field(default_factory=dict)
    x_inputs: list = field(default_factory=list)
    y_true: int = -1
    loss_out: int = -1
    # the order kernels are generated (the whole lowered graph's topological order): the print
    # order of the kernel-private ALLOC lines; `forward_order` is the partial graph's (TensorPlanner)
    kernel_order: list = field(default_factory=list)
    unused: set = field(default_factory=set)  # tensors nothing reads or writes (onert drops them)
    replay: object = None  # stdhash.OnertReplay: onert's containers, for its hash-map orders

    def used_inputs(self, op: TOp) -> list:
        """Inputs without -1 and without repeats (onert's Remove::UNDEFINED | DUPLICATED)."""
        return [i for i in dict.fromkeys(op.inputs) if i >= 0]

    def used_outputs(self, op: TOp) -> list:
        return [o for o in dict.fromkeys(op.outputs) if o >= 0]


def _fwd_uses(ops, n_operands):
    uses = {k: [] for k in range(n_operands)}
    for op in ops:
        for i in dict.fromkeys(op.inputs):
            if i >= 0:
                uses[i].append(op.index)
    return uses


def build_train_ir(graph, trainable_ops: set, stage: str = "train") -> TrainIR:
    """onert's training graph for `graph` (already re-batched) with weights updated for `trainable_ops`;
    refuses what onert cannot train (`support.check`; `stage="compile"`: only what stops its compile)."""
    if len(graph.outputs) != 1:
        # measured with onert 0.1.0: train_prepare fails, "LossInsertionPass: Not supported multiple outputs"
        raise UnsupportedOpError(f"onert 0.1.0 trains models with one output; this one has {len(graph.outputs)} "
                                 "(its LossInsertionPass: \"Not supported multiple outputs\")")
    operands = [TOperand(o.index, o.name, tuple(o.shape), o.nbytes, bool(o.is_const), o.index, o.value)
                for o in graph.operands]
    ops = [TOp(op.index, op.type, list(op.inputs), list(op.outputs), dict(op.attrs), op.label,
               activation(op)) for op in graph.operations]

    n_tensors = len(operands)
    used = set(graph.inputs) | set(graph.outputs)
    for op in ops:
        used.update(i for i in op.inputs + op.outputs if i >= 0)

    # constants shared by several ops: one copy per extra op using it, which gets every one of its
    # uses replaced (ConstantInsertionPass; an op using a constant twice keeps one)
    # (named NAME_copy, NAME_copy2, ...: one name per buffer, which verify's step maps back)
    seen: dict = {}
    for op in ops:
        for i in list(dict.fromkeys(op.inputs)):
            if i < 0 or not operands[i].is_const:
                continue
            if i in seen:
                src = operands[i]
                seen[i] += 1
                suffix = "_copy" if seen[i] == 2 else f"_copy{seen[i] - 1}"
                new = TOperand(len(operands), src.name + suffix, src.shape, src.nbytes, True, src.source,
                               src.value)
                operands.append(new)
                op.inputs = [new.index if (j == i) else j for j in op.inputs]
            else:
                seen[i] = 1

    y_pred = graph.outputs[0]
    yp = operands[y_pred]
    y_true = TOperand(len(operands), "y_true'", yp.shape, yp.nbytes, False, -1)
    operands.append(y_true)
    # the loss output is re-batched with the graph: one float per sample
    batch = yp.shape[0] if yp.shape else 1
    loss_out = TOperand(len(operands), "loss", (batch,), 4 * batch, False, -1)
    operands.append(loss_out)
    loss = TOp(len(ops), LOSS_TYPE, [y_pred, y_true.index], [loss_out.index], {}, f"#{len(ops)} {LOSS_TYPE}")
    ops.append(loss)

    replay = OnertReplay(n_tensors, set(range(n_tensors)) - used, list(graph.inputs), y_pred,
                         len(operands) - n_tensors - 2,
                         {o.index for o in operands[:n_tensors] if o.is_const},
                         [list(op.inputs) for op in graph.operations],
                         [list(op.outputs) for op in graph.operations])
    forward_order = replay.planner_order
    enabled = set()
    if trainable_ops:
        first = min(trainable_ops)
        enabled = {op.index for op in ops if op.index >= first}
    border = _btopol_sort(ops, operands)
    border = _truncate(border, ops, len(operands), lambda k: k in enabled)
    border = _truncate(border, ops, len(operands), lambda k: _weighted(ops[k].type))

    ir = TrainIR(operands, ops, forward_order, border, enabled, set(trainable_ops),
                 x_inputs=list(graph.inputs), y_true=y_true.index, loss_out=loss_out.index)
    ir.kernel_order = replay.kernel_order
    # tensors nothing reads or writes, and model inputs no op reads (they stay on the builtin
    # backend: onert plans neither)
    read = {i for op in graph.operations for i in op.inputs if i >= 0}
    ir.unused = (set(range(n_tensors)) - used) | {i for i in graph.inputs if i not in read}
    ir.replay = replay
    support.check(ir, stage)  # what onert 0.1.0 cannot train: one reason, before any figure
    _usedefs(ir)
    return ir


def _btopol_sort(ops, operands) -> list:
    """TrainableGraph::btopolSortOperations: post-order DFS from the Loss along input defs, reversed."""
    defs = {}
    for op in ops:
        for o in op.outputs:
            if o >= 0:
                defs[o] = op.index
    seen = set()

    def claim(k):
        if k in seen:
            return False
        seen.add(k)
        return True

    return reverse_postorder([ops[-1].index],
                             lambda k: [defs[i] for i in dict.fromkeys(ops[k].inputs) if i >= 0 and i in defs],
                             claim)


def _truncate(border, ops, n_operands, alive_cond) -> list:
    uses = _fwd_uses(ops, n_operands)
    alive = set()
    for k in reversed(border):
        if alive_cond(k):
            alive.add(k)
        if k in alive:
            for o in ops[k].outputs:
                if o >= 0:
                    alive.update(uses[o])
    return [k for k in border if k in alive]


class UseDefs(dict):
    """(operand, is_forward) -> set of (op, is_forward); an operand with none reads as an empty
    set without being stored (a large graph has four per operand, most of them empty)."""

    def __missing__(self, key):
        return _NONE

    def add(self, key, value) -> None:
        s = self.get(key)
        if s is None:
            self[key] = {value}
        else:
            s.add(value)


_NONE = frozenset()


def _weighted(op_type: str) -> bool:
    """Conv2D / DepthwiseConv2D / FullyConnected: the backward region is cut to ops reachable forward
    from one (its family's onert "weighted" fact)."""
    return bool((registry.profile_facts("onert", op_type) or {}).get("weighted"))


class _Chains:
    """What an op family's onert "usedef" fact records for the backward of op k."""

    def __init__(self, k, uses, defs, const):
        self.b, self.uses, self.defs, self.const = (k, False), uses, defs, const

    def use(self, operand) -> None:
        """The backward reads the forward value."""
        self.uses.add((operand, True), self.b)

    def bp_def(self, operand) -> None:
        """The backward defines the operand's back-prop (none for a constant)."""
        if operand not in self.const:
            self.defs.add((operand, False), self.b)

    def grad_def(self, operand) -> None:
        """The backward defines the operand's gradient (a weight's, a bias's)."""
        self.defs.add((operand, False), self.b)

    def drop_incoming(self, operand) -> None:
        """The backward reads no incoming back-prop of the operand (the loss starts it)."""
        s = self.uses.get((operand, False))
        if s:
            s.discard(self.b)


def _usedefs(ir: TrainIR) -> None:
    """Training use-def chains, as UseDefGenerator builds them."""
    uses, defs = UseDefs(), UseDefs()
    for op in ir.ops:
        f = (op.index, True)
        for o in op.outputs:
            if o >= 0:
                defs.add((o, True), f)
        for i in op.inputs:
            if i >= 0:
                uses.add((i, True), f)

    const = {o.index for o in ir.operands if o.is_const}

    for k in ir.backward_order:
        op = ir.ops[k]
        uses.add((op.outputs[0], False), (k, False))  # the incoming back-prop
        usedef = (registry.profile_facts("onert", op.type) or {}).get("usedef")
        if usedef is not None:  # the op family's onert facts (UseDefGenerator::visit)
            usedef(op, _Chains(k, uses, defs, const))
    ir.uses, ir.defs = uses, defs
