"""Activations beyond ReLU/Sigmoid/Tanh (which stay in passes/ops/activations.py): Erf, Gelu,
HardSigmoid, HardSwish, LeakyRelu, Elu, Selu, Softplus, Softsign, Mish (ONNX), TFLite HARD_SWISH,
LEAKY_RELU, ELU, GELU; and PRelu with its learned slope (ONNX PRelu, TFLite PRELU).

What backward keeps (PyTorch derivatives.yaml; see ops/_pointwise.py for the shared rule):
- the input X: erf (`2/sqrt(pi)·exp(-self²)·grad`), gelu (`gelu_backward(grad, self, approximate)`),
  hardswish (`hardswish_backward(grad, self)`), mish (`mish_backward(grad, self)`), prelu
  (`_prelu_kernel_backward(grad, self, weight)`: X and the slope);
- the output Y, where the derivative is a function of it: elu/selu (`elu_backward(..., is_result=true,
  result)` as elu_ has it, needs alpha > 0 and scale > 0), leaky_relu with slope >= 0 (as
  leaky_relu_'s result form: y > 0 iff x > 0), hardsigmoid (alpha where 0 < y < 1), softplus
  (1 - exp(-y) = sigmoid(x)), softsign (1 - |y|)²; otherwise X (LeakyRelu with a negative slope).
Formulas (ONNX defaults): Gelu none: x·Φ(x), tanh: x/2·(1 + tanh(√(2/π)(x + 0.044715x³)));
HardSigmoid max(0, min(1, αx+β)), α 0.2, β 0.5; HardSwish x·max(0, min(1, x/6 + 1/2));
LeakyRelu α 0.01; Elu α 1; Selu α 1.67326, γ 1.0507; Softplus log(1+eˣ); Softsign x/(1+|x|);
Mish x·tanh(softplus(x)).
PRelu: Y = X where X > 0 else slope·X, the slope broadcast to X (numpy rules; ONNX opsets < 7 and
a 1-D slope of C values: per channel, axis 1). The slope is the op's weight when it is a float
constant: dslope = Σ_broadcast (X ≤ 0)·X·dY (calcGradient, reads X and dY); dX = dY where X > 0
else slope·dY (reads X, the slope and dY).
"""
from __future__ import annotations

import math

import numpy as np

from memplan_cli.kernels.common import reduce_to_shape
from memplan_cli.ops._pointwise import Pointwise, erf, opdef
from memplan_cli.ops.base import Canon, OpDef
from memplan_cli.ops.rule import OpRule, StepIO, bp_targets, forward_io

SQRT_2_PI = math.sqrt(2 / math.pi)
SELU_ALPHA, SELU_GAMMA = 1.6732632423543772, 1.0507009873554805


def _f(attrs, k, default):
    return float(attrs.get(k, default))


def _sigmoid(x):
    return 0.5 * (1 + np.tanh(0.5 * x))


# ---- Gelu --------------------------------------------------------------------------------------
def _gelu(x, a):
    if a.get("approximate", "none") == "tanh":
        return 0.5 * x * (1 + np.tanh(SQRT_2_PI * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + erf(x / math.sqrt(2)))


def _gelu_grad(x, a):
    if a.get("approximate", "none") == "tanh":
        t = np.tanh(SQRT_2_PI * (x + 0.044715 * x ** 3))
        return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * SQRT_2_PI * (1 + 3 * 0.044715 * x * x)
    return 0.5 * (1 + erf(x / math.sqrt(2))) + x * np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)


def _gelu_check(op, operands):
    a = op.attrs.get("approximate", "none")
    return None if a in ("none", "tanh") else f"has approximate={a!r} (only none and tanh exist)"


def _torch_gelu_reorders(op, operands) -> int:
    """Exact GELU's backward on CPU (ATen gelu_backward_out_cpu) runs oneDNN's eltwise backward where
    the saved input is a contiguous float32 tensor of more than one element (use_mkldnn(self)); the
    result is laid out like the incoming gradient (TensorIterator, the gradient its first input). An
    incoming gradient of other strides costs two more output-sized buffers through the kernel: the
    gradient reordered to the input's plain layout and the result made plain, then reordered into its
    strides (measured, torch 2.14.1: a transposed gradient, batch 1 and 4, +2 x the input's bytes;
    none for tanh GELU, which runs ATen's own kernel)."""
    x = operands[op.inputs[0]]
    plain = op.attrs.get("approximate", "none") == "none" and str(x.dtype) == "float32"
    return 2 if plain and math.prod(x.shape) > 1 else 0


