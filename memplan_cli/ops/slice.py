"""Slice and Split: Y is a strided window of X (Slice), or X cut into pieces along one axis (Split).

Canonical forms:
- `Slice(x[, starts, ends, axes, steps])`, attrs `starts`, `ends`, `axes`, `steps` with ONNX
  semantics (negative values count from the end, out-of-range values clamp, a negative step walks
  backwards). ONNX opset 1-9 gives them as attributes, opset 10+ as inputs: constant inputs become
  attributes; inputs computed at run time (a `Shape -> Gather` chain) stay operands that the kernels
  read (small ints; the backward keeps them). TFLite SLICE (begin, size) and STRIDED_SLICE (begin,
  end, strides and begin/end/shrink-axis masks) are converted when begin/end/strides are constants;
  a shrunk axis is a length-1 window whose output drops the axis (the kernels reshape to Y's shape).
  STRIDED_SLICE with ellipsis_mask, new_axis_mask or offset is not converted (it stays STRIDED_SLICE
  and is refused if training needs it).
- `Split(x)`, attrs `axis` and `sizes` (from the outputs' shapes, which shape inference knows for
  every ONNX opset: the `split` attribute (< 13), input (13+) or `num_outputs` (18+)). TFLite SPLIT
  (axis input first), SPLIT_V (sizes, axis inputs) and UNPACK (pieces of size 1, the axis dropped:
  attr `squeeze`).
- `Pack(x0, x1, ...)`, attr `axis`: TFLite PACK, the inputs stacked along a new axis (UNPACK's
  inverse; ONNX writes it as Unsqueeze + Concat).

Training rules (PyTorch derivatives.yaml `slice.Tensor`: self: slice_backward_wrapper(grad,
self.sym_sizes(), dim, start, end, step); `split.Tensor`: self: split_backward(grads, ...)): only
sizes are saved, never data.
- Slice calcDerivative: dX = zeros, dX[window] = dY; reads dY (and run-time slice parameters).
- Split calcDerivative: dX = the pieces' back-props side by side, zeros for a piece nobody
  differentiates; reads the back-props that exist.
- Pack calcDerivative: dX_k = dY's k-th slice along the new axis; reads dY only (PyTorch `stack`:
  tensors: stack_tensors_backward(grad, dim, ...)).
FLOPs: none (data movement).
"""
from __future__ import annotations

import math

import numpy as np

from memplan_cli.ops.base import Canon, OpDef
from memplan_cli.ops.concat import concat
from memplan_cli.ops.kernel_util import param_gradient, target
from memplan_cli.ops.rule import OpRule, StepIO, bp_targets, forward_io

PARAMS = ("starts", "ends", "axes", "steps")  # ONNX Slice inputs 1..4
SPLIT_TYPE = "Split"  # what `--profile torch` reads TorchScript's chunk Slices back as (attr "chunk")
BIG = 2**62


# ---- Slice --------------------------------------------------------------------------------------
def window(shape, starts, ends, axes=None, steps=None) -> tuple:
    """The numpy index of an ONNX Slice on `shape` (ONNX's clamping rules)."""
    rank = len(shape)
    axes = range(len(starts)) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    sl = [slice(None)] * rank
    for s, e, a, st in zip(starts, ends, axes, steps):
        a, s, e, st = int(a) % rank, int(s), int(e), int(st)
        dim = shape[a]
        s = s + dim if s < 0 else s
        e = e + dim if e < 0 else e
        if st > 0:
            s, e = min(max(s, 0), dim), min(max(e, 0), dim)
        else:
            s, e = min(max(s, 0), dim - 1), min(max(e, -1), dim - 1)
        sl[a] = slice(s, None if e < 0 else e, st)
    return tuple(sl)


def _params(op, get) -> list:
    """starts, ends, axes, steps: from the attrs, else from `get(k)` (input k's value) when present."""
    out = []
    for k, name in enumerate(PARAMS, start=1):
        v = op.attrs.get(name)
        if v is None and k < len(op.inputs) and op.inputs[k] >= 0:
            v = get(k)
        out.append(None if v is None else [int(x) for x in np.asarray(v).reshape(-1)])
    return out


