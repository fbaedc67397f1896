"""FLOPs of the ops that still live in `passes/ops/` (TEMPORARY: one table, op type -> fn).

Each op's FLOPs belong in its registry entry (`OpDef.flops`, memplan_cli/ops/). While an op family
waits to move there, its figure lives here; whoever moves a family deletes its entries from this
table (`passes/cost.py` reads the registry first, so a moved op's own figure wins anyway). An op in
neither place has no FLOPs, and every FLOPs figure that would need it is withheld, never guessed.

Conventions (as `OpDef.flops`): `fn(op, operands) -> (forward, backward)`; a multiply-add is 2
FLOPs; backward is calcGradient plus calcDerivative (both, as when every input needs a back-prop).
- Conv2D / DepthwiseConv2D: 2 x |Y| x (|W| / output channels) multiply-adds forward; dW and dX each
  cost the same again; the bias adds |Y| forward and |Y| for its gradient. Depthwise weights hold
  K_h x K_w x multiplier per output channel, so one formula serves both.
- Pools: one compare / add per window element per output forward, the same to route dY back.
- Mean: |X| adds and |Y| divisions forward; |X| backward (dY / N broadcast).
- Add / Sub / Mul / Div: per output element 1 forward; backward Add 1, Sub 2 (the negation),
  Mul 2 (dY x B, dY x A), Div 4 (dY / B; -dY x A / B^2).
- Standalone activations per element (forward, backward): Relu (1, 1), Relu6 / Clip (2, 2),
  Sigmoid (4, 3), Tanh (5, 3); a fused activation adds the same to its op.
- Reshape / Flatten / Pad / Concat move or view bytes: 0 FLOPs.
- Loss: MSE 3 / element forward (difference, square, sum), 2 backward; CCE 3 forward (log,
  product, sum), 2 backward (division, scale).
"""
from __future__ import annotations

_ACT = {"NONE": (0, 0), "RELU": (1, 1), "RELU6": (2, 2), "RELU_N1_TO_1": (2, 2), "TANH": (5, 3),
        "SIGMOID": (4, 3), "LOGISTIC": (4, 3)}
_STANDALONE = {"Relu": (1, 1), "Relu6": (2, 2), "Clip": (2, 2), "Sigmoid": (4, 3), "Tanh": (5, 3)}
_BINARY_BACK = {"Add": 1, "Sub": 2, "Mul": 2, "Div": 4}


def _n(operands, i) -> int:
    return operands[i].num_elements


def _fused(op, operands, f, b):
    """(f, b) plus the fused activation's per-element cost over output 0; None when it is unknown."""
    act = str(op.attrs.get("activation", "NONE") or "NONE").upper()
    if act not in _ACT:
        return None
    n = _n(operands, op.outputs[0])
    return f + _ACT[act][0] * n, b + _ACT[act][1] * n


def _out_channels(op, operands) -> int:
    shape = operands[op.outputs[0]].shape
    nchw = str(op.attrs.get("layout", "NHWC")).upper() == "NCHW"
    return int(shape[1] if nchw else shape[-1])


def conv_flops(op, operands):
    if len(operands[op.outputs[0]].shape) != 4 or len(op.inputs) < 2 or op.inputs[1] < 0:
        return None  # not a 2-D convolution's shapes: no figure rather than a wrong one
    y = _n(operands, op.outputs[0])
    per_out = _n(operands, op.inputs[1]) // max(_out_channels(op, operands), 1)
    macs = 2 * y * per_out
    bias = y if len(op.inputs) > 2 and op.inputs[2] >= 0 else 0
    return _fused(op, operands, macs + bias, 2 * macs + bias)


def _window(op) -> int:
    f = op.attrs.get("filter") or op.attrs.get("kernel_shape") or op.attrs.get("ksize") or ()
    n = 1
    for d in f:
        n *= int(d)
    return n


def pool_flops(op, operands):
    w = _window(op)
    if not w:
        return None
    y = _n(operands, op.outputs[0])
    return _fused(op, operands, y * w, y * w)


def mean_flops(op, operands):
    x, y = _n(operands, op.inputs[0]), _n(operands, op.outputs[0])
    return x + y, x


def binary_flops(op, operands):
    y = _n(operands, op.outputs[0])
    return _fused(op, operands, y, _BINARY_BACK[op.type] * y)


def activation_flops(op, operands):
    f, b = _STANDALONE[op.type]
    y = _n(operands, op.outputs[0])
    return f * y, b * y


def zero_flops(op, operands):
    return _fused(op, operands, 0, 0)


def loss_flops(op, operands):
    n = _n(operands, op.inputs[0])
    return 3 * n, 2 * n


FLOPS = {
    "Conv2D": conv_flops,
    "DepthwiseConv2D": conv_flops,
    "MaxPool2D": pool_flops,
    "AvgPool2D": pool_flops,
    "Mean": mean_flops,
    "GlobalAveragePool": mean_flops,
    "Add": binary_flops,
    "Sub": binary_flops,
    "Mul": binary_flops,
    "Div": binary_flops,
    "Relu": activation_flops,
    "Relu6": activation_flops,
    "Clip": activation_flops,
    "Sigmoid": activation_flops,
    "Tanh": activation_flops,
    "Reshape": zero_flops,
    "Flatten": zero_flops,
    "Pad": zero_flops,
    "Concat": zero_flops,
    "Loss": loss_flops,
}
