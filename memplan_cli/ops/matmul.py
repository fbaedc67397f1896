"""FullyConnected / Gemm / MatMul / BatchMatMul: Y = act(op(A) · op(B) (+ C)).

Canonical forms:
- `FullyConnected(x, W[, b])`: TFLite FULLY_CONNECTED (W stored [O, I], x flattened to [-1, I]),
  ONNX Gemm with a constant B and no transA (`trans_b` False: B stored [I, O]), and the ONNX loader's
  MatMul(x, W) + Add(b) fusion.
- `MatMul(a, b[, c])`, attrs `trans_a` / `trans_b`: ONNX MatMul (numpy semantics: batch dimensions
  broadcast, a 1-D operand is a vector), ONNX Gemm otherwise (2-D, C is input 2, broadcast to Y),
  TFLite BATCH_MATMUL (adj_x / adj_y). Gemm's beta = 0 drops C; alpha other than 1 and beta other
  than 0 or 1 are refused.

Training rules (PyTorch derivatives.yaml `mm` / `matmul` / `addmm`: self: grad.mm(mat2.t()) saves
mat2; mat2: self.t().mm(grad) saves self):
- calcGradient (the op trains): dW = X^T·dY reads X and dY; db = Σ dY reads dY only. A MatMul whose
  both operands are parameters reads each other.
- calcDerivative (an input needs a back-prop): dA = dY·B^T reads B, dB = A^T·dY reads A; summed over
  broadcast batch dimensions down to each operand's shape.
- Kept for backward: X (only when W trains), W (only when X needs a back-prop), Y when an activation
  is fused (its derivative comes from Y).
- Extras: none in memplan (GEMM with transpose flags reads W, X and dY as they are). With
  `policy.transpose_extras` (onert): W^T (|W|) in calcDerivative, X^T (|X|) and dY^T (|dY|) in
  calcGradient, all BACKWARD.
FLOPs: forward 2·M·N·K per batch element (+ |Y| for a bias); backward the same per operand whose
gradient or back-prop is computed.
"""
from __future__ import annotations

import math

import numpy as np

from memplan_cli.kernels import activation, fc
from memplan_cli.kernels.common import reduce_to_shape, store
from memplan_cli.ops import _onert as onert
from memplan_cli.ops.base import Canon, OpDef, UnsupportedKernel
from memplan_cli.ops.binary import ADD_TYPE
from memplan_cli.ops.kernel_util import tflite_activation
from memplan_cli.ops.rule import (BACKWARD, ExtraRequest, OpRule, StepIO, bp_targets, forward_io,
                                  fused_activation)


# ---- rules ---------------------------------------------------------------------------------------
def matmul_like(op, ctx, *, transposes=("W^T", "X^T", "dY^T")) -> OpRule:
    a, b = op.inputs[0], op.inputs[1]
    y = op.outputs[0]
    weights = [i for i in dict.fromkeys(op.inputs) if i >= 0 and ctx.is_param(i)]
    rule = OpRule(forward=forward_io(op), weights=weights)
    other = {a: b, b: a}
    if ctx.trains(op) and weights:
        reads = [("bp", y)]
        for w in weights:
            if w in other:  # a matrix operand: its gradient needs the other matrix
                reads.append(("fwd", other[w]))
        rule.calc_gradient = StepIO(reads, [("grad", w) for w in weights])
    targets = bp_targets(op, ctx, [a, b])
    if targets:
        rule.calc_derivative = StepIO([("bp", y)] + [("fwd", other[t]) for t in targets],
                                      [("bp", t) for t in targets])
    if ctx.policy.transpose_extras:
        _transposes(op, ctx, rule, transposes)
    fused_activation(op, ctx, rule, y)
    return rule


