"""Pass (stage training, after backward region): resolve every op's rule and create the tensors training needs."""
from __future__ import annotations

from memplan_cli import ops
from memplan_cli.errors import UnsupportedOpError
from memplan_cli.ir.graph import broadcasts_to
from memplan_cli.ops.rule import plain_rule
from memplan_cli.passes.backward_region import differentiable_inputs
from memplan_cli.passes.infra import Pass
from memplan_cli.passes.rules import RULE_READS, RuleContext


def _check_parameters_train(tg, ctx, op, rule) -> None:
    """A selected op the loss depends on: every parameter whose values it reads in a differentiable
    position is one of its rule's weights. An input read only for its shape or as an index (a `no_grad`
    op's, a declared `nondiff_inputs` position: Shape of a weight, Reshape's shape) carries no
    gradient in autograd either, so nothing is missing there; an op state is not a parameter."""
    d = ops.get(op.type)
    diff = set(differentiable_inputs(op))
    state = {op.inputs[k] for k in (d.state_inputs if d is not None else ()) if k < len(op.inputs)}
    for pos, i in enumerate(op.inputs):
        if i not in diff or i in state or not ctx.is_param(i) or i in rule.weights:
            continue
        raise UnsupportedOpError(
            f"op #{op.index} {op.type} reads parameter '{tg.graph.operands[i].name}' (input {pos}), which "
            f"memplan's rule for {op.type} does not train: its gradient would be missing (freeze it with "
            f"--freeze params:NAME, or train fewer ops)")


