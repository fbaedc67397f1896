"""Re-batch a graph: change the batch dimension of the inputs and propagate shapes op by op.

Rules (dim 0 is the batch in both NHWC and NCHW):
- graph inputs: every non-constant input of rank >= 1 whose dim 0 equals the model's batch gets the new batch;
- ops that keep the batch at dim 0 (element-wise ops, activations, Softmax, MatMul):
  an output whose old dim 0 followed its inputs' gets the new batch (broadcast: the largest);
- every op type of the registry (memplan_cli/ops/) gives its own rule (`OpDef.batch`: Concat sums
  dim 0 on axis 0, a reduction over axis 0 removes the batch, Reshape scales the batch inside its
  shape constant, ...) and may add attributes (`OpDef.batch_attrs`: a Concat broadcasting a batch-1
  class token);
- shapes computed in the graph (`Shape -> StridedSlice -> Pack -> Reshape`, as the TF Lite converter
  writes a dynamic batch) are followed as values (`shape_values`), so such a Reshape gets the new
  batch; an op that reads such a value and is not followed refuses the re-batch, naming the op;
- any op without a rule: dim 0 of each output is scaled by how much the op's batched input grew,
  with a warning.
Constants never change, but for an op's state made at the file's batch (an RNN's initial state:
its `OpDef.batch` rule re-shapes it; the constant loses any values it had, and is no parameter).
"""
from __future__ import annotations

from dataclasses import replace

from memplan_cli import ops
from memplan_cli.ir.batch import keep_batch, numel, scale_rows
from memplan_cli.ir.graph import Graph, GraphError
from memplan_cli.opgraph import shape_values


def rebatch(graph: Graph, batch_size: int, *, resolve: bool = False) -> Graph:
    """A copy of `graph` whose inputs have batch `batch_size`, with every activation shape updated.

    `resolve`: propagate even at the file's own batch. The TF Lite converter writes a placeholder
    shape (e.g. (1, 1), signature (-1, -1)) for tensors whose shape the graph computes (Keras Dense
    on a sequence: Shape -> Gather -> ReduceProd -> Pack -> Reshape -> FullyConnected -> Reshape);
    following the values gives their real shapes."""
    if batch_size < 1:
        raise GraphError(f"batch size must be >= 1, got {batch_size}")
    ops = graph.operations
    operands = graph.operands
    data_inputs = [i for i in graph.inputs if not operands[i].is_const and operands[i].shape]
    warnings = list(graph.warnings)
    if not data_inputs:
        g = _copy(graph, {}, warnings)
        g.warnings.append("the model has no non-constant input with a batch dimension; batch size ignored")
        return g
    old_batch = operands[data_inputs[0]].shape[0]
    shapes = {o.index: tuple(o.shape) for o in operands}
    batched: set[int] = set()
    for i in data_inputs:
        if operands[i].shape[0] == old_batch:
            shapes[i] = (batch_size,) + tuple(operands[i].shape[1:])
            batched.add(i)
    values: dict = {}  # operand -> np.ndarray: shape values computed from the new shapes
    tainted: set = set()  # the values that depend on the batch
    old_values: dict = {}  # the same values at the file's own shapes
    attr_updates: dict = {}  # op index -> attrs the re-batched graph adds
    if old_batch != batch_size or resolve:
        # the rules read shape constants' values from this copy, where computed ones are filled in
        work = Graph(list(operands), ops, list(graph.inputs), list(graph.outputs), name=graph.name,
                     source_format=graph.source_format, metadata=graph.metadata)
        for k in graph.topological_order():
            op = ops[k]
            if _follow_values(op, work, shapes, batched, values, tainted, old_values):
                continue
            if not any(i in batched for i in op.inputs if i >= 0):
                continue
            extra = _registry_batch_attrs(op, work, shapes, batched)
            if extra is not None:
                attr_updates[k], why = extra
                warnings.append(f"op {op.label}: " + why.format(old_batch=old_batch, batch_size=batch_size))
            rule = _registry_rule(op.type)
            if rule is None:
                if _source_keeps_batch(op.type):
                    rule = keep_batch
                else:
                    rule = scale_rows
                    warnings.append(f"op {op.label}: no batch rule for {op.source_type or op.type}; "
                                    "scaled dim 0 of its outputs by the growth of its input")
            try:
                new_shapes = list(rule(op, work, shapes, batched))
            except GraphError:
                raise
            except ValueError:  # the shapes no longer broadcast: a constant holds the file's batch
                ins = ", ".join(str(list(shapes[i])) for i in op.inputs if i >= 0)
                raise GraphError(f"op {op.label} cannot combine its inputs' "
                                 f"shapes {ins}") from None
            for o, shape in zip(op.outputs, new_shapes):
                if shape is None:
                    continue
                if any(d <= 0 for d in shape):
                    raise GraphError(f"re-batching to {batch_size}: op {op.label} would give operand {o} "
                                     f"the shape {list(shape)}")
                if operands[o].is_const:
                    continue
                shapes[o] = tuple(shape)
                batched.add(o)
        graph = work
    g = _copy(graph, shapes, warnings)
    for k, attrs in attr_updates.items():
        g.operations[k].attrs.update(attrs)
    g.metadata["batch_size"] = batch_size
    g.metadata["source_batch_size"] = old_batch
    return g


