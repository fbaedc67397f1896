"""The torch facts of an eager op: its family's (`OpDef.profiles["torch"]` in memplan_cli/ops), those
of the eager ops the exporters split (`FACTS`), and the general rule for an op no family covers."""
from __future__ import annotations

from memplan_cli import ops
from memplan_cli.ops import matmul
from memplan_cli.profiles.torch.strides import elements

# Facts of the eager ops the exporters split (read back by `fuse`), in the registry's format (an op
# family declares its own as `OpDef.profiles["torch"]` in memplan_cli/ops):
# - "saves": ((what, when), ...): what in "in0", "in1", "out0"; when "any" (the op records a node),
#   "g0" / "g1" (input 0 / 1 requires grad);
# - "aux": ((name, size, dtype), ...) saved tensors the op makes: size "in0" / "out0" (elements of
#   that operand), "channels" (dim 1 of input 0), "rows" (input 0's elements over its last dim),
#   "groups" (input 0's samples times attrs["groups"]); dtype "in0": input 0's (a bfloat16 step's);
# - "view": output 0 shares input 0's memory; "grad": "new" (each input's gradient allocated, the
#   default), "pass" (a same-shape input gets the incoming gradient itself), "view" (a view of it),
#   "expand" (the incoming gradient expanded back over reduced axes, a stride-0 view: sum's backward;
#   a trained weight's is still made);
# - "strided": the view's layout is not contiguous (a transpose); "view_needs_contiguous": a view of
#   a contiguous input only, a copy otherwise (reshape), and so is its gradient; "view_if": fn(op) ->
#   output 0 is input 0 itself (dropout with p = 0); "grad_shared": input positions whose gradient is
#   the incoming one itself when their shapes agree (add, sub's first); "contiguous_inputs": the
#   first N inputs go to BLAS contiguous when batched (a copy of a non-contiguous view);
# - "fwd_tmp": temporary tensors the forward makes and frees in the op, all alive with its output
#   (a custom Function's intermediates): each bytes, or a size "in0" / "out0" / "mask:in0" as below;
#   or a function (op, operands) -> those sizes;
# - "bwd_tmp": temporary tensors of backward, "fwd_scratch" / "bwd_scratch": allocator scratch that is
#   no tensor (MemTracker misses it); each a tuple of alternatives (the largest counts), each a tuple
#   of sizes "in0" / "in1" / "out0" ("in0?g0" only when input 0 requires grad, "in1?n1" only when not) or bytes; or a
#   function (op, operands) -> that tuple;
# - "dw_inputs": with "bwd_scratch_dw", the input positions whose gradient the second phase makes
#   (a convolution's weight and bias), whether a parameter or a tensor computed each step;
# - "contiguous_grad": the backward copies a non-contiguous incoming gradient contiguous first (a bool,
#   or a function (op, operands) -> bool); the copy lives through its backward;
# - "grad_reorders": fn(op, operands) -> how many output-sized buffers the backward makes, through
#   its kernel, for an incoming gradient that is not contiguous where input 0 is (oneDNN's eltwise
#   backward: exact GELU's);
# - "grad_reshaped": fn(op, operands) -> (axes, shape) or None: the op's kernel ran on a reshape and
#   viewed its result back (a linear over more than two dims: rows; einsum: bmm's 3 dims), so its
#   backward permutes the incoming gradient by `axes` and reshapes it to `shape`: a copy, through
#   its backward, where the gradient's known strides allow no view;
# - "bmm_operands": fn(op, operands, strides, view_strides) -> bytes per input: a new tensor the
#   kernel saves in place of that input (einsum's permuted copy or a sum), 0 for a view of it;
# - "out_strides": fn(op, operands) -> the new output's strides (einsum's permuted bmm result);
# - "only_for_outputs": {input position: output positions}: that input makes only those outputs, so
#   where none of them is read eager never computes it (rewrites.unread_statistics);
# - "none_fills": input positions where a constant that is no parameter (`Operand.computed`) is the
#   exporter's fill for an argument eager passes as None (batch_norm's weight and bias): not held;
# - "refuse": a function (op, operands) -> why the facts do not cover this op here, or None;
# - "estimated_written": why the facts cover the op only approximately where its result (through
#   one-input ops) is then written in place (refusal.py): a matrix a loop solves row by row (tril
#   before forward substitution); the op and the loop's ops are named as estimated, with this reason;
# - "expanded_inputs": fn(op, operands) -> per input, the shape the kernel expands it to over
#   broadcast batch dims (matmul's bmm), or None: its copy is that size, and its gradient is made at
#   that size and then summed to the input's shape, after the op's saved tensors are freed;
# - "grad_bytes": fn(op, operands, k) -> bytes of the tensor input k's new gradient is a view of (the
#   real part of a complex gradient: a real input's Fourier transform), or None: its own bytes;
# - "estimated": a function (op, operands) -> True where the facts count the op only approximately
#   (the report names it as estimated, as an op the general rule covers); "estimated_dx": the same for
#   the input's gradient, where that phase runs.
# - "cache_sized": a function (op, operands) -> bytes of the op's scratch a kernel's cache model sizes
#   from the CPU's caches (oneDNN's gemm convolution), 0 for none: exact on the CPU the facts assume,
#   which the report names with those ops (`figures.torch.cpu`, `figures.torch.coverage.cache_sized`).


