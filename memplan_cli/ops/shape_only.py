"""Ops that compute shapes, masks, indices and constants: Shape, Size, ConstantOfShape, Range,
comparisons (Equal, Less, Greater, LessOrEqual, GreaterOrEqual, NotEqual), logic (Not, And, Or, Xor),
IsNaN / IsInf (boolean masks: torch.onnx's dynamo export of an attention mask guards with IsNaN) and
Cast (ONNX CastLike too: a Cast to its second input's dtype, which gives only the type).

Rules:
- Their outputs are integers or booleans (or a constant fill), so no gradient ever flows through
  them (`no_grad`): they run forward only and keep nothing for backward. Their forward step reads
  their inputs like any op, except Shape and Size, which read only the input's static shape and so
  do not keep the input alive (torch's `aten::size` does not touch data either).
- Cast is differentiable when it maps a float to a float: dX = dY cast back (a copy; PyTorch
  derivatives.yaml `_to_copy`: self: _to_copy_backward(grad, self.options()), saves nothing). A cast
  to or from an integer type carries no gradient (requires-grad analysis: ints never do).
- A float Cast to its input's own dtype (`softmax(x, dtype=torch.float32).to(x.dtype)` in float32, an
  exporter's `to(dtype)` of a float32 tensor) is an identity, as PyTorch's `to` of a tensor already in
  that dtype returns the tensor itself (aten `to`: `_to_copy` only when the dtype changes): with
  `policy.alias_reshape` Y is a view of X and dX a view of dY, so attention probabilities cast this way
  are held once for the softmax's and the next MatMul's backward, not twice.
- ONNX shape inference (with data propagation) already gives every output a static shape; these
  kernels only exist so that `memplan verify` can run the forward pass through them.
- NonZero is not here (its output shape depends on the data), except for the bound of its count,
  which the loader takes under a stated assumption (`data_sized_count`; loaders/data_sized.py); so
  does a Range up to the largest count of a mask along an axis (`_range_count`).
FLOPs: one per output element (comparisons, logic, casts); none for the shape ops.
"""
from __future__ import annotations

import numpy as np

from memplan_cli.ops.base import Canon, OpDef
from memplan_cli.ops.kernel_util import broadcast_batch, first_input_value, param_gradient, target, view_rule
from memplan_cli.ops.rule import OpRule, StepIO, bp_targets, forward_io


# ONNX ops whose outputs' sizes the data may decide (a Split by computed sizes, NonZero of a mask):
# shape inference leaves them unsized, and the loader refuses them as such, not as a broken file
DATA_SIZED_ONNX = frozenset({"Split", "NonZero", "Unique", "Compress", "TopK", "Loop", "If", "Scan"})
# ONNX ops whose output shape the *values* of some inputs set (input positions): an Expand or Reshape
# to a target shape, Tile's repeats, a Range's bounds. When such a value comes from a graph input (not
# through a Shape), the data decides the shape and the loader says so, naming that input
SHAPE_FROM_VALUES_ONNX = {"Expand": (1,), "Reshape": (1,), "ConstantOfShape": (0,), "Tile": (1,),
                          "Range": (0, 1, 2), "Slice": (1, 2, 3, 4), "Pad": (1, 3), "Resize": (2, 3),
                          "Upsample": (1,), "OneHot": (1,), "CenterCropPad": (1,), "Unsqueeze": (1,),
                          "Squeeze": (1,), "AffineGrid": (1,), "Col2Im": (1, 2), "DFT": (1, 2),
                          "STFT": (1, 3), "MaxUnpool": (2,), "HannWindow": (0,), "HammingWindow": (0,),
                          "BlackmanWindow": (0,), "MelWeightMatrix": (0, 1, 2), "ImageDecoder": (0,),
                          "NonMaxSuppression": (0, 1, 2, 3, 4),
                          **{f"Reduce{r}": (1,) for r in ("Sum", "Mean", "Max", "Min", "Prod", "L1", "L2",
                                                          "LogSum", "LogSumExp", "SumSquare")}}
# ONNX ops whose output is the input's static shape, never its values: a walk for data stops there
SHAPE_READERS_ONNX = frozenset({"Shape", "Size"})


def plain(op, ctx) -> OpRule:
    return OpRule(forward=forward_io(op))