def _transposes(op, ctx, rule, names):
    """onert's materialised transposes: W^T for dX, X^T and dY^T for dW."""
    w, x, y = op.inputs[1], op.inputs[0], op.outputs[0]
    if rule.calc_derivative is not None:
        k = len(rule.extras)
        rule.extras.append(ExtraRequest(names[0], tuple(reversed(ctx.operand(w).shape)), "float32", BACKWARD))
        rule.calc_derivative.writes.insert(0, ("extra", k))
        rule.calc_derivative.reads.append(("extra", k))
        if ("fwd", w) not in rule.calc_derivative.reads:
            rule.calc_derivative.reads.append(("fwd", w))
    if rule.calc_gradient is not None and ("fwd", x) in rule.calc_gradient.reads:  # dW = X^T dY
        for name, src in ((names[1], x), (names[2], y)):
            k = len(rule.extras)
            rule.extras.append(ExtraRequest(name, tuple(reversed(ctx.operand(src).shape)), "float32", BACKWARD))
            rule.calc_gradient.writes.insert(0, ("extra", k))
            rule.calc_gradient.reads.append(("extra", k))


def fully_connected(op, ctx) -> OpRule:
    return matmul_like(op, ctx)


# ---- FullyConnected kernels ----------------------------------------------------------------------
def _fc_layout(ctx) -> str:
    # tflite and ONNX Gemm(transB=1) store [O, I]; MatMul+Add / Gemm(transB=0) store [I, O]
    tb = ctx.attrs.get("trans_b", ctx.attrs.get("transB"))
    return "IO" if tb in (0, False) else "OI"


def _fc_fwd(ctx):
    fc.forward(ctx.x(0), ctx.x(1), ctx.x(2), ctx.y(), ctx.act(), _fc_layout(ctx))


def _fc_grad(ctx):
    gx = ctx.grad(0)
    if gx is not None:  # a parameter as the data operand (learned queries / latents through a Linear)
        fc.calc_derivative(ctx.dz(), ctx.x(1), gx, w_layout=_fc_layout(ctx))
    dw, db = ctx.grad(1), ctx.grad(2)
    if dw is None and db is None:
        return
    dz = ctx.dz()
    n_out = ctx.tg.graph.operands[ctx.op.outputs[0]].shape[-1]
    dz2 = dz.reshape(-1, n_out)
    if dw is None:
        db[...] = dz2.sum(axis=0)
        return
    x = ctx.x(0)
    xt, dyt = ctx.extra("X^T"), ctx.extra("dY^T")
    if xt is not None and dyt is not None:
        # onert: dW = dY^T . X through materialised transposes
        x2 = x.reshape(dz2.shape[0], -1)
        xt.reshape(-1)[...] = x2.T.reshape(-1)
        dyt.reshape(-1)[...] = dz2.T.reshape(-1)
        xt2 = xt.reshape(x2.shape[1], x2.shape[0])
        dyt2 = dyt.reshape(n_out, dz2.shape[0])
        g = dyt2 @ xt2.T
        store(dw, g if _fc_layout(ctx) == "OI" else g.T)
        if db is not None:
            db[...] = dyt2.sum(axis=1)
        return
    fc.calc_gradient(dz, x, dw, db, w_layout=_fc_layout(ctx))


def _fc_deriv(ctx):
    dx = ctx.dx(0)
    if ctx.dx(1) is not None:
        raise UnsupportedKernel("back-prop into a FullyConnected weight operand that is not constant")
    if dx is None:
        return
    dz = ctx.dz()
    w = ctx.x(1)
    wt = ctx.extra("W^T")
    layout = _fc_layout(ctx)
    if wt is not None:
        w_oi = w if layout == "OI" else w.T
        wt.reshape(-1)[...] = w_oi.T.reshape(-1)
        w, layout = wt.reshape(w_oi.shape[1], w_oi.shape[0]), "IO"
    fc.calc_derivative(dz, w, dx, w_layout=layout)


# ---- MatMul kernels ------------------------------------------------------------------------------
def _flags(attrs) -> tuple[bool, bool]:
    ta = attrs.get("trans_a", attrs.get("adj_x", False))
    tb = attrs.get("trans_b", attrs.get("adj_y", False))
    return bool(ta), bool(tb)