# `--profile torch`: gelu saves its input (gelu_backward(grad, self, approximate))
_TORCH_GELU = {"saves": (("in0", "any"),), "grad_reorders": _torch_gelu_reorders}


# ---- the others -------------------------------------------------------------------------------
def _hsig(x, a):
    return np.clip(_f(a, "alpha", 0.2) * x + _f(a, "beta", 0.5), 0, 1)


def _hsig_grad(y, a):
    return _f(a, "alpha", 0.2) * ((y > 0) & (y < 1))


def _hswish(x, a):
    return x * np.clip(x / 6 + 0.5, 0, 1)


def _hswish_grad(x, a):
    return np.where(x < -3, 0.0, np.where(x > 3, 1.0, (2 * x + 3) / 6))


def _leaky_uses(a):
    return "y" if _f(a, "alpha", 0.01) >= 0 else "x"


def _leaky(x, a):
    return np.where(x > 0, x, _f(a, "alpha", 0.01) * x)


def _leaky_grad(v, a):  # v is Y (slope >= 0: same sign as X) or X
    return np.where(v > 0, 1.0, _f(a, "alpha", 0.01))


def _elu_params(a, selu: bool):
    if selu:
        return _f(a, "alpha", SELU_ALPHA), _f(a, "gamma", SELU_GAMMA)
    return _f(a, "alpha", 1.0), 1.0


def _elu(selu):
    def fwd(x, a):
        al, g = _elu_params(a, selu)
        return g * np.where(x > 0, x, al * np.expm1(np.minimum(x, 0)))

    def grad(y, a):
        al, g = _elu_params(a, selu)
        return np.where(y > 0, g, y + g * al)

    def check(op, operands):
        al, g = _elu_params(op.attrs, selu)
        if al <= 0 or g <= 0:
            return f"has alpha {al:g} / scale {g:g} <= 0 (its derivative is taken from the output)"
        return None
    return fwd, grad, check


def _softplus(x, a):
    return np.logaddexp(0, x)


def _softplus_grad(y, a):
    return -np.expm1(-y)


def _softsign(x, a):
    return x / (1 + np.abs(x))


def _softsign_grad(y, a):
    return (1 - np.abs(y)) ** 2


def _mish(x, a):
    return x * np.tanh(np.logaddexp(0, x))


def _mish_grad(x, a):
    t = np.tanh(np.logaddexp(0, x))
    return t + x * (1 - t * t) * _sigmoid(x)


_elu_f, _elu_g, _elu_c = _elu(False)
_selu_f, _selu_g, _selu_c = _elu(True)

SPECS = [
    Pointwise("Erf", lambda x, a: erf(x), lambda x, a: 2 / math.sqrt(math.pi) * np.exp(-x * x), "x", (20, 4)),
    Pointwise("Gelu", _gelu, _gelu_grad, "x", (24, 12), _gelu_check, profiles={"torch": _TORCH_GELU}),
    Pointwise("HardSigmoid", _hsig, _hsig_grad, "y", (3, 2)),
    Pointwise("HardSwish", _hswish, _hswish_grad, "x", (4, 3)),
    Pointwise("LeakyRelu", _leaky, _leaky_grad, _leaky_uses, (2, 2)),
    Pointwise("Elu", _elu_f, _elu_g, "y", (4, 2), _elu_c),
    Pointwise("Selu", _selu_f, _selu_g, "y", (5, 2), _selu_c),
    Pointwise("Softplus", _softplus, _softplus_grad, "y", (4, 3)),
    Pointwise("Softsign", _softsign, _softsign_grad, "y", (3, 3)),
    Pointwise("Mish", _mish, _mish_grad, "x", (8, 12)),
]


# ---- PRelu -------------------------------------------------------------------------------------
def _slope(ctx, ndim):
    s = np.asarray(ctx.x(1))
    if ctx.attrs.get("channel_axis") is not None:
        s = s.reshape((1, -1) + (1,) * (ndim - 2))
    return s


def prelu_rule(op, ctx) -> OpRule:
    x, s, y = op.inputs[0], op.inputs[1], op.outputs[0]
    weights = [s] if ctx.is_param(s) else []
    r = OpRule(forward=forward_io(op), weights=weights)
    grads = weights if ctx.trains(op) else []
    targets = bp_targets(op, ctx, [x, s])
    slope_out = [("grad", s)] if grads else []
    if grads:
        r.calc_gradient = StepIO([("fwd", x), ("bp", y)], slope_out)
    if targets:
        reads = [("fwd", x)] + ([("fwd", s)] if x in targets else []) + [("bp", y)]
        r.calc_derivative = StepIO(reads, [("bp", t) for t in targets])
    return r