def _copy(graph: Graph, shapes: dict, warnings: list) -> Graph:
    def regrown(o):  # a constant made at the file's batch: a fill or state, never a parameter
        return o.is_const and tuple(shapes.get(o.index, o.shape)) != tuple(o.shape)

    operands = [replace(o, shape=shapes[o.index], value=None, computed=True, assumed=False) if regrown(o)
                else replace(o, shape=shapes.get(o.index, o.shape)) for o in graph.operands]
    operations = [replace(op, inputs=list(op.inputs), outputs=list(op.outputs), attrs=dict(op.attrs))
                  for op in graph.operations]
    return Graph(operands, operations, list(graph.inputs), list(graph.outputs), name=graph.name,
                 source_format=graph.source_format, metadata=dict(graph.metadata), warnings=warnings)


def _follow_values(op, work: Graph, shapes, batched, values, tainted, old_values) -> bool:
    """Shape ops and the integer ops computing on their values (`shape_values`): compute the value,
    record it on the working copy's operand (so Reshape and Expand rules read it) and return True.
    False: not a shape computation; the op's batch rule applies. The same values at the file's own
    shapes (`old_values`) tell which values the batch changes (`tainted`): a head size sliced from
    a batched tensor's shape is not one of them."""
    np = shape_values.np  # NumPy loads only if a shape value is computed

    role = _role(op.type)
    if role == "shape_of" and op.inputs and op.inputs[0] >= 0:
        start, end = op.attrs.get("start", 0), op.attrs.get("end")
        s = np.asarray(shapes[op.inputs[0]], dtype=np.int64)
        v = s[start:end] if end is not None else s[start:]
        s0 = np.asarray(work.operands[op.inputs[0]].shape, dtype=np.int64)
        old = s0[start:end] if end is not None else s0[start:]
    elif role in ("reshape", "fill") and op.inputs[-1] in values and len(op.outputs) == 1:
        # the shape operand is a computed value: it gives the output's shape (-1 and ONNX's 0 resolved)
        t = [int(d) for d in values[op.inputs[-1]].reshape(-1)]
        o = op.outputs[0]
        if role == "reshape":
            src = shapes[op.inputs[0]]
            if op.attrs.get("zero_copies_input"):
                t = [src[k] if d == 0 and k < len(src) else d for k, d in enumerate(t)]
            n = numel(src)
            if t.count(-1) == 1:
                known = numel([d for d in t if d != -1])
                t[t.index(-1)] = n // known if known > 0 and n % known == 0 else -1
            if numel(t) != n or any(d < 0 for d in t):
                raise GraphError(f"cannot re-batch op {op.label}: the shape it computes, {t}, does not hold "
                                 f"the {n} elements of its input")
        if tuple(t) != tuple(shapes[o]):
            shapes[o] = tuple(t)
            batched.add(o)
        return True
    elif any(i in values for i in op.inputs if i >= 0):
        v = shape_values.evaluate(op, work.operands, values)
        old = shape_values.evaluate(op, work.operands, old_values) if v is not None else None
        if v is None:
            src = next((i for i in op.inputs if i >= 0 and i in tainted), None)
            if src is None:  # a static shape's value: the op's own batch rule applies
                return False
            raise GraphError(f"cannot re-batch op {op.label}: it reads {work.operands[src].name}, a value "
                             "computed from the batch dimension, in a way memplan does not follow; export "
                             "the model with the batch you want or a symbolic batch")
    else:
        return False
    o = op.outputs[0]
    if v.size != work.operands[o].num_elements:
        raise GraphError(f"cannot re-batch op {op.label}: its output holds {work.operands[o].num_elements} "
                         f"values, the shape it reads gives {v.size}")
    values[o] = v
    if old is not None:
        old_values[o] = old
    if old is None or old.shape != v.shape or not np.array_equal(old, v):
        tainted.add(o)
    work.operands[o] = replace(work.operands[o], value=tuple(int(d) for d in v.reshape(-1)))
    return True


def _registry_batch_attrs(op, graph, shapes, batched):
    """(attrs, why) the op's registry entry adds to the re-batched op (`OpDef.batch_attrs`), or None."""
    d = ops.get(op.type)
    return d.batch_attrs(op, graph, shapes, batched) if d is not None and d.batch_attrs is not None else None


def _role(op_type: str) -> str:
    return ops.role(op_type)


def _source_keeps_batch(op_type: str) -> bool:
    """A source op no registry family converts (it keeps its TFLite name) that keeps dim 0: a
    quantized model's boundary ops (their family's "keeps_batch" fact)."""
    return bool(ops.source_facts("tflite", op_type).get("keeps_batch"))


def _registry_rule(op_type: str):
    """The op registry's batch trait: "keep", "scale", or fn(op, graph, shapes, batched) -> shapes."""
    d = ops.get(op_type)
    if d is None or d.batch is None:
        return None
    if d.batch == "keep":
        return keep_batch
    if d.batch == "scale":
        return scale_rows
    return d.batch