def _adj(a, flag):
    return np.swapaxes(a, -1, -2) if flag else a


def _mm_fwd(ctx):
    ta, tb = _flags(ctx.attrs)
    y = ctx.y()
    fc.matmul_forward(_adj(ctx.x(0), ta), _adj(ctx.x(1), tb), y)
    if ctx.x(2, optional=True) is not None:  # Gemm's C
        y += ctx.x(2)
    activation.apply(y, ctx.act(), y)


def _through_transpose(ext, v):
    """onert's materialised transpose: write v with its axes reversed into `ext`, and return the
    view of `ext` that reads as v again (the kernel then computes from the copy)."""
    if ext is None:
        return v
    t = np.transpose(v)
    ext.reshape(-1)[...] = t.reshape(-1)
    return np.transpose(ext.reshape(t.shape))


def _mm_back(ctx, want_grad: bool):
    ta, tb = _flags(ctx.attrs)
    outs = [(k, ctx.grad(k) if want_grad else ctx.dx(k)) for k in (0, 1, 2)]
    outs = [(k, o) for k, o in outs if o is not None]
    if not outs:
        return
    dz = ctx.dz()
    # onert's transposes (baseline policy): W^T of input 1 for calcDerivative, X^T of input 0 and
    # dY^T for calcGradient
    xa = xb = None
    if want_grad:
        dz = _through_transpose(ctx.extra("dY^T"), dz)
        xt = ctx.extra("X^T")
        if xt is not None and any(k == 1 for k, _ in outs):
            xa = _through_transpose(xt, ctx.x(0))
    else:
        wt = ctx.extra("W^T")
        if wt is not None:
            xb = _through_transpose(wt, ctx.x(1))
    # x @ x (Keras' Attention of a sequence with itself): both sides' results land in x's one buffer,
    # so they are summed before it is written
    same = ctx.operand_in(0) == ctx.operand_in(1) and {0, 1} <= {k for k, _ in outs}
    total = None
    for k, out in outs:
        if k == 2:
            store(out, reduce_to_shape(dz, out.shape))
            continue
        # each side reads only the other operand (its own value is not kept for it)
        shape_a, shape_b = (ctx.tg.graph.operands[ctx.operand_in(j)].shape for j in (0, 1))
        a = _adj(ctx.x(0) if xa is None else xa, ta) if k == 1 else _adj(np.broadcast_to(False, shape_a), ta)
        b = _adj(ctx.x(1) if xb is None else xb, tb) if k == 0 else _adj(np.broadcast_to(False, shape_b), tb)
        g = _adj(operand_grad(dz, a, b, k), ta if k == 0 else tb)
        if same:
            total = g if total is None else total + g
            if k == 1:
                store(out, total)
            continue
        store(out, g)


def operand_grad(dy, a, b, k: int) -> np.ndarray:
    """dL/da (k=0) or dL/db (k=1) of y = a @ b (numpy semantics): a 1-D a is a row [1, K] whose
    row axis y lacks, a 1-D b a column [K, 1]; broadcast batch dimensions are summed away."""
    a2 = a[None, :] if a.ndim == 1 else a  # (only its shape is used when k == 0)
    b2 = b[:, None] if b.ndim == 1 else b
    d = np.asarray(dy)
    if a.ndim == 1:
        d = np.expand_dims(d, -2 if b.ndim > 1 else -1)
    if b.ndim == 1:
        d = np.expand_dims(d, -1) if a.ndim > 1 else d.reshape(1, 1)
    if k == 0:
        return reduce_to_shape(np.matmul(d, np.swapaxes(b2, -1, -2)), a2.shape).reshape(a.shape)
    return reduce_to_shape(np.matmul(np.swapaxes(a2, -1, -2), d), b2.shape).reshape(b.shape)