class BackwardInsertion(Pass):
    """Rules:
    - Each op gets the rule registered for its type (profile overrides first, then the op registry's,
      `memplan_cli/ops/`). An op inside the backward region without a rule is an `UnsupportedOpError`
      naming the op and its index; an op outside it without a rule just runs forward (reads its
      inputs, writes its outputs).
    - Backward steps a rule returns for an op outside the backward region are dropped.
    - A parameter whose values a selected op the loss depends on reads must be one of the rule's
      weights: otherwise `UnsupportedOpError`, never a gradient silently left out (a rule written for
      activations only, as BatchNormalization's was for a standardized weight). A position no gradient
      flows through (`differentiable_inputs`: a `no_grad` op's inputs, such as Shape of a weight, and
      the registry's `nondiff_inputs`) or an op state (`state_inputs`) is not such a read.
    - Forward tensors: one per operand some op or graph input / output touches. Non-constants are
      category non-const (role input, label, activation or loss); constants are category trainable
      and persistent (role weight when an op trains it, frozen-weight for other float constants,
      constant for integer ones such as a Reshape shape); a constant folded from a broadcast that no
      op trains holds only the values it repeats (`Policy.broadcast_views`: `TensorSpec.stored`).
      A tensor's `op` is its defining op, or for
      constants and graph inputs the first op that reads it (so per-layer views group weights with
      their layer).
    - One back-prop tensor (category back-prop) per operand that needs one; one gradient tensor
      (category gradient) per weight of an op that trains; one tensor per extra request (category
      extra, role `extra:<what>`).
    - A weight several trained ops read (tied embeddings, one bias used twice) has one gradient, to
      which each of them contributes (the accumulation pass splits the contributions). Its tensor
      belongs to the op whose backward runs last among the contributors and the ops whose backward
      steps read the weight, so its applyGradient runs after every contribution and after every
      backward read of the old value.
    """

    name = "backward-insertion"
    reads = RULE_READS | frozenset({"order", "loss_ancestors", "selected_ops", "loss_outputs", "label", "labels"})
    writes = frozenset({"rules", "tensors", "persistent", "fed", "live_out", "fwd", "extras", "bp", "grad"})

    def __init__(self, policy, rules: dict):
        self.policy = policy
        self.rules = rules

    def run(self, tg) -> bool:
        g = tg.graph
        ctx = RuleContext(tg, self.policy)
        loss_ancestors = tg.loss_ancestors
        selected = tg.selected_ops
        for k in tg.order:
            op = g.operations[k]
            fn = self.rules.get(op.type)
            if fn is None:
                if k in tg.backward_ops:
                    src = f" (source op {op.source_type})" if op.source_type and op.source_type != op.type else ""
                    heads = tg.loss_outputs
                    other = (f", or put the loss on other outputs with --loss-outputs (now {', '.join(heads)})"
                             if len(heads) > 1 else "")
                    e = UnsupportedOpError(
                        f"op #{k} {op.type}{src} is inside the backward region but memplan has no backward "
                        f"rule for it (train fewer ops with --trainable-ops N{other})")
                    # build_training_graph replaces the hint by an N it has checked (`trainable_hint`)
                    e.op_index, e.hint_tail = k, other
                    raise e
                rule = plain_rule(op)
            else:
                rule = fn(op, ctx)
            if fn is not None and k in loss_ancestors and k in selected:
                _check_parameters_train(tg, ctx, op, rule)
            if k not in tg.backward_ops:
                rule.calc_gradient = rule.calc_derivative = None
            tg.rules[k] = rule

        weight_ops = _apply_ops(tg)
        used = set(g.inputs) | set(g.outputs)
        first_use: dict[int, int] = {}
        for k in tg.order:
            op = g.operations[k]
            used.update(i for i in op.inputs + op.outputs if i >= 0)
            for i in op.inputs:
                first_use.setdefault(i, k)
        for o in g.operands:
            if o.index not in used:
                continue
            if o.is_const:
                is_float = o.dtype.startswith(("float", "bfloat"))
                role = "weight" if o.index in weight_ops else ("frozen-weight" if is_float else "constant")
                # a broadcast no step writes (never a trained weight) holds only the values it repeats
                stored = (o.broadcast_of if self.policy.broadcast_views and role != "weight"
                          and o.broadcast_of is not None and broadcasts_to(o.broadcast_of, tuple(o.shape))
                          else None)
                t = tg.add_tensor(o.name, "trainable", o.shape, o.dtype, role, first_use.get(o.index), o.index,
                                  stored=stored)
                tg.persistent.add(t)
            else:
                d = tg.defs.get(o.index, first_use.get(o.index))
                role = ("label" if o.index in (tg.labels or [tg.label]) else "input" if o.index in g.inputs
                        else "loss" if o.index in g.outputs else "activation")
                t = tg.add_tensor(o.name, "non-const", o.shape, o.dtype, role, d, o.index)
                if o.index in g.inputs:
                    tg.fed.add(t)
                if o.index in g.outputs:
                    tg.live_out.add(t)
            tg.fwd[o.index] = t
        for k in tg.order:
            rule = tg.rules[k]
            ids = []
            for e in rule.extras:
                ids.append(tg.add_tensor(f"#{k}:{e.what}", "extra", e.shape, e.dtype, f"extra:{e.what}", k, None))
            tg.extras[k] = ids
        for v in sorted(tg.needs_bp):
            o = g.operands[v]
            tg.bp[v] = tg.add_tensor(f"{o.name}:bp", "back-prop", o.shape, o.dtype, "back-prop",
                                     tg.defs.get(v), v)
        for w, k in sorted(weight_ops.items()):
            o = g.operands[w]
            tg.grad[w] = tg.add_tensor(f"{o.name}:grad", "gradient", o.shape, o.dtype, "gradient", k, w)
        return True


def _apply_ops(tg) -> dict[int, int]:
    """weight operand -> the op after whose backward its gradient is applied: of the trained ops that
    contribute to its gradient and the backward ops whose backward steps read its value, the one
    whose backward runs last (the earliest in forward order)."""
    pos = {k: n for n, k in enumerate(tg.order)}
    trained: dict[int, list[int]] = {}
    for k, rule in tg.rules.items():
        if k in tg.trainable_ops and k in tg.backward_ops:
            for w in dict.fromkeys(rule.weights):
                trained.setdefault(w, []).append(k)
    # one scan of the backward reads, not one per weight (linear in the graph)
    readers: dict[int, list[int]] = {}
    for k in tg.backward_ops:
        for s in tg.rules[k].backward_steps():
            for r in s.reads:
                if len(r) == 2 and r[0] == "fwd" and r[1] in trained:
                    readers.setdefault(r[1], []).append(k)
    return {w: min(ks + readers.get(w, []), key=lambda k: pos[k]) for w, ks in trained.items()}