def runtime_params(op) -> list[int]:
    """Slice-parameter operands whose values only exist at run time."""
    return [op.inputs[k] for k, name in enumerate(PARAMS, start=1)
            if name not in op.attrs and k < len(op.inputs) and op.inputs[k] >= 0]


def slice_rule(op, ctx) -> OpRule:
    x, y = op.inputs[0], op.outputs[0]
    r = OpRule(forward=forward_io(op))
    reads = [("bp", y)] + [("fwd", i) for i in runtime_params(op)]
    if bp_targets(op, ctx, [x]):
        r.calc_derivative = StepIO(reads, [("bp", x)])
    param_gradient(op, ctx, r, x, reads)
    return r


def _window_of(ctx, shape) -> tuple:
    starts, ends, axes, steps = _params(ctx.op, ctx.x)
    return window(shape, starts, ends, axes, steps)


def slice_forward(ctx):
    x = ctx.x(0)
    y = ctx.y()
    y[...] = x[_window_of(ctx, x.shape)].reshape(y.shape)


def slice_derivative(ctx):
    dx = target(ctx, 0)
    if dx is None:
        return
    dy = ctx.dy()
    w = _window_of(ctx, dx.shape)
    part = np.array(dy)  # dY may share dX's memory: read it before zeroing
    dx[...] = 0
    dx[w] = part.reshape(dx[w].shape)


def _known(op, operands):
    def get(k):
        return operands[op.inputs[k]].value
    return _params(op, get)


def slice_check(op, operands):
    shape = operands[op.inputs[0]].shape
    rank = len(shape)
    for k, name in enumerate(PARAMS, start=1):
        if name not in op.attrs and k < len(op.inputs) and op.inputs[k] >= 0:
            o = operands[op.inputs[k]]
            if o.is_const and o.value is None:
                return f"has a constant {name} input whose values memplan cannot read"
    starts, ends, axes, steps = _known(op, operands)
    if starts is None or ends is None:
        return None  # computed at run time: checked by the kernel's shapes
    n = len(starts)
    if len(ends) != n or (axes is not None and len(axes) != n) or (steps is not None and len(steps) != n):
        return "has starts, ends, axes and steps of different lengths"
    if axes is not None:
        if any(not -rank <= a < rank for a in axes):
            return f"has an axis outside the input's {rank} dimensions"
        if len({a % rank for a in axes}) != n:
            return "slices one axis twice"
    if steps is not None and any(s == 0 for s in steps):
        return "has a step of 0"
    if axes is None and n > rank:
        return f"slices {n} axes of a {rank}-dimensional input"
    got = np.empty(shape, np.bool_)[window(shape, starts, ends, axes, steps)].size
    want = operands[op.outputs[0]].num_elements
    if got != want:
        return f"selects {got} elements but its output has {want}"
    return None


def _slice_batch(op, graph, shapes, batched):
    x = op.inputs[0]
    if x not in batched:
        return [None]
    starts, ends, axes, steps = _known(op, graph.operands)
    old_out = graph.operands[op.outputs[0]].shape
    if starts is None or ends is None:
        old0 = graph.operands[x].shape[0]
        return [(shapes[x][0],) + tuple(old_out[1:])] if old_out and old_out[0] == old0 else [None]
    cut = np.empty(shapes[x], np.bool_)[window(shapes[x], starts, ends, axes, steps)].shape
    if len(cut) == len(old_out):
        return [tuple(cut)]
    # a TFLite shrink dropped axes: dim 0 follows the window's dim 0 when it is still there
    was = np.empty(graph.operands[x].shape, np.bool_)[window(graph.operands[x].shape, starts, ends, axes, steps)].shape
    return [(cut[0],) + tuple(old_out[1:])] if old_out and old_out[0] == was[0] and was[0] != 1 else [None]


# ---- Split --------------------------------------------------------------------------------------
def split_rule(op, ctx) -> OpRule:
    x = op.inputs[0]
    r = OpRule(forward=forward_io(op))
    reads = [("bp", o) for o in op.outputs if ctx.needs_bp(o)]
    if bp_targets(op, ctx, [x]):
        r.calc_derivative = StepIO(reads, [("bp", x)])
    param_gradient(op, ctx, r, x, reads)
    return r