# ---- contract, FLOPs, batch ----------------------------------------------------------------------
def _mm_dims(op, shapes) -> tuple[int, int, int, int] | None:
    """(batch elements, M, K, N) of a MatMul from its operand shapes."""
    a, b = list(shapes[0]), list(shapes[1])
    ta, tb = _flags(op.attrs)
    if len(a) >= 2 and ta:
        a[-1], a[-2] = a[-2], a[-1]
    if len(b) >= 2 and tb:
        b[-1], b[-2] = b[-2], b[-1]
    if len(a) == 1:
        a = [1] + a
    if len(b) == 1:
        b = b + [1]
    if a[-1] != b[-2]:
        return None
    try:
        batch = np.broadcast_shapes(tuple(a[:-2]), tuple(b[:-2]))
    except ValueError:
        return None
    return math.prod(batch), a[-2], a[-1], b[-1]


def _shape_by_rule(a, b) -> tuple | None:
    va, vb = len(a) == 1, len(b) == 1
    a2 = [1] + a if va else a
    b2 = b + [1] if vb else b
    if a2[-1] != b2[-2]:
        return None
    batch = np.broadcast_shapes(tuple(a2[:-2]), tuple(b2[:-2]))
    out = list(batch) + ([] if va else [a2[-2]]) + ([] if vb else [b2[-1]])
    return tuple(out)


def mm_check(op, operands):
    sa, sb = operands[op.inputs[0]].shape, operands[op.inputs[1]].shape
    for k in ("alpha", "beta"):
        if float(op.attrs.get(k, 1.0)) != 1.0:
            # the label names the canonical MatMul; the file holds a Gemm: say which attribute of what
            src = f"{op.source_type}'s " if op.source_type and op.source_type != op.type else ""
            return f"has {src}{k}={op.attrs[k]} (only 1 is implemented)"
    if len(sa) == 0 or len(sb) == 0:
        return "multiplies a scalar"
    if (op.attrs.get("trans_a") or op.attrs.get("adj_x")) and len(sa) < 2 or \
            (op.attrs.get("trans_b") or op.attrs.get("adj_y")) and len(sb) < 2:
        return "transposes a 1-D operand"
    out = _shape_by_rule(*[list(s) for s in _transposed(op, sa, sb)]) if _mm_dims(op, (sa, sb)) else None
    if out is None:
        return f"cannot multiply {tuple(sa)} by {tuple(sb)}"
    y = operands[op.outputs[0]].shape
    if math.prod(out) != math.prod(y):
        return f"multiplies {tuple(sa)} by {tuple(sb)}, which does not give its output {tuple(y)}"
    if len(op.inputs) > 2 and op.inputs[2] >= 0:
        try:
            np.broadcast_shapes(tuple(operands[op.inputs[2]].shape), tuple(y))
        except ValueError:
            return f"has a C of shape {operands[op.inputs[2]].shape} that does not broadcast to {tuple(y)}"
    return None


def _transposed(op, sa, sb):
    a, b = list(sa), list(sb)
    ta, tb = _flags(op.attrs)
    if len(a) >= 2 and ta:
        a[-1], a[-2] = a[-2], a[-1]
    if len(b) >= 2 and tb:
        b[-1], b[-2] = b[-2], b[-1]
    return a, b


def mm_flops(op, operands):
    d = _mm_dims(op, (operands[op.inputs[0]].shape, operands[op.inputs[1]].shape))
    if d is None:
        return 0, 0
    n, m, k, p = d
    f = 2 * n * m * k * p
    bias = operands[op.outputs[0]].num_elements if len(op.inputs) > 2 and op.inputs[2] >= 0 else 0
    return f + bias, 2 * f + bias


def fc_check(op, operands):
    w = operands[op.inputs[1]].shape
    if len(w) != 2:  # TFLite stores [O, I]; the ONNX fusion and Gemm give 2-D weights too
        return f"has a weight of shape {tuple(w)} (a FullyConnected weight is 2-D)"
    return None


