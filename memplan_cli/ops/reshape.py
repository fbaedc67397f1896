"""Reshape / Flatten (ONNX Reshape, Flatten; TFLite RESHAPE).

Rules:
- The data is unchanged, so memplan (`policy.alias_reshape`) makes the output a view of the input
  (one buffer) and the input's back-prop contribution a view of the output's back-prop (taken over
  in place when dY is dead after the step). Nothing is kept for backward.
- Off (onert): forward and backward are copies, so both sides get their own buffers.
- The shape operand, if any, is a constant read by forward only.
- A parameter kept unfolded as the input (a shared weight) trains through it.
- ONNX Flatten is a Reshape with `flatten_axis`; ONNX Reshape's 0 copies the input's dim unless
  `allowzero` (attribute `zero_copies_input`).
- Contract: the output holds as many elements as the input.
FLOPs: 0 (bytes move or are viewed).
"""
from __future__ import annotations

from memplan_cli.kernels import shape
from memplan_cli.ops.base import Canon, OpDef
from memplan_cli.ops.kernel_util import param_gradient, target
from memplan_cli.ops.rule import OpRule, StepIO, bp_targets, forward_io


def reshape(op, ctx) -> OpRule:
    x, y = op.inputs[0], op.outputs[0]
    rule = OpRule(forward=forward_io(op))
    if ctx.policy.alias_reshape and not ctx.is_const(x):  # never a view of a (persistent) weight
        rule.view = (y, x)
    if bp_targets(op, ctx, [x]):
        rule.calc_derivative = StepIO([("bp", y)], [("bp", x)])
        if ctx.policy.alias_reshape:
            rule.inplace.append((("bp", y), ("bp", x)))
    param_gradient(op, ctx, rule, x, [("bp", y)])  # a shared weight kept unfolded trains through it
    return rule


def _check(op, operands) -> str | None:
    x, y = operands[op.inputs[0]], operands[op.outputs[0]]
    if x.num_elements != y.num_elements:
        return f"reshapes {tuple(x.shape)} ({x.num_elements} elements) to {tuple(y.shape)} ({y.num_elements})"
    return None


def _forward(ctx):
    shape.reshape_forward(ctx.x(0), ctx.y())


def _backward(ctx):
    dx = target(ctx, 0)
    if dx is not None:
        shape.reshape_calc_derivative(ctx.dy(), dx)


def _flops(op, operands):
    return 0, 0


_KERNELS = {"forward": _forward, "calcDerivative": _backward, "calcGradient": _backward}
# batch: the re-batch rule of Reshape (shape constants, computed shapes) lives in ir/batch.py
# `--profile torch`: a view of a contiguous input (a non-contiguous one is copied, profiles/torch.py)
TORCH = {"view": True, "grad": "view"}
OPS = [OpDef(t, rule=reshape, kernels=_KERNELS, flops=_flops, check=_check, profiles={"torch": TORCH})
       for t in ("Reshape", "Flatten")]


def _onnx_reshape(node) -> Canon:
    return Canon("Reshape", {} if node.attrs.get("allowzero", 0) else {"zero_copies_input": True})


def _onnx_flatten(node) -> Canon:
    return Canon("Reshape", {"flatten_axis": node.attrs.get("axis", 1)})


def _tflite_reshape(node) -> Canon:
    ns = node.options.get("new_shape")
    return Canon("Reshape", {"new_shape": tuple(ns)} if ns else {})


ONNX = {"Reshape": _onnx_reshape, "Flatten": _onnx_flatten}
TFLITE = {"RESHAPE": _tflite_reshape}