def _cuts(op, shape) -> list[tuple]:
    ax = int(op.attrs["axis"]) % len(shape)
    out, at = [], 0
    for n in op.attrs["sizes"]:
        sl = [slice(None)] * len(shape)
        sl[ax] = slice(at, at + n)
        out.append(tuple(sl))
        at += n
    return out


def split_forward(ctx):
    x = ctx.x(0)
    for k, w in enumerate(_cuts(ctx.op, x.shape)):
        y = ctx.y(k)
        y[...] = x[w].reshape(y.shape)


def split_derivative(ctx):
    dx = target(ctx, 0)
    if dx is None:
        return
    parts = []
    for k, w in enumerate(_cuts(ctx.op, dx.shape)):
        t = ctx.tg.bp.get(ctx.op.outputs[k])
        parts.append((w, None if t is None or t not in ctx.touched else np.array(ctx.dy(k))))
    dx[...] = 0
    for w, d in parts:
        if d is not None:
            dx[w] = d.reshape(dx[w].shape)


def split_check(op, operands):
    shape = operands[op.inputs[0]].shape
    rank = len(shape)
    ax = op.attrs.get("axis")
    sizes = op.attrs.get("sizes")
    if ax is None or sizes is None:
        return "has no axis or sizes"
    if not -rank <= int(ax) < rank:
        return f"has axis {ax} outside the input's {rank} dimensions"
    if len(sizes) != len(op.outputs) or sum(sizes) != shape[int(ax) % rank] or min(sizes) < 0:
        return f"cuts a dimension of {shape[int(ax) % rank]} into {tuple(sizes)} for {len(op.outputs)} outputs"
    for o, n in zip(op.outputs, sizes):
        if operands[o].num_elements != math.prod(shape) // shape[int(ax) % rank] * n:
            return f"has an output of shape {operands[o].shape} that does not match its piece"
    return None


def _split_batch(op, graph, shapes, batched):
    """The pieces keep their sizes along the split axis and follow the input in every other dim
    (the batch may sit anywhere: after a Transpose, attention splits q, k, v on axis 0). Splitting
    an axis whose size changed (the batch itself) into fixed pieces cannot be re-batched."""
    x = op.inputs[0]
    if x not in batched:
        return [None] * len(op.outputs)
    old, new = graph.operands[x].shape, shapes[x]
    ax = int(op.attrs["axis"]) % len(old)
    if old[ax] != new[ax]:
        from memplan_cli.ir.graph import GraphError

        raise GraphError(f"cannot re-batch op {op.label}: it splits the batch dimension into fixed pieces")
    out = []
    for o in op.outputs:
        s = graph.operands[o].shape
        if op.attrs.get("squeeze"):
            out.append(tuple(d for k, d in enumerate(new) if k != ax))
        else:
            out.append(tuple(new[:ax]) + (s[ax],) + tuple(new[ax + 1:]))
    return out


def _split_sizes(node, axis: int) -> list[int]:
    ax = axis % len(node.shape(0))
    outs = [node.operands[o].shape for o in node.outputs]
    return [int(s[ax]) if len(s) > ax else 1 for s in outs]


# ---- Pack ---------------------------------------------------------------------------------------
def pack_rule(op, ctx) -> OpRule:
    """Concat's rule: a stack is a concatenation along a new axis (dY splits back into the inputs'
    back-props; parameters stacked in train through it); PACK has no fused activation."""
    return concat(op, ctx)


def pack_forward(ctx):
    y = ctx.y()
    y[...] = np.stack([ctx.x(k) for k in range(len(ctx.op.inputs))], axis=int(ctx.attrs["axis"]) % y.ndim)


def pack_derivative(ctx):
    dy = np.array(ctx.dy())
    ax = int(ctx.attrs["axis"]) % dy.ndim
    done = set()
    for k in range(len(ctx.op.inputs)):
        out = target(ctx, k)
        if out is None:
            continue
        part = np.take(dy, k, axis=ax).reshape(out.shape)
        o = ctx.op.inputs[k]
        if o in done:  # the same operand stacked twice: its parts add up
            out += part
        else:
            out[...] = part
            done.add(o)


