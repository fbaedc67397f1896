"""Pass (stage graph, after training configuration): append the loss op and one label input per output that carries a loss."""
from __future__ import annotations

import copy

from memplan_cli import ops as registry
from memplan_cli.ir.graph import Operand, Operation
from memplan_cli.opgraph.outputs import loss_outputs, output_label  # noqa: F401  (re-exported for the passes' users)
from memplan_cli.ops.loss import LOSS_TYPE
from memplan_cli.passes.infra import Pass
from memplan_cli.passes.rules import RuleContext

# why a weight gets no gradient although its op trains (report: table note and JSON `frozen_weights`)
NO_LOSS_REASON = "no loss depends on it (it feeds only outputs without a loss, or only shapes and indices)"
QUANTIZED_REASON = ("a quantized integer constant (a TF Lite converter's int8 weights): memplan trains float "
                    "weights only")


class LossInsertion(Pass):
    """Rules:
    - A loss is attached to every float model output a gradient can flow back from (not integer
      outputs nor BatchNormalization's running statistics; `opgraph.outputs.loss_outputs`), or to the
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
    reads = frozenset({"config"})
    writes = frozenset({"graph", "loss_op", "label", "labels", "loss_outputs"})

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
            name = "label" if len(preds) == 1 else f"{output_label(g, y_pred)}:label"
            label = Operand(n, fresh(name, n), tuple(yp.shape), yp.dtype, is_input=True)
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
        op = Operation(len(g.operations), LOSS_TYPE, inputs, [loss.index], {"loss": tg.config.loss},
                       source_type=tg.config.loss.upper(), name=tg.config.loss)
        g.operations.append(op)
        g.inputs = list(g.inputs) + labels
        g.outputs = [loss.index]
        tg.loss_op, tg.label, tg.labels = op.index, labels[0], labels
        tg.loss_outputs = [output_label(g, o) for o in preds]
        return True


def unreached_weights(tg) -> list[dict]:
    """The weights the setup would train (a parameter of a selected op) that get no gradient because
    no loss depends on their op: [{"weight", "op", "bytes", "reason"}], in operand order."""
    g = tg.graph
    ancestors = tg.loss_ancestors
    selected = tg.selected_ops
    ctx = RuleContext(tg, tg.policy)
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


def quantized_weights(tg) -> list[dict]:
    """The integer constants in the weight slots of the ops the setup selects (`OpDef.weight_inputs`:
    a dynamic-range quantized file's int8 filters): no rule trains them, so a "trainable all" step
    updates only the float weights; listed so the report says so. [{"weight", "op", "bytes",
    "reason"}], in operand order."""
    g = tg.graph
    out: dict[int, dict] = {}
    for k in sorted(tg.selected_ops):
        if k >= tg.model_ops:
            continue
        op = g.operations[k]
        d = registry.get(op.type)
        for p in (d.weight_inputs if d is not None else ()):
            i = op.inputs[p] if p < len(op.inputs) else -1
            o = g.operands[i] if i >= 0 else None
            if o is not None and o.is_const and o.dtype.startswith(("int", "uint")) and i not in out:
                out[i] = {"weight": o.name, "op": op.label, "bytes": o.nbytes, "reason": QUANTIZED_REASON}
    return [out[i] for i in sorted(out)]
