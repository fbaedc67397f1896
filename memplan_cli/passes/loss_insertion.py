"""Pass 2: append the loss op and the label input."""
from __future__ import annotations

import copy

from memplan_cli.errors import ConfigError
from memplan_cli.ir.graph import Operand, Operation

FLOAT_DTYPES = ("float16", "float32", "float64", "bfloat16")


class LossInsertion:
    """Rules:
    - The loss (`config.loss`: mse or cce) is an op `Loss` after the model's first output y_pred,
      with inputs (y_pred, label) and a scalar float32 output `loss`.
    - The label ("label") is a new graph input with y_pred's shape and dtype.
    - y_pred must be a float tensor (float16/32/64, bfloat16): no gradient flows back through an int
      or bool output, so there is no training step to size.
    - The loss value is the training graph's only output (read after the step); y_pred is an
      ordinary activation.
    """

    name = "loss-insertion"

    def run(self, tg) -> bool:
        g = tg.graph
        if not g.outputs:
            raise ConfigError("the model has no output to attach a loss to")
        y_pred = g.outputs[0]
        yp = g.operands[y_pred] = copy.copy(g.operands[y_pred])
        if yp.is_const:
            raise ConfigError(f"the model output {yp.name} is a constant; there is nothing to train")
        if yp.dtype not in FLOAT_DTYPES:
            raise ConfigError(f"the model output {yp.name} is {yp.dtype}: a loss needs a floating-point output "
                              "(no gradient flows back through integers or booleans)")
        n = len(g.operands)
        taken = {o.name for o in g.operands}  # a model may name a tensor "label" or "loss" itself
        label = Operand(n, "label" if "label" not in taken else f"label#{n}", tuple(yp.shape), yp.dtype,
                        is_input=True)
        loss = Operand(n + 1, "loss" if "loss" not in taken else f"loss#{n + 1}", (1,), "float32", is_output=True)
        yp.is_output = False
        g.operands += [label, loss]
        label, loss = label.index, loss.index
        op = Operation(len(g.operations), "Loss", [y_pred, label], [loss], {"loss": tg.config.loss},
                       source_type=tg.config.loss.upper(), name=tg.config.loss)
        g.operations.append(op)
        g.inputs = list(g.inputs) + [label]
        g.outputs = [loss]
        tg.loss_op, tg.label = op.index, label
        return True