def pack_check(op, operands):
    y = operands[op.outputs[0]].shape
    shapes = {tuple(operands[i].shape) for i in op.inputs}
    ax = int(op.attrs.get("axis", 0))
    if len(shapes) != 1 or not -len(y) <= ax < len(y):
        return "stacks inputs of different shapes" if len(shapes) != 1 else f"has axis {ax} outside its output"
    (s,) = shapes
    want = tuple(s[:ax % len(y)]) + (len(op.inputs),) + tuple(s[ax % len(y):])
    if want != tuple(y):
        return f"stacks {len(op.inputs)} inputs of shape {s} into {tuple(y)}"
    return None


def _pack_batch(op, graph, shapes, batched):
    s = list(shapes[op.inputs[0]])
    ax = int(op.attrs["axis"]) % (len(s) + 1)
    return [tuple(s[:ax] + [len(op.inputs)] + s[ax:])]


def _slice_value(op, ins):
    """Slice of a shape value: starts / ends / axes / steps from the attributes or (ONNX opset >= 10)
    the inputs' values; None when they are unknown."""
    p = [op.attrs.get(k) for k in ("starts", "ends", "axes", "steps")]
    for k in range(4):
        if p[k] is None and k + 1 < len(ins) and ins[k + 1] is not None:
            p[k] = [int(d) for d in np.atleast_1d(ins[k + 1]).reshape(-1)]
    if p[0] is None or p[1] is None:
        return None
    return ins[0][window(ins[0].shape, *p)]


OPS = [
    OpDef("Pack", rule=pack_rule, kernels={"forward": pack_forward, "calcDerivative": pack_derivative,
                                           "calcGradient": pack_derivative},
          flops=lambda op, operands: (0, 0), check=pack_check, batch=_pack_batch,
          shape_value=lambda op, ins: np.stack([v for v in ins if v is not None], axis=int(op.attrs.get("axis", 0)))),
    OpDef("Slice", rule=slice_rule, kernels={"forward": slice_forward, "calcDerivative": slice_derivative,
                                     "calcGradient": slice_derivative},
          flops=lambda op, operands: (0, 0), check=slice_check, nondiff_inputs=(1, 2, 3, 4), batch=_slice_batch,
          shape_value=_slice_value, narrows=True,
          profiles={"torch": {"view": True}}),  # `--profile torch`: a view; slice_backward makes a new tensor
    OpDef("Split", rule=split_rule, kernels={"forward": split_forward, "calcDerivative": split_derivative,
                                     "calcGradient": split_derivative},
          flops=lambda op, operands: (0, 0), check=split_check, batch=_split_batch,
          # `--profile torch`: split's outputs are views; its backward allocates zeros for each output
          # that got no gradient, then concatenates them into the input's gradient (measured)
          profiles={"torch": {"view": "all", "bwd_tmp": "unused_outputs"}}),
]


# ---- converters ---------------------------------------------------------------------------------
def _onnx_slice(node) -> Canon:
    if node.opset < 10:
        a = node.attrs
        attrs = {"starts": tuple(a.get("starts", ())), "ends": tuple(a.get("ends", ()))}
        if "axes" in a:
            attrs["axes"] = tuple(a["axes"])
        return Canon("Slice", attrs, inputs=node.inputs[:1])
    attrs, ins = {}, [node.inputs[0]]
    dynamic = False
    for k, name in enumerate(PARAMS, start=1):
        if node.input(k) is None:
            continue
        v = node.values(k)
        if v is None:
            dynamic = True
        else:
            attrs[name] = tuple(int(x) for x in v)
    if dynamic:  # keep every parameter operand in place; the known ones also as attrs
        ins = list(node.inputs)
    return Canon("Slice", attrs, inputs=ins)


def _onnx_split(node) -> Canon:
    axis = int(node.attrs.get("axis", 0))
    return Canon("Split", {"axis": axis, "sizes": tuple(_split_sizes(node, axis))}, inputs=node.inputs[:1])


