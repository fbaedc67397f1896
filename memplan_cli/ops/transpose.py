"""Transpose (ONNX Transpose, TFLite TRANSPOSE): Y = X permuted by `perm`.

Training rule (PyTorch derivatives.yaml `permute`: self: permute_backwards(grad, dims)):
- calcDerivative: dX = dY permuted by the inverse of `perm`; reads dY only, keeps nothing.
- Not a view: NumPy/TFLite kernels copy, so Y and dX get their own buffers.
FLOPs: none (data movement only); bytes moved are |X| each way.
"""
from __future__ import annotations

import numpy as np

from memplan_cli.ops.base import Canon, OpDef
from memplan_cli.ops.kernel_util import dy_only_rule, target


def perm_of(op, rank: int) -> tuple[int, ...]:
    p = op.attrs.get("perm")
    return tuple(range(rank))[::-1] if p is None else tuple(int(a) % rank for a in p)


rule = dy_only_rule


def forward(ctx):
    x = ctx.x(0)
    ctx.y()[...] = np.transpose(x, perm_of(ctx.op, x.ndim))


def calc_derivative(ctx):
    dx = target(ctx, 0)
    if dx is None:
        return
    dy = ctx.dy()
    dx[...] = np.transpose(dy, np.argsort(perm_of(ctx.op, dy.ndim)))


def check(op, operands):
    rank = len(operands[op.inputs[0]].shape)
    p = op.attrs.get("perm")
    if p is not None and sorted(int(a) % max(rank, 1) for a in p) != list(range(rank)):
        return f"has a perm {tuple(p)} that is not a permutation of {rank} axes"
    return None


def _batch(op, graph, shapes, batched):
    x = op.inputs[0]
    if x not in batched:
        return [None]
    s = shapes[x]
    return [tuple(s[a] for a in perm_of(op, len(s)))]


OPS = [OpDef("Transpose", rule=rule, kernels={"forward": forward, "calcDerivative": calc_derivative,
                                                    "calcGradient": calc_derivative},
             flops=lambda op, operands: (0, 0), check=check, nondiff_inputs=(1,), batch=_batch, moves_data=True,
             profiles={"torch": {"view": True, "grad": "view", "strided": True}})]  # `--profile torch`: a strided view


def _onnx(node) -> Canon:
    perm = node.attrs.get("perm")
    return Canon("Transpose", {} if perm is None else {"perm": tuple(int(a) for a in perm)})


def _tflite(node) -> Canon | None:
    perm = node.values(1)
    if perm is None:
        return None  # a perm computed at run time: memplan cannot size or run it
    return Canon("Transpose", {"perm": tuple(int(a) for a in perm)}, inputs=node.inputs[:1])


def _perm_from_end(attrs: dict) -> dict | None:
    """A perm with axes counted from the end (TorchScript writes `x.permute(0, -2, -1, 1)` as given):
    ONNX allows only 0 <= axis < rank there, and onnx's shape inference and onnxruntime reject it, but
    it has one meaning, torch.permute's (an axis a < 0 is a + rank). Read so where the result is a
    permutation; anything else stays as written (and is refused)."""
    p = attrs.get("perm")
    if not p or all(a >= 0 for a in p):
        return None
    q = [a + len(p) if -len(p) <= a < 0 else a for a in p]
    return {"perm": q} if sorted(q) == list(range(len(p))) else None


ONNX = {"Transpose": _onnx}
# read before shape inference: an attribute as the exporter meant it where ONNX's rule is narrower
ONNX_FACTS = {"Transpose": {"attrs_as_meant": _perm_from_end}}
TFLITE = {"TRANSPOSE": _tflite}
# its converter declines (an option it does not read): the builtin kept, its shape-deciding constant
# input still read at load (loaders/flatbuffer_loader.py)
TFLITE_FACTS = {"TRANSPOSE": {"shape_const_input": 1}}
