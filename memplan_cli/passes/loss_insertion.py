"""Pass 2: append the loss op and one label input per output that carries a loss."""
from __future__ import annotations

import copy
from fnmatch import fnmatchcase

from memplan_cli.errors import ConfigError
from memplan_cli.ir.graph import Operand, Operation

# why a weight gets no gradient although its op trains (report: table note and JSON `frozen_weights`)
NO_LOSS_REASON = "no loss depends on it (it feeds only outputs without a loss)"


def _is_float(o) -> bool:
    return o.dtype.startswith(("float", "bfloat"))


def output_label(graph, o: int) -> str:
    """An output's name as a user reads it: its signature name when the file has one (a TF Lite
    file's Keras output name), else its tensor name."""
    return ((getattr(graph, "metadata", None) or {}).get("output_names") or {}).get(o) or graph.operands[o].name


def _carries_gradient(graph, o: int) -> bool:
    """Whether a gradient can flow back from output o: not one of a `no_grad` op's outputs, nor at a
    position its op declares non-differentiable (BatchNormalization's running statistics)."""
    from memplan_cli import ops

    for op in graph.operations:
        if o in op.outputs:
            d = ops.get(op.type)
            return d is None or not (d.no_grad or op.outputs.index(o) in d.nondiff_outputs)
    return True


def loss_outputs(graph, patterns=()) -> list[int]:
    """Operand indices of the model outputs that carry a loss, in the file's output order.

    Default: every float, non-constant output a gradient can flow back from (not an integer output
    such as an argmax index, nor BatchNormalization's running statistics); when none can, the first
    output, as memplan did before (nothing then trains: the report says so). `patterns` (`--loss-outputs`): output names or globs (matched against the tensor name
    and the signature name, `output_label`); each must match an output and
    every output it names must be a float, non-constant one (ConfigError otherwise)."""
    outs = list(dict.fromkeys(graph.outputs))
    ops = graph.operands
    if not outs:
        raise ConfigError("the model has no output to attach a loss to")
    listing = ", ".join(output_label(graph, o) for o in outs)
    if patterns:
        chosen: set[int] = set()
        for p in patterns:
            hit = {o for o in outs if fnmatchcase(ops[o].name, p) or fnmatchcase(output_label(graph, o), p)}
            if not hit:
                raise ConfigError(f"--loss-outputs {p} matches no model output (the outputs: {listing})")
            chosen |= hit
        for o in sorted(chosen):
            if ops[o].is_const:
                raise ConfigError(f"--loss-outputs: output {output_label(graph, o)} is a constant; there is nothing to train")
            if not _is_float(ops[o]):
                raise ConfigError(f"--loss-outputs: output {output_label(graph, o)} is {ops[o].dtype}; a loss needs "
                                  "a float output")
            if not _carries_gradient(graph, o):
                raise ConfigError(f"--loss-outputs: no gradient flows back from output {output_label(graph, o)} "
                                  "(its op's output there is not differentiable, e.g. running statistics)")
        return [o for o in outs if o in chosen]
    chosen_list = [o for o in outs if not ops[o].is_const and _is_float(ops[o]) and _carries_gradient(graph, o)]
    if not chosen_list:
        if ops[outs[0]].is_const:
            raise ConfigError(f"the model output {ops[outs[0]].name} is a constant; there is nothing to train")
        return outs[:1]
    return chosen_list


class LossInsertion:
    """Rules:
    - A loss is attached to every float, non-constant model output (`loss_outputs`), or to the
      outputs `--loss-outputs` names: a user trains every head of a multi-head model. The loss is one
      op `Loss` after the model with inputs (y_pred_1, label_1, y_pred_2, label_2, ...) and a scalar
      float32 output `loss`, the sum of one `config.loss` (mse or cce) per output.
    - Each label is a new graph input with its y_pred's shape and dtype, named `label` when one
      output carries a loss, else `<output name>:label`.
    - The loss value is the training graph's only output (read after the step); the y_preds are
      ordinary activations. Outputs without a loss stay computed in forward but no gradient flows
      from them: weights only they depend on get none (`unreached_weights`).
    """

    name = "loss-insertion"

    def run(self, tg) -> bool:
        g = tg.graph
        preds = loss_outputs(g, getattr(tg.config, "loss_outputs", ()))
        taken = {o.name for o in g.operands}  # a model may name a tensor "label" or "loss" itself

        def fresh(name: str, n: int) -> str:
            return name if name not in taken else f"{name}#{n}"

        inputs, labels = [], []
        for y_pred in preds:
            yp = g.operands[y_pred] = copy.copy(g.operands[y_pred])
            n = len(g.operands)
            label = Operand(n, fresh("label" if len(preds) == 1 else f"{output_label(g, y_pred)}:label", n), tuple(yp.shape),
                            yp.dtype, is_input=True)
            yp.is_output = False
            g.operands.append(label)
            inputs += [y_pred, label.index]
            labels.append(label.index)
        n = len(g.operands)
        loss = Operand(n, fresh("loss", n), (1,), "float32", is_output=True)
        g.operands.append(loss)
        for o in g.outputs:  # outputs without a loss are no longer read after the step
            if g.operands[o].is_output and o not in preds:
                g.operands[o] = copy.copy(g.operands[o])
                g.operands[o].is_output = False
        op = Operation(len(g.operations), "Loss", inputs, [loss.index], {"loss": tg.config.loss},
                       source_type=tg.config.loss.upper(), name=tg.config.loss)
        g.operations.append(op)
        g.inputs = list(g.inputs) + labels
        g.outputs = [loss.index]
        tg.loss_op, tg.label, tg.labels = op.index, labels[0], labels
        tg.info["loss_outputs"] = [output_label(g, o) for o in preds]
        return True


def unreached_weights(tg) -> list[dict]:
    """The weights the setup would train (a parameter of a selected op) that get no gradient because
    no loss depends on their op: [{"weight", "op", "bytes", "reason"}], in operand order."""
    from memplan_cli.passes.rules import RuleContext

    g = tg.graph
    ancestors = set(tg.info.get("loss_ancestors", ()))
    selected = set(tg.info.get("selected_ops", ()))
    ctx = RuleContext(tg, tg.info.get("policy"))
    out: dict[int, dict] = {}
    for k in sorted(selected - ancestors):
        if k >= tg.model_ops:
            continue
        op = g.operations[k]
        for i in op.inputs:
            if i < 0 or i in tg.grad or i in out or not ctx.is_param(i):
                continue
            o = g.operands[i]
            out[i] = {"weight": o.name, "op": op.label, "bytes": o.nbytes, "reason": NO_LOSS_REASON}
    # a weight shared with an op some loss depends on has a gradient: not listed
    return [out[i] for i in sorted(out) if i not in tg.grad]