def _tfl_slice(node) -> Canon | None:
    begin, size = node.values(1), node.values(2)
    if begin is None or size is None:
        return None
    ends = tuple(BIG if s == -1 else int(b) + int(s) for b, s in zip(begin, size))
    return Canon("Slice", {"starts": tuple(int(b) for b in begin), "ends": ends}, inputs=node.inputs[:1])


def _tfl_strided_slice(node) -> Canon | None:
    o = node.options
    if o.get("ellipsis_mask", 0) or o.get("new_axis_mask", 0) or o.get("offset", False):
        return None
    begin, end = node.values(1), node.values(2)
    strides = node.values(3) if node.input(3) is not None else None
    shape = node.shape(0)
    if begin is None or end is None or shape is None or (node.input(3) is not None and strides is None):
        return None
    strides = strides or (1,) * len(begin)
    bm, em, sm = int(o.get("begin_mask", 0)), int(o.get("end_mask", 0)), int(o.get("shrink_axis_mask", 0))
    starts, ends, steps = [], [], []
    for i, (b, e, st) in enumerate(zip(begin, end, strides)):
        b, e, st = int(b), int(e), int(st)
        if sm >> i & 1:
            b = b + shape[i] if b < 0 else b
            starts.append(b), ends.append(b + 1), steps.append(1)
            continue
        if bm >> i & 1:
            b = 0 if st > 0 else BIG
        if em >> i & 1:
            e = BIG if st > 0 else -BIG
        starts.append(b), ends.append(e), steps.append(st)
    return Canon("Slice", {"starts": tuple(starts), "ends": tuple(ends), "axes": tuple(range(len(starts))),
                           "steps": tuple(steps)}, inputs=node.inputs[:1])


def _tfl_split(node) -> Canon | None:
    ax = node.values(0)
    if ax is None or node.input(1) is None:
        return None
    x = node.inputs[1]
    rank = len(node.operands[x].shape)
    axis = int(ax[0]) % rank
    sizes = [int(node.operands[o].shape[axis]) for o in node.outputs]
    return Canon("Split", {"axis": axis, "sizes": tuple(sizes)}, inputs=[x])


def _tfl_split_v(node) -> Canon | None:
    ax = node.values(2)
    if ax is None:
        return None
    axis = int(ax[0]) % len(node.shape(0))
    return Canon("Split", {"axis": axis, "sizes": tuple(_split_sizes(node, axis))}, inputs=node.inputs[:1])


def _tfl_pack(node) -> Canon:
    return Canon("Pack", {"axis": int(node.options.get("axis", 0))})


def _tfl_unpack(node) -> Canon:
    axis = int(node.options.get("axis", 0)) % len(node.shape(0))
    return Canon("Split", {"axis": axis, "sizes": (1,) * len(node.outputs), "squeeze": True},
                 inputs=node.inputs[:1])


ONNX = {"Slice": _onnx_slice, "Split": _onnx_split}
TFLITE = {"SLICE": _tfl_slice, "STRIDED_SLICE": _tfl_strided_slice, "SPLIT": _tfl_split,
          "SPLIT_V": _tfl_split_v, "UNPACK": _tfl_unpack, "PACK": _tfl_pack}


def _onnx_split_pieces(attrs: dict, n_inputs: int, n_outputs: int, input_rank: int) -> dict | None:
    """A Split whose sizes input is computed from the data (a mixture of experts' tokens split by
    each expert's count: `split_with_sizes` of `counts.tolist()`). What ONNX's Split guarantees is
    that the pieces, one per output, sum to the input's length along `axis`: the loader sizes them
    under a stated assumption (loaders/data_sized.py). None for a Split whose sizes are attributes."""
    if n_inputs < 2 or n_outputs < 1 or input_rank < 1:
        return None
    return {"axis": int(attrs.get("axis", 0)) % input_rank, "sizes_input": 1}