def shape_only(op, ctx) -> OpRule:
    """Shape / Size: the static shape is known without reading the data."""
    return OpRule(forward=StepIO([], [("fwd", o) for o in op.outputs]))


def _in_shape(ctx):
    return ctx.tg.graph.operands[ctx.op.inputs[0]].shape


def shape_fwd(ctx):
    s = _in_shape(ctx)
    start, end = ctx.attrs.get("start", 0), ctx.attrs.get("end")
    y = ctx.y()
    y[...] = np.asarray(s[start:end] if end is not None else s[start:], dtype=np.int64).reshape(y.shape)


def size_fwd(ctx):
    ctx.y()[...] = int(np.prod(_in_shape(ctx), dtype=np.int64))


def const_fwd(ctx):
    ctx.y()[...] = ctx.attrs.get("value", 0)


def range_fwd(ctx):
    start, limit, delta = (np.asarray(ctx.x(k)).reshape(-1)[0] for k in range(3))
    y = ctx.y()
    v = np.arange(start, limit, delta)[: y.size]
    y[...] = 0  # a length the loader took under an assumption (loaders/data_sized.py) may exceed it
    y.reshape(-1)[: v.size] = v


BINARY = {"Equal": "equal", "Less": "less", "Greater": "greater", "LessOrEqual": "less_equal",
          "GreaterOrEqual": "greater_equal", "NotEqual": "not_equal", "And": "logical_and",
          "Or": "logical_or", "Xor": "logical_xor"}  # NumPy names, resolved on use


def _binary(name):
    def fwd(ctx):
        y = ctx.y()
        y[...] = getattr(np, name)(ctx.x(0), ctx.x(1))
    return fwd


def not_fwd(ctx):
    ctx.y()[...] = np.logical_not(ctx.x(0))


def isnan_fwd(ctx):
    ctx.y()[...] = np.isnan(ctx.x(0))


def isinf_fwd(ctx):
    x = np.asarray(ctx.x(0))
    pos, neg = ctx.attrs.get("detect_positive", 1), ctx.attrs.get("detect_negative", 1)
    ctx.y()[...] = (np.isposinf(x) & bool(pos)) | (np.isneginf(x) & bool(neg))


def cast_rule(op, ctx) -> OpRule:
    x, y = op.inputs[0], op.outputs[0]
    dtype = ctx.operand(y).dtype
    if ctx.operand(x).dtype == dtype and dtype.startswith(("float", "bfloat")):  # an identity
        return view_rule(op, ctx)
    r = OpRule(forward=forward_io(op))
    if bp_targets(op, ctx, [x]):
        r.calc_derivative = StepIO([("bp", y)], [("bp", x)])
    if ctx.operand(y).dtype.startswith(("float", "bfloat")):
        param_gradient(op, ctx, r, x, [("bp", y)])
    return r


def cast_fwd(ctx):
    y = ctx.y()
    x = np.asarray(ctx.x(0))
    if y.dtype.kind in "iu" and x.dtype.kind == "f":
        x = np.trunc(x)  # ONNX / TFLite: toward zero
    y[...] = x


def cast_derivative(ctx):
    dx = target(ctx, 0)
    if dx is not None:
        dx[...] = ctx.dy()


def _elementwise_flops(op, operands):
    return operands[op.outputs[0]].num_elements, 0


def _zero(op, operands):
    return 0, 0


def _fixed(op, graph, shapes, batched):
    """Shape, Size, Range: the output's shape does not follow the batch."""
    return [None] * len(op.outputs)


def _shape_batch(op, graph, shapes, batched):
    """A Shape of a batched tensor that includes the batch dim feeds a shape computation whose
    values memplan does not track: re-batching would leave them stale."""
    x = op.inputs[0]
    start = int(op.attrs.get("start", 0))
    if start == 0 or start <= -len(graph.operands[x].shape):
        from memplan_cli.ir.graph import GraphError

        raise GraphError(f"cannot re-batch op {op.label}: it reads the batch dimension into a shape "
                         "computation; export the model with the batch you want or a symbolic batch")
    return [None]


def _same(op, graph, shapes, batched):
    return [tuple(shapes[op.inputs[0]])]


def _check_cast(op, operands):
    return None


def _check_const(op, operands):
    v = op.attrs.get("value", 0)
    if not isinstance(v, (int, float, bool)):
        return f"has a fill value {v!r} that is not a number"
    return None


