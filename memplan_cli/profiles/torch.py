"""`--profile torch`: the bytes PyTorch eager holds during one training step on CPU.

For an ONNX export of a PyTorch module, replays what eager autograd allocates and frees, tensor by
tensor, in the order it does (shared/research/torch-memory.md says how the figures it targets were
measured: the peak of the CPU allocator's live bytes during the third step, plus what is held
before it). It models PyTorch, not memplan's plan: its facts are its own and never read memplan's
saving rules (the ops' `rule`s, Policy); memplan's pass pipeline only says which weights train (LoRA,
freezing, --trainable-ops) and appends the loss.

Rules (sources: PyTorch's `tools/autograd/derivatives.yaml` for what each op saves, `aten/src/ATen/
native` for what it allocates, `torch/optim/adam.py`, `torch/csrc/autograd/engine.cpp`):
- Held the whole step: every float constant of more than one element (parameters and buffers; a
  scalar constant is a Python number in eager), the input batch, the label (class indices, int64,
  one per row, for `cce`; the output's shape and dtype for `mse`), optimizer state (SGD none,
  momentum one buffer, Adam exp_avg, exp_avg_sq and a 4-byte float32 `step` per trained weight).
- requires_grad flows forward from trained weights; an op none of whose inputs requires grad
  records nothing for backward and its outputs are plain values.
- Forward: each op allocates its outputs (an output no op reads and the graph does not return is an
  exporter artefact, e.g. BatchNorm's running statistics, updated in place in eager: none). Views
  (Reshape of a contiguous tensor, Flatten, Squeeze, Unsqueeze, Identity, Transpose) share their
  input's memory; a Reshape, or a MatMul operand of more than 2 dims, that is a non-contiguous view
  (after Transpose) copies it (a 2-D one, a transposed weight, goes to BLAS as it is). A value is freed after its last reader in forward, unless autograd saved it: then
  after the backward of the last op that saved it.
- What each op saves, and the auxiliary tensors it makes, are its family's torch facts
  (`OpDef.profiles["torch"]` in memplan_cli/ops; `FACTS` below for the two eager ops exporters
  split); an op type without torch facts is refused, naming it.
- Exporters split some eager ops; these are read back as the one op eager runs: x * Sigmoid(x) is
  `silu` (saves x), MatMul with a constant weight (or a transposed view of one: a tied weight)
  followed by Add of a constant bias is `linear`.
- Kernel scratch that is no tensor (oneDNN convolution, batch_norm backward) is each family's fact
  too; an op whose kernel makes the input's gradient before the weight's (convolution) gets two
  backward steps.
- Backward runs the ops in reverse order. Each op allocates the gradients of its inputs that
  require grad (a view op or a same-shape Add passes the incoming gradient on without a copy); the
  incoming gradient and the saved tensors are freed after it. A second gradient reaching one value
  is added into the first in place (the engine's InputBuffer) and freed.
- Weight gradients are kept in `.grad` until `optimizer.step()`; `zero_grad(set_to_none=True)` frees
  them after it.
- Optimizer (CPU tensors take the single-tensor path, foreach is for CUDA): SGD and momentum update
  in place; Adam makes `exp_avg_sq.sqrt()` and its quotient per weight, and the previous weight's
  quotient (`denom`) is still alive when the next weight's are made.
- Cross-entropy: log_softmax's result (saved) and two scalars in forward; backward allocates
  nll_loss's and log_softmax's gradients (N x C each). The training loop holds the model's output and
  the loss to the end of the step (`out = model(x); loss = lossfn(out, y)`).
Not modelled, said in `figures`: allocator slack (the figure is live bytes, the allocator's own
count), memory allocated outside PyTorch's allocator (some oneDNN scratch), tensors a module's
Python code keeps longer than its last use (locals live until `forward` returns).

`figures` reports `torch.peak` (bytes) and the split at the peak; `--by-layer` gets ColossalAI's four
columns as eager has them.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from memplan_cli.buffers import Buffer, BufferList, Pool, Step
from memplan_cli.errors import ConfigError, UnsupportedOpError
from memplan_cli.ops._torch import (CONVOLUTIONS, EXPAND, FORMAT_KEEPING, LAYOUT_KEEPING, NARROWS, SDPA, TRANSPOSE,
                                    GATHER, SDPA_CALLS, WEIGHT_MATMULS, parse_call, sdpa_dropout)
from memplan_cli.ops.activations import SIGMOID_TYPE
from memplan_cli.ops.binary import ADD_TYPE, MUL_TYPE
from memplan_cli.ops.instancenorm import INSTANCE_NORM_TYPE
from memplan_cli.ops.loss import LOSS_TYPE
from memplan_cli.ops import matmul
from memplan_cli.ops.matmul import MATMUL_TYPE
from memplan_cli.ops.reshape import RESHAPE_TYPE
from memplan_cli.ops.views import UNSQUEEZE_TYPE
from memplan_cli.profiles.torch_autocast import Autocast

PLANNER = "best"

# Facts of the eager ops the exporters split (read back by `_fuse`), in the registry's format (an op
# family declares its own as `OpDef.profiles["torch"]` in memplan_cli/ops):
# - "saves": ((what, when), ...): what in "in0", "in1", "out0"; when "any" (the op records a node),
#   "g0" / "g1" (input 0 / 1 requires grad);
# - "aux": ((name, size, dtype), ...) saved tensors the op makes: size "in0" / "out0" (elements of
#   that operand), "channels" (dim 1 of input 0), "rows" (input 0's elements over its last dim),
#   "groups" (input 0's samples times attrs["groups"]); dtype "in0": input 0's (a bfloat16 step's);
# - "view": output 0 shares input 0's memory; "grad": "new" (each input's gradient allocated, the
#   default), "pass" (a same-shape input gets the incoming gradient itself), "view" (a view of it);
# - "strided": the view's layout is not contiguous (a transpose); "view_needs_contiguous": a view of
#   a contiguous input only, a copy otherwise (reshape), and so is its gradient; "view_if": fn(op) ->
#   output 0 is input 0 itself (dropout with p = 0); "grad_shared": input positions whose gradient is
#   the incoming one itself when their shapes agree (add, sub's first); "contiguous_inputs": the
#   first N inputs go to BLAS contiguous when batched (a copy of a non-contiguous view);
# - "bwd_tmp": temporary tensors of backward, "fwd_scratch" / "bwd_scratch": allocator scratch that is
#   no tensor (MemTracker misses it); each a tuple of alternatives (the largest counts), each a tuple
#   of sizes "in0" / "in1" / "out0" ("in0?g0" only when input 0 requires grad) or bytes; or a
#   function (op, operands) -> that tuple;
# - "refuse": a function (op, operands) -> why the facts do not cover this op here, or None.


def _flash_blocks(op, operands) -> tuple:
    """The CPU flash kernel's block sizes (ATen FlashAttentionKernel.cpp): q 256 / 64 / 32 rows for a
    query length of 768+ / 192+ / less, kv 512 columns, each capped at the length."""
    sq, skv, d = op.attrs["q_len"], op.attrs["kv_len"], op.attrs["head_dim"]
    qs = min(sq, 256 if sq >= 768 else 64 if sq >= 192 else 32)
    return qs, min(skv, 512), d


def _flash_fwd(op, operands) -> tuple:
    qs, kvs, d = _flash_blocks(op, operands)  # per thread: scores, row max, row sum, an output block
    return ((4 * (qs * kvs + 2 * qs + qs * d),),)


def _flash_bwd(op, operands) -> tuple:
    qs, kvs, _ = _flash_blocks(op, operands)  # per thread: scores and their gradient; the row sums
    return ((4 * (2 * qs * kvs) + 4 * qs,),)


FACTS = {
    "SiLU": {"saves": (("in0", "any"),)},  # silu_backward(grad, self)
    # _scaled_dot_product_flash_attention_for_cpu (torch 2.14, measured; scratch for one thread): saves q,
    # k, v (k / v with their own heads: grouped-query attention is not repeated), the output (laid out
    # like q) and a float32 logsumexp per query row; backward makes zeroed gradients of q, k, v
    "SDPA": {"saves": (("in0", "any"), ("in1", "any"), ("in2", "any"), ("out0", "any"), ("in3", "any")),
             "aux": (("logsumexp", "rows", "float32"),), "layout": "in0",
             "fwd_scratch": _flash_fwd, "bwd_scratch": _flash_bwd},
    # addmm: mat1 when the weight needs its gradient; in bfloat16, oneDNN's matmul scratchpads
    "Linear": {"saves": (("in0", "g1"),), "fwd_scratch": matmul.linear_bf16_fwd,
               "bwd_scratch": matmul.linear_bf16_bwd},
    # a copy the dynamo export dropped (`_lost_clones`): a new contiguous tensor, saves nothing; its
    # backward hands the incoming gradient on (CloneBackward0)
    "Clone": {"grad": "pass"},
    # _safe_softmax (sdpa's math path, measured): keeps its result; forward makes a bool isneginf mask
    # of its input and a bool per row (both freed in the op)
    "SafeSoftmax": {"saves": (("out0", "any"),), "fwd_scratch": lambda op, opd: ((
        _elements(opd[op.inputs[0]].shape) + _elements(opd[op.inputs[0]].shape[:-1]),),)},
    # select (`_selects`): a view; select_backward makes a zeroed gradient of the input's size (measured)
    "Select": {"view": True},
}


# The general rule, for an op whose family has no torch facts: what most of derivatives.yaml's formulas
# do (the backward is a function of the op's inputs: each is saved) and what every backward does (each
# input that needs one gets a new gradient); no kernel temporaries. Such an op is estimated, not
# measured: the report names it and its bytes at the peak (`figures.torch.coverage`).
GENERAL = {"saves": (("in0", "any"), ("in1", "any"), ("in2", "any"), ("in3", "any"))}
ESTIMATED = "torch_estimated"  # attrs key marking an op the general rule covers


def _fused_activations() -> dict:
    """Fused activation -> the eager op that computes it (the registry's standalone activation op)."""
    from memplan_cli import ops

    return ops.fused_activation_ops()


def facts(op) -> dict | None:
    """The torch facts of `op` (an IR op or an _Op): its family's (a dict, or a function of the op),
    {} for an op that never carries a gradient (`OpDef.no_grad`: eager records no node), else None."""
    from memplan_cli import ops

    d = ops.get(op.type)
    f = (d.profiles or {}).get("torch") if d is not None else None
    if callable(f):
        f = f(op)
    if f is not None:
        return f
    if d is not None and d.no_grad:
        return {}
    f = FACTS[op.type] if op.type in FACTS else ops.profile_facts("torch", op.type)
    if f is None and (getattr(op, "attrs", None) or {}).get(ESTIMATED):
        return GENERAL
    return f


@dataclass
class _Op:
    """One eager op: an IR op, or a fused pair read back as one (`silu`, `linear`)."""

    index: int  # the IR op whose label it reports under
    type: str
    inputs: list
    outputs: list
    attrs: dict = field(default_factory=dict)
    label: str = ""
    members: tuple = ()


def _is_weight(g, defs, v) -> bool:
    o = g.operands[v]
    if o.is_const:
        return True
    p = defs.get(v)
    return (p is not None and (facts(g.operations[p]) or {}).get("strided") and len(o.shape) == 2
            and g.operands[g.operations[p].inputs[0]].is_const)


def _scalar(g, v) -> bool:
    return v >= 0 and _elements(g.operands[v].shape) == 1


def _attention(g, uses, defs) -> dict:
    """torch.onnx's decomposition of `F.scaled_dot_product_attention` read back as the one eager op:
    MatMul(q * s, k^T * s) (both operands scaled by a one-element factor: sdpa's math, never a
    hand-written attention), [+ mask], Softmax (last axis), [Where(IsNaN(p), 0, p): its _safe_softmax],
    [Dropout], MatMul with v; k^T through the Reshape / Transpose views the decomposition writes, k and
    v through its grouped-query repeat (Unsqueeze, Expand, Reshape). Returns {index of the last MatMul:
    (members, q, k, v, mask or -1, softmax output, dropout op or None)}."""
    ops = g.operations
    found = {}

    def only(v, users=1):
        return v >= 0 and len(uses.get(v, ())) == users and v not in g.outputs

    def unrepeat(v, chain):
        """The grouped-query repeat (x[:, :, None].expand(...).reshape(...)) undone: sdpa's enable_gqa."""
        found = []
        p = defs.get(v)
        if p is not None and ops[p].type == SDPA["reshape"] and only(v):
            found.append(p)
            v = ops[p].inputs[0]
        pe = defs.get(v)
        if pe is None or ops[pe].type != SDPA["expand"] or not only(v):
            return v if not found else ops[found[0]].outputs[0]
        u = ops[pe].inputs[0]
        pu = defs.get(u)
        x = ops[pu].inputs[0] if pu is not None else -1
        if pu is None or ops[pu].type != SDPA["unsqueeze"] or not only(u) or len(g.operands[x].shape) != 4 \
                or tuple(int(a) % 5 for a in ops[pu].attrs.get("axes", ())) != (2,):
            return v if not found else ops[found[0]].outputs[0]
        chain += found + [pe, pu]
        return x

    for m2 in ops:
        if m2.type != SDPA["matmul"] or len(m2.inputs) != 2:
            continue
        members = [m2.index]
        p = m2.inputs[0]
        drop = None
        if defs.get(p) is not None and ops[defs[p]].type == SDPA["dropout"] and only(p):
            members.append(defs[p])
            if float(ops[defs[p]].attrs.get("ratio", 0.5)) > 0:
                drop = ops[defs[p]]
            p = ops[defs[p]].inputs[0]
        if defs.get(p) is not None and ops[defs[p]].type == SDPA["where"] and only(p):
            w = ops[defs[p]]
            c, sm = w.inputs[0], w.inputs[2] if len(w.inputs) > 2 else -1
            pc = defs.get(c)
            if pc is None or ops[pc].type != SDPA["isnan"] or ops[pc].inputs[0] != sm or not only(c) \
                    or sorted(uses.get(sm, ())) != sorted((pc, w.index)):
                continue
            members += [w.index, pc]
            p = sm
        elif not only(p):
            continue
        ps = defs.get(p)
        if ps is None or ops[ps].type != SDPA["softmax"]:
            continue
        ax = ops[ps].attrs.get("axes", ops[ps].attrs.get("axis", -1))
        ax = tuple(ax) if isinstance(ax, (tuple, list)) else (ax,)
        if tuple(int(a) % len(g.operands[p].shape) for a in ax) != (len(g.operands[p].shape) - 1,):
            continue
        members.append(ps)
        sm_out = p
        x = ops[ps].inputs[0]
        mask = -1
        px = defs.get(x)
        if px is not None and ops[px].type == SDPA["mask"] and only(x):
            a, b = ops[px].inputs[:2]
            if defs.get(a) is not None and ops[defs[a]].type == SDPA["matmul"]:
                x, mask = a, b
            elif defs.get(b) is not None and ops[defs[b]].type == SDPA["matmul"]:
                x, mask = b, a
            else:
                continue
            members.append(px)
        p1 = defs.get(x)
        if p1 is None or ops[p1].type != SDPA["matmul"] or not only(x):
            continue
        m1 = ops[p1]
        sides = []
        for v in m1.inputs[:2]:
            pm = defs.get(v)
            if pm is None or ops[pm].type != SDPA["scale"] or not only(v):
                break
            a, b = ops[pm].inputs[:2]
            if _scalar(g, b) and not _scalar(g, a):
                sides.append((pm, a))
            elif _scalar(g, a) and not _scalar(g, b):
                sides.append((pm, b))
            else:
                break
        if len(sides) != 2 and sdpa_dropout(m1.call) is not None:
            # the exporter leaves out the factors for a scale of 1 (OPT scales q itself); its recorded
            # call says the MatMul is sdpa's
            sides = [(None, m1.inputs[0]), (None, m1.inputs[1])]
        if len(sides) != 2:
            continue
        members += [p1] + [pm for pm, _ in sides if pm is not None]
        q = sides[0][1]
        qs = tuple(g.operands[q].shape)
        # back through the views of k^T to the nearest k of (..., S_kv, head dim), repeat undone
        chain: list[int] = []
        kt = sides[1][1]
        k, v = -1, kt
        while k < 0:
            p = defs.get(v)
            if p is None or ops[p].type not in SDPA["views"] or not only(v):
                break
            chain.append(p)
            v = ops[p].inputs[0]
            rep: list[int] = []
            c = unrepeat(v, rep)
            ks = tuple(g.operands[c].shape)
            if len(ks) == len(qs) and ks[-1] == qs[-1] and ks[:-3] == qs[:-3]:
                k = c
                chain += rep
        if k < 0 and chain and _elements(g.operands[v].shape) == _elements(g.operands[kt].shape):
            k = v  # the views start from a folded (batch x heads, S, d) k (nn.MultiheadAttention's)
        if k < 0:
            continue
        vchain: list[int] = []
        v = unrepeat(m2.inputs[1], vchain)
        found[m2.index] = (tuple(members + chain + vchain), q, k, v, mask, sm_out, drop,
                           {"q_len": int(qs[-2]), "kv_len": int(g.operands[kt].shape[-1]), "head_dim": int(qs[-1]),
                            "dropout_p": _recorded_dropout(ops, (m2.index, ps, p1))})
    return found


def _group_norms(g, uses, defs) -> dict:
    """torch's GroupNorm as both exporters write it, read back as eager's one `native_group_norm`:
    Reshape(x, (N, G, -1)) -> InstanceNormalization(scale, bias: constants of G) -> Reshape to x's
    shape -> [Mul by a per-channel weight] -> [Add of a per-channel bias] (each weight a constant of
    C values, or an Unsqueeze of one to (C, 1, ...)). Returns {index of the last op: (members, x,
    weight or -1, bias or -1, G)}."""
    ops = g.operations
    found = {}

    def only(v):
        return v >= 0 and len(uses.get(v, ())) == 1 and v not in g.outputs

    def per_channel(v, c):
        """The constant behind `v` (itself, or the input of the Unsqueeze that makes it) when it holds one
        value per channel and broadcasts over the spatial dims; with the Unsqueeze's index or None."""
        o = g.operands[v]
        p = defs.get(v)
        if not o.is_const and p is not None and ops[p].type == UNSQUEEZE_TYPE and only(v):
            w = ops[p].inputs[0]
            if g.operands[w].is_const and _elements(g.operands[w].shape) == c:
                return w, p
        if o.is_const and _elements(o.shape) == c and (len(o.shape) <= 1 or int(o.shape[0]) == c):
            return v, None
        return -1, None

    for inorm in ops:
        if inorm.type != INSTANCE_NORM_TYPE or len(inorm.inputs) < 3:
            continue
        r1 = defs.get(inorm.inputs[0])
        if r1 is None or ops[r1].type != RESHAPE_TYPE or not only(inorm.inputs[0]):
            continue
        x = ops[r1].inputs[0]
        xs, rs = tuple(g.operands[x].shape), tuple(g.operands[inorm.inputs[0]].shape)
        if len(xs) < 3 or len(rs) != 3 or rs[0] != xs[0] or int(xs[1]) % int(rs[1]):
            continue
        if not all(g.operands[i].is_const for i in inorm.inputs[1:3]):
            continue
        y = inorm.outputs[0]
        us = uses.get(y, ())
        if not only(y) or ops[us[0]].type != RESHAPE_TYPE or tuple(g.operands[ops[us[0]].outputs[0]].shape) != xs:
            continue
        members = [r1, inorm.index, us[0]]
        out = ops[us[0]].outputs[0]
        c = int(xs[1])
        w = b = -1
        for kind in (MUL_TYPE, ADD_TYPE):
            nxt = uses.get(out, ())
            if not only(out) or ops[nxt[0]].type != kind or len(ops[nxt[0]].inputs) != 2:
                break
            op = ops[nxt[0]]
            other = op.inputs[1] if op.inputs[0] == out else op.inputs[0]
            v, unsq = per_channel(other, c)
            if v < 0:
                break
            members += [op.index] + ([unsq] if unsq is not None else [])
            if kind == MUL_TYPE:
                w = v
            else:
                b = v
            out = op.outputs[0]
        found[max(m for m in members if ops[m].outputs and out in ops[m].outputs)] = (
            tuple(members), x, w, b, int(rs[1]), out)
    return found


def _recorded_dropout(ops, members) -> float | None:
    """sdpa's dropout_p as the dynamo exporter recorded it beside its decomposition's ops (their `call`):
    None when an op has no such record (TorchScript, or metadata stripped) or they disagree."""
    ps = {sdpa_dropout(ops[i].call) for i in members}
    return ps.pop() if len(ps) == 1 else None


def _eager_order(g, defs) -> list:
    """The ops in the order eager runs them: the graph's own, except that an op listed after one that
    reads its result (the adapters `--lora` appends) runs just before that reader, after its own
    inputs' producers (PEFT's lora.Linear: the base projection, then A, B, the scale and the sum)."""
    ops = g.operations
    done: set[int] = set()
    order = []
    for top in ops:
        stack = [(top.index, False)]
        while stack:
            i, ready = stack.pop()
            if i in done:
                continue
            if ready:
                done.add(i)
                order.append(ops[i])
                continue
            stack.append((i, True))
            for v in reversed(ops[i].inputs):
                p = defs.get(v) if v >= 0 else None
                if p is not None and p not in done:
                    stack.append((p, False))
    return order


def _fuse(g, uses) -> list[_Op]:
    """The graph's ops as eager runs them (see the module docstring)."""
    defs = g.defs()
    ops = g.operations
    gone: set[int] = set()
    out: list[_Op] = []
    attention = _attention(g, uses, defs)
    group_norms = _group_norms(g, uses, defs)
    for members, *_ in group_norms.values():
        gone.update(members)
    dropout = any(op.type == SDPA["dropout"] and float(op.attrs.get("ratio", 0.5)) > 0 for op in ops)
    if any(a[6] is not None for a in attention.values()):
        dropout = False  # an attention's own Dropout is written: TorchScript's export, the others had none
    math: dict[int, float] = {}  # the last MatMul of an sdpa whose recorded dropout_p is on -> p
    safe: dict[int, int] = {}  # its Softmax -> the output of the Where(IsNaN) after it
    for m2, (members, q, k, v, mask, sm_out, drop, sizes) in attention.items():
        p = sizes["dropout_p"]
        if drop is None and p is not None and p > 0:
            # the dynamo exporter recorded sdpa's dropout_p but wrote no Dropout: eager takes the math
            # path (the CPU flash kernel takes no dropout), op by op as the decomposition, with its dropout
            math[m2] = p
            nan = [i for i in members if ops[i].type in (SDPA["where"], SDPA["isnan"])]
            if nan:  # Softmax, IsNaN, Where: the math path's one _safe_softmax
                gone.update(nan)
                safe[defs[sm_out]] = ops[m2].inputs[0]
        elif drop is None:
            # no dropout in the graph (or a recorded dropout_p of 0): eager ran the fused CPU kernel
            # (_scaled_dot_product_flash_attention_for_cpu). With dropout elsewhere and nothing recorded,
            # the export cannot say whether sdpa's own dropout was on (TorchScript writes it): refused
            gone.update(members)
    for op in _eager_order(g, defs):
        if op.index in group_norms:
            members, x, w, b, groups, y = group_norms[op.index]
            out.append(_Op(op.index, "GroupNorm", [x, w, b], [y], {"groups": groups}, op.label, members))
            continue
        if op.index in attention and op.index in gone:
            members, q, k, v, mask, _, _, sizes = attention[op.index]
            ins = [q, k, v] + ([mask] if mask >= 0 and not g.operands[mask].is_const else [])
            known = sizes["dropout_p"] is not None
            out.append(_Op(op.index, "SDPA" if known or not dropout else "SDPA?", ins, list(op.outputs), sizes,
                           op.label, tuple(sorted(members))))
            continue
        if op.index in math:
            out.append(_Op(op.index, op.type, list(op.inputs), list(op.outputs),
                           {**op.attrs, "sdpa_dropout": math[op.index], "sdpa_probs": op.inputs[0]},
                           op.label, (op.index,)))
            continue
        if op.index in safe:
            out.append(_Op(op.index, "SafeSoftmax", list(op.inputs), [safe[op.index]], dict(op.attrs), op.label,
                           (op.index,)))
            continue
        if op.index in gone:
            continue
        # x * Sigmoid(x) -> silu(x)
        if op.type == MUL_TYPE and len(op.inputs) == 2:
            a, b = op.inputs
            for x, s in ((a, b), (b, a)):
                p = defs.get(s)
                if p is not None and ops[p].type == SIGMOID_TYPE and ops[p].inputs[0] == x and uses[s] == [op.index]:
                    out = [o for o in out if o.index != p]
                    out.append(_Op(op.index, "SiLU", [x], list(op.outputs), {}, op.label, (p, op.index)))
                    break
            else:
                out.append(_Op(op.index, op.type, list(op.inputs), list(op.outputs), dict(op.attrs), op.label,
                               (op.index,)))
            continue
        # MatMul(x, W) + b -> linear (W a constant, or a transposed view of a 2-D one: a tied weight)
        if op.type == MATMUL_TYPE and len(op.inputs) == 2 and _is_weight(g, defs, op.inputs[1]):
            y = op.outputs[0]
            us = uses[y]
            if len(us) == 1 and ops[us[0]].type == ADD_TYPE and y not in g.outputs:
                add = ops[us[0]]
                other = [i for i in add.inputs if i != y]
                if len(other) == 1 and g.operands[other[0]].is_const and len(g.operands[other[0]].shape) <= 1:
                    gone.add(add.index)
                    out.append(_Op(op.index, "Linear", [op.inputs[0], op.inputs[1], other[0]], list(add.outputs),
                                   {}, op.label, (op.index, add.index)))
                    continue
        out.append(_Op(op.index, op.type, list(op.inputs), list(op.outputs), dict(op.attrs), op.label, (op.index,)))
    return out


def _selects(ops_: list[_Op], opd: list) -> list[_Op]:
    """A Gather of one index (a 0-d index: the rank drops) from an activation is eager's `select`
    (`x[i]`, `unbind`): a view, not a copy; its backward makes a zeroed gradient of the input's size."""
    out = []
    for op in ops_:
        if op.type == GATHER and len(op.inputs) > 1 and op.inputs[1] >= 0 and not opd[op.inputs[1]].shape \
                and not opd[op.inputs[0]].is_const:
            op = _Op(op.index, "Select", op.inputs[:1], op.outputs, {"axis": int(op.attrs.get("axis", 0))},
                     op.label, op.members)
        out.append(op)
    return out


def _lost_clones(ops_: list[_Op], g, opd: list, uses: dict) -> list[_Op]:
    """A copy the export dropped, read back from the calls the dynamo exporter recorded: an op whose
    call's first argument is an `aten.clone` (`.contiguous()`, `.clone()`) that no op of the file
    records read a copy of its input 0 in eager. Each such clone becomes one Clone op (a new
    contiguous operand, appended to `opd`) before its first reader; every reader of it reads the copy.
    Only ops that read their input 0 from outside their own call's decomposition are matched."""
    from memplan_cli.ir.graph import Operand

    calls = [parse_call(op.call) if op.call else None for op in g.operations]
    names = {c[0] for c in calls if c}
    defs = g.defs()
    made: dict[str, int] = {}
    out = []
    for op in ops_:
        c = calls[op.index]
        x = op.inputs[0] if op.inputs else -1
        arg = c[2][0] if c and c[2] else ""
        p = defs.get(x)
        if x < 0 or not re.fullmatch(r"%clone(_\d+)?", arg) or arg[1:] in names or (
                p is not None and calls[p] and calls[p][0] == c[0]):
            out.append(op)
            continue
        if arg not in made:
            y = Operand(len(opd), f"{opd[x].name}:clone", tuple(opd[x].shape), opd[x].dtype)
            opd.append(y)
            made[arg] = y.index
            out.append(_Op(op.index, "Clone", [x], [y.index], {}, op.label, op.members))
        uses.setdefault(made[arg], []).append(op.index)
        out.append(_Op(op.index, op.type, [made[arg]] + op.inputs[1:], op.outputs, op.attrs, op.label, op.members))
    return out


def _merged_dropouts(ops_: list[_Op], g, opd: list, uses: dict) -> list[_Op]:
    """Dropouts of one input the dynamo exporter merged into one (its optimizer folds equal nodes; peft's
    lora_dropout of q_proj and of v_proj): the ops reading the Dropout's output record it under
    different names (`%getitem`, `%getitem_2`), one per draw eager made. Each further name is another
    Dropout of the same input (a new operand, appended to `opd`), run before its first reader."""
    from memplan_cli.ir.graph import Operand

    drops = {o: op for op in ops_ if op.type == SDPA["dropout"] and float(op.attrs.get("ratio", 0.5)) > 0
             for o in op.outputs[:1]}
    if not drops:
        return ops_
    # names of values an op of the file computes (a Dropout's own output is read as an unrecorded
    # `%getitem`): a reader naming one of these reads another value at input 0
    recorded = {c.partition(" = ")[0] for c in (op.call for op in g.operations) if c}
    first: dict[int, str] = {}
    made: dict[tuple, int] = {}
    out = []
    for op in ops_:
        x = op.inputs[0] if op.inputs else -1
        c = parse_call(g.operations[op.index].call) if x in drops and g.operations[op.index].call else None
        arg = c[2][0] if c and c[2] else ""
        if not arg.startswith("%") or arg[1:] in recorded or first.setdefault(x, arg) == arg:
            out.append(op)
            continue
        if (x, arg) not in made:
            d = drops[x]
            y = Operand(len(opd), f"{opd[x].name}:{arg[1:]}", tuple(opd[x].shape), opd[x].dtype)
            opd.append(y)
            made[(x, arg)] = y.index
            out.append(_Op(op.index, d.type, list(d.inputs), [y.index], dict(d.attrs), d.label, d.members))
        uses.setdefault(made[(x, arg)], []).append(op.index)
        out.append(_Op(op.index, op.type, [made[(x, arg)]] + op.inputs[1:], op.outputs, op.attrs, op.label,
                       op.members))
    return out


def _sdpa_dropouts(ops_: list[_Op], opd: list, uses: dict) -> list[_Op]:
    """sdpa's own dropout on the math path (`_fuse` marks the MatMul with v): a Dropout of the
    attention probabilities, on a new operand (appended to `opd`), read by that MatMul instead."""
    from memplan_cli.ir.graph import Operand

    out = []
    for op in ops_:
        p = op.attrs.get("sdpa_dropout")
        if p is None:
            out.append(op)
            continue
        x = opd[op.attrs["sdpa_probs"]]
        y = Operand(len(opd), f"{x.name}:dropout", tuple(x.shape), x.dtype)
        opd.append(y)
        uses[y.index] = [op.index]
        out.append(_Op(op.index, SDPA["dropout"], [x.index], [y.index], {"ratio": p}, op.label, op.members))
        attrs = {k: v for k, v in op.attrs.items() if not k.startswith("sdpa_")}
        out.append(_Op(op.index, op.type, [y.index if v == x.index else v for v in op.inputs], op.outputs, attrs,
                       op.label, op.members))
    return out


def _split_activations(ops_: list[_Op], opd: list, uses: dict) -> list[_Op]:
    """A fused activation (TF Lite) is a second eager op: the op writes a pre-activation operand (new,
    appended to `opd`), the activation reads it."""
    from memplan_cli.ir.graph import Operand

    out = []
    for op in ops_:
        act = (op.attrs.get("activation") or "NONE").upper()
        if act == "NONE" or act not in _fused_activations() or len(op.outputs) != 1:
            out.append(op)
            continue
        y = opd[op.outputs[0]]
        pre = Operand(len(opd), f"{y.name}:pre", tuple(y.shape), y.dtype)
        opd.append(pre)
        uses[pre.index] = [op.index]
        out.append(_Op(op.index, op.type, op.inputs, [pre.index], {**op.attrs, "activation": "NONE"}, op.label,
                       op.members))
        out.append(_Op(op.index, _fused_activations()[act], [pre.index], [y.index], {}, op.label, op.members))
    return out


class _Sim:
    """The replay: storages with their birth and death steps."""

    def __init__(self):
        self.steps: list[Step] = []
        self.store: list[dict] = []  # name, category, bytes, first, last, owner, kind
        self.coverage: dict = {"ops": 0, "estimated": {}}  # eager ops replayed; estimated label -> type

    def step(self, kind: str, op: int, label: str) -> int:
        self.steps.append(Step(len(self.steps), kind, op, label))
        return len(self.steps) - 1

    def new(self, name, category, nbytes, first, owner="", kind="") -> int:
        self.store.append({"name": name, "category": category, "bytes": int(nbytes), "first": first,
                           "last": first, "owner": owner, "kind": kind})
        return len(self.store) - 1

    def touch(self, s: int, step: int) -> None:
        if s is not None and step > self.store[s]["last"]:
            self.store[s]["last"] = step


def _no_grad(op_type: str) -> bool:
    from memplan_cli import ops

    d = ops.get(op_type)
    if d is not None:
        return bool(d.no_grad)
    return bool((ops.profile_facts("torch", op_type) or {}).get("draws"))


def _elements(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _cstr(shape) -> tuple:
    """Contiguous strides (in elements) of `shape`."""
    out, n = [], 1
    for d in reversed(tuple(shape)):
        out.append(n)
        n *= int(d)
    return tuple(reversed(out))


def _is_contig(shape, strides) -> bool:
    """torch's is_contiguous: sizes of 1 have any stride."""
    return all(st == c for d, st, c in zip(shape, strides, _cstr(shape)) if int(d) != 1)


def _view_stride(old, oldst, new):
    """The strides of `old` (strides `oldst`) viewed as `new`, or None when no view exists and reshape
    copies (ATen's computeStride)."""
    old, oldst, new = tuple(int(d) for d in old), tuple(oldst), tuple(int(d) for d in new)
    if _elements(old) == 0 or not old:
        return _cstr(new)
    newst = [0] * len(new)
    view_d = len(new) - 1
    chunk = oldst[-1]
    t_n = v_n = 1
    for d in range(len(old) - 1, -1, -1):
        t_n *= old[d]
        if d == 0 or (old[d - 1] != 1 and oldst[d - 1] != t_n * chunk):
            while view_d >= 0 and (v_n < t_n or new[view_d] == 1):
                newst[view_d] = v_n * chunk
                v_n *= new[view_d]
                view_d -= 1
            if v_n != t_n:
                return None
            if d > 0:
                chunk = oldst[d - 1]
                t_n = v_n = 1
    return tuple(newst) if view_d == -1 else None


def _out_strides(op, opd, st, k=0):
    """Strides of view op `op`'s output k, given its input's strides `st`; None: the op copies."""
    x, y = tuple(opd[op.inputs[0]].shape), tuple(opd[op.outputs[k]].shape)
    if op.type == TRANSPOSE:
        perm = op.attrs.get("perm") or tuple(reversed(range(len(x))))
        return tuple(st[int(i)] for i in perm)
    if op.type == "Select":  # the selected dim goes
        ax = int(op.attrs.get("axis", 0)) % len(x)
        return tuple(st[:ax]) + tuple(st[ax + 1:])
    if op.type == EXPAND:  # broadcast dims get stride 0
        pad = (0,) * (len(y) - len(x))
        full = pad + tuple(st)
        xs = (1,) * (len(y) - len(x)) + x
        return tuple(0 if xs[i] == 1 and y[i] != 1 else full[i] for i in range(len(y)))
    if op.type in NARROWS and len(x) == len(y):
        return tuple(st)  # a narrow keeps its input's strides
    if x == y:
        return tuple(st)
    return _view_stride(x, st, y)


def _ti_strides(out_shape, ins) -> tuple:
    """The output strides TensorIterator gives an elementwise op of inputs `ins` ((shape, strides)
    pairs): dimensions sorted by the inputs' strides (broadcast ones skipped), a dense result."""
    out_shape = tuple(int(d) for d in out_shape)
    nd = len(out_shape)
    al = []
    for shp, st in ins:
        pad = nd - len(shp)
        al.append([0] * pad + [0 if int(shp[i]) == 1 and out_shape[pad + i] != 1 else st[i]
                               for i in range(len(shp))])
    perm = list(range(nd - 1, -1, -1))  # perm[0] is the fastest axis

    def should_swap(d0, d1):
        for st in al:
            a, b = st[d0], st[d1]
            if a == 0 or b == 0:
                continue
            if a != b:
                return -1 if a < b else 1
            if out_shape[d0] > out_shape[d1]:
                return 1
        return 0

    for i in range(1, nd):
        d1 = i
        for d0 in range(i - 1, -1, -1):
            c = should_swap(perm[d0], perm[d1])
            if c > 0:
                perm[d0], perm[d1] = perm[d1], perm[d0]
                d1 = d0
            elif c < 0:
                break
    st, n = [0] * nd, 1
    for d in perm:
        st[d] = n
        n *= out_shape[d]
    return tuple(st)


def _bmm_copies(shape, st) -> bool:
    """A matmul operand of 3+ dims is folded to (batch, m, n) (a reshape: a copy when no view exists);
    bmm takes a row- or column-major matrix as it is and copies any other layout."""
    shape = tuple(int(d) for d in shape)
    b = _elements(shape[:-2])
    f = _view_stride(shape, st, (b,) + shape[-2:])
    if f is None:
        return True
    m, n = shape[-2:]
    return not ((f[-1] == 1 or n == 1) and f[-2] >= max(n, 1) or (f[-2] == 1 or m == 1) and f[-1] >= max(m, 1))


class TorchProfile:
    name = "torch"
    precisions = ("32-true", "bf16-mixed", "bf16-true")
    precision_note = "matched against float32, bf16-mixed (CPU autocast) and bf16-true runs only"
    # how its figures were checked (`memplan compare` prints it)
    checked = ("matched against torch 2.14's CPU allocator and MemTracker on zoos of CNN, vision, transformer "
               "and LoRA exports (devtools/torch_oracle.py; docs/torchprof.md has each figure and what is refused)")
    OPTIONS = ("planner",)

    def checked_for(self, extras: dict) -> str:
        """For this model: how many of its eager ops measured rules cover (not the zoos it was checked on)."""
        cov = (extras.get("torch") or {}).get("coverage")
        return coverage_line(cov) if cov else ""

    def training_graph(self, graph, config):
        """memplan's training graph: only which weights train and the appended loss are read. What the
        dynamo exporter's optimizer folded away is put back first (profiles/torch_export.py)."""
        from memplan_cli.passes.pipeline import build_training_graph
        from memplan_cli.profiles.torch_export import eager_graph

        return build_training_graph(eager_graph(graph), config)

    def build(self, graph, config, **options):
        from memplan_cli.planners import planner_names

        bad = sorted(set(options) - set(self.OPTIONS))
        if bad:
            raise ConfigError(f"unknown torch profile option {bad[0]!r} (known: {', '.join(self.OPTIONS)})")
        planner = options.get("planner") or PLANNER
        if planner not in planner_names():
            raise ConfigError(f"unknown planner {planner!r} (known: {', '.join(planner_names())})")
        tg = self.training_graph(graph, config)
        sim, layer = replay(tg, config)
        kept = [s for s in sim.store if s["bytes"] > 0]
        bufs = [Buffer(s["name"], s["category"], s["bytes"], s["first"], s["last"], s["owner"], "heap", s["bytes"],
                       key=f"{s['category']}:{i}")
                for i, s in enumerate(kept)]
        bl = BufferList(bufs, sim.steps, [Pool("heap", "non-const", planner)])
        bl.info.update({"profile": self.name, "planner": planner, "steps": len(sim.steps)})
        # not dataclass fields: read by `figures`
        bl.torch_layers = layer
        bl.training_graph = tg  # which weights train (the report's assumed-trainable list reads it)
        bl.torch_parts = [_part(s, sim.steps) for s in kept]
        bl.torch_coverage = sim.coverage
        return bl

    def figures(self, analysis) -> dict:
        """Eager's peak (live bytes, what its allocator counts), the split there, and the per-layer
        ColossalAI columns."""
        from memplan_cli.profiles.memplan import peak_figures, peak_step

        bl = analysis.buffers
        pf = peak_figures(bl)
        at = pf.get("peak_step", 0)
        parts = getattr(bl, "torch_parts", [""] * len(bl.buffers))
        tensors = [b for b, p in zip(bl.buffers, parts) if p != "scratch"]
        t_parts = [p for p in parts if p != "scratch"]
        t_at, t_peak = peak_step(tensors, len(bl.steps))
        t_peak = max(t_peak, 0)
        out = {"torch": {"peak": pf.get("peak_live_bytes", 0), "peak_step": at,
                         "peak_op": pf.get("peak_op", ""), "peak_kind": pf.get("peak_kind", ""),
                         "by_category": pf.get("peak_by_category", {}), "split": _split(bl.buffers, parts, at),
                         # tensor storages only (MemTracker's view): their own peak and its split
                         "tensors": {"peak": t_peak, "peak_step": t_at, "split": _split(tensors, t_parts, t_at)},
                         "coverage": _coverage(bl, at, pf.get("peak_live_bytes", 0)),
                         "not_modelled": "allocator slack; memory outside PyTorch's allocator (some oneDNN "
                                         "scratch); tensors module code keeps past their last use"}}
        layers = getattr(analysis.buffers, "torch_layers", None)
        if layers is not None:
            out["per_layer_extra"] = layers
        return out


# a profile whose estimated ops hold more than this share of the peak says so in the table's header
ESTIMATED_SHARE = 0.02


def _coverage(bl, at: int, peak: int) -> dict:
    """How sure the figure is: of the eager ops replayed, how many a measured rule covers, and the ops
    the general rule estimated (`GENERAL`), each with the bytes it made (outputs, saved tensors,
    temporaries, gradients from its backward) that are live at the peak."""
    cov = getattr(bl, "torch_coverage", None) or {"ops": 0, "estimated": {}}
    est = cov["estimated"]
    at_peak = dict.fromkeys(est, 0)
    for b in bl.buffers:
        if b.owner in at_peak and b.first <= at <= b.last:
            at_peak[b.owner] += b.size
    total = sum(at_peak.values())
    return {"ops": cov["ops"], "measured": cov["ops"] - len(est),
            "estimated": [{"op": label, "type": est[label], "bytes_at_peak": at_peak[label]} for label in est],
            "estimated_bytes_at_peak": total,
            "estimated_share": round(total / peak, 4) if peak else 0.0,
            "says_so": bool(peak) and total > ESTIMATED_SHARE * peak}


def coverage_line(cov: dict) -> str:
    """`memplan compare`'s line for this model: how many of its ops measured rules cover."""
    line = f"measured rules cover {cov['measured']} of {cov['ops']} eager ops of this model"
    if cov["estimated"]:
        types = sorted({e["type"] for e in cov["estimated"]})
        line += (f"; {len(cov['estimated'])} estimated by the general rule ({', '.join(types)}), "
                 f"{cov['estimated_bytes_at_peak']:,d} B of the peak")
    return line + " (devtools/torch_oracle.py; docs/torchprof.md)"


# the split `figures` reports at the peak, in MemTracker's terms (PARAM + BUFFER, OPT, GRAD, ACT,
# TEMP, and OTH for the batch): optimizer temporaries count with its state, as MemTracker counts them;
# `scratch` is what kernels allocate through the allocator that is no tensor (MemTracker misses it)
PARTS = ("parameters", "optimizer", "gradients", "activations", "temporaries", "batch", "scratch")


def _split(bufs, parts, at: int) -> dict:
    """Bytes live at step `at` by part; a weight's gradient is a temporary in the backward step that
    makes it (it becomes `.grad` when that step returns: MemTracker's view)."""
    split = dict.fromkeys(PARTS, 0)
    for b, part in zip(bufs, parts):
        if b.first <= at <= b.last:
            split["temporaries" if part == "gradients" and b.first == at else part] += b.size
    return split


def _part(s: dict, steps) -> str:
    cat = s["category"]
    if cat == "trainable":
        return "parameters"
    if cat == "opt-variable" or steps[s["first"]].kind == "applyGradient":
        return "optimizer"
    if cat == "gradient":
        return "gradients"
    if s["kind"] == "held":
        return "batch"
    if s["kind"] == "scratch":
        return "scratch"
    if steps[s["first"]].kind == "forward":
        return "activations"
    return "temporaries"


def refusal(ops_: list[_Op], operands=None, source_format: str = "onnx") -> str | None:
    for op in ops_:
        if op.type == "SDPA?":
            return (f"torch profile: op {op.label} is scaled_dot_product_attention in a model with dropout: the "
                    f"export does not say whether its own dropout was on (torch.onnx's dynamo exporter drops "
                    f"it), and eager's CPU kernel differs (fused without dropout, the math path with it)")
        f = facts(op) if op.type != LOSS_TYPE else {}
        if f is None and source_format not in ("tflite", "circle"):
            op.attrs[ESTIMATED] = True  # the general rule covers it; the report names it
            continue
        if f is None:
            if source_format in ("tflite", "circle"):
                # a TF Lite file is no PyTorch export: its ops are read only where each is one eager op
                return (f"torch profile: op {op.label} ({op.type}) of a {source_format} file has no PyTorch "
                        f"counterpart: the torch profile is for exports of PyTorch modules (ONNX); a "
                        f"{source_format} model is read only where every op is one eager op")
            return (f"torch profile: op {op.label} ({op.type}) has no torch facts (what eager autograd saves "
                    f"for it is not modelled)")
        # a family's own refusal in a situation its facts do not cover (e.g. a CPU kernel not measured)
        why = f.get("refuse") and operands is not None and f["refuse"](op, operands)
        if why:
            return f"torch profile: op {op.label} ({op.type}): {why}"
        act = (op.attrs.get("activation") or "NONE").upper()
        if act != "NONE" and act not in _fused_activations():
            return f"torch profile: op {op.label} has a fused activation {act} eager has no op for here"
    return None


def replay(tg, config):
    """Replay one eager training step over `tg.graph`; returns (the simulation, per-layer columns)."""
    from memplan_cli.ir.dtypes import dtype_size

    g = tg.graph
    uses = g.uses()
    opd = list(g.operands)  # plus the pre-activations of fused activations (_split_activations)
    ops_ = _selects(_merged_dropouts(_lost_clones(_fuse(g, uses), g, opd, uses), g, opd, uses), opd)
    ops_ = _split_activations(_sdpa_dropouts(ops_, opd, uses), opd, uses)
    why = refusal(ops_, opd, getattr(g, "source_format", "onnx") or "onnx")
    if why:
        raise UnsupportedOpError(why)
    trained = set(tg.grad)
    sim = _Sim()
    ac = Autocast(config, opd, trained)  # --precision N-mixed: profiles/torch_autocast.py
    sim.coverage = {"ops": len(ops_), "estimated": {op.label: op.type for op in ops_ if op.attrs.get(ESTIMATED)}}
    layer: dict[str, dict[str, int]] = {}

    def cols(label):
        return layer.setdefault(label, {"fwd_mem_out": 0, "fwd_mem_tmp": 0, "bwd_mem_tmp": 0, "bwd_mem_out": 0})

    # ---- held before the step ----
    storage: dict[int, int] = {}  # operand -> storage
    params_order: list[int] = []
    # a constant only fused-away ops read is none in eager; nor is one read for its shape alone (the
    # dynamo exporter's constant folding turns dropout's `empty_like(x)` into a constant of x's shape)
    read = {v for op in ops_ if not (facts(op) or {}).get("shape_only") for v in op.inputs}
    masks = _sdpa_masks(g)
    # an sdpa mask received as a computed value is no parameter in eager, also where memplan's
    # parameter rules cannot tell (assumed trainable: T5's position bias, folded with its table)
    trained -= {m for m in masks if opd[m].assumed}
    computed = _folded_values(g, trained, masks)
    for o in opd:
        if o.is_const and o.dtype.startswith(("float", "bfloat")) and _elements(o.shape) > 1 and o.index in read \
                and o.index not in computed:
            storage[o.index] = sim.new(o.name, "trainable", o.nbytes, 0, kind="held")
    for v in g.inputs:
        o = opd[v]
        if v == tg.label:
            y_pred = opd[g.operations[tg.loss_op].inputs[0]]
            if config.loss == "cce":
                n = _elements(y_pred.shape[:-1]) if len(y_pred.shape) > 1 else 1
                storage[v] = sim.new("label", "non-const", 8 * n, 0, kind="held")
            else:
                storage[v] = sim.new("label", "non-const", y_pred.nbytes, 0, kind="held")
        else:
            storage[v] = sim.new(o.name, "non-const", o.nbytes, 0, kind="held")
    for op in ops_:
        for v in op.inputs:
            if v in trained and v not in params_order:
                params_order.append(v)
    held = list(range(len(sim.store)))
    # a view of a trained weight (a tied weight's Transpose) is that weight to autocast's cast cache
    weight_of_storage = {storage[w]: w for w in trained if w in storage}
    ac.weight_of = lambda v: v if v in trained else weight_of_storage.get(storage.get(v))
    state_count = {"sgd": 0, "momentum": 1, "adam": 2}[config.optimizer]
    for w in params_order:
        for k in range(state_count):
            held.append(sim.new(f"{opd[w].name}:state{k}", "opt-variable", opd[w].nbytes, 0, kind="held"))
        if config.optimizer == "adam":
            held.append(sim.new(f"{opd[w].name}:step", "opt-variable", 4, 0, kind="held"))

    # ---- forward ----
    rg: set[int] = set(trained)  # operands that require grad
    contig: dict[int, bool] = {}
    cl: dict[int, bool] = {}  # channels-last memory format (see _memory_format)
    noncontig_in: set[int] = set()  # positions whose input 0 was non-contiguous
    strides: dict[int, tuple] = {}  # operand -> strides of a view or a strided result (absent: contiguous)

    def is_c(v) -> bool:
        return v not in strides or _is_contig(opd[v].shape, strides[v])
    node: dict[int, bool] = {}  # fused-op position -> records a backward node
    saved_by: dict[int, list] = {}  # position -> storages it saved
    out_store: dict[int, list] = {}
    fwd_last: dict[int, int] = {}  # storage -> last forward step reading it
    pos_step: dict[int, int] = {}
    consumers: dict[int, list[int]] = {}
    for p, op in enumerate(ops_):
        for v in op.inputs:
            if v >= 0:
                consumers.setdefault(v, []).append(p)

    def _bytes(spec, op, needs):
        """Bytes of `in0` / `in1` / `out0`, or 0 for `in0?g0` when input 0 needs no gradient; an int is
        bytes already (a family's own function computed them)."""
        if isinstance(spec, int):
            return spec
        spec, _, cond = spec.partition("?")
        if cond and not (int(cond[1:]) < len(needs) and needs[int(cond[1:])]):
            return 0
        mask = spec.startswith("mask:")  # a bool tensor of that many elements
        spec = spec[5:] if mask else spec
        k = int(spec[2:]) if spec.startswith("in") else int(spec[3:])
        v = op.inputs[k] if spec.startswith("in") else op.outputs[k]
        if v < 0:
            return 0
        return _elements(opd[v].shape) if mask else opd[v].nbytes

    def size_of(spec, op):
        x = opd[op.inputs[0]]
        if spec == "in0":
            return _elements(x.shape)
        if spec == "out0":
            return _elements(opd[op.outputs[0]].shape)
        if spec == "channels":
            return int(x.shape[1]) if len(x.shape) > 1 else 1
        if spec == "groups":  # (N, G): one per sample and group (group_norm's statistics)
            return int(x.shape[0]) * int(op.attrs["groups"])
        if spec == "rows":
            return _elements(x.shape[:-1]) if len(x.shape) > 1 else 1
        raise ValueError(f"unknown size rule {spec!r}")

    for p, op in enumerate(ops_):
        s = sim.step("forward", op.index, op.label)
        pos_step[p] = s
        c = cols(op.label)
        ins = [v for v in op.inputs if v >= 0]
        for v in ins:
            if v in computed and v not in storage:  # eager computes it here, a forward value
                storage[v] = sim.new(opd[v].name, "non-const", opd[v].nbytes, s, op.label, "out")
            if v in storage:
                fwd_last[storage[v]] = s
        needs = [v in rg for v in op.inputs]
        f = facts(op) or {}
        # a random mask never carries a gradient; nor does a no-grad op (aten::size of a tensor that
        # requires grad records no node: no phantom gradient back into its input)
        rec = any(needs) and not f.get("draws") and not _no_grad(op.type)
        node[p] = rec
        saved = []
        if op.type == LOSS_TYPE:
            x = op.inputs[0]
            ac.loss_forward(sim, op, s, op.label, c)
            if config.loss == "cce":
                n_el = _elements(opd[x].shape) * dtype_size(opd[op.outputs[0]].dtype)  # the loss's dtype
                ls = sim.new(f"{op.label}:log_softmax", "non-const", n_el, s, op.label, "saved")
                c["fwd_mem_tmp"] += n_el
                saved.append(ls)
                tw = sim.new(f"{op.label}:total_weight", "non-const", 4, s, op.label, "tmp")
                c["fwd_mem_tmp"] += 4
                saved.append(tw)
            else:
                saved += [storage[x], storage[op.inputs[1]]]
            out = sim.new(f"{op.label}:loss", "non-const", 4, s, op.label, "out")
            c["fwd_mem_out"] += 4
            storage[op.outputs[0]] = out
            out_store[p] = [out]
            rg.add(op.outputs[0])
            saved_by[p] = saved if rec else []
            continue
        # inputs a kernel needs contiguous: a copy of a non-contiguous view
        copies = {}
        if f.get("contiguous_inputs") or op.type in WEIGHT_MATMULS:
            w2d = len(op.inputs) > 1 and op.inputs[1] >= 0 and len(opd[op.inputs[1]].shape) == 2
            for k, v in enumerate(op.inputs[:2]):
                if v < 0 or is_c(v) or len(opd[v].shape) <= 2:
                    continue  # a 2-D transposed operand goes to BLAS as it is
                shp = opd[v].shape
                if k == 0 and w2d:  # against a 2-D weight all leading dims fold into rows: a reshape
                    copy = _view_stride(shp, strides[v], (_elements(shp[:-1]), int(shp[-1]))) is None
                else:
                    copy = bool(f.get("contiguous_inputs")) and _bmm_copies(shp, strides[v])
                if copy:
                    cp = sim.new(f"{op.label}:contiguous{k}", "non-const", opd[v].nbytes, s, op.label, "copy")
                    c["fwd_mem_tmp"] += opd[v].nbytes
                    copies[f"in{k}"] = cp
        copies.update(ac.forward_casts(sim, op, p, s, op.label))
        # outputs
        outs = []
        view = bool(f.get("view"))
        if f.get("view_if") is not None and f["view_if"](op):
            view = True
        x0 = op.inputs[0] if op.inputs else -1
        for k, v in enumerate(op.outputs):
            if not uses.get(v) and v not in g.outputs:
                continue  # an exporter's extra output (running statistics, a mask): none in eager
            vs = None
            if view and (k == 0 or f.get("view") == "all"):
                # a reshape that no view can express copies (contiguous result)
                vs = _out_strides(op, opd, strides.get(x0) or _cstr(opd[x0].shape), k)
            if vs is not None:
                storage[v] = storage.get(x0)
                if not _is_contig(opd[v].shape, vs) or _cl_2d(opd[v].shape, vs):
                    strides[v] = vs  # kept when contiguous too if a convolution would read it channels-last
                contig[v] = _is_contig(opd[v].shape, vs)
            else:
                storage[v] = sim.new(opd[v].name, "non-const", opd[v].nbytes, s, op.label, "out")
                c["fwd_mem_out"] += opd[v].nbytes
                # the new tensor's layout: like input 0 (empty_like), or TensorIterator's
                if f.get("layout") == "in0" and x0 in strides and opd[v].shape == opd[x0].shape:
                    strides[v] = strides[x0]
                elif op.type in LAYOUT_KEEPING and k == 0 and any(i in strides for i in op.inputs if i >= 0):
                    lay = _ti_strides(opd[v].shape, [(opd[i].shape, strides.get(i) or _cstr(opd[i].shape))
                                                     for i in op.inputs if i >= 0])
                    if not _is_contig(opd[v].shape, lay):
                        strides[v] = lay
                contig[v] = v not in strides
            outs.append(v)
        out_store[p] = [storage[v] for v in outs]
        _memory_format(op, opd, contig, cl, strides)
        if rec and f.get("copies_noncontiguous") and not contig.get(op.inputs[0], True):
            noncontig_in.add(p)
            sim.new(f"{op.label}:contiguous", "extra", opd[op.inputs[0]].nbytes, s, op.label, "scratch")
            c["fwd_mem_tmp"] += opd[op.inputs[0]].nbytes
        if rec and not _no_grad(op.type):
            for v in outs:
                rg.add(v)
        if rec:
            for what, when in f.get("saves", ()):
                if when == "any" or (when.startswith("g") and int(when[1:]) < len(needs) and needs[int(when[1:])]):
                    if what in copies:
                        saved.append(copies[what])
                    elif what.startswith("in"):
                        k = int(what[2:])
                        if k < len(op.inputs) and op.inputs[k] >= 0 and op.inputs[k] in storage:
                            saved.append(storage[op.inputs[k]])
                    elif what.startswith("out"):
                        k = int(what[3:])
                        if op.outputs[k] in storage:
                            saved.append(storage[op.outputs[k]])
            saved += [st for st in ac.saved_weight_copies(op, p, needs, copies) if st not in saved]
            alts = f.get("fwd_scratch", ())
            alts = alts(op, opd) if callable(alts) else alts
            tmp_b = max((sum(_bytes(x, op, needs) for x in alt) for alt in alts), default=0)
            if tmp_b:
                sim.new(f"{op.label}:scratch", "extra", tmp_b, s, op.label, "scratch")
                c["fwd_mem_tmp"] += tmp_b
            for name, spec, dtype in f.get("aux", ()):
                nb = size_of(spec, op) * dtype_size(opd[op.inputs[0]].dtype if dtype == "in0" else dtype)
                saved.append(sim.new(f"{op.label}:{name}", "extra", nb, s, op.label, "saved"))
                c["fwd_mem_tmp"] += nb
        for st in copies.values():
            if st not in saved:
                sim.touch(st, s)
        saved_by[p] = saved if rec else []

    loss_step = len(sim.steps) - 1
    ac.end_forward(sim, loss_step)
    # the graph's outputs (the loss) are held by the caller
    for v in g.outputs:
        if v in storage:
            fwd_last[storage[v]] = max(fwd_last.get(storage[v], 0), loss_step)

    # ---- backward ----
    grad: dict[int, int | None] = {}  # operand -> storage of its accumulated gradient
    grad_contig: dict[int, bool] = {}  # operand -> its gradient is contiguous
    grads_of_weights: list[int] = []
    release_at: dict[int, int] = {}  # storage -> backward step that last needs it
    for p in range(len(ops_) - 1, -1, -1):
        op = ops_[p]
        if not node[p]:
            continue
        s = sim.step("calcDerivative", op.index, op.label)
        c = cols(op.label)
        f = facts(op) or {}
        made: list[int] = []  # storages created by this backward
        tmp: list[int] = []
        if op.type == LOSS_TYPE:
            one = sim.new("loss:grad", "back-prop", 4, s, op.label, "tmp")
            tmp.append(one)
            x = op.inputs[0]
            nb = opd[x].nbytes
            t = sim.new(f"{op.label}:nll_grad", "back-prop", ac.loss_grad_bytes(x), s, op.label, "tmp")
            tmp.append(t)
            tmp += ac.loss_backward_tmps(sim, x, s, op.label)
            gx = sim.new(f"{opd[x].name}:grad", "back-prop", nb, s, op.label, "grad")
            made.append(gx)
            _deliver(sim, grad, grad_contig, x, gx, True, s, opd, made, tmp, op.label, uses)
            ac.after_loss_backward(sim, op, s, gx, tmp)
        else:
            # an op whose kernel computes the input's gradient, then the weight's, with their own
            # scratch (convolution_backward) gets two steps: the weight's gradient is not yet made
            # while the input's is
            s_dw = sim.step("calcGradient", op.index, op.label) if "bwd_scratch_dw" in f else s
            outs = [v for v in op.outputs if v in storage]
            g_out = [grad.get(v) for v in outs]
            for st in g_out:
                sim.touch(st, s_dw)
            incoming_contig = all(grad_contig.get(v, True) for v in outs)
            mode = f.get("grad", "new")
            for k, v in enumerate(op.inputs):
                if v < 0 or v not in rg:
                    continue
                if k in f.get("grad_shared", ()):
                    if tuple(opd[v].shape) == tuple(opd[op.outputs[0]].shape) and g_out and g_out[0] is not None:
                        _deliver(sim, grad, grad_contig, v, g_out[0], incoming_contig, s, opd, made, tmp, op.label,
                                 uses, shared=True)
                        continue
                if mode in ("view", "pass") and g_out and g_out[0] is not None and (
                        not f.get("view_needs_contiguous") or incoming_contig):
                    _deliver(sim, grad, grad_contig, v, g_out[0], incoming_contig and not f.get("strided"), s, opd,
                             made, tmp, op.label, uses, shared=True)
                    continue
                if v in trained:
                    gw = sim.new(f"{opd[v].name}:grad", "gradient", opd[v].nbytes, s_dw, op.label, "wgrad")
                    made.append(gw)
                    grads_of_weights.append(gw)
                    if grad.get(v) is not None and grad_contig.get(v, True):
                        # a weight read twice: the second gradient is added into the first in place
                        tmp.append(gw)
                        made.remove(gw)
                        grads_of_weights.remove(gw)
                    elif grad.get(v) is not None:
                        # the first is a transposed view (a tied weight's, through its Transpose): the sum
                        # is a new tensor, both addends freed (the engine's InputBuffer, measured)
                        tmp.append(gw)
                        made.remove(gw)
                        grads_of_weights.remove(gw)
                        sim.touch(grad[v], s_dw)
                        new = sim.new(f"{opd[v].name}:grad", "gradient", opd[v].nbytes, s_dw, op.label, "wgrad")
                        made.append(new)
                        grads_of_weights.append(new)
                        grad[v] = new
                        grad_contig[v] = True
                    else:
                        grad[v] = gw
                    continue
                gx = sim.new(f"{opd[v].name}:grad", "back-prop", opd[v].nbytes, s, op.label, "grad")
                made.append(gx)
                _deliver(sim, grad, grad_contig, v, gx, True, s, opd, made, tmp, op.label, uses)
            if s_dw != s:
                # the engine adds an input's gradient into an earlier one when the op's backward returns,
                # after the weight's gradient is made: it lives through both steps (measured, ConvNeXt's
                # depthwise convolution beside the residual)
                for t in tmp:
                    if sim.store[t]["kind"] == "grad" and sim.store[t]["first"] == s:
                        sim.touch(t, s_dw)
            needs = [v in rg for v in op.inputs]
            dx = any(n and v not in trained for v, n in zip(op.inputs, needs))
            dw = any(v in trained for v in op.inputs)
            if p in noncontig_in:  # the saved non-contiguous input is made contiguous again
                tmp.append(sim.new(f"{op.label}:contiguous", "disposable", opd[op.inputs[0]].nbytes, s, op.label,
                                   "scratch"))
            for key, kind, at, runs in (("bwd_tmp", "tmp", s, True), ("bwd_scratch", "scratch", s, True),
                                        ("bwd_scratch_dx", "scratch", s, dx), ("bwd_scratch_dw", "scratch", s_dw, dw)):
                alts = f.get(key, ()) if runs else ()
                if alts == "unused_outputs":  # zeros for each output that got no gradient
                    alts = ((sum(opd[v].nbytes for v in op.outputs if v >= 0 and grad.get(v) is None),),)
                alts = _alternatives(alts, op, opd, needs) if callable(alts) else alts
                tmp_b = max((sum(_bytes(x, op, needs) for x in alt) for alt in alts), default=0)
                if tmp_b:
                    tmp.append(sim.new(f"{op.label}:{kind}", "disposable", tmp_b, at, op.label, kind))
            s = s_dw
        for st in saved_by[p]:
            release_at[st] = max(release_at.get(st, 0), s)
        if op.type != LOSS_TYPE:
            ac.after_backward(sim, op, p, s, needs, made, tmp)
        c["bwd_mem_out"] += sum(sim.store[m]["bytes"] for m in made)
        for st in {sim.store[t]["first"] for t in tmp}:  # temporaries live in one step each
            c["bwd_mem_tmp"] = max(c["bwd_mem_tmp"], sum(sim.store[t]["bytes"] for t in tmp
                                                         if sim.store[t]["first"] == st))
    # ---- lifetimes of forward storages ----
    for st, last in fwd_last.items():
        sim.touch(st, last)
    for st, last in release_at.items():
        sim.touch(st, last)
    # ---- optimizer step ----
    prev = None
    for w in params_order:
        s = sim.step("applyGradient", -1, f"step {opd[w].name}")
        if config.optimizer == "adam":
            nb = opd[w].nbytes
            sim.new(f"{opd[w].name}:sqrt", "disposable", nb, s, "", "tmp")
            d = sim.new(f"{opd[w].name}:denom", "disposable", nb, s, "", "tmp")
            sim.touch(prev, s)
            prev = d
    end = len(sim.steps) - 1
    # the training loop holds the model's output and the loss (`out = model(x); loss = lossfn(out, y)`)
    if tg.loss_op is not None:
        for v in (g.operations[tg.loss_op].inputs[0], g.operations[tg.loss_op].outputs[0]):
            sim.touch(storage.get(v), end)
    for st in grads_of_weights:
        sim.touch(st, end)
    for st in held:
        sim.touch(st, end)
    return sim, layer


def _alternatives(fn, op, opd, needs) -> tuple:
    """A family's backward size function: (op, operands), or (op, operands, needs) where what backward
    makes depends on which inputs need their gradient (needs[k]: input k requires grad)."""
    return fn(op, opd, needs) if fn.__code__.co_argcount >= 3 else fn(op, opd)


def _cl_2d(shape, st) -> bool:
    """ATen's is_channels_last_strides_2d_s4: strides that suggest channels-last (ambiguous ones, such
    as (N, 1, 1, 1), count as contiguous)."""
    if len(shape) != 4 or st[1] == 0:
        return False
    low = 0
    for d in (1, 3, 2, 0):
        if int(shape[d]) == 0 or st[d] < low or (d == 0 and low == st[1]):
            return False
        low = st[d] * (int(shape[d]) if int(shape[d]) > 1 else 1)
    return True


def _sdpa_masks(g) -> set[int]:
    """Constants the Add of sdpa's decomposition reads, where its recorded call builds the mask itself
    (is_causal) or receives a computed value (an fx node, not a parameter `%p_...`, buffer `%b_...` or
    constant `%c_...`): a value eager computes during the step."""
    masks: set[int] = set()
    for op in g.operations:
        c = parse_call(op.call) if op.call and op.type == SDPA["mask"] else None
        if c and c[1] in SDPA_CALLS:
            arg = c[2][3] if len(c[2]) > 3 and c[1] != "aten._scaled_dot_product_flash_attention_for_cpu" \
                else c[3].get("attn_mask", "None")
            if not arg.startswith(("%p_", "%b_", "%c_")):
                masks.update(i for i in op.inputs if i >= 0 and g.operands[i].is_const)
    return masks


def _folded_values(g, trained, masks) -> set[int]:
    """Constants that are values eager computes during forward (a mask, a position bias, rotary
    tables), folded by the dynamo exporter: an op's recorded call reads the constant by its own name
    (`%expand_2`: an fx node, never a parameter `%p_...` or a buffer `%b_...`), or an sdpa mask
    (`_sdpa_masks`). Those that do not train are forward values (made at their first reader, freed
    after their last), not held the whole step."""
    names: set[str] = set()
    for op in g.operations:
        if op.call:
            names.update(re.findall(r"%(\w+)", op.call.partition(" = ")[2].partition("(")[2]))
    return {o.index for o in g.operands if o.is_const and (o.name in names or o.index in masks)
            and o.index not in trained}


def _memory_format(op, opd, contig, cl, strides=None) -> None:
    """Channels-last tensors: `permute(0, 3, 1, 2)` of contiguous NHWC data (a LayerNorm over channels,
    as ConvNeXt writes it) is a channels-last view; elementwise ops keep the format of their first
    full-size input; `permute(0, 2, 3, 1)` of a channels-last tensor is contiguous again. A channels-last
    tensor is not contiguous (a Reshape copies it). A convolution of one runs oneDNN's channels-last
    kernels (its family's facts read attrs["memory_format"]) and writes a channels-last output; one its
    facts do not cover is refused."""
    x = op.inputs[0] if op.inputs else -1
    if x < 0:
        return
    ys = [v for v in op.outputs if v in contig]
    if op.type == TRANSPOSE and len(opd[x].shape) == 4 and ys:
        perm = tuple(op.attrs.get("perm") or ())
        if perm == (0, 3, 1, 2) and contig.get(x, True):
            cl[ys[0]] = True
        elif perm == (0, 2, 3, 1) and cl.get(x):
            contig[ys[0]] = True
        return
    if op.type in CONVOLUTIONS and (cl.get(x) if strides is None else
                                    x in strides and _cl_2d(opd[x].shape, strides[x])):
        op.attrs["memory_format"] = "channels_last"
        f = facts(op) or {}
        why = f.get("refuse") and f["refuse"](op, opd)
        if why:
            raise UnsupportedOpError(f"torch profile: op {op.label} ({op.type}) convolves a channels-last tensor "
                                     f"(as ConvNeXt's LayerNorm over channels leaves it): {why}")
        for v in ys:
            shape = tuple(opd[v].shape)
            if len(shape) == 4 and strides is not None:
                n, c, h, w = (int(d) for d in shape)
                st = (h * w * c, 1, w * c, c)
                strides[v] = st  # channels-last even where it is contiguous too (1 x 1 pixels)
                cl[v] = True
                contig[v] = _is_contig(shape, st)
        return
    if op.type in FORMAT_KEEPING and ys:
        shape = tuple(opd[ys[0]].shape)
        first = next((v for v in op.inputs if v >= 0 and tuple(opd[v].shape) == shape), None)
        # (strides known: a result with 1 x 1 pixels is contiguous, TensorIterator's (C, 1, 1, 1))
        if first is not None and cl.get(first) and (strides is None or ys[0] in strides):
            for v in ys:
                cl[v] = True
                contig[v] = False


def _deliver(sim, grad, grad_contig, v, st, is_contig, s, opd, made, tmp, label, uses, shared=False):
    """Gradient `st` reaches operand `v`: the first is kept, a later one is added into it and freed."""
    if grad.get(v) is None:
        grad[v] = st
        grad_contig[v] = is_contig
        return
    if shared:
        # the incoming gradient itself cannot be added in place into: the sum is a new tensor
        nb = opd[v].nbytes
        new = sim.new(f"{opd[v].name}:grad_sum", "back-prop", nb, s, label, "grad")
        made.append(new)
        sim.touch(grad[v], s)
        grad[v] = new
        grad_contig[v] = True
        return
    sim.touch(grad[v], s)
    if st in made:
        made.remove(st)
    tmp.append(st)


PROFILE = TorchProfile()
