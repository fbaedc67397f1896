"""FLOPs of the ops that still live in `passes/ops/` (TEMPORARY: one table, op type -> fn).

Each op's FLOPs belong in its registry entry (`OpDef.flops`, memplan_cli/ops/). While an op family
waits to move there, its figure lives here; whoever moves a family deletes its entries from this
table (`passes/cost.py` reads the registry first, so a moved op's own figure wins anyway). An op in
neither place has no FLOPs, and every FLOPs figure that would need it is withheld, never guessed.

Conventions (as `OpDef.flops`): `fn(op, operands) -> (forward, backward)`; a multiply-add is 2
FLOPs; backward is calcGradient plus calcDerivative (both, as when every input needs a back-prop).
- Standalone activations per element (forward, backward): Relu (1, 1), Relu6 / Clip (2, 2),
  Sigmoid (4, 3), Tanh (5, 3).
- Reshape / Flatten / Concat move or view bytes: 0 FLOPs (a fused activation on a Concat adds its
  per-element cost, as above).
- Loss: MSE 3 / element forward (difference, square, sum), 2 backward; CCE 3 forward (log,
  product, sum), 2 backward (division, scale).
"""
from __future__ import annotations

_ACT = {"NONE": (0, 0), "RELU": (1, 1), "RELU6": (2, 2), "RELU_N1_TO_1": (2, 2), "TANH": (5, 3),
        "SIGMOID": (4, 3), "LOGISTIC": (4, 3)}
_STANDALONE = {"Relu": (1, 1), "Relu6": (2, 2), "Clip": (2, 2), "Sigmoid": (4, 3), "Tanh": (5, 3)}


def _n(operands, i) -> int:
    return operands[i].num_elements


def _fused(op, operands, f, b):
    """(f, b) plus the fused activation's per-element cost over output 0; None when it is unknown."""
    act = str(op.attrs.get("activation", "NONE") or "NONE").upper()
    if act not in _ACT:
        return None
    n = _n(operands, op.outputs[0])
    return f + _ACT[act][0] * n, b + _ACT[act][1] * n


def activation_flops(op, operands):
    f, b = _STANDALONE[op.type]
    y = _n(operands, op.outputs[0])
    return f * y, b * y


def zero_flops(op, operands):
    return _fused(op, operands, 0, 0)


def loss_flops(op, operands):
    n = sum(_n(operands, y) for y in op.inputs[0::2])  # one loss per (y_pred, label) pair
    return 3 * n, 2 * n


FLOPS = {
    "Relu": activation_flops,
    "Relu6": activation_flops,
    "Clip": activation_flops,
    "Sigmoid": activation_flops,
    "Tanh": activation_flops,
    "Reshape": zero_flops,
    "Flatten": zero_flops,
    "Concat": zero_flops,
    "Loss": loss_flops,
}