def _onnx_sequence_pieces(attrs: dict, split) -> dict | None:
    """SplitToSequence with no split input, or a scalar split of 1 (`split`: its value, None when
    absent), cuts its input into pieces of one along `axis`, dropped with keepdims 0 (TorchScript's
    `nonzero(as_tuple=True)` / `unbind`: a scalar 1 with keepdims 0; ONNX Runtime drops the axis for a
    scalar split, as eager's 1-d tensors are, where onnx's reference keeps it). A piece read at a
    constant position k is Gather(x, k, axis) (a 0-d index drops the axis, [k] keeps it), so the
    loader reads the sequence as those Gathers. A 1-d split cuts Split's pieces (not read so)."""
    if split is not None and (np.asarray(split).ndim != 0 or int(np.asarray(split)) != 1):
        return None
    return {"type": "Gather", "axis": int(attrs.get("axis", 0)), "keep": bool(attrs.get("keepdims", 1))}


def _chunk_piece(node, producer, value) -> dict | None:
    """A Slice that is piece i of n of `x.chunk(n, d)` as TorchScript writes it (torch.onnx's
    `prim::ConstantChunk` symbolic, opset 11+): `c = (Shape(x)[d] + n - 1) / n`, the pieces
    `Slice(x, i * c, (i + 1) * c, [d])` without steps, the first from a constant 0, each next from
    the previous end. Eager ran one `split` (SplitBackward0: one `cat` of the pieces' gradients)
    where a Slice each runs `slice_backward` (a zeroed tensor of x's size each); in the file the
    ends are computed from x's shape, not constants, and the shape fold would erase that. Returns
    {"chunk": (i, n, d)}, or None. `producer(name)`: the node writing a value; `value(name)`: a small
    constant's integers (a tuple) or None."""
    ins = list(node.input)
    if len(ins) != 4 or not all(ins):
        return None

    def op(name, typ):
        p = producer(name)
        return p if p is not None and p.op_type == typ and p.domain in ("", "ai.onnx") else None

    def scaled(name):  # Mul(c, k) in either order -> (c, k)
        m = op(name, "Mul")
        if m is None or len(m.input) != 2:
            return None
        for a, b in (m.input, m.input[::-1]):
            k = value(b)
            if k is not None and len(k) == 1:
                return a, int(k[0])
        return None

    end = scaled(ins[2])
    axis = value(ins[3])
    if end is None or axis is None or len(axis) != 1:
        return None
    c, k = end
    div = op(c, "Div")
    n = value(div.input[1]) if div is not None and len(div.input) == 2 else None
    add = op(div.input[0], "Add") if n is not None and len(n) == 1 else None
    if add is None or len(add.input) != 2 or not 1 <= k <= int(n[0]):
        return None
    n = int(n[0])
    shifted = [(a, value(b)) for a, b in (add.input, add.input[::-1])]
    dim = next((a for a, sh in shifted if sh is not None and tuple(sh) == (n - 1,)), None)
    gather = op(dim, "Gather") if dim is not None else None
    shape = op(gather.input[0], "Shape") if gather is not None and len(gather.input) == 2 else None
    if shape is None or shape.input[0] != ins[0] or value(gather.input[1]) not in (tuple(axis), (axis[0],)):
        return None
    start = value(ins[1])
    if k == 1:
        if start is None or tuple(start) != (0,):
            return None
    elif scaled(ins[1]) != (c, k - 1):
        return None
    return {"chunk": (k - 1, n, int(axis[0]))}


ONNX_FACTS = {"Slice": {"as_written": _chunk_piece},
              "Split": {"data_sized_pieces": _onnx_split_pieces},
              "SplitToSequence": {"sequence_pieces": _onnx_sequence_pieces},
              # reads one piece of a sequence, at the position its input 1 gives
              "SequenceAt": {"sequence_position_input": 1},
              # build a sequence of tensors (a list in the source model): with no tensor, of its
              # inputs in order, or its input 0 with input 1 put at position input 2 (the end when
              # absent). The shape fold reads a SequenceAt at a known position of one so built as
              # that tensor (TorchScript's `tensor_split` at a list of indices appends its slices:
              # loaders/onnx_fold.py)
              "SequenceEmpty": {"sequence_built": "empty"},
              "SequenceConstruct": {"sequence_built": "inputs"},
              "SequenceInsert": {"sequence_built": "insert"}}