OPS = [
    OpDef("Shape", rule=shape_only, kernels={"forward": shape_fwd}, flops=_zero, no_grad=True, batch=_shape_batch,
          role="shape_of"),
    OpDef("Size", rule=shape_only, kernels={"forward": size_fwd}, flops=_zero, no_grad=True, batch=_shape_batch),
    OpDef("ConstantOfShape", rule=plain, kernels={"forward": const_fwd}, flops=_zero, no_grad=True,
          check=_check_const, batch=_fixed, role="fill", autocast="fixed"),  # its value's dtype
    OpDef("Range", rule=plain, kernels={"forward": range_fwd}, flops=_zero, required_inputs=3, no_grad=True,
          batch=_fixed, autocast="fixed"),
    OpDef("Not", rule=plain, kernels={"forward": not_fwd}, flops=_elementwise_flops, no_grad=True, batch=_same),
    OpDef("IsNaN", rule=plain, kernels={"forward": isnan_fwd}, flops=_elementwise_flops, no_grad=True, batch=_same),
    OpDef("IsInf", rule=plain, kernels={"forward": isinf_fwd}, flops=_elementwise_flops, no_grad=True, batch=_same),
    OpDef("Cast", rule=cast_rule, kernels={"forward": cast_fwd, "calcDerivative": cast_derivative,
                                                  "calcGradient": cast_derivative},
          flops=_elementwise_flops, check=_check_cast, batch=_same, moves_data=True, shape_value=first_input_value,
          autocast="fixed",  # `to(dtype)` names its dtype: autocast leaves it alone
          profiles={"torch": {}}),  # `--profile torch`: `to(dtype)` keeps nothing
] + [OpDef(t, rule=plain, kernels={"forward": _binary(fn)}, flops=_elementwise_flops, required_inputs=2,
           no_grad=True, batch=broadcast_batch) for t, fn in BINARY.items()]


# ---- converters ---------------------------------------------------------------------------------
def _same_type(t):
    def conv(node) -> Canon:
        return Canon(t, {})
    return conv


def _onnx_shape(node) -> Canon:
    attrs = {}
    for k in ("start", "end"):
        if k in node.attrs:
            attrs[k] = int(node.attrs[k])
    return Canon("Shape", attrs)


def _onnx_constant_of_shape(node) -> Canon:
    v = node.attrs.get("value")
    value = 0.0
    if v is not None:
        from onnx import numpy_helper

        value = numpy_helper.to_array(v).reshape(-1)[0].item()
    return Canon("ConstantOfShape", {"value": value})


def _onnx_isinf(node) -> Canon:
    return Canon("IsInf", {k: int(node.attrs.get(k, 1)) for k in ("detect_positive", "detect_negative")})


def _onnx_cast(node) -> Canon:
    return Canon("Cast", {})  # the target type is the output operand's dtype


def _onnx_cast_like(node) -> Canon:
    # CastLike(x, like): a Cast to like's dtype (the output's); `like` gives only its type
    return Canon("Cast", {}, inputs=node.inputs[:1])


