"""onert's TensorPlanner, replayed: the claim/release events of each planned category.

Each category gets its own event counter; a tensor's `first` is its claim event and `last` its
release event, so a planner that walks events in order (Bump, FirstFit) or orders claims by
`first` (WIC) sees exactly what onert's planner sees. Rules (`backend/train/TensorPlanner.cc`):
- trainable: claim every (used) constant, then release every one (no sharing).
- non-const: claim the operands with no forward def (x', y_true') first, in onert's unordered_map
  order (`stdhash.OnertReplay.zero_def`); forward order: claim outputs, release inputs at their last
  training use; essential backward order: release the inputs/outputs whose backward use ends;
  operands with no use (the loss) are released at the end. Tensors nothing reads or writes are
  not planned (UnusedOperandEliminationPass).
- back-prop: backward order: claim an op's non-const inputs at their first backward def, then
  release its outputs' back-props at their last backward use; unused ones (back-prop of x',
  y_true', a boundary activation) are released at the end.
- gradient: per backward op, claim the gradients it defines, then release them.
- disposable: per backward op, claim the partial back-props of its branching inputs, then release.
"""
from __future__ import annotations

from dataclasses import dataclass
from memplan_cli.profiles.onert.stdhash import unordered_order

ALIGN = 16


def aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


@dataclass
class Event:
    """One tensor of a category: `first`/`last` are claim/release event numbers (distinct)."""

    name: str
    size: int
    nbytes: int
    first: int
    last: int
    owner: str = ""
    key: object = None  # the TrainIR operand (or (op, operand) for a disposable) it belongs to


class _Timeline:
    def __init__(self):
        self.t = 0
        self.open: dict = {}
        self.done: list[Event] = []

    def claim(self, key, name, nbytes, owner=""):
        assert key not in self.open, key
        self.open[key] = Event(name, aligned(nbytes), nbytes, self.t, -1, owner, key)
        self.t += 1

    def release(self, key):
        ev = self.open.pop(key)
        ev.last = self.t
        self.t += 1
        self.done.append(ev)

    def events(self) -> list[Event]:
        assert not self.open, f"tensors never released: {list(self.open)}"
        return sorted(self.done, key=lambda e: e.first)


def _unused(ir) -> set:
    """Tensors no op reads or writes: UnusedOperandEliminationPass removes them."""
    return getattr(ir, "unused", set())


def plan_trainable(ir) -> list[Event]:
    tl = _Timeline()
    unused = _unused(ir)
    consts = [o for o in ir.operands if o.is_const and o.index not in unused]
    for o in consts:
        tl.claim(o.index, o.name, o.nbytes)
    for o in consts:
        tl.release(o.index)
    return tl.events()


def zero_def_claim_order(ir, candidates: list[int]) -> list[int]:
    """Order onert claims the operands that have no forward def (an unordered_map walk)."""
    return unordered_order(ir, candidates)


def plan_nonconst(ir) -> list[Event]:
    tl = _Timeline()
    ops = ir.ops
    unused = _unused(ir)
    nonconst = [o.index for o in ir.operands if not o.is_const and o.index not in unused]
    uses = {o: len(ir.uses[(o, True)]) for o in nonconst}
    defs = {o: len(ir.defs[(o, True)]) for o in nonconst}
    name = {o.index: o.name for o in ir.operands}
    nb = {o.index: o.nbytes for o in ir.operands}
    const = {o.index for o in ir.operands if o.is_const}

    for o in zero_def_claim_order(ir, [o for o in nonconst if defs[o] == 0]):
        tl.claim(o, name[o], nb[o], "input")
    until_end = [o for o in nonconst if uses[o] == 0]
    for k in ir.forward_order:
        op = ops[k]
        for o in ir.used_outputs(op):
            tl.claim(o, name[o], nb[o], op.label)
        for i in ir.used_inputs(op):
            if i in const:
                continue
            uses[i] -= 1
            if uses[i] == 0:
                tl.release(i)
    for k in ir.backward_order:
        op = ops[k]
        for i in ir.used_inputs(op) + ir.used_outputs(op):
            if i in const:
                continue
            if (k, False) in ir.uses[(i, True)]:
                uses[i] -= 1
                if uses[i] == 0:
                    tl.release(i)
    for o in until_end:
        tl.release(o)
    return tl.events()


def registered_backward(ir) -> tuple[list[int], list[int]]:
    """(back-prop operands, gradient operands): inputs of backward ops that have a backward def or use."""
    bp, grad = [], []
    seen = set()
    for k in ir.backward_order:
        for i in ir.used_inputs(ir.ops[k]):
            if i in seen:
                continue
            if not ir.defs[(i, False)] and not ir.uses[(i, False)]:
                continue
            seen.add(i)
            (grad if ir.operands[i].is_const else bp).append(i)
    return bp, grad


def plan_backprop(ir) -> list[Event]:
    tl = _Timeline()
    bp, _ = registered_backward(ir)
    reg = set(bp)
    uses = {o: len(ir.uses[(o, False)]) for o in bp}
    until_end = [o for o in bp if uses[o] == 0]
    allocated = set()
    for k in ir.backward_order:
        op = ir.ops[k]
        for i in ir.used_inputs(op):
            if i in reg and i not in allocated:
                allocated.add(i)
                tl.claim(i, "d" + ir.operands[i].name, ir.operands[i].nbytes, op.label)
        for o in ir.used_outputs(op):
            if o in reg and o in uses:
                uses[o] -= 1
                if uses[o] == 0:
                    tl.release(o)
    for o in until_end:
        tl.release(o)
    return tl.events()


def plan_gradient(ir) -> list[Event]:
    tl = _Timeline()
    _, grad = registered_backward(ir)
    reg = set(grad)
    for k in ir.backward_order:
        op = ir.ops[k]
        cur = []
        for i in ir.used_inputs(op):
            if i in reg and (k, False) in ir.defs[(i, False)]:
                tl.claim(i, "grad " + ir.operands[i].name, ir.operands[i].nbytes, op.label)
                cur.append(i)
        for i in cur:
            tl.release(i)
    return tl.events()


def disposables(ir) -> list[tuple[int, int]]:
    """(def op, operand) pairs: non-const operands with more than one backward def."""
    bp, _ = registered_backward(ir)
    out = []
    for o in bp:
        d = ir.defs[(o, False)]
        if len(d) > 1:
            out.extend((k, o) for k, _ in sorted(d))
    return out


def plan_disposable(ir) -> list[Event]:
    tl = _Timeline()
    pairs = set(disposables(ir))
    for k in ir.backward_order:
        op = ir.ops[k]
        cur = []
        for i in ir.used_inputs(op):
            if (k, i) in pairs:
                tl.claim((k, i), f"d{ir.operands[i].name}@{k}", ir.operands[i].nbytes, op.label)
                cur.append((k, i))
        for key in cur:
            tl.release(key)
    return tl.events()
