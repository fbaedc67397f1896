"""Pass (stage training, after activation masks): back-prop contributions at branch points."""
from __future__ import annotations

from memplan_cli.passes.execution_order import backward_sequence
from memplan_cli.passes.infra import Pass


class Accumulation(Pass):
    """Rules:
    - An operand whose back-prop several backward ops contribute to (a branch point, e.g. a residual
      block's input) gets one contribution per consumer, accumulated into its back-prop in the
      consumer's calcDerivative step (`StepSpec.accumulate`).
    - Each contribution is a disposable tensor (category disposable) living in that one step;
      with `policy.accumulate_in_place` the first contributor in backward order writes straight into
      the back-prop instead, so a branch point with n consumers needs n-1 disposables.
    - A single contributor writes the back-prop directly.
    - Contributions accumulate in backward order (`backward_sequence`: a runtime's own when the
      profile gives it), which decides the floating-point sum.
    - The same for a weight's gradient that several trained ops contribute to (a shared weight):
      each calcGradient step writes its own contribution, accumulated into the gradient at the end of
      that step; the first contributor in backward order writes the gradient itself under
      `policy.accumulate_in_place`.
    """

    name = "accumulation"
    reads = frozenset({"graph", "order", "backward_order", "rules", "bp", "grad"})
    writes = frozenset({"contributions", "tensors", "accumulate", "accumulate_grad"})

    def __init__(self, policy):
        self.policy = policy

    def run(self, tg) -> bool:
        g = tg.graph
        contributors: dict[int, list[int]] = {}
        for k in backward_sequence(tg):
            rule = tg.rules[k]
            if rule.calc_derivative is None:
                continue
            inputs = set(g.operations[k].inputs)  # a set: a Concat may have 10^4 inputs
            for kind, v in rule.calc_derivative.writes:
                if kind == "bp" and v in inputs and v in tg.bp:
                    contributors.setdefault(v, []).append(k)
        changed = False
        tg.accumulate = acc = {}
        for v, ops in contributors.items():
            if len(ops) == 1:
                tg.contributions[(ops[0], v)] = tg.bp[v]
                continue
            o = g.operands[v]
            for n, k in enumerate(ops):
                if n == 0 and self.policy.accumulate_in_place:
                    tg.contributions[(k, v)] = tg.bp[v]
                    continue
                t = tg.add_tensor(f"{o.name}:bp@{k}", "disposable", o.shape, o.dtype, "disposable", k, v)
                tg.contributions[(k, v)] = t
                acc.setdefault(k, []).append((t, tg.bp[v], n == 0))
                changed = True
        return self._gradients(tg) or changed

    def _gradients(self, tg) -> bool:
        g = tg.graph
        contributors: dict[int, list[int]] = {}
        for k in backward_sequence(tg):
            rule = tg.rules[k]
            if rule.calc_gradient is None:
                continue
            for kind, w in dict.fromkeys(rule.calc_gradient.writes):
                if kind == "grad" and w in tg.grad:
                    contributors.setdefault(w, []).append(k)
        tg.accumulate_grad = acc = {}
        for w, ops in contributors.items():
            if len(ops) == 1:
                continue
            o = g.operands[w]
            for n, k in enumerate(ops):
                if n == 0 and self.policy.accumulate_in_place:
                    continue  # writes the gradient itself
                t = tg.add_tensor(f"{o.name}:grad@{k}", "disposable", o.shape, o.dtype, "disposable", k, w)
                tg.contributions[(k, w)] = t  # a weight never has a back-prop: no clash with those keys
                acc.setdefault(k, []).append((t, tg.grad[w], n == 0))
        return bool(acc)
