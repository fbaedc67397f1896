"""Pass (stage training, first): requires-grad analysis: which ops run backward and which operands need a back-prop."""
from __future__ import annotations

from memplan_cli import ops
from memplan_cli.passes.infra import Pass


def is_float(operand) -> bool:
    return operand.dtype.startswith(("float", "bfloat"))


def differentiable_inputs(op) -> list[int]:
    """The op's inputs a gradient can flow into: every present input but those the op registry
    declares non-differentiable (indices, shapes, a Where's condition); none for a `no_grad` op."""
    d = ops.get(op.type)
    if d is not None and d.no_grad:
        return []
    skip = set(d.nondiff_inputs) if d is not None else set()
    return [i for k, i in enumerate(op.inputs) if i >= 0 and k not in skip]


class BackwardRegion(Pass):
    """Rules (autograd's requires-grad, on the forward graph):
    - A tensor requires grad when it is a non-constant float computed by an op that trains, or by an
      op with a differentiable input that requires grad. Integer and boolean tensors (shapes,
      indices, masks) never do, nor do the outputs of ops the registry marks `no_grad` (Shape,
      Equal, ConstantOfShape, ...). Graph inputs and the label never do.
    - An op runs backward when the loss depends on it through differentiable inputs that require
      grad (no gradient passes through an int or bool tensor) and it trains
      or one of its differentiable inputs requires grad. An operand needs a back-prop when it
      requires grad and a backward op reads it as a differentiable input. Everything else runs
      forward only and keeps nothing for backward (as onert's `essentialBackwardOrder` prunes ops
      before the first trained one).
    - With `policy.input_backprop` (onert), every non-constant input of a backward op gets a
      back-prop too (the first trained op's input, the label), although nothing reads it.
    """

    name = "backward-region"
    reads = frozenset({"graph", "loss_op", "trainable_ops"})
    writes = frozenset({"defs", "order", "loss_ancestors", "backward_ops", "needs_bp"})

    def __init__(self, policy):
        self.policy = policy

    def run(self, tg) -> bool:
        g = tg.graph
        order = g.topological_order()
        defs = g.defs()
        tg.defs = defs
        tg.order = order
        diff = {k: differentiable_inputs(g.operations[k]) for k in order}
        requires: set[int] = set()
        for k in order:
            op = g.operations[k]
            if k in tg.trainable_ops or any(i in requires for i in diff[k]):
                if diff[k] or k in tg.trainable_ops:
                    requires.update(o for o in op.outputs
                                    if not g.operands[o].is_const and is_float(g.operands[o]))
        def walk_back(through: set[int] | None) -> set[int]:
            """The ops reached from the loss op back through differentiable inputs (those in `through`
            only, unless it is None)."""
            seen: set[int] = set()
            stack = [tg.loss_op]
            while stack:
                k = stack.pop()
                if k in seen:
                    continue
                seen.add(k)
                stack += [defs[i] for i in diff.get(k, g.operations[k].inputs)
                          if i in defs and (through is None or i in through)]
            return seen

        # ops the loss depends on through differentiable inputs
        tg.loss_ancestors = walk_back(None)
        # a gradient reaches an op only through tensors that require grad: not through a bool / int
        # tensor (a Cast to bool feeding the loss), so ops behind one run forward only
        reached = walk_back(requires)
        tg.backward_ops = {k for k in reached
                           if k in tg.trainable_ops or any(i in requires for i in diff.get(k, []))}
        tg.needs_bp = {i for k in tg.backward_ops for i in diff.get(k, []) if i in requires}
        if self.policy.input_backprop:
            for k in tg.backward_ops:
                tg.needs_bp.update(i for i in g.operations[k].inputs if i >= 0 and not g.operands[i].is_const)
        return bool(tg.backward_ops)
