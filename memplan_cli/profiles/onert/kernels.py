"""Kernel-private buffers: each training kernel's own Allocator (one ALLOC line each, exact bytes).

Rules (onert 0.1.0 `backend/train/ops/*Layer.cc`, measured on the PyPI wheel), per op in the order
kernels are generated (the whole lowered graph's topological order), for ops whose backward runs:
- FullyConnected: W^T (|W|), X^T (|X|), dY^T (|Y|), then act (|Y|) if a fused activation.
- Conv2D: W^T (|W|), conv back-prop out (|Y|, never used), dW^T (|W|), then act (|Y|) if fused.
- DepthwiseConv2D: act (|Y|) if fused, filter-dim buffers [T, P], padded filter [B, kh*kw, P],
  filter buffers [T, kh*kw, P], floats; T = threads + 1, P = C_out rounded up to the SIMD width.
  onert takes both from its host; memplan from flags, defaulting to a stated device (DEFAULT_*).
- MaxPool2D: argmax (|Y|), then act (|Y|) if fused. AvgPool2D / Add / Sub / Mul / Div: act if fused.
"""
from __future__ import annotations



def _round_up(n, m):
    return (n + m - 1) // m * m


def kernel_buffers(ir, *, threads: int, simd_width: int) -> list[tuple[str, int, str]]:
    """(name, bytes, op label) in onert's print order."""
    out = []
    enabled = set(ir.backward_order)
    nb = lambda i: ir.operands[i].nbytes  # noqa: E731
    for k in ir.kernel_order or ir.forward_order:
        op = ir.ops[k]
        if k not in enabled:
            continue
        t, lab = op.type, op.label
        y = op.outputs[0]
        act = op.act != "NONE"
        if t == "FullyConnected":
            out += [("W^T", nb(op.inputs[1]), lab), ("X^T", nb(op.inputs[0]), lab), ("dY^T", nb(y), lab)]
            if act:
                out.append(("act dY", nb(y), lab))
        elif t == "Conv2D":
            out += [("W^T", nb(op.inputs[1]), lab), ("conv dY", nb(y), lab), ("dW^T", nb(op.inputs[1]), lab)]
            if act:
                out.append(("act dY", nb(y), lab))
        elif t == "DepthwiseConv2D":
            if act:
                out.append(("act dY", nb(y), lab))
            wshape = ir.operands[op.inputs[1]].shape
            kh, kw, c_out = wshape[1], wshape[2], wshape[3]
            batch = ir.operands[op.inputs[0]].shape[0]
            p = _round_up(c_out, simd_width)
            tt = threads + 1
            out += [("filter dim buffers", tt * p * 4, lab),
                    ("padded filter", batch * kh * kw * p * 4, lab),
                    ("filter buffers", tt * kh * kw * p * 4, lab)]
        elif t == "MaxPool2D":
            out.append(("argmax", nb(y), lab))
            if act:
                out.append(("act dY", nb(y), lab))
        elif t in ("AvgPool2D", "Add", "Sub", "Mul", "Div"):
            if act:
                out.append(("act dY", nb(y), lab))
    return out


# The device the defaults describe. onert sizes DepthwiseConv2D's buffers by its host
# (`std::thread::hardware_concurrency()` and Eigen's packet size); memplan never reads its own host,
# so the same command gives the same figures on any machine. Flags override both.
DEFAULT_DEVICE = "a 4-core CPU with 128-bit SIMD (SSE or NEON, 4 floats per packet)"
DEFAULT_THREADS = 4
# measured: onert 0.1.0's x86-64 wheel packs 4 floats even on AVX hosts; NEON packs 4 too
DEFAULT_SIMD_WIDTH = 4


def default_threads() -> int:
    """onert's thread count on DEFAULT_DEVICE (never this machine's: results must not depend on it)."""
    return DEFAULT_THREADS


def default_simd_width() -> int:
    """Floats per SIMD packet on DEFAULT_DEVICE."""
    return DEFAULT_SIMD_WIDTH


