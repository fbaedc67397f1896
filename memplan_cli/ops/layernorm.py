"""LayerNormalization (ONNX LayerNormalization, opset 17+): normalisation over the trailing axes.

Canonical form: `LayerNormalization(X, scale[, B]) -> Y [, Mean [, InvStdDev]]` with attrs `axis`
(non-negative: normalised axes are axis..rank-1) and `epsilon`. With M rows (the product of
X.shape[:axis]) and N elements per row (the product of X.shape[axis:]):
Y = scale·(X - μ)·σ⁻¹ + B, μ and σ⁻¹ = 1/sqrt(var + ε) per row (biased variance, as ONNX's reference).
scale and B broadcast against X.shape[axis:] (numpy rules, right-aligned); B is optional.
Older exports (opset < 17) and TFLite's converter decompose layer norm into ReduceMean / Sub / Pow /
Sqrt / Div / Mul / Add (TFLite: MEAN, SQUARED_DIFFERENCE, RSQRT, ...): there is no single builtin,
and those ops live in their own families.

Training rule (PyTorch derivatives.yaml `native_layer_norm`: input, weight, bias:
native_layer_norm_backward(grad, input, normalized_shape, result1, result2, weight, bias, mask):
saves the input, the weight and result1/result2 = the per-row mean and inverse std):
- forward writes two per-row extras, `ln_mean` and `ln_invstd` (M floats each, forward to backward);
  when the model has the Mean / InvStdDev outputs, those are what backward keeps instead (the same
  values: no extra).
- calcGradient: dscale = Σ_rows dY·x̂ (reads X, mean, inverse std, dY), dB = Σ_rows dY (dY only).
  A parameter normalised (X itself a weight: DeBERTa-v3's relative-position table) gets dX here, by
  the formula below (reads X, scale, mean, inverse std, dY).
- calcDerivative: g = dY·scale; dX = σ⁻¹/N · (N·g - Σ g - x̂·Σ g·x̂) per row (reads X, scale, mean,
  inverse std, dY). A non-constant scale or B (an activation) gets its back-prop here too.
  Kept for backward: X, scale and 2·M floats.
- The Mean / InvStdDev outputs carry no gradient: a model whose loss depends on them through a
  differentiable path is refused when training reaches them.
FLOPs (per element of X): forward 7 (mean, centre, square-sum, scale by σ⁻¹, affine), backward 12
(dscale, dB, and the 9 of dX).
Refused: `stash_type` other than 1 (float32 statistics), a scale / B that does not broadcast
against X.shape[axis:], `axis` outside the input's rank.
"""
from __future__ import annotations

import math

import numpy as np

from memplan_cli.errors import UnsupportedOpError
from memplan_cli.ops.base import Canon, OpDef
from memplan_cli.ops.rule import FORWARD_TO_BACKWARD, ExtraRequest, OpRule, StepIO, bp_targets, forward_io

EPS = 1e-5


def _inputs(op):
    x, scale = op.inputs[0], op.inputs[1]
    bias = op.inputs[2] if len(op.inputs) > 2 else -1
    return x, scale, bias


def rule(op, ctx) -> OpRule:
    x, scale, bias = _inputs(op)
    y = op.outputs[0]
    # a parameter normalised (DeBERTa-v3's relative-position table, norm_rel_ebd="layer_norm") is a
    # weight too: its gradient is dX, made in calcGradient
    weights = [i for i in dict.fromkeys((x, scale, bias)) if i >= 0 and ctx.is_param(i)]
    r = OpRule(forward=forward_io(op), weights=weights)
    stat_outs = [o for o in op.outputs[1:3] if o >= 0]
    for o in stat_outs:
        if ctx.needs_bp(o):
            raise UnsupportedOpError(f"op {op.label} LayerNormalization: the loss depends on its "
                                     f"{'Mean' if o == op.outputs[1] else 'InvStdDev'} output, "
                                     "whose gradient memplan does not implement")
    trained = weights if ctx.trains(op) else []
    targets = bp_targets(op, ctx, [x, scale, bias])
    if not trained and not targets:
        return r
    needs_stats = bool(targets) or scale in trained or x in trained
    stats = []
    if needs_stats:
        if len(stat_outs) == 2:  # the model's own Mean / InvStdDev outputs are the statistics
            stats = [("fwd", op.outputs[1]), ("fwd", op.outputs[2])]
        else:
            rows = tuple(ctx.operand(x).shape[:op.attrs.get("axis", 0)])
            r.extras = [ExtraRequest("ln_mean", rows, "float32", FORWARD_TO_BACKWARD),
                        ExtraRequest("ln_invstd", rows, "float32", FORWARD_TO_BACKWARD)]
            r.forward.writes += [("extra", 0), ("extra", 1)]
            stats = [("extra", 0), ("extra", 1)]
        stats = [("fwd", x)] + stats
    if trained:
        reads = (stats if scale in trained or x in trained else []) + ([("fwd", scale)] if x in trained else [])
        r.calc_gradient = StepIO(reads + [("bp", y)], [("grad", w) for w in trained])
    if targets:
        r.calc_derivative = StepIO(stats + [("fwd", scale), ("bp", y)], [("bp", t) for t in targets])
    return r


