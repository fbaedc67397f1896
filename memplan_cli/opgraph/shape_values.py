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

from memplan_cli import ops
from memplan_cli.lazyimport import deferred

np = deferred("numpy")  # loaded on first use: re-batching a circle / tflite model rarely needs it


def constant_value(operand) -> np.ndarray | None:
    """A constant's kept value in its static shape (None: the loader did not keep it)."""
    if operand.value is None or not operand.is_const:
        return None
    v = np.asarray(operand.value, dtype=np.int64)
    if v.size != operand.num_elements:
        return None
    return v.reshape(operand.shape)


def follows(op_type: str) -> bool:
    """Whether values of an op of this type are followed (its registry entry's `shape_value`)."""
    d = ops.get(op_type)
    return d is not None and d.shape_value is not None


def evaluate(op, operands, values: dict) -> np.ndarray | None:
    """The value of `op`'s (single) output, or None when the op is not followed or an input's value is
    unknown. `values`: operand index -> np.ndarray of values computed so far. How an op computes
    values is its registry entry's `OpDef.shape_value`."""
    d = ops.get(op.type)
    if d is None or d.shape_value is None or len(op.outputs) != 1:
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
    try:
        y = d.shape_value(op, ins)
    except (ValueError, IndexError, TypeError):
        return None
    if y is None:
        return None
    y = np.asarray(y, dtype=np.int64)
    if y.size != out.num_elements:
        return None
    return y.reshape(out.shape)
