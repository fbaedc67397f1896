"""Chen et al. 2016 ("Training Deep Nets with Sublinear Memory Cost", arXiv:1604.06174): split the
n-layer network into sqrt(n) segments, keep only each segment's input through the forward pass and
recompute the rest of the segment before its backward: about one extra forward pass.

Here the layers are the remat candidates in forward order (`RematProblem.candidates`): with
L = ceil(sqrt(n)), candidate i is kept when i % L == 0 and dropped otherwise. `segments(n, L)` gives
the same scheme for any segment length (the solver starts from every L).
"""
from __future__ import annotations

import math


def segments(candidates: list[int], length: int) -> frozenset:
    """Drop every candidate but the first of each run of `length` (length 1: drop nothing)."""
    return frozenset(c for i, c in enumerate(candidates) if i % max(length, 1))


def sqrt_n(candidates: list[int]) -> frozenset:
    """Chen's plan: segments of ceil(sqrt(n)) candidates."""
    n = len(candidates)
    return segments(candidates, math.ceil(math.sqrt(n)) if n else 1)