# ---- kernels ---------------------------------------------------------------------------------
def _axis(ctx) -> int:
    return int(ctx.attrs.get("axis", 0))


def _rows(x, axis):
    """X as (M, N) rows."""
    return np.asarray(x).reshape(math.prod(x.shape[:axis]), -1)


def _row_vec(v, x, axis):
    """A per-row statistic (any stored shape with M elements) as an (M, 1) column."""
    return np.asarray(v).reshape(math.prod(x.shape[:axis]), 1)


def _param_rows(p, x, axis):
    """scale / B broadcast against X.shape[axis:], flattened to one row of N."""
    return np.broadcast_to(np.asarray(p), x.shape[axis:]).reshape(1, -1)


def _stats(ctx):
    """The (mean, inverse std) tensors backward reads: the model's outputs or the extras."""
    op = ctx.op
    if len(op.outputs) >= 3 and op.outputs[1] >= 0 and op.outputs[2] >= 0 and ctx.extra_id("ln_mean") is None:
        return ctx.y(1), ctx.y(2)
    return ctx.extra("ln_mean"), ctx.extra("ln_invstd")


def _recomputing(ctx) -> bool:
    """A recompute step (passes/cheap_recompute.py): it reads the saved statistics instead of writing them."""
    t = ctx.extra_id("ln_mean")
    return t is not None and t in ctx._reads and t not in ctx._writes


def forward(ctx):
    x = np.asarray(ctx.x(0))
    ax = _axis(ctx)
    xr = _rows(x, ax)
    if _recomputing(ctx):  # the same arithmetic as below, from the saved statistics
        mu, inv = (v.reshape(xr.shape[0], 1) for v in _stats(ctx))
    else:
        mu = xr.mean(axis=1, keepdims=True)
        inv = 1.0 / np.sqrt(((xr - mu) ** 2).mean(axis=1, keepdims=True) + float(ctx.attrs.get("epsilon", EPS)))
    y = (xr - mu) * inv * _param_rows(ctx.x(1), x, ax)
    if len(ctx.op.inputs) > 2 and ctx.op.inputs[2] >= 0:
        y = y + _param_rows(ctx.x(2), x, ax)
    ctx.y()[...] = y.reshape(ctx.y().shape)
    if _recomputing(ctx):
        return
    for k, what, v in ((1, "ln_mean", mu), (2, "ln_invstd", inv)):
        e = ctx.extra(what)
        if e is not None:
            e[...] = v.reshape(e.shape)
        if k < len(ctx.op.outputs) and ctx.op.outputs[k] >= 0:
            o = ctx.y(k)
            o[...] = v.reshape(o.shape)


def _xhat(ctx, x, ax):
    mu, inv = _stats(ctx)
    inv = _row_vec(inv, x, ax)
    return (_rows(x, ax) - _row_vec(mu, x, ax)) * inv, inv


def _reduce_param(g_rows, x, ax, shape):
    """Σ over rows of an (M, N) gradient, then over the dims the parameter was broadcast along."""
    from memplan_cli.kernels.common import reduce_to_shape

    return reduce_to_shape(g_rows.sum(axis=0).reshape(x.shape[ax:]), tuple(shape))


def calc_gradient(ctx):
    _param_grads(ctx, ctx.grad(1), ctx.grad(2))
    _input_grad(ctx, ctx.grad(0))  # a parameter normalised: its gradient is dX


def _param_grads(ctx, gs, gb):
    dy = np.asarray(ctx.dy())
    ax = _axis(ctx)
    dyr = _rows(dy, ax)
    if gb is not None:
        gb[...] = _reduce_param(dyr, dy, ax, gb.shape).reshape(gb.shape)
    if gs is not None:
        xhat, _ = _xhat(ctx, np.asarray(ctx.x(0)), ax)
        gs[...] = _reduce_param(dyr * xhat, dy, ax, gs.shape).reshape(gs.shape)


def calc_derivative(ctx):
    _param_grads(ctx, ctx.dx(1), ctx.dx(2) if len(ctx.op.inputs) > 2 else None)
    _input_grad(ctx, ctx.dx(0))


