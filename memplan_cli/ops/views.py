"""Squeeze, Unsqueeze, Identity: the output is the input's data seen with another shape.

Canonical forms: `Squeeze(x)` / `Unsqueeze(x)` with attr `axes` (non-negative: of the input for
Squeeze, of the output for Unsqueeze), `Identity(x)`. ONNX gives the axes as an attribute before
opset 13 and as an input from 13 on; Squeeze without axes drops every dimension of 1. A run-time
axes input is not needed: the output shape (from shape inference) says where the ones are, so the
axes are read off the shapes and the axes operand is dropped. TFLite SQUEEZE (squeeze_dims) and
EXPAND_DIMS (axis input). (Reshape and Flatten are the legacy `Reshape`, with the same rule.)

Training rule (PyTorch derivatives.yaml `squeeze`, `unsqueeze`: self: grad.unsqueeze / squeeze,
saving sizes only; `alias`/identity: grad):
- With `policy.alias_reshape` the output is a view of the input (one buffer, `rule.view`), and the
  input's back-prop contribution a view of dY, taken over in place when dY is dead after the step.
  Off (onert's copies): both get their own buffers.
- calcDerivative: dX = dY reshaped; reads dY only. Nothing is kept.
FLOPs: none.
"""
from __future__ import annotations

from memplan_cli.ops.base import Canon, OpDef
from memplan_cli.ops.kernel_util import first_input_value, target, view_rule


def forward(ctx):
    y = ctx.y()
    y[...] = ctx.x(0).reshape(y.shape)


def calc_derivative(ctx):
    dx = target(ctx, 0)
    if dx is not None:
        dx[...] = ctx.dy().reshape(dx.shape)


def _same_size(op, operands):
    if operands[op.inputs[0]].num_elements != operands[op.outputs[0]].num_elements:
        return (f"changes the element count from {operands[op.inputs[0]].num_elements} to "
                f"{operands[op.outputs[0]].num_elements}")
    return None


def squeeze_check(op, operands):
    s = operands[op.inputs[0]].shape
    axes = op.attrs.get("axes", ())
    if any(not 0 <= a < len(s) or s[a] != 1 for a in axes):
        return f"squeezes axes {tuple(axes)} of a {tuple(s)} input, not all of size 1"
    out = tuple(d for k, d in enumerate(s) if k not in set(axes))
    if out != tuple(operands[op.outputs[0]].shape):
        return f"has output shape {operands[op.outputs[0]].shape}, squeezing gives {out}"
    return None


def unsqueeze_check(op, operands):
    s, o = operands[op.inputs[0]].shape, operands[op.outputs[0]].shape
    axes = op.attrs.get("axes", ())
    if any(not 0 <= a < len(o) or o[a] != 1 for a in axes) or len(o) != len(s) + len(axes):
        return f"inserts axes {tuple(axes)} into {tuple(s)}, which does not give {tuple(o)}"
    return _same_size(op, operands)


def _squeeze_batch(op, graph, shapes, batched):
    x = op.inputs[0]
    axes = set(op.attrs.get("axes", ()))
    if 0 in axes and shapes[x][0] != 1:
        from memplan_cli.ir.graph import GraphError

        raise GraphError(f"cannot re-batch op {op.label}: it squeezes the batch dimension")
    return [tuple(d for k, d in enumerate(shapes[x]) if k not in axes)]


def _unsqueeze_batch(op, graph, shapes, batched):
    s = list(shapes[op.inputs[0]])
    for a in sorted(op.attrs.get("axes", ())):
        s.insert(a, 1)
    return [tuple(s)]


def _identity_batch(op, graph, shapes, batched):
    return [tuple(shapes[op.inputs[0]])]


def _flops(op, operands):
    return 0, 0


_K = {"forward": forward, "calcDerivative": calc_derivative, "calcGradient": calc_derivative}
IDENTITY_TYPE = "Identity"  # `--profile torch`: a Cast to its input's own dtype (profiles/torch/rewrites.py)
UNSQUEEZE_TYPE = "Unsqueeze"  # `--profile torch`: a GroupNorm weight unsqueezed to (C, 1, ...) (profiles/torch/groupnorm.py)
TORCH = {"view": True, "grad": "view"}  # `--profile torch`: views share memory, in forward and backward
_VALUES = {"moves_data": True, "shape_value": first_input_value, "profiles": {"torch": TORCH}}
OPS = [OpDef("Squeeze", rule=view_rule, kernels=_K, flops=_flops, check=squeeze_check, batch=_squeeze_batch, **_VALUES),
       OpDef("Unsqueeze", rule=view_rule, kernels=_K, flops=_flops, check=unsqueeze_check, batch=_unsqueeze_batch,
             **_VALUES),
       OpDef("Identity", rule=view_rule, kernels=_K, flops=_flops, check=_same_size, batch=_identity_batch,
             role="identity", **_VALUES)]


# ---- converters: axes from the shapes (exact: both shapes are static) ---------------------------
def squeezed_axes(in_shape, out_shape, given=None) -> tuple | None:
    """Axes of `in_shape` a squeeze to `out_shape` drops (the given ones when they fit)."""
    rank = len(in_shape)
    if given is not None:
        return tuple(sorted({int(a) % rank for a in given})) if rank else ()
    ones = [k for k, d in enumerate(in_shape) if d == 1]
    if len(ones) == rank - len(out_shape):
        return tuple(ones)
    # some ones stay: match greedily from the left
    out, j = [], 0
    for k, d in enumerate(in_shape):
        if j < len(out_shape) and out_shape[j] == d:
            j += 1
        else:
            out.append(k)
    return tuple(out)


def _axes_value(node, k):
    if "axes" in node.attrs:
        return node.attrs["axes"]
    if node.input(k) is not None:
        return node.values(k)
    return None


def _onnx_squeeze(node) -> Canon:
    given = _axes_value(node, 1)
    return Canon("Squeeze", {"axes": squeezed_axes(node.shape(0), node.out_shape(), given)}, inputs=node.inputs[:1])


def _onnx_unsqueeze(node) -> Canon:
    given = _axes_value(node, 1)
    rank = len(node.out_shape())
    if given is None:  # a run-time axes input: the output's extra ones (squeeze read backwards)
        axes = squeezed_axes(node.out_shape(), node.shape(0))
    else:
        axes = tuple(sorted(int(a) % rank for a in given))
    return Canon("Unsqueeze", {"axes": axes}, inputs=node.inputs[:1])


def _onnx_identity(node) -> Canon:
    return Canon("Identity", {}, inputs=node.inputs[:1])


def _tfl_squeeze(node) -> Canon:
    dims = node.options.get("squeeze_dims") or None
    return Canon("Squeeze", {"axes": squeezed_axes(node.shape(0), node.out_shape(), dims)}, inputs=node.inputs[:1])


def _tfl_expand_dims(node) -> Canon:
    v = node.values(1)
    rank = len(node.out_shape())
    axes = (int(v[0]) % rank,) if v else squeezed_axes(node.out_shape(), node.shape(0))
    return Canon("Unsqueeze", {"axes": axes}, inputs=node.inputs[:1])


ONNX = {"Squeeze": _onnx_squeeze, "Unsqueeze": _onnx_unsqueeze, "Identity": _onnx_identity}
TFLITE = {"SQUEEZE": _tfl_squeeze, "EXPAND_DIMS": _tfl_expand_dims}
# its converter declines (an option it does not read): the builtin kept, its shape-deciding constant
# input still read at load (loaders/flatbuffer_loader.py)
TFLITE_FACTS = {"EXPAND_DIMS": {"shape_const_input": 1}}
