"""The lower bound of any offset plan: the most bytes live at one step.

Lifetimes are inclusive: buffer i is live at every step t with firsts[i] <= t <= lasts[i]. No plan
can place the buffers live at step t in fewer bytes than the sum of their sizes, so
`lower_bound = max_t live(t)` (XLA's NoFragmentationStatsHeap figure).
"""
from __future__ import annotations

from typing import Sequence


def live_profile(sizes: Sequence[int], firsts: Sequence[int], lasts: Sequence[int]
                 ) -> tuple[list[int], list[int]]:
    """Bytes live per step, as `(steps, live)`: `live[k]` is the number of bytes live at step
    `steps[k]`, for every step at which some buffer starts (the live total only changes there
    upward). Steps with nothing starting are omitted; an empty input gives two empty lists.
    Plain Python (one sort of the events): the onert path never imports NumPy."""
    if not sizes:
        return [], []
    delta: dict[int, int] = {}
    for s, f, l in zip(sizes, firsts, lasts):
        delta[f] = delta.get(f, 0) + s
        delta[l + 1] = delta.get(l + 1, 0) - s
    starts = set(firsts)
    steps, live, cur = [], [], 0
    for t in sorted(delta):
        cur += delta[t]
        if t in starts:
            steps.append(t)
            live.append(cur)
    return steps, live


def lower_bound(sizes: Sequence[int], firsts: Sequence[int], lasts: Sequence[int]) -> int:
    """Max over steps of the bytes live at that step (0 for no buffers)."""
    _, live = live_profile(sizes, firsts, lasts)
    return max(live) if live else 0
