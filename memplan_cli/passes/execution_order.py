"""Pass (stage training, last): the steps, in order, with each step's exact reads and writes."""
from __future__ import annotations

from memplan_cli.passes.infra import Pass


def backward_sequence(tg) -> list[int]:
    """Every op in the order backward visits them: the reverse of the forward order, unless the
    profile gave its runtime's own (`tg.backward_order`, e.g. onert's btopolSortOperations),
    which then comes first, the ops it leaves out after it in reverse forward order."""
    rev = list(reversed(tg.order))
    given = tg.backward_order
    if not given:
        return rev
    ops = set(rev)
    head = [k for k in dict.fromkeys(given) if k in ops]
    seen = set(head)
    return head + [k for k in rev if k not in seen]


def resolve(tg, k: int, ref) -> int:
    """Tensor id of a rule reference made by op k (see `passes.rules`)."""
    kind, v = ref
    if kind == "fwd":
        return tg.fwd[v]
    if kind == "bp":
        if v in tg.graph.operations[k].outputs:
            return tg.bp[v]
        return tg.contributions[(k, v)]
    if kind == "grad":  # a shared weight's contribution, else the gradient itself
        return tg.contributions.get((k, v), tg.grad[v])
    if kind == "extra":
        return tg.extras[k][v]
    raise ValueError(f"unknown rule reference {ref!r} in op #{k}")


def inplace_pairs(tg, steps):
    """(step, rule, src, dst) for each in-place pair of a step's rule whose output dst the step writes
    over an input src it reads, in another buffer. A generator: memory shared is judged as each pair
    comes (aliasing merges buffers between pairs)."""
    for s in steps:
        rule = tg.rules.get(s.op)
        for src_ref, dst_ref in (rule.inplace if rule is not None else ()):
            try:
                src, dst = resolve(tg, s.op, src_ref), resolve(tg, s.op, dst_ref)
            except KeyError:
                continue
            if dst in s.writes and src in s.reads and tg.root(src) != tg.root(dst):
                yield s, rule, src, dst


def inplace_results(tg, steps) -> set[tuple[int, int]]:
    """(step, tensor) for every result a step's rule may compute over one of its reads (an in-place
    pair whose output the step writes over an input it reads, in another buffer)."""
    return {(s.index, dst) for s, _, _, dst in inplace_pairs(tg, steps)}


class ExecutionOrder(Pass):
    """Rules (nntrainer's four-part order):
    - Forward steps: every op, the loss last, in the graph's deterministic topological order.
    - Then, for each op of the backward region in backward order (the reverse forward order, or the
      runtime's own when the profile gives it: `backward_sequence`): calcGradient (when its weights
      train), calcDerivative (when an input needs a back-prop; branch-point accumulations run at its
      end), applyGradient (the optimizer update of its weights: reads the gradient, reads and writes
      the weight and its state). Steps an op does not need are skipped. A shared weight's gradient
      contributions are accumulated at the end of each contributor's calcGradient, and its
      applyGradient runs with the op its gradient tensor belongs to (see backward insertion).
    - With `policy.apply_immediately` off, every applyGradient runs after the whole backward pass.
    """

    name = "execution-order"
    reads = frozenset({"graph", "order", "backward_order", "rules", "backward_ops", "fwd", "bp", "grad", "contributions",
             "extras", "opt_state", "tensors", "accumulate", "accumulate_grad"})
    writes = frozenset({"steps"})

    def __init__(self, policy):
        self.policy = policy

    def run(self, tg) -> bool:
        order = tg.order
        tg.steps = []

        def io(k, sio):
            return [resolve(tg, k, r) for r in sio.reads], [resolve(tg, k, r) for r in sio.writes]

        for k in order:
            r, w = io(k, tg.rules[k].forward)
            tg.add_step("forward", k, r, w)
        deferred = []
        applied: dict[int, list[int]] = {}
        for v, t in sorted(tg.grad.items()):
            applied.setdefault(tg.tensors[t].op, []).append(v)
        for k in backward_sequence(tg):
            if k not in tg.backward_ops:
                continue
            rule = tg.rules[k]
            if rule.calc_gradient is not None:
                tg.add_step("calcGradient", k, *io(k, rule.calc_gradient),
                            tg.accumulate_grad.get(k, []))
            if rule.calc_derivative is not None:
                r, w = io(k, rule.calc_derivative)
                tg.add_step("calcDerivative", k, r, w, tg.accumulate.get(k, []))
            mine = applied.get(k, [])
            weights = [v for v in dict.fromkeys(rule.weights) if v in mine] + [v for v in mine if v not in rule.weights]
            if weights:
                reads, writes = [], []
                for v in weights:
                    st = tg.opt_state.get(v, [])
                    reads += [tg.grad[v], tg.fwd[v]] + st
                    writes += [tg.fwd[v]] + st
                if self.policy.apply_immediately:
                    tg.add_step("applyGradient", k, reads, writes)
                else:
                    deferred.append((k, reads, writes))
        for k, reads, writes in deferred:
            tg.add_step("applyGradient", k, reads, writes)
        return True
