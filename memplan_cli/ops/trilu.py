"""Trilu (ONNX Trilu): keeps the lower (`upper` = 0) or upper triangle of the last two axes, from
diagonal `k` on, and zeroes the rest (torch.tril / torch.triu; linear attention's causal masks on
activations, as the dynamo exporter writes them).

Canonical form: `Trilu(X) -> Y` with attrs `upper` (0 or 1) and `k`; `k` is read at load (a `k`
computed at run time is refused).
Training rule (PyTorch derivatives.yaml `tril` / `triu`: self: grad.tril(diagonal) /
grad.triu(diagonal)): calcDerivative applies the same mask to dY, reads dY only, keeps nothing.
A parameter input trains through the same mask. Integer Trilu carries no gradient.
FLOPs: none (a masked copy, forward and backward).
`--profile torch` (derivatives.yaml `tril` / `triu`: self: grad.tril(diagonal) / grad.triu(diagonal)):
saves nothing; its backward makes dX, the masked incoming gradient (measured, torch 2.14.1: causal
masks of (4, 4, 16, 16) scores, `fam_trilu`, to 4 B under both exporters). Where its result is
solved for by forward substitution, rows written in place, the file's loop is replayed as it is and
named as estimated, with the loop's ops (transformers' chunked gated delta rule writes that loop only
under export, in place of `torch.linalg.solve_triangular`, so the file does not say which ran; the two
differ by the row copies the loop saves). Under a TorchScript export the loop is what eager ran (its
exporter has no solve_triangular: eager's branch is the one traced); under dynamo the loop and the
`+ eye` and matmuls after it are replayed as eager's two `linalg_solve_triangular` calls
(`SOLVE_TYPE`, facts below), the loop's own figure given beside.
"""
from __future__ import annotations

import numpy as np

from memplan_cli.ops.base import Canon, OpDef
from memplan_cli.ops.kernel_util import dy_only_rule, target

rule = dy_only_rule


def trilu(x, upper: bool, k: int) -> np.ndarray:
    return np.triu(x, k) if upper else np.tril(x, k)


def forward(ctx):
    y = ctx.y()
    y[...] = trilu(ctx.x(0), bool(ctx.attrs["upper"]), int(ctx.attrs["k"])).astype(y.dtype)


def calc_derivative(ctx):
    out = target(ctx, 0)
    if out is not None:
        out[...] = trilu(ctx.dy(), bool(ctx.attrs["upper"]), int(ctx.attrs["k"]))


def check(op, operands):
    if op.attrs.get("k_unknown"):
        return "has a diagonal offset k computed at run time"
    if len(operands[op.inputs[0]].shape) < 2:
        return "masks an input of rank under 2 (ONNX's Trilu needs a matrix)"
    return None


# a masked copy that saves nothing (its backward needs the diagonal only); `estimated_written`: where
# its result, through one-input ops, is then written in place row by row, it and the loop are named
TORCH = {"estimated_written": "a triangular solve by forward substitution (rows written in place): eager "
                              "may run torch.linalg.solve_triangular instead, saving the matrix and its "
                              "result, not each row's copies (the file cannot tell)"}


# eager's `torch.linalg.solve_triangular(A, B, upper=False, unitriangular=True)`, which the dynamo file
# writes as the loop (profiles/torch/replay.py `as_solves`): a torch-profile op, no file's op
SOLVE_TYPE = "SolveTriangular"


def _solve_bwd_tmp(op, operands, needs) -> tuple:
    """linalg_solve_triangular_backward (FunctionsManual.cpp; measured, torch 2.14.1): G_B =
    solve_triangular(A^H, grad) first, then, for A's gradient, -(G_B @ X^H) (the product and its
    negation alive at once) masked by tril(-1) into G_A, the negation alive with it. Beyond the
    gradients made: one A-sized temporary, and G_B itself where B needs none."""
    a, b = (operands[v].nbytes for v in op.inputs[:2])
    if not needs[0]:
        return ()
    return ((a + (0 if needs[1] else b),),)


# derivatives.yaml `linalg_solve_triangular`: self, B: linalg_solve_triangular_backward(grad, self,
# result, ...): saves the matrix and the result; the forward allocates the result only (measured)
def _solve_out_strides(op, operands) -> tuple:
    """The result is laid out for LAPACK: each matrix column-major (measured: strides (m*n, 1, m) for
    (b, m, n)), the batch dims contiguous over the matrices."""
    shape = tuple(operands[op.outputs[0]].shape)
    m, n = shape[-2:]
    batch, step = [], m * n
    for d in reversed(shape[:-2]):
        batch.append(step)
        step *= d
    return tuple(reversed(batch)) + (1, m)


SOLVE_FACTS = {"saves": (("in0", "any"), ("out0", "any")), "bwd_tmp": _solve_bwd_tmp,
               "out_strides": _solve_out_strides}
PROFILES = {"torch": {SOLVE_TYPE: SOLVE_FACTS}}

OPS = [OpDef("Trilu", rule=rule, kernels={"forward": forward, "calcDerivative": calc_derivative,
                                          "calcGradient": calc_derivative},
             flops=lambda op, operands: (0, 0), check=check, batch="keep", profiles={"torch": TORCH})]


def _onnx(node) -> Canon:
    upper = int(node.attrs.get("upper", 1))
    if len(node.inputs) > 1 and node.inputs[1]:
        k = node.values(1)
        if k is None:
            return Canon("Trilu", {"upper": upper, "k_unknown": True}, inputs=node.inputs[:1])
        return Canon("Trilu", {"upper": upper, "k": int(np.asarray(k).reshape(-1)[0])}, inputs=node.inputs[:1])
    return Canon("Trilu", {"upper": upper, "k": 0}, inputs=node.inputs[:1])


ONNX = {"Trilu": _onnx}