# what ONNX's own constant folding (loaders/onnx_fold.py) computes from a static shape: the dims or
# their count
def _range_elements(start, limit, delta):
    """How many elements Range(start, limit, delta) makes, from its constant scalar inputs."""
    if not all(v is not None and len(v) == 1 for v in (start, limit, delta)) or not delta[0]:
        return None
    return max(0, -((start[0] - limit[0]) // delta[0]))


def _constant_of_shape_elements(shape, *_):
    """How many elements ConstantOfShape makes, from its constant shape input."""
    if shape is None:
        return None
    count = 1
    for d in shape:
        count *= max(d, 0)
    return count


def _through(view, name: str, kinds) -> tuple:
    """(name, node) of the first value up `name`'s first-input chain whose node is not one of `kinds`."""
    n = view.node(name)
    while n is not None and n["type"] in kinds:
        name = n["inputs"][0]
        n = view.node(name)
    return name, n


# `elements`: from the constant integer inputs (lists, None where not constant), how many elements
# the op asks onnx's shape inference to materialise (the loader names an op that exhausts its memory)
def _one_hot_slice(x: str, view) -> tuple | None:
    """(classes, class index) when `x` is one class's slice of a one-hot encoding: a Gather of a
    scalar index along the class axis (through Casts and Transposes) of an ONNX OneHot with off
    value 0, or of Equal(ints with a last axis of 1, arange(classes)) (torch's one_hot as the dynamo
    exporter writes it). The class index is None where the graph computes it (a TorchScript loop's
    traced index). Every row of a one-hot holds at most one nonzero, so the classes' counts sum to
    at most its rows: a mixture of experts' `torch.where(one_hot(...)[e])`."""
    _, g = _through(view, x, ("Cast",))
    if g is None or g["type"] != "Gather" or len(g["inputs"]) < 2:
        return None
    index = view.value(g["inputs"][1])  # None: computed in the graph
    if (index is None and view.shape(g["inputs"][1]) != ()) or (index is not None and index.ndim != 0):
        return None
    axis, name = int(g["attrs"].get("axis", 0)), g["inputs"][0]
    n = view.node(name)
    while n is not None and n["type"] in ("Cast", "Transpose"):
        if n["type"] == "Transpose":
            perm = n["attrs"].get("perm")
            if perm is None:
                return None
            axis = int(perm[axis])
        name = n["inputs"][0]
        n = view.node(name)
    rank = view.rank(name)
    if n is None or rank is None:
        return None
    if n["type"] == "OneHot" and len(n["inputs"]) >= 3:
        depth, values = view.value(n["inputs"][1]), view.value(n["inputs"][2])
        if depth is None or values is None or values.size != 2 or values.reshape(-1)[0] != 0:
            return None
        if int(n["attrs"].get("axis", -1)) % rank != axis % rank:
            return None
        classes = int(depth.reshape(-1)[0])
    elif n["type"] == "Equal" and len(n["inputs"]) == 2:
        consts = [view.value(i) for i in n["inputs"]]
        r = next((c for c in consts if c is not None and c.ndim == 1), None)
        other = [i for i, c in zip(n["inputs"], consts) if c is None]
        if r is None or len(other) != 1 or axis % rank != rank - 1 or \
                not np.array_equal(r, np.arange(r.size)) or (view.shape(other[0]) or (0,))[-1] != 1:
            return None
        classes = int(r.size)
    else:
        return None
    if index is None:
        return classes, None
    k = int(index)
    return (classes, k % classes) if -classes <= k < classes else None


_BOOL_RESULTS = ("Greater", "Less", "Equal", "GreaterOrEqual", "LessOrEqual", "Not", "And", "Or", "Xor", "IsNaN")


def mask_count(view, name: str) -> dict | None:
    """{"mask", "bound", "dtype"} when `name` is the number of true elements of a boolean result
    (`mask.sum()`: a ReduceSum over every axis of a Cast to int32 / int64 of a comparison, through
    reshapes and casts): at most the mask's elements; else None."""
    total = view.node(name)
    if total is None or total["type"] != "ReduceSum" or total["attrs"].get("noop_with_empty_axes", 0):
        return None
    cast = view.node(total["inputs"][0])
    if cast is None or cast["type"] != "Cast" or int(cast["attrs"].get("to", 0)) not in (6, 7):
        return None
    axes = total["attrs"].get("axes")
    if axes is None and len(total["inputs"]) > 1 and total["inputs"][1]:
        axes = view.value(total["inputs"][1])
        if axes is None:
            return None
        axes = [int(a) for a in np.asarray(axes).reshape(-1)]
    rank = view.rank(total["inputs"][0])
    if rank is None or (axes and sorted({a % rank for a in axes}) != list(range(rank))):
        return None  # a count per row, not the mask's
    mask, n = _through(view, cast["inputs"][0], ("Cast", "Reshape", "Flatten", "Identity"))
    shape = view.shape(mask)
    if n is None or n["type"] not in _BOOL_RESULTS or shape is None:
        return None
    return {"mask": mask, "bound": int(np.prod(shape, dtype=np.int64)),
            "dtype": "int32" if int(cast["attrs"]["to"]) == 6 else "int64"}


def _range_count(attrs: dict, input_shape: tuple, view=None, x: str = "", inputs=(), outputs=()) -> dict | None:
    """Range(0, limit, 1) whose limit is the largest count of a mask along an axis (Longformer's
    `arange(num_global_attn_indices.max())`: ReduceMax of ReduceSum of a Cast of a comparison, through
    Casts and reshapes) makes at most as many elements as that axis is long; the loader takes that
    bound (every element selected) unless --dim sets it. Any other data-sized Range has no bound."""
    if view is None or len(inputs) < 3:
        return None
    start, delta = view.value(inputs[0]), view.value(inputs[2])
    if start is None or delta is None or start.size != 1 or delta.size != 1 or start.reshape(-1)[0] != 0 \
            or delta.reshape(-1)[0] != 1 or start.dtype.kind not in "iu":
        return None

    largest, top = _through(view, inputs[1], ("Cast", "Squeeze", "Unsqueeze", "Reshape", "Identity"))
    if top is None or top["type"] != "ReduceMax":
        return None
    _, total = _through(view, top["inputs"][0], ("Cast", "Identity"))
    if total is None or total["type"] != "ReduceSum":
        return None
    cast = view.node(total["inputs"][0])
    mask, n = _through(view, total["inputs"][0], ("Cast",))
    shape = view.shape(mask)
    if n is None or n["type"] not in _BOOL_RESULTS or shape is None or not shape:
        return None
    axes = total["attrs"].get("axes")
    if axes is None and len(total["inputs"]) > 1 and total["inputs"][1]:
        axes = view.value(total["inputs"][1])
        axes = None if axes is None else [int(a) for a in np.asarray(axes).reshape(-1)]
    if axes is None or total["attrs"].get("noop_with_empty_axes", 0):
        axes = range(len(shape))  # every axis: the whole mask's count
    bound = 1
    for a in set(int(a) % len(shape) for a in axes):
        bound *= int(shape[a])
    out = {"dim": 0, "bound": bound, "leading": (), "of": mask}
    if cast is not None and cast["type"] == "Cast" and view.node(top["inputs"][0]) is total and \
            int(cast["attrs"].get("to", 0)) in (6, 7):
        # the largest count itself, read elsewhere as a size (`new_zeros(b, count.max(), ...)`), is
        # taken at the same value: an integer of the Cast's type (6 int32, 7 int64)
        out["value_of"], out["value_dtype"] = largest, ("int32" if int(cast["attrs"]["to"]) == 6 else "int64")
    return out


def _scatter_updates_bound(view, out: str, x: str) -> int | None:
    """The length L when NonZero's result `out` (of `x`), transposed, is a ScatterND's indices whose updates are
    a slice from 0 of a 1-d tensor of L elements: the ScatterND runs only when there are at most L
    index rows (the TorchScript exporter's index_put with a boolean mask: the values flattened and
    sliced to the count; a learned row written where the ids match)."""
    for t in view.readers(out):
        if t["type"] != "Transpose" or list(t["attrs"].get("perm") or ()) != [1, 0]:
            continue
        for sc in view.readers(t["outputs"][0]):
            if sc["type"] != "ScatterND" or len(sc["inputs"]) < 3 or sc["inputs"][1] != t["outputs"][0]:
                continue
            sl = view.node(sc["inputs"][2])
            if sl is None or sl["type"] != "Slice" or len(sl["inputs"]) < 2:
                continue
            src, start = view.shape(sl["inputs"][0]), view.value(sl["inputs"][1])
            if src is not None and len(src) == 1 and start is not None and start.size == 1 \
                    and int(start.reshape(-1)[0]) == 0 and view.rank(sc["inputs"][0]) == view.rank(x):
                return int(src[0])  # each index row addresses one element of the data: one update each
    return None


def _nonzero_count(attrs: dict, input_shape: tuple, view=None, x: str = "", inputs=(), outputs=()) -> dict:
    """NonZero (`torch.nonzero`, `torch.where(mask)`: a mixture of experts' tokens of one expert, a
    mask's positions) returns (rank, count) indices; what it guarantees is that the count is at most
    the input's elements, every one selected. The loader takes that bound unless --dim sets it, or
    the count the file itself traced (`_traced_count`) (loaders/data_sized.py). Of one class's slice of a one-hot (`_one_hot_slice`), the classes'
    counts sum to at most the rows: the loader takes them as equal shares (balanced routing). Where
    the indices address a ScatterND of updates sliced from a shorter tensor (`_scatter_updates_bound`),
    the file runs only up to that tensor's length: that is the bound."""
    bound = 1
    for d in input_shape:
        bound *= int(d)
    cap = _scatter_updates_bound(view, outputs[0], x) if view is not None and outputs and x else None
    if cap is not None:
        bound = min(bound, cap)
    out = {"dim": 1, "bound": bound, "leading": (max(len(input_shape), 1),)}
    found = _one_hot_slice(x, view) if view is not None and x else None
    if found is not None:
        classes, k = found
        # the slice has one element per row of the one-hot: `bound` rows shared by `classes`
        # (an index computed in the graph, k None: which class is not known, a first class's share)
        out["share"] = max(1, bound // classes + ((k or 0) < bound % classes))
    traced = _traced_count(view, outputs[0]) if view is not None and outputs else None
    if traced is not None and traced <= bound:
        out["traced"] = traced
    return out


def _traced_count(view, indices: str) -> int | None:
    """The count a TorchScript file itself records: a loop over `mask.nonzero()` (transformers'
    mixture of experts, `for expert_idx in expert_hit`) is traced as the indices, transposed
    (`nonzero()` is NonZero's transpose), cut by a Split of constant sizes along the count's axis,
    one piece per iteration run at export time. ONNX's Split requires its sizes to sum to that axis's
    length, so the count is their sum, as the file has it (nothing assumed). None when the indices
    are read otherwise."""
    readers = view.readers(indices)
    if len(readers) != 1:
        return None
    node, axis = readers[0], 1
    if node["type"] == "Transpose":
        perm = list(node["attrs"].get("perm") or (1, 0))
        if sorted(perm) != [0, 1]:
            return None
        axis = perm.index(1)
        readers = view.readers(node["outputs"][0])
        if len(readers) != 1:
            return None
        node = readers[0]
    if node["type"] != "Split":
        return None
    split_axis = int(node["attrs"].get("axis", 0))
    if split_axis % 2 != axis:
        return None
    sizes = view.value(node["inputs"][1]) if len(node["inputs"]) > 1 and node["inputs"][1] else None
    if sizes is None:
        sizes = node["attrs"].get("split")
    if sizes is None:
        return None
    sizes = [int(v) for v in (sizes.reshape(-1) if hasattr(sizes, "reshape") else sizes)]
    return sum(sizes) if len(sizes) == len([o for o in node["outputs"] if o]) else None


ONNX_FACTS = {"Shape": {"shape_of": "dims"}, "Size": {"shape_of": "count"},
              "If": {"branches": ("then_branch", "else_branch")},
              "Loop": {"body": "body"},
              "Range": {"elements": _range_elements, "data_sized_count": _range_count},
              "ConstantOfShape": {"elements": _constant_of_shape_elements},
              "NonZero": {"data_sized_count": _nonzero_count}}
ONNX = {"Shape": _onnx_shape, "Size": _same_type("Size"), "ConstantOfShape": _onnx_constant_of_shape,
        "Range": _same_type("Range"), "Not": _same_type("Not"), "Cast": _onnx_cast, "CastLike": _onnx_cast_like, "IsNaN": _same_type("IsNaN"),
        "IsInf": _onnx_isinf,
        **{t: _same_type(t) for t in BINARY if t != "NotEqual"}}


def _tfl_shape(node) -> Canon:
    return Canon("Shape", {})


def _tfl_fill(node) -> Canon | None:
    """FILL(dims, value): ONNX's ConstantOfShape with its scalar value read at load (Keras's ones_like of a
    computed shape: MultiHeadAttention's causal mask). A value computed at run time stays unconverted."""
    v = node.values(1)
    if v is None or len(v) != 1:
        return None
    return Canon("ConstantOfShape", {"value": v[0]}, inputs=node.inputs[:1])


TFLITE = {"SHAPE": _tfl_shape, "FILL": _tfl_fill, "CAST": _same_type("Cast"), "RANGE": _same_type("Range"),
          "EQUAL": _same_type("Equal"), "NOT_EQUAL": _same_type("NotEqual"), "LESS": _same_type("Less"),
          "GREATER": _same_type("Greater"), "LESS_EQUAL": _same_type("LessOrEqual"),
          "GREATER_EQUAL": _same_type("GreaterOrEqual"), "LOGICAL_NOT": _same_type("Not"),
          "LOGICAL_AND": _same_type("And"), "LOGICAL_OR": _same_type("Or")}