def fc_flops(op, operands):
    w = operands[op.inputs[1]].shape
    if len(w) != 2:
        o, i = w[-1], math.prod(w[:-1])
    else:  # stored [O, I] (TFLite, Gemm transB=1) or [I, O] (`trans_b` False: Gemm transB=0, MatMul+Add)
        o, i = (w[1], w[0]) if op.attrs.get("trans_b") is False else (w[0], w[1])
    rows = operands[op.outputs[0]].num_elements // max(o, 1)
    f = 2 * rows * o * i
    bias = rows * o if len(op.inputs) > 2 and op.inputs[2] >= 0 else 0
    return f + bias, 2 * f + bias


def _mm_batch(op, graph, shapes, batched):
    out = _shape_by_rule(*_transposed(op, shapes[op.inputs[0]], shapes[op.inputs[1]]))
    if out is None:
        from memplan_cli.ir.graph import GraphError

        raise GraphError(f"cannot re-batch op {op.label}: its operands no longer multiply")
    return [out]


def _onert_fc_backward(op, operands):
    """onert 0.1.0's FullyConnectedLayer backward: "Input other ranks than 2 are not supported" (measured)."""
    r = len(operands[op.inputs[0]].shape)
    return f"FullyConnected with a rank-{r} input: its backward takes rank 2 only" if r != 2 else None


def _onert_fc_buffers(op, ir, threads, simd_width):
    x, w, y = op.inputs[0], op.inputs[1], op.outputs[0]
    nb = lambda i: ir.operands[i].nbytes  # noqa: E731
    return [("W^T", nb(w)), ("X^T", nb(x)), ("dY^T", nb(y))] + onert.act_buffers(op, ir)


# onert: FullyConnected's facts (see ops/conv.py); the only op whose optional inputs its loader accepts
ONERT_FC = {"backward": _onert_fc_backward, "kernel_buffers": _onert_fc_buffers, "usedef": onert.weighted_usedef,
            "weighted": True, "optional_inputs": True}


