"""Kernel-private buffers: each training kernel's own Allocator (one ALLOC line each, exact bytes).

Rules (onert 0.1.0 `backend/train/ops/*Layer.cc`, measured on the PyPI wheel; each op family's
`profiles["onert"]["kernel_buffers"]`), per op in the order kernels are generated (the whole lowered
graph's topological order), for ops whose backward runs:
- FullyConnected: W^T (|W|), X^T (|X|), dY^T (|Y|), then act (|Y|) if a fused activation.
- Conv2D: W^T (|W|), conv back-prop out (|Y|, never used), dW^T (|W|), then act (|Y|) if fused.
- DepthwiseConv2D: act (|Y|) if fused, filter-dim buffers [T, P], padded filter [B, kh*kw, P],
  filter buffers [T, kh*kw, P], floats; T = threads + 1, P = C_out rounded up to the SIMD width.
  onert takes both from its host; memplan from flags, defaulting to a stated device (DEFAULT_*).
- MaxPool2D: argmax (|Y|), then act (|Y|) if fused. AvgPool2D / Add / Sub / Mul / Div: act if fused.
"""
from __future__ import annotations
from memplan_cli import ops


def kernel_buffers(ir, *, threads: int, simd_width: int) -> list[tuple[str, int, str]]:
    """(name, bytes, op label) in onert's print order: each op family's onert "kernel_buffers"."""
    out = []
    enabled = set(ir.backward_order)
    for k in ir.kernel_order or ir.forward_order:
        op = ir.ops[k]
        if k not in enabled:
            continue
        fn = (ops.profile_facts("onert", op.type) or {}).get("kernel_buffers")
        if fn is not None:
            out += [(name, n, op.label) for name, n in fn(op, ir, threads, simd_width)]
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


