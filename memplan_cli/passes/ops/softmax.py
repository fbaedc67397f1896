"""Softmax: dX = Y ⊙ (dY - Σ(dY ⊙ Y)) along the axis.

Rules: backward keeps Y (not X); calcDerivative reads Y and dY. In place (`policy.inplace`): forward
may write Y over a dead X, backward dX over a dead dY (the row sum is taken before the write).
"""
from __future__ import annotations

from memplan_cli.passes.ops.activations import activation


def softmax(op, ctx):
    return activation(op, ctx)


RULES = {"Softmax": softmax}
