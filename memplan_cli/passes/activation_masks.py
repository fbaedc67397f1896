"""Pass (stage training, after backward insertion): ReLU-family derivatives from a 1-bit mask instead of the kept float output."""
from __future__ import annotations

from memplan_cli.passes.infra import Pass
from memplan_cli.passes.rules import FORWARD_TO_BACKWARD, ExtraRequest, maskable


class ActivationMasks(Pass):
    """Rules (`policy.relu_mask`):
    - A ReLU, ReLU6 or Clip (standalone or fused) has a derivative that is 1 where lo < y < hi and 0
      elsewhere, so its backward needs one bit per element of its output y, not y itself.
    - When no other op reads y (or a Reshape view of it) in backward (no consumer keeps it, e.g. as a
      Conv input for dW), the op's forward step writes a packed mask (uint8, ceil(n/8) bytes,
      FORWARD_TO_BACKWARD) and its backward reads the mask instead of y, so y dies after its last
      forward reader.
    - Runs after the rules are resolved and before the execution order is built.
    """

    name = "activation-masks"
    reads = frozenset({"graph", "order"})
    writes = frozenset({"rules", "extras", "tensors"})

    def __init__(self, policy):
        self.policy = policy

    def run(self, tg) -> bool:
        if not self.policy.relu_mask:
            return False
        g = tg.graph
        # a Reshape view and its input are one value: a reader of either keeps both
        view_of: dict[int, int] = {}
        for rule in tg.rules.values():
            if rule.view is not None:
                view_of[rule.view[0]] = rule.view[1]

        def base(v):
            while v in view_of:
                v = view_of[v]
            return v

        readers: dict[int, set[int]] = {}
        for k, rule in tg.rules.items():
            for v in rule.kept_forward():
                readers.setdefault(base(v), set()).add(k)
        changed = False
        for k in tg.order:
            op = g.operations[k]
            rule = tg.rules[k]
            if not maskable(op) or not rule.backward_steps():
                continue
            for y in op.outputs:
                if readers.get(base(y)) != {k} or g.operands[y].is_const:
                    continue
                n = g.operands[y].num_elements
                m = len(rule.extras)
                rule.extras.append(ExtraRequest("relu_mask", ((n + 7) // 8,), "uint8", FORWARD_TO_BACKWARD))
                tg.extras.setdefault(k, []).append(
                    tg.add_tensor(f"#{k}:relu_mask", "extra", ((n + 7) // 8,), "uint8", "extra:relu_mask", k, None))
                rule.forward.writes.append(("extra", m))
                for s in rule.backward_steps():
                    s.reads = [("extra", m) if r == ("fwd", y) else r for r in s.reads]
                changed = True
        return changed
