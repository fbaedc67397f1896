"""Standalone activations: Relu, Relu6 (and ONNX Clip(0, 6)), Sigmoid, Tanh, Clip (ONNX Relu,
Sigmoid, Tanh, Clip; TFLite RELU, RELU6, LOGISTIC, TANH, and RELU_N1_TO_1 / RELU_0_TO_1 as Clip).

Rules:
- Every one of them has a derivative that is a function of its output Y (ReLU: Y > 0; ReLU6:
  0 < Y < 6; Sigmoid: Y(1-Y); Tanh: 1-Y²), so backward keeps Y only, never X.
- calcDerivative reads Y and dY and writes the input's back-prop.
- In place (`policy.inplace`): forward may write Y over X when X is dead after the step (a Conv
  without fused activation followed by a ReLU, as ONNX writes it, then costs one buffer like the
  fused circle op); backward may write dX over dY when dY is dead after the step.
- Fused activations are handled by the op that carries them (`rule.fused_activation`).
- A parameter as the input (ConViT's gating parameter through Sigmoid, SwinV2's logit scale through
  Clip) trains: calcGradient reads Y and dY and writes its gradient.
- ONNX Clip with constant bounds (0, 6) is Relu6 (its bound operands are dropped, as in TFLite).
FLOPs per element of Y (forward, backward): Relu (1, 1), Relu6 / Clip (2, 2), Sigmoid (4, 3), Tanh (5, 3).
"""
from __future__ import annotations

import numpy as np

from memplan_cli.kernels import activation as act
from memplan_cli.kernels.activation import MASK_BOUNDS, between
from memplan_cli.kernels.common import store
from memplan_cli.ops.base import Canon, OpDef, UnsupportedKernel
from memplan_cli.ops.kernel_util import param_gradient
from memplan_cli.ops.rule import FORWARD_TO_BACKWARD, ExtraRequest, OpRule, StepIO, bp_targets, forward_io

# standalone op type -> the fused-activation name its kernels share (Clip has its own bounds)
SIGMOID_TYPE = "Sigmoid"  # `--profile torch` reads x * sigmoid(x) as one eager silu
RELU_TYPE = "Relu"  # `--profile torch` runs a folded linear-and-ReLU again
FUSED_NAME = {"Relu": "RELU", "Relu6": "RELU6", "Sigmoid": "SIGMOID", "Tanh": "TANH"}
_FLOPS = {"Relu": (1, 1), "Relu6": (2, 2), "Clip": (2, 2), "Sigmoid": (4, 3), "Tanh": (5, 3)}


def activation(op, ctx) -> OpRule:
    x, y = op.inputs[0], op.outputs[0]
    rule = OpRule(forward=forward_io(op))
    if bp_targets(op, ctx, [x]):
        rule.calc_derivative = StepIO([("fwd", y), ("bp", y)], [("bp", x)])
        if ctx.policy.inplace:
            rule.inplace.append((("bp", y), ("bp", x)))
    if ctx.policy.inplace:
        rule.inplace.append((("fwd", x), ("fwd", y)))
    param_gradient(op, ctx, rule, x, [("fwd", y), ("bp", y)])
    return rule


def _flops(op, operands):
    f, b = _FLOPS[op.type]
    n = operands[op.outputs[0]].num_elements
    return f * n, b * n


# ---- kernels ----------------------------------------------------------------------------------
def _kernels(op_type: str) -> dict:

    def kind(ctx):
        if op_type == "Clip":
            return ctx.attrs.get("min"), ctx.attrs.get("max")
        return FUSED_NAME[op_type]

    def bounds(k):
        return k if isinstance(k, tuple) else MASK_BOUNDS.get(k)

    def forward(ctx):
        k = kind(ctx)
        x = ctx.x(0)
        if ctx.writes_extra("clip_mask"):  # SINGA's Clip keeps a float mask of lo < x < hi
            if bounds(k) is None:
                raise UnsupportedKernel(f"a clip mask for {ctx.op.label}, which is not ReLU-like")
            store(ctx.extra("clip_mask"), between(x, bounds(k)))
        if isinstance(k, tuple):
            store(ctx.y(), np.clip(x, k[0], k[1]))
        else:
            act.forward(x, ctx.y(), k)

    def backward(ctx):
        dx = ctx.grad(0) if ctx.step.kind == "calcGradient" else ctx.dx(0)  # a parameter's, or a back-prop
        if dx is None:
            return
        k = kind(ctx)
        m = ctx.extra("clip_mask")
        if m is not None:
            store(dx, ctx.dy() * m.reshape(dx.shape))
            return
        if ctx.y(optional=True) is None and ctx.extra_id("relu_mask") is None and \
                (isinstance(k, tuple) or k in ("RELU", "RELU6")):
            # a clipping mask is the same from the input
            store(dx, ctx.dy() * between(ctx.x(0), k if isinstance(k, tuple) else MASK_BOUNDS[k]))
            return
        store(dx, ctx.through_activation(ctx.dy(), k))

    return {"forward": forward, "calcDerivative": backward, "calcGradient": backward}