def prelu_forward(ctx):
    x = np.asarray(ctx.x(0))
    ctx.y()[...] = np.where(x > 0, x, _slope(ctx, x.ndim) * x)


def _slope_grad(ctx, out, x, dy):
    g = np.where(x > 0, 0.0, x * dy)
    if ctx.attrs.get("channel_axis") is not None:
        out[...] = g.sum(axis=(0,) + tuple(range(2, g.ndim))).reshape(out.shape)
    else:
        out[...] = reduce_to_shape(g, out.shape)


def prelu_gradient(ctx):
    out = ctx.grad(1)
    if out is not None:
        _slope_grad(ctx, out, np.asarray(ctx.x(0)), np.asarray(ctx.dy()))


def prelu_derivative(ctx):
    x, dy = np.asarray(ctx.x(0)), np.asarray(ctx.dy())
    ds = ctx.dx(1)
    if ds is not None:
        _slope_grad(ctx, ds, x, dy)
    dx = ctx.dx(0)
    if dx is not None:
        dx[...] = np.where(x > 0, dy, _slope(ctx, x.ndim) * dy)


def prelu_check(op, operands):
    xs, ss = tuple(operands[op.inputs[0]].shape), tuple(operands[op.inputs[1]].shape)
    if op.attrs.get("channel_axis") is not None:
        return None
    try:
        if np.broadcast_shapes(xs, ss) != xs:
            return f"has a slope of shape {ss} that does not broadcast to its input {xs}"
    except ValueError:
        return f"has a slope of shape {ss} that does not broadcast to its input {xs}"
    return None


def _prelu_flops(op, operands):
    n = operands[op.outputs[0]].num_elements
    return 2 * n, 4 * n


OPS = [opdef(s) for s in SPECS] + [
    OpDef("PRelu", rule=prelu_rule, kernels={"forward": prelu_forward, "calcGradient": prelu_gradient,
                                            "calcDerivative": prelu_derivative},
          flops=_prelu_flops, required_inputs=2, check=prelu_check, batch="keep",
          weight_inputs=(1,), autocast="lower")]  # prelu is on autocast's CPU lower-precision list


# ---- converters -------------------------------------------------------------------------------
def _onnx(typ, keys=()):
    def conv(node) -> Canon:
        attrs = {k: node.attrs[k] for k in keys if k in node.attrs}
        for k, v in attrs.items():
            attrs[k] = v.decode() if isinstance(v, bytes) else v
        return Canon(typ, attrs, inputs=node.inputs[:1])
    return conv


def _onnx_prelu(node) -> Canon:
    xs, ss = node.shape(0), node.shape(1)
    attrs = {}
    # opset < 7 PRelu broadcast a 1-D slope of C values over the channel axis (torch exports so)
    if node.opset < 7 and len(ss) == 1 and len(xs) > 2 and ss[0] == xs[1] and ss[0] != 1:
        attrs["channel_axis"] = 1
    return Canon("PRelu", attrs)


def _tfl(typ, opts=()):
    def conv(node) -> Canon:
        attrs = {}
        for src, dst, cast in opts:
            if src in node.options:
                attrs[dst] = cast(node.options[src])
        return Canon(typ, attrs, inputs=node.inputs[:1])
    return conv


ONNX = {"Erf": _onnx("Erf"), "Gelu": _onnx("Gelu", ("approximate",)),
        "HardSigmoid": _onnx("HardSigmoid", ("alpha", "beta")), "HardSwish": _onnx("HardSwish"),
        "LeakyRelu": _onnx("LeakyRelu", ("alpha",)), "Elu": _onnx("Elu", ("alpha",)),
        "Selu": _onnx("Selu", ("alpha", "gamma")), "Softplus": _onnx("Softplus"),
        "Softsign": _onnx("Softsign"), "Mish": _onnx("Mish"), "PRelu": _onnx_prelu}
TFLITE = {"HARD_SWISH": _tfl("HardSwish"), "LEAKY_RELU": _tfl("LeakyRelu", (("alpha", "alpha", float),)),
          "ELU": _tfl("Elu"),
          "GELU": _tfl("Gelu", (("approximate", "approximate", lambda v: "tanh" if v else "none"),)),
          "PRELU": lambda node: Canon("PRelu", {}),
          # a TensorFlow op the converter keeps as a Select TF op (custom code "Flex" + its name): onnx2tf
          # writes torch's exact GELU as FlexErf (TF Lite has no ERF builtin)
          "FlexErf": _tfl("Erf")}