def _input_grad(ctx, dx):
    if dx is None:
        return
    x = np.asarray(ctx.x(0))
    ax = _axis(ctx)
    xhat, inv = _xhat(ctx, x, ax)
    g = _rows(np.asarray(ctx.dy()), ax) * _param_rows(ctx.x(1), x, ax)
    n = g.shape[1]
    d = inv * (g - g.sum(axis=1, keepdims=True) / n - xhat * ((g * xhat).sum(axis=1, keepdims=True) / n))
    dx[...] = d.reshape(dx.shape)


# ---- load-time facts -------------------------------------------------------------------------
def _broadcasts(p, tail) -> bool:
    if len(p) > len(tail):
        return False
    return all(a in (1, b) for a, b in zip(reversed(p), reversed(tail)))


def check(op, operands):
    xs = tuple(operands[op.inputs[0]].shape)
    ax = op.attrs.get("axis", 0)
    if not 0 <= ax < len(xs):
        return f"normalises from axis {ax} of a rank-{len(xs)} input"
    if op.attrs.get("stash_type", 1) != 1:
        return f"has stash_type {op.attrs['stash_type']} (statistics not in float32), which memplan does not implement"
    tail = xs[ax:]
    for k, what in ((1, "scale"), (2, "bias")):
        if k < len(op.inputs) and op.inputs[k] >= 0:
            s = tuple(operands[op.inputs[k]].shape)
            if not _broadcasts(s, tail):
                return f"has a {what} of shape {s}, which does not broadcast against the normalised shape {tail}"
    return None


def _flops(op, operands):
    n = operands[op.inputs[0]].num_elements
    return 7 * n, 12 * n


def _batch(op, graph, shapes, batched):
    s = tuple(shapes[op.inputs[0]])
    ax = op.attrs.get("axis", 0)
    stat = s[:ax] + (1,) * (len(s) - ax)
    return [s] + [stat] * (len(op.outputs) - 1)


# `--profile torch`: native_layer_norm saves its input, mean and rstd (one per row)
# a non-contiguous input (a permuted view: LayerNorm over channels) is copied contiguous in forward and
# again in backward (measured, torch 2.14: +X in native_layer_norm and in its backward, freed there)
TORCH = {"saves": (("in0", "any"),), "aux": (("mean", "rows", "float32"), ("rstd", "rows", "float32")),
         "copies_noncontiguous": True}
OPS = [OpDef("LayerNormalization", rule=rule,
             kernels={"forward": forward, "calcGradient": calc_gradient, "calcDerivative": calc_derivative},
             flops=_flops, required_inputs=2, check=check, batch=_batch, bias_inputs=(2,),
             weight_inputs=(1, 2), profiles={"torch": TORCH}, recompute_stats=("ln_mean", "ln_invstd"),
             autocast="first")]  # on no CPU autocast list: the output keeps its input's dtype


def _onnx(node) -> Canon:
    a = node.attrs
    rank = len(node.shape(0))
    ax = int(a.get("axis", -1))
    attrs = {"axis": ax + rank if ax < 0 else ax, "epsilon": float(a.get("epsilon", EPS))}
    if int(a.get("stash_type", 1)) != 1:
        attrs["stash_type"] = int(a["stash_type"])
    return Canon("LayerNormalization", attrs)


ONNX = {"LayerNormalization": _onnx}


# ---- a normalisation a converter decomposed, its scale and shift merged into the next layer ------
# TF Lite has no layer-norm builtin: litert-torch and the TF converter write LayerNorm / RMSNorm as
# MEAN, SQUARED_DIFFERENCE (or SUB and a square), ADD epsilon, RSQRT (or SQRT and a division), MUL,
# ADD; and the converter's optimiser moves a constant Mul / Add that feeds a FullyConnected or a
# convolution into that layer's weight and bias (litert-torch 0.10 names such a weight after both
# modules, "...LayerNorm_ln;;...Linear_fc"). A file whose normalisation has no per-channel constant
# after it and feeds only weighted layers trains those layers' merged weights: the norm's own scale
# and shift (if the source model had any) get no gradient of their own.
_SQUARES = ("SquaredDifference", "Square", "Pow", "Mul")
_NORM_STEPS = ("Add", "Sub", "Mul", "Div", "Neg", "Rsqrt", "Sqrt", "Reciprocal", "Reshape", "Squeeze",
               "Unsqueeze", "Identity", "Mean")
_ONE_DATA_INPUT = ("Reshape", "Squeeze", "Unsqueeze", "Identity", "Mean")  # the rest: shapes, axes
_WEIGHTED = ("FullyConnected", "MatMul", "Conv1D", "Conv2D", "Conv3D")


