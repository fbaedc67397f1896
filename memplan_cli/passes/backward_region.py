"""Pass 3: which ops run backward and which operands need a back-prop."""
from __future__ import annotations


class BackwardRegion:
    """Rules:
    - An operand needs a back-prop when it is non-constant, depends on the output of an op that
      trains (so a gradient flows through it), and the loss depends on it. Graph inputs, the label
      and everything before the first trained op need none: ops before the first trained op run
      forward only, as onert's `essentialBackwardOrder` prunes them.
    - An op runs backward when the loss depends on it and it trains or one of its inputs needs a
      back-prop.
    - With `policy.input_backprop` (onert), every non-constant input of a backward op gets a
      back-prop too (the first trained op's input, the label), although nothing reads it.
    """

    name = "backward-region"

    def __init__(self, policy):
        self.policy = policy

    def run(self, tg) -> bool:
        g = tg.graph
        order = g.topological_order()
        defs = g.defs()
        tg.info["defs"] = defs
        tg.info["order"] = order
        depends: set[int] = set()
        for k in order:
            op = g.operations[k]
            if k in tg.trainable_ops or any(i in depends for i in op.inputs if i >= 0):
                depends.update(o for o in op.outputs if not g.operands[o].is_const)
        # the loss depends on: walk back from the loss op
        anc_ops: set[int] = set()
        stack = [tg.loss_op]
        while stack:
            k = stack.pop()
            if k in anc_ops:
                continue
            anc_ops.add(k)
            stack += [defs[i] for i in g.operations[k].inputs if i >= 0 and i in defs]
        anc_operands = {i for k in anc_ops for i in g.operations[k].inputs if i >= 0}
        tg.needs_bp = {v for v in depends & anc_operands if not g.operands[v].is_const}
        tg.backward_ops = {k for k in anc_ops
                           if k in tg.trainable_ops or any(i in tg.needs_bp for i in g.operations[k].inputs)}
        if self.policy.input_backprop:
            for k in tg.backward_ops:
                tg.needs_bp.update(i for i in g.operations[k].inputs if i >= 0 and not g.operands[i].is_const)
        return bool(tg.backward_ops)