# `--profile torch` (derivatives.yaml): relu / sigmoid / tanh keep their result, hardtanh (ReLU6, Clip)
# its input
TORCH = {"Relu": {"saves": (("out0", "any"),)}, "Sigmoid": {"saves": (("out0", "any"),)},
         "Tanh": {"saves": (("out0", "any"),)}, "Relu6": {"saves": (("in0", "any"),)},
         "Clip": {"saves": (("in0", "any"),)}}
OPS = [OpDef(t, rule=activation, kernels=_kernels(t), flops=_flops, activation=FUSED_NAME.get(t, "CLIP"),
             profiles={"torch": TORCH[t]} if t in TORCH else {})
       for t in ("Relu", "Relu6", "Sigmoid", "Tanh", "Clip")]


# ---- loaders ----------------------------------------------------------------------------------
def _same(t):
    def conv(node) -> Canon:
        return Canon(t, {})
    return conv


def _onnx_clip(node) -> Canon:
    if "min" in node.attrs or "max" in node.attrs:  # opset < 11: bounds are attributes
        lo, hi = node.attrs.get("min"), node.attrs.get("max")
    else:
        lo, hi = (_scalar(node, k) for k in (1, 2))
    if lo == 0 and hi == 6:
        return Canon("Relu6", {}, inputs=node.inputs[:1])  # the bounds are not operands of a Relu6
    return Canon("Clip", {"min": lo, "max": hi})


def _scalar(node, k: int) -> float | None:
    v = node.values(k)
    return float(v[0]) if v else None


ONNX = {"Relu": _same("Relu"), "Sigmoid": _same("Sigmoid"), "Tanh": _same("Tanh"), "Clip": _onnx_clip}


def _tflite_bounded(lo: float, hi: float):
    # TF Lite's standalone RELU_N1_TO_1 / RELU_0_TO_1 (what the converter makes of tf.clip_by_value)
    def conv(node) -> Canon:
        return Canon("Clip", {"min": lo, "max": hi}, inputs=node.inputs[:1])
    return conv


TFLITE = {"RELU": _same("Relu"), "RELU6": _same("Relu6"), "LOGISTIC": _same("Sigmoid"), "TANH": _same("Tanh"),
          "RELU_N1_TO_1": _tflite_bounded(-1.0, 1.0), "RELU_0_TO_1": _tflite_bounded(0.0, 1.0)}


# ---- other runtimes' profiles (profiles/singa.py, onert/, nntrainer.py): what they know of these ops ----


def _singa_relu(op, ctx):
    """SINGA's standalone ReLU keeps its input X (`ReLUBackward(dy, x)`), not Y."""
    r = activation(op, ctx)
    x, y = op.inputs[0], op.outputs[0]
    if r.calc_derivative is not None:
        r.calc_derivative.reads = [("fwd", x) if ref == ("fwd", y) else ref for ref in r.calc_derivative.reads]
    return r


def _singa_clip(op, ctx):
    """SINGA's standalone ReLU6 / Clip keeps a float mask of |X| made in forward (its `Clip.mask`)."""
    r = activation(op, ctx)
    x, y = op.inputs[0], op.outputs[0]
    if r.calc_derivative is not None:
        o = ctx.operand(x)
        k = len(r.extras)
        r.extras.append(ExtraRequest("clip_mask", tuple(o.shape), "float32", FORWARD_TO_BACKWARD))
        r.forward.writes.append(("extra", k))
        r.calc_derivative.reads = [("extra", k) if ref == ("fwd", y) else ref for ref in r.calc_derivative.reads]
    return r


# singa: the SINGA autograd operator memplan models the op as, and SINGA's own rule
PROFILES = {"singa": {"Relu": {"operator": "ReLU", "rule": _singa_relu},
                      "Relu6": {"operator": "Clip(0, 6)", "rule": _singa_clip},
                      "Clip": {"operator": "Clip", "rule": _singa_clip},
                      "Sigmoid": {"operator": "Sigmoid"}, "Tanh": {"operator": "Tanh"}}}


def _onert_relu_usedef(op, c):
    c.use(op.outputs[0])
    for i in dict.fromkeys(op.inputs):
        if i >= 0:
            c.bp_def(i)


# onert (profiles/onert/): "forward" / "backward": fn(op, operands) -> why onert refuses at load or
# compile (backward: only when the op's backward runs), an `AfterCompile` reason when onert finds it
# only after it compiles; "kernel_buffers": fn(op, ir, threads, simd_width) -> [(name, bytes)] its
# train kernel allocates; "usedef": fn(op, chains), its backward's training use-defs;
# "weighted": the backward region is cut to ops reachable from these
PROFILES["onert"] = {"Relu": {"usedef": _onert_relu_usedef}, "Relu6": {"usedef": _onert_relu_usedef}}

# nntrainer (profiles/nntrainer.py): "layer", the nntrainer 0.6.0 layer the profile models the op as;
# "kind", that layer's type; "check": fn(graph, op, batchnorm) -> why the layer cannot take this op
# "cross_entropy": the loss nntrainer fuses the op into when it ends a model trained with cce
PROFILES["nntrainer"] = {"Relu": {"layer": "activation (relu)", "kind": "activation"},
                         "Sigmoid": {"layer": "activation (sigmoid)", "kind": "activation",
                                     "cross_entropy": "cross_sigmoid"},
                         "Tanh": {"layer": "activation (tanh)", "kind": "activation"}}