def flash_blocks(op, operands) -> tuple:
    """The CPU flash kernel's block sizes (ATen FlashAttentionKernel.cpp): q 256 / 64 / 32 rows for a
    query length of 768+ / 192+ / less, kv 512 columns, each capped at the length."""
    sq, skv, d = op.attrs["q_len"], op.attrs["kv_len"], op.attrs["head_dim"]
    qs = min(sq, 256 if sq >= 768 else 64 if sq >= 192 else 32)
    return qs, min(skv, 512), d


def flash_fwd(op, operands) -> tuple:
    qs, kvs, d = flash_blocks(op, operands)  # per thread: scores, row max, row sum, an output block
    return ((4 * (qs * kvs + 2 * qs + qs * d),),)


def flash_bwd(op, operands) -> tuple:
    qs, kvs, _ = flash_blocks(op, operands)  # per thread: scores and their gradient; the row sums
    return ((4 * (2 * qs * kvs) + 4 * qs,),)


FACTS = {
    "SiLU": {"saves": (("in0", "any"),)},  # silu_backward(grad, self)
    # _scaled_dot_product_flash_attention_for_cpu (torch 2.14, measured; scratch for one thread): saves q,
    # k, v (k / v with their own heads: grouped-query attention is not repeated), the output (laid out
    # like q) and a float32 logsumexp per query row; backward makes zeroed gradients of q, k, v
    "SDPA": {"saves": (("in0", "any"), ("in1", "any"), ("in2", "any"), ("out0", "any"), ("in3", "any")),
             "aux": (("logsumexp", "rows", "float32"),), "layout": "in0",
             "fwd_scratch": flash_fwd, "bwd_scratch": flash_bwd},
    # addmm: mat1 when the weight needs its gradient; in bfloat16, oneDNN's matmul scratchpads; over
    # more than two dims, the incoming gradient reshaped to rows (matmul.py)
    "Linear": {"saves": (("in0", "g1"),), "fwd_scratch": matmul.linear_bf16_fwd,
               "bwd_scratch": matmul.linear_bf16_bwd, "grad_reshaped": matmul.over_rows},
    # a copy the dynamo export dropped (`lost_clones`): a new contiguous tensor, saves nothing; its
    # backward hands the incoming gradient on (CloneBackward0)
    "Clone": {"grad": "pass"},
    # _safe_softmax (sdpa's math path, measured): keeps its result; forward makes a bool isneginf mask
    # of its input and a bool per row (both freed in the op)
    "SafeSoftmax": {"saves": (("out0", "any"),), "fwd_scratch": lambda op, opd: ((
        elements(opd[op.inputs[0]].shape) + elements(opd[op.inputs[0]].shape[:-1]),),)},
    # select (`selects`): a view; select_backward makes a zeroed gradient of the input's size (measured)
    "Select": {"view": True},
    # unbind (rewrites.unbinds): each piece a select of the input, a view; UnbindBackward0 stacks the
    # pieces' gradients into one of the input's size, a piece that got none standing in as a 0-d zero
    # expanded (measured: 4 B, not counted), not split's zeros of the piece's size
    "Unbind": {"view": "all"},
}


# The general rule, for an op whose family has no torch facts: what most of derivatives.yaml's formulas
# do (the backward is a function of the op's inputs: each is saved) and what every backward does (each
# input that needs one gets a new gradient); no kernel temporaries. Such an op is estimated, not
# measured: the report names it and its bytes at the peak (`figures.torch.coverage`).
GENERAL = {"saves": (("in0", "any"), ("in1", "any"), ("in2", "any"), ("in3", "any"))}
ESTIMATED = "torch_estimated"  # attrs key marking an op the general rule covers
ESTIMATED_WHY = "torch_estimated_why"  # attrs key: why, where a family's facts say (the report names it)
# facts of an op made of other ops, computed from theirs: functions.py registers the custom autograd
# Function here (it reads `facts` of its inner ops, so `facts` cannot import it)
COMPOSED: dict = {}


def fused_activations() -> dict:
    """Fused activation -> the eager op that computes it (the registry's standalone activation op)."""
    return ops.fused_activation_ops()


def facts(op) -> dict | None:
    """The torch facts of `op` (an IR op or an EagerOp): its family's (a dict, or a function of the op),
    {} for an op that never carries a gradient (`OpDef.no_grad`: eager records no node), else None."""
    d = ops.get(op.type)
    own = (d.profiles or {}).get("torch") if d is not None else None
    f = own(op) if callable(own) else own
    if f is not None:
        return f
    if d is not None and d.no_grad:
        return {}
    if op.type in COMPOSED:
        return COMPOSED[op.type](op)
    if own is None:  # a family's function that gave none here leaves the op to the general rule
        f = FACTS[op.type] if op.type in FACTS else ops.profile_facts("torch", op.type)
    if f is None and (getattr(op, "attrs", None) or {}).get(ESTIMATED):
        return GENERAL
    return f



def no_grad(op_type: str) -> bool:
    d = ops.get(op_type)
    if d is not None:
        return bool(d.no_grad)
    return bool((ops.profile_facts("torch", op_type) or {}).get("draws"))

