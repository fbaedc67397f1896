"""DFT (ONNX DFT, opsets 17 and 20): a discrete Fourier transform along one signal axis; the last
axis holds a real signal (size 1) or a complex one (size 2: real, imaginary). torch.fft's transforms
as the dynamo exporter writes them (`torch.fft.fftn(x).real`: a real input concatenated with zeros,
one DFT per transformed axis, the real part gathered; transformers' FNet mixes tokens that way).

Canonical form: `DFT(X) -> Y` with attrs `axis` (a signal axis, counted from 0), `inverse`,
`onesided` and `n` (the transform length: `dft_length`, or the axis's size). The axis (opset 20's
input, opset 17's attribute) and `dft_length` must be constants. Inverse with onesided is irfft
(n // 2 + 1 complex bins in, n real values out; `dft_length` required), as the dynamo exporter
writes `torch.fft.irfft` and onnx's shape inference reads it.
Training rule: the transform is linear, so dX is its adjoint applied to dY read as complex numbers:
a onesided result's gradient padded with zeros to n, then n * ifft (forward) or fft / n (inverse),
then cut or zero-padded back to the input's length (the adjoint of dft_length's pad or cut), its real
part alone for a real input; irfft's is rfft(dY) / n with the conjugate pairs' bins doubled (PyTorch's
fft_c2r_backward). Reads dY only, keeps nothing (as PyTorch's derivatives.yaml `_fft_c2c`:
self: _fft_c2c(grad, dim, normalization, !forward)). A parameter input trains through the same map.
FLOPs: 5 n log2 n per complex transform of length n (the usual radix-2 count), forward and backward.
`--profile torch` (derivatives.yaml `_fft_c2c`, `_fft_r2c`, `_fft_c2r`; MKL's `_exec_fft`, measured on
torch 2.14.1): a real input's transform (`_fft_r2c`) saves its input, a complex one nothing; backward
makes dX (a real input's: the real part of a complex tensor, holding all of it); the kernel copies its
input (forward) and the incoming gradient (backward) where the untransformed axes do not fold into
one. Named as estimated: the exporter's one DFT per axis against eager's one call over all of them.
"""
from __future__ import annotations

import math

import numpy as np

from memplan_cli.ops._torch import parse_call
from memplan_cli.ops.base import Canon, OpDef
from memplan_cli.ops.kernel_util import dy_only_rule, target

rule = dy_only_rule
DFT_TYPE = "DFT"


def _complex(a) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    return a[..., 0] + 1j * a[..., 1] if a.shape[-1] == 2 else a[..., 0].astype(np.complex128)


def _fit(z: np.ndarray, ax: int, size: int) -> np.ndarray:
    """`z` cut or zero-padded to `size` along `ax`."""
    have = z.shape[ax]
    if have >= size:
        return np.take(z, np.arange(size), axis=ax)
    pad = [(0, 0)] * z.ndim
    pad[ax] = (0, size - have)
    return np.pad(z, pad)


def _store(out, z: np.ndarray) -> None:
    if out.shape[-1] == 2:
        out[...] = np.stack([z.real, z.imag], axis=-1)
    else:
        out[...] = z.real[..., None]