def _fc_batch(op, graph, shapes, batched):
    """FullyConnected keeps the input's leading dims (ONNX MatMul+Add, TFLite keep_num_dims) or
    flattens the input to rows of the weight's width (TFLite): rows follow the element count."""
    from memplan_cli.ir.batch import scale_rows

    x, w = op.inputs[0], op.inputs[1]
    sx, sw = tuple(shapes[x]), graph.operands[w].shape
    if len(sw) != 2 or not sx:
        return scale_rows(op, graph, shapes, batched)
    k, units = (sw[0], sw[1]) if op.attrs.get("trans_b") is False else (sw[1], sw[0])
    rank = len(graph.operands[op.outputs[0]].shape)
    if rank == len(sx) and sx[-1] == k:
        return [sx[:-1] + (units,)]
    if rank == 2 and math.prod(sx) % k == 0:
        return [(math.prod(sx) // k, units)]
    return scale_rows(op, graph, shapes, batched)


_MM = {"forward": _mm_fwd, "calcGradient": lambda c: _mm_back(c, True),
       "calcDerivative": lambda c: _mm_back(c, False)}
# `--profile torch`: addmm / mm / bmm save each operand when the other needs its gradient (a frozen
# weight keeps no input: LoRA's base projections)
TORCH = {"saves": (("in0", "g1"), ("in1", "g0"))}


def over_rows(op, operands) -> tuple | None:
    """A linear (or a matmul by a 2-D weight) over more than two dims: ATen's `linear`
    (`_flatten_nd_linear`) and `matmul` (its fold of a >= 3-D tensor times a 2-D one) run addmm / mm
    on `x.reshape(-1, k)` and view the result back, so the backward of that view (`grad.reshape`,
    derivatives.yaml's view / _unsafe_view) takes the incoming gradient as rows: (its axes in
    order, (rows, last dim)); None for a 2-D one."""
    w = operands[op.inputs[1]] if len(op.inputs) > 1 and op.inputs[1] >= 0 else None
    y = tuple(int(d) for d in operands[op.outputs[0]].shape)
    if w is None or len(w.shape) != 2 or len(y) <= 2:
        return None
    return tuple(range(len(y))), (math.prod(y[:-1]), y[-1])


TORCH_FC = {**TORCH, "grad_reshaped": over_rows}


def expanded_operands(op, operands) -> tuple:
    """ATen's matmul of two operands of 3+ dims (`_matmul_impl`, no fold) expands each to the broadcast
    batch dims and reshapes it to (batch product, rows, cols) for bmm: per input, that expanded shape
    where it is larger than the operand (its batch dims broadcast), else None. The reshape of a
    broadcast operand is a copy (stride 0 merges with no other dim), which bmm saves; its gradient is
    bmm's at the expanded size, then summed to the operand's shape (ExpandBackward0: sum_to_size)."""
    if len(op.inputs) < 2 or min(op.inputs[:2]) < 0:
        return (None, None)
    shapes = [tuple(int(d) for d in operands[v].shape) for v in op.inputs[:2]]
    if min(len(s) for s in shapes) < 3:
        return (None, None)
    batch = tuple(int(d) for d in np.broadcast_shapes(shapes[0][:-2], shapes[1][:-2]))
    # an operand whose batch dims are all 1 is not copied (measured): eager folds a 3-dim one (a (1, M, K)
    # table) into one mm, and hands a 4+-dim one to bmm as a stride-0 view whose gradient is still
    # made at the expanded size and summed
    return tuple(batch + s[-2:] if math.prod(batch) > math.prod(s[:-2]) and (math.prod(s[:-2]) > 1 or len(s) > 3)
                 else None for s in shapes)


# bfloat16 (--precision bf16-*): ATen runs addmm / mm on oneDNN's brgemm matmul (AMX on the measuring
# CPU), whose scratchpad goes through the allocator (ideep books it per call). Its pieces
# (brgemm_matmul_utils init_scratchpad): the B operand reformatted to VNNI (buffer_b), a transposed A
# copied to rows of LDA elements (buffer_a; get_actual_LDA pads a power of two of 512 or more by a cache
# line), the AMX tile buffer, the brgemm batch and the C accumulator. Measured (torch 2.14.1, one
# thread, M 32-4096, K and N 64-2048), where oneDNN takes all of B as one chunk:
# - plain A, B plain or transposed (a linear's input's gradient, its forward): 2 x K x N + 5,120 B,
#   for K x N up to 512 Ki elements, with M at least 512 or N at most 256 (128 when B is transposed);
# - transposed A (a linear's weight gradient, gy^T @ x): 2 x min(M, 256) x LDA(K) + 2 x K x 64 + 5,248 B,
#   for K up to 512, or up to 1,024 with N at most 128.
# Elsewhere oneDNN splits K or N into chunks by a cache-size search not reproduced here: no scratch
# is counted (docs/torchprof.md, "Precision").
def _lda(k: int) -> int:
    return k + 32 if k >= 512 and k & (k - 1) == 0 else k


def bf16_mm_scratch(m: int, k: int, n: int, transposed_a: bool, transposed_b: bool = False) -> int:
    """Bytes of oneDNN's bfloat16 brgemm matmul scratchpad for (M x K) @ (K x N), or 0 outside the
    shapes measured."""
    if transposed_a:
        if k <= 512 or (k <= 1024 and n <= 128):
            return 2 * min(m, 256) * _lda(k) + 2 * k * 64 + 5248
        return 0
    if k * n <= 512 * 1024 and (m >= 512 or n <= (128 if transposed_b else 256)):
        return 2 * k * n + 5120
    return 0


def _linear_mkn(op, operands):
    x, y = operands[op.inputs[0]], operands[op.outputs[0]]
    k, n = int(x.shape[-1]), int(y.shape[-1])
    return math.prod(int(d) for d in x.shape) // max(k, 1), k, n


def _bf16(op, operands) -> bool:
    return operands[op.outputs[0]].dtype == "bfloat16"


def linear_bf16_fwd(op, operands) -> tuple:
    """addmm(bias, x, W^T) in bfloat16: the scratchpad beside the output."""
    if not _bf16(op, operands):
        return ()
    m, k, n = _linear_mkn(op, operands)
    return ((bf16_mm_scratch(m, k, n, False, True),),)


def linear_bf16_bwd(op, operands, needs) -> tuple:
    """AddmmBackward in bfloat16: the input's gradient gy @ W, then the weight's gy^T @ x, then the
    bias's, each mm with its scratchpad. The profile counts the three gradients (bfloat16) in one step:
    the scratch beside what exists by then."""
    if not _bf16(op, operands):
        return ()
    m, k, n = _linear_mkn(op, operands)
    dw = 2 * k * n if len(needs) > 1 and needs[1] else 0
    db = 2 * n if len(needs) > 2 and needs[2] else 0
    alts = []
    if needs and needs[0]:
        alts.append((max(0, bf16_mm_scratch(m, n, k, False) - dw - db),))
    if dw:
        alts.append((max(0, bf16_mm_scratch(n, m, k, True) - db),))
    return tuple(alts)


def _weight_rhs(op, operands) -> bool:
    """A bias-less linear (x @ W, W a 2-D constant): eager folds it into one mm, as addmm."""
    w = operands[op.inputs[1]]
    return w.is_const and len(w.shape) == 2 and len(operands[op.inputs[0]].shape) >= 2


def matmul_bf16_fwd(op, operands) -> tuple:
    return linear_bf16_fwd(op, operands) if _weight_rhs(op, operands) else ()


def matmul_bf16_bwd(op, operands, needs) -> tuple:
    return linear_bf16_bwd(op, operands, needs) if _weight_rhs(op, operands) else ()


MATMUL_TYPE = "MatMul"  # what LoRA's adapters compute with (passes/lora.py)


def _fc_lora_layout(op) -> str:
    """TFLite's FullyConnected and Gemm(transB=1) store W as [out, in]; MatMul+Add fused as [in, out]."""
    return "OI" if op.attrs.get("trans_b", op.attrs.get("transB")) not in (0, False) else "IO"


OPS = [
    OpDef("FullyConnected", rule=fully_connected, kernels={"forward": _fc_fwd, "calcGradient": _fc_grad,
                                                          "calcDerivative": _fc_deriv},
          flops=fc_flops, required_inputs=2, check=fc_check, batch=_fc_batch, bias_inputs=(2,),
          weight_inputs=(1, 2), lora_layout=_fc_lora_layout, profiles={"onert": ONERT_FC, "torch": TORCH_FC},
          autocast="lower"),  # autocast: linear, addmm
    OpDef("MatMul", rule=fully_connected, kernels=_MM, flops=mm_flops, required_inputs=2, check=mm_check,
          batch=_mm_batch, weight_inputs=(1,), lora_layout=lambda op: "IO", autocast="lower",  # matmul, mm, bmm
          profiles={"torch": {**TORCH_FC, "contiguous_inputs": 2, "expanded_inputs": expanded_operands,
                              "fwd_scratch": matmul_bf16_fwd,
                              "bwd_scratch": matmul_bf16_bwd}}),
]


# ---- converters ----------------------------------------------------------------------------------
def _onnx_matmul(node) -> Canon:
    return Canon("MatMul", {})  # no attrs: the loader's MatMul + Add -> FullyConnected fusion looks for that


def _onnx_gemm(node) -> Canon:
    a = node.attrs
    w = node.input(1)
    ins = list(node.inputs)
    if float(a.get("beta", 1.0)) == 0.0:  # beta = 0: C does not count (torch.mm exports so)
        ins = ins[:2]
    extra = {k: float(a[k]) for k in ("alpha", "beta") if k in a and float(a[k]) not in (1.0, 0.0 if k == "beta" else 1.0)}
    if w is not None and w.is_const and not a.get("transA", 0) and not extra:
        return Canon("FullyConnected", {"activation": "NONE", "trans_b": bool(a.get("transB", 0))}, inputs=ins)
    return Canon("MatMul", {"trans_a": bool(a.get("transA", 0)), "trans_b": bool(a.get("transB", 0)), **extra},
                 inputs=ins)


def _tfl_batch_matmul(node) -> Canon:
    o = node.options
    return Canon("MatMul", {"trans_a": bool(o.get("adjoint_lhs", o.get("adj_x", False))),
                            "trans_b": bool(o.get("adjoint_rhs", o.get("adj_y", False)))})


ONNX = {"MatMul": _onnx_matmul, "Gemm": _onnx_gemm}
FC_TYPE = "FullyConnected"


def fuse_matmul_add(ops: list, operands: list) -> list:
    """MatMul(x, W const) followed only by Add(_, b const 1-D) -> FullyConnected(x, W, b), as tflite has it.

    The MatMul's output tensor disappears (it was an activation only ONNX has).
    """
    uses: dict[int, list[int]] = {}
    for op in ops:
        for i in op.inputs:
            uses.setdefault(i, []).append(op.index)
    drop: set[int] = set()
    for op in ops:
        if op.type != MATMUL_TYPE or op.attrs or len(op.inputs) != 2 or not operands[op.inputs[1]].is_const:
            continue
        if len(operands[op.inputs[1]].shape) != 2:
            continue
        y = op.outputs[0]
        if operands[y].is_output or len(uses.get(y, [])) != 1:
            continue
        add = ops[uses[y][0]]
        if add.type != ADD_TYPE or len(add.inputs) != 2:
            continue
        b = add.inputs[1] if add.inputs[0] == y else add.inputs[0]
        if not operands[b].is_const or len(operands[b].shape) != 1:
            continue
        add.type, add.inputs = FC_TYPE, [op.inputs[0], op.inputs[1], b]
        add.attrs = {"activation": "NONE", "fused_from": "MatMul+Add", "trans_b": False}
        if op.name:  # the file's MatMul node: --lora-targets / ops: globs still match its name
            add.attrs["fused_names"] = (op.name,)
        add.source_type = "MatMul+Add"
        drop.add(op.index)
    if not drop:
        return ops
    kept = [op for op in ops if op.index not in drop]
    for k, op in enumerate(kept):
        op.index = k
    return kept


# run by the ONNX loader on its converted ops, in order
ONNX_FUSIONS = (fuse_matmul_add,)
# ONNX inputs only a layer's weights fill (loaders/params.py reads them before conversion)
ONNX_FACTS = {"MatMul": {"weight_inputs": (1,)}, "Gemm": {"weight_inputs": (1, 2)}}
def _tfl_fully_connected(node) -> Canon:
    attrs = {"keep_num_dims": bool(node.options["keep_num_dims"])} if "keep_num_dims" in node.options else {}
    attrs["activation"] = tflite_activation(node)
    return Canon("FullyConnected", attrs)


TFLITE = {"BATCH_MATMUL": _tfl_batch_matmul, "FULLY_CONNECTED": _tfl_fully_connected}


# ---- other runtimes' profiles (profiles/singa.py, onert/, nntrainer.py): what they know of these ops ----
# singa: the SINGA autograd operator memplan models the op as (ONNX Gemm: when its converter declines)
PROFILES = {"singa": {"FullyConnected": {"operator": "Linear (Matmul, AddBias)"}, "Gemm": {"operator": "Gemm"},
                      "MatMul": {"operator": "Matmul"}}}

# nntrainer (profiles/nntrainer.py): "layer", the nntrainer 0.6.0 layer the profile models the op as;
# "kind", that layer's type; "check": fn(graph, op, batchnorm) -> why the layer cannot take this op
PROFILES["nntrainer"] = {"FullyConnected": {"layer": "fully_connected", "kind": "fully_connected"}}
