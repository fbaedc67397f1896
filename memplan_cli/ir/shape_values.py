"""Values of the small integer tensors that compute shapes, followed through a re-batch.

Exporters that keep the batch dynamic compute some shapes inside the graph: the TF Lite converter
writes Keras' `Reshape((1, 1, C))` and squeeze-excite blocks as `Shape -> StridedSlice -> Pack ->
Reshape`, so the batch travels as a value, not as a dimension. When the graph is re-batched, those
values must follow, or the Reshape keeps the old batch.

Rules:
- A `Shape` of a tensor gives its (new) shape as a value.
- An op whose every input has a known value (a small integer constant the loader kept, or a value
  computed here) and that only moves or combines integers (Slice, Pack, Concat, Gather, Squeeze,
  Unsqueeze, Reshape, Identity, Cast, Add, Sub, Mul, Div, ReduceProd) gets its value computed. Its
  shape never depends on the batch, so the value has the output operand's static shape.
- Anything else that reads such a value is not followed: the caller refuses the re-batch naming it.
"""
from __future__ import annotations

from memplan_cli.lazyimport import deferred

np = deferred("numpy")  # loaded on first use: re-batching a circle / tflite model rarely needs it

MOVES = {"Identity", "Cast", "Squeeze", "Unsqueeze", "Reshape"}
ARITH = {"Add": "add", "Sub": "subtract", "Mul": "multiply"}  # NumPy names: resolved on use, so
# importing this module does not load NumPy
FOLLOWED = MOVES | set(ARITH) | {"Div", "Slice", "Pack", "Concat", "Gather", "ReduceProd"}


def constant_value(operand) -> np.ndarray | None:
    """A constant's kept value in its static shape (None: the loader did not keep it)."""
    if operand.value is None or not operand.is_const:
        return None
    v = np.asarray(operand.value, dtype=np.int64)
    if v.size != operand.num_elements:
        return None
    return v.reshape(operand.shape)


def evaluate(op, operands, values: dict) -> np.ndarray | None:
    """The value of `op`'s (single) output, or None when the op is not followed or an input's value is
    unknown. `values`: operand index -> np.ndarray of values computed so far."""
    if op.type not in FOLLOWED or len(op.outputs) != 1:
        return None
    ins = []
    for i in op.inputs:
        if i < 0:
            ins.append(None)
            continue
        v = values.get(i)
        if v is None:
            v = constant_value(operands[i])
        if v is None:
            return None
        ins.append(v)
    out = operands[op.outputs[0]]
    if not out.dtype.startswith(("int", "uint")):
        return None
    x = ins[0]
    a = op.attrs
    try:
        if op.type in MOVES:
            y = x
        elif op.type in ARITH:
            y = getattr(np, ARITH[op.type])(ins[0], ins[1])
        elif op.type == "Div":
            y = np.floor_divide(ins[0], ins[1])
        elif op.type == "Slice":
            from memplan_cli.ops.slice import window

            p = [a.get(k) for k in ("starts", "ends", "axes", "steps")]
            for k in range(4):  # ONNX Slice (opset >= 10) gives them as inputs
                if p[k] is None and k + 1 < len(ins) and ins[k + 1] is not None:
                    p[k] = [int(d) for d in np.atleast_1d(ins[k + 1]).reshape(-1)]
            if p[0] is None or p[1] is None:
                return None
            y = x[window(x.shape, *p)]
        elif op.type == "Pack":
            y = np.stack([v for v in ins if v is not None], axis=int(a.get("axis", 0)))
        elif op.type == "Concat":
            y = np.concatenate([np.atleast_1d(v) for v in ins if v is not None], axis=int(a.get("axis", 0)))
        elif op.type == "Gather":
            y = np.take(x, ins[1], axis=int(a.get("axis", 0)))
        else:  # ReduceProd: canonical axes (ops/reduce.py)
            from memplan_cli.ops.reduce import reduced_axes

            ax = reduced_axes(a, x.ndim)
            y = np.prod(x, axis=ax) if ax else x
    except (ValueError, IndexError, TypeError):
        return None
    y = np.asarray(y, dtype=np.int64)
    if y.size != out.num_elements:
        return None
    return y.reshape(out.shape)