def forward(ctx):
    a = ctx.attrs
    ax, n = int(a["axis"]), int(a["n"])
    if a["inverse"] and a["onesided"]:  # torch.fft.irfft: n // 2 + 1 bins in, n real values out
        _store(ctx.y(), np.fft.irfft(_complex(ctx.x(0)), n=n, axis=ax).astype(np.complex128))
        return
    z = _fit(_complex(ctx.x(0)), ax, n)
    y = np.fft.ifft(z, axis=ax) if a["inverse"] else np.fft.fft(z, axis=ax)
    if a["onesided"]:
        y = np.take(y, np.arange(n // 2 + 1), axis=ax)
    _store(ctx.y(), y)


def calc_derivative(ctx):
    out = target(ctx, 0)
    if out is None:
        return
    a = ctx.attrs
    ax, n = int(a["axis"]), int(a["n"])
    if a["inverse"] and a["onesided"]:
        # irfft's adjoint (as PyTorch's fft_c2r_backward): rfft(dY) / n, the bins that stand for two
        # (a conjugate pair) doubled; the input's surplus bins (past n // 2 + 1) get none
        g = np.fft.rfft(np.asarray(ctx.dy(), dtype=np.float64)[..., 0], axis=ax) / n
        pairs = n - (n // 2 + 1)
        idx = [slice(None)] * g.ndim
        idx[ax] = slice(1, 1 + pairs)
        g[tuple(idx)] *= 2
        _store(out, _fit(g, ax, out.shape[ax]))
        return
    g = _fit(_complex(ctx.dy()), ax, n)  # a onesided result's gradient padded with zeros to n
    # the adjoint of fft is the unnormalised inverse (n * ifft); of ifft (fft / n), fft / n
    g = np.fft.fft(g, axis=ax) / n if a["inverse"] else np.fft.ifft(g, axis=ax) * n
    _store(out, _fit(g, ax, out.shape[ax]))


def _transforms(op, operands) -> tuple[int, int]:
    ys = operands[op.outputs[0]].shape
    ax = int(op.attrs["axis"])
    count = 1
    for k, d in enumerate(ys[:-1]):
        if k != ax:
            count *= int(d)
    return count, int(op.attrs["n"])


def flops(op, operands):
    count, n = _transforms(op, operands)
    f = count * int(round(5 * n * math.log2(n))) if n > 1 else 0
    return f, f


def check(op, operands):
    a = op.attrs
    if a.get("unknown"):
        return f"has its {a['unknown']} computed at run time"
    xs = operands[op.inputs[0]].shape
    if len(xs) < 2 or xs[-1] not in (1, 2):
        return f"transforms a tensor of shape {list(xs)} (the last axis must hold 1 or 2 values)"
    ax = int(a["axis"])
    if not 0 <= ax < len(xs) - 1:
        return f"has axis {ax} outside the signal axes of {list(xs)}"
    if a["inverse"] and a["onesided"] and (xs[-1] != 2 or not a.get("length_given")):
        return "is an inverse onesided transform of a real input or without dft_length"
    if a["onesided"] and not a["inverse"] and xs[-1] == 2:  # ONNX's onesided result is of a real signal only
        return "is a onesided transform of a complex input"
    if a["n"] < 1:
        return f"has dft_length {a['n']}"
    if ax == 0 and (a["onesided"] or a["n"] != xs[0]):
        return "changes the length of axis 0 (the batch axis)"
    return None


def _real_input_grad(op, operands, k):
    """A real input's gradient (fft_r2c_backward: at::real(_fft_c2c(grad, ...))) is the real part of a
    complex tensor of the transform's length: it holds all of that tensor. A dft_length shorter than
    the input cuts it first (a slice, whose backward makes the input's gradient anew): its own bytes."""
    x = operands[op.inputs[0]]
    ax, n = int(op.attrs["axis"]), int(op.attrs["n"])
    if k != 0 or x.shape[-1] != 1 or n < int(x.shape[ax]):
        return None
    return 2 * x.nbytes // int(x.shape[ax]) * n


FFT_CALLS = ("aten._fft_c2c", "aten._fft_r2c", "aten._fft_c2r")


def fft_dims(op, rank: int) -> list[int]:
    """The axes eager's one call transforms: the recorded call's dim list (the dynamo exporter writes
    one DFT per axis of `aten._fft_c2c(x, [1, 2], ...)`, each recording that call), else the op's axis."""
    c = parse_call(getattr(op, "call", "") or "")
    if c and c[1] in FFT_CALLS and len(c[2]) > 1:
        try:
            dims = [int(t) % rank for t in c[2][1].strip("[]").split(",") if t.strip()]
        except ValueError:
            dims = []
        if dims:
            return dims
    return [int(op.attrs["axis"])]


def batch_copied(op, operands) -> bool:
    """Whether ATen's CPU FFT (MKL's `_exec_fft`, SpectralOps.cpp) copies its input: it permutes the
    untransformed (batch) axes first, in stride order, and reshapes them into one, a copy where a
    transformed axis of size > 1 lies between two batch axes of size > 1 (a contiguous input)."""
    shape = [int(d) for d in operands[op.inputs[0]].shape[:-1]]
    dims = set(fft_dims(op, len(shape)))
    batch = [k for k, d in enumerate(shape) if k not in dims and d > 1]
    return any(shape[m] > 1 for a, b in zip(batch, batch[1:]) for m in range(a + 1, b))


# derivatives.yaml: _fft_r2c / _fft_c2c / _fft_c2r save no tensor (self's sizes at most); backward makes
# dX (`fft_r2c_backward`: at::real(_fft_c2c(grad, ...)) for a real input). The kernel's batch copy: of
# the input in forward, of the incoming gradient in backward (a c2c of it), freed in the op (measured,
# torch 2.14.1: `torch.fft.fft(x, dim=1)` of (4, 16, 64)). Estimated: the exporter's one DFT per axis
# against eager's one call over all of them (the DFTs' intermediate is no eager tensor)
def _torch(op):
    # _fft_r2c's formula reads `self.sym_size(dim.back())`, which autograd's codegen saves as `self`
    # itself (FftR2CBackward0._saved_self, torch 2.14.1); _fft_c2c and _fft_c2r save no tensor
    saves = (("in0", "g0"),) if op.attrs.get("real") else ()
    f = {"saves": saves, "grad_bytes": _real_input_grad, "estimated": lambda op, operands: True}

    f["fwd_tmp"] = lambda op, operands: ("in0",) if batch_copied(op, operands) else ()
    f["bwd_tmp"] = _bwd_tmp
    return f


def _bwd_tmp(op, operands):
    """The incoming gradient copied where the axes do not fold; a onesided transform of a real input
    first pads it to the full length (fft_r2c_backward: new_zeros, then a c2c of that)."""
    copied = batch_copied(op, operands)
    x = operands[op.inputs[0]]
    if op.attrs.get("real") and op.attrs["onesided"] and not op.attrs["inverse"]:
        ax = int(op.attrs["axis"])
        full = 2 * x.nbytes // int(x.shape[ax]) * int(op.attrs["n"])
        return ((full, full),) if copied else ((full,),)
    return (("out0",),) if copied else ()
OPS = [OpDef(DFT_TYPE, rule=rule, kernels={"forward": forward, "calcDerivative": calc_derivative,
                                        "calcGradient": calc_derivative},
             flops=flops, check=check, batch="keep", profiles={"torch": _torch})]


def _onnx(node) -> Canon:
    rank = len(node.shape(0) or ())
    attrs = {"inverse": int(node.attrs.get("inverse", 0)), "onesided": int(node.attrs.get("onesided", 0)),
             "real": int(bool(rank) and node.shape(0)[-1] == 1)}
    if node.opset >= 20:
        axis = -2
        if node.input(2) is not None:
            v = node.values(2)
            if v is None:
                return Canon("DFT", {**attrs, "unknown": "axis", "axis": 0, "n": 1}, inputs=node.inputs[:1])
            axis = int(np.asarray(v).reshape(-1)[0])
    else:
        axis = int(node.attrs.get("axis", 1))
    axis = axis + rank if axis < 0 else axis
    n = int(node.shape(0)[axis]) if 0 <= axis < rank - 1 else 1
    if node.input(1) is not None:
        v = node.values(1)
        if v is None:
            return Canon("DFT", {**attrs, "unknown": "dft_length", "axis": axis, "n": n}, inputs=node.inputs[:1])
        n = int(np.asarray(v).reshape(-1)[0])
        attrs["length_given"] = 1
    return Canon("DFT", {**attrs, "axis": axis, "n": n}, inputs=node.inputs[:1])


ONNX = {"DFT": _onnx}