def _scalar_const(operands, i) -> bool:
    return operands[i].is_const and operands[i].num_elements == 1


def _through_views(graph, defs, i):
    """The operand a chain of Reshape / Squeeze / Unsqueeze / Identity reads, from its end `i`."""
    while i in defs and graph.operations[defs[i]].type in ("Reshape", "Squeeze", "Unsqueeze", "Identity"):
        i = graph.operations[defs[i]].inputs[0]
    return i


def _statistics(graph, defs, root):
    """(kind, input, stats operands) when `root` (an Rsqrt's or Sqrt's input) is mean(square) + eps
    of a centred input (LayerNorm) or of the input itself (RMSNorm); None otherwise."""
    ops, operands = graph.operations, graph.operands
    stats = {root}
    i = root
    if i in defs and ops[defs[i]].type == "Add":  # + epsilon
        a = ops[defs[i]]
        rest = [k for k in a.inputs if k >= 0 and not _scalar_const(operands, k)]
        if len(rest) != 1:
            return None
        i = rest[0]
        stats.add(i)
    i = _through_views(graph, defs, i)
    if i not in defs or ops[defs[i]].type != "Mean":
        return None
    stats.add(i)
    sq = _through_views(graph, defs, ops[defs[i]].inputs[0])
    if sq not in defs or ops[defs[sq]].type not in _SQUARES:
        return None
    s = ops[defs[sq]]
    stats.add(sq)
    act = [k for k in s.inputs if k >= 0 and not _scalar_const(operands, k)]
    if s.type == "SquaredDifference":
        if len(act) != 2:
            return None
        x, m = act
        if _through_views(graph, defs, m) not in defs or ops[defs[_through_views(graph, defs, m)]].type != "Mean":
            x, m = m, x
        mm = _through_views(graph, defs, m)
        if mm not in defs or ops[defs[mm]].type != "Mean" or _through_views(graph, defs, ops[defs[mm]].inputs[0]) != \
                _through_views(graph, defs, x):
            return None
        return "LayerNorm", x, stats | {m, mm}
    if len(set(act)) != 1 or (s.type == "Pow" and len(s.inputs) < 2) or (s.type == "Mul" and len(act) != 2):
        return None
    d = act[0]
    if d in defs and ops[defs[d]].type == "Sub":  # x - mean(x)
        x, m = ops[defs[d]].inputs[:2]
        mm = _through_views(graph, defs, m)
        if mm in defs and ops[defs[mm]].type == "Mean" and \
                _through_views(graph, defs, ops[defs[mm]].inputs[0]) == _through_views(graph, defs, x):
            return "LayerNorm", x, stats | {d, m, mm}
    return "RMSNorm", d, stats


def merged_normalizations(graph) -> list[dict]:
    """Each decomposed LayerNorm / RMSNorm without a scale or shift of its own whose output feeds
    only weighted layers (with constant weights): {"norm", "op" (its rsqrt's label), "into" (the
    layers' labels), "weights" (their weight operands' indices)}."""
    ops, operands = graph.operations, graph.operands
    defs, uses = graph.defs(), graph.uses()
    out = []
    for r in ops:
        if r.type not in ("Rsqrt", "Sqrt"):
            continue
        found = _statistics(graph, defs, r.inputs[0])
        if found is None:
            continue
        kind, x, stats = found
        region = stats | {x, r.outputs[0]}
        normalised = {r.outputs[0]}
        for op in ops[r.index + 1:]:  # the file's order is topological (loaders verify it)
            if op.type not in _NORM_STEPS:
                continue
            ins = [op.inputs[0]] if op.type in _ONE_DATA_INPUT else \
                [k for k in op.inputs if k >= 0 and not _scalar_const(operands, k)]
            if ins and all(k in region for k in ins) and any(k in normalised for k in ins):
                region.update(op.outputs)
                normalised.update(op.outputs)
        frontier = {u for t in normalised for u in uses.get(t, []) if not set(ops[u].outputs) <= normalised}
        if not frontier or any(t in graph.outputs for t in normalised):
            continue
        layers = [ops[u] for u in sorted(frontier)]
        if all(op.type in _WEIGHTED and len(op.inputs) > 1 and op.inputs[0] in normalised and
               op.inputs[1] >= 0 and operands[op.inputs[1]].is_const for op in layers):
            out.append({"norm": kind, "op": r.label, "into": [op.label for op in layers],
                        "weights": [op.inputs[1] for op in layers]})
    return out


PARAMETER_FOLDS = (merged_normalizations,)
