"""The lower bound of any offset plan: the most bytes live at one step.

Lifetimes are inclusive: buffer i is live at every step t with firsts[i] <= t <= lasts[i]. No plan
can place the buffers live at step t in fewer bytes than the sum of their sizes, so
`lower_bound = max_t live(t)` (XLA's NoFragmentationStatsHeap figure).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np


def live_profile(sizes: Sequence[int], firsts: Sequence[int], lasts: Sequence[int]
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Bytes live per step, as `(steps, live)`: `live[k]` is the number of bytes live at step
    `steps[k]`, for every step at which some buffer starts (the live total only changes there
    upward). Steps with nothing starting are omitted; an empty input gives two empty arrays.
    """
    s = np.asarray(sizes, dtype=np.int64)
    f = np.asarray(firsts, dtype=np.int64)
    l = np.asarray(lasts, dtype=np.int64)
    if s.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    steps = np.unique(f)
    # bytes started at or before t minus bytes ended strictly before t
    of = np.argsort(f, kind="stable")
    ol = np.argsort(l, kind="stable")
    cum_start = np.concatenate([[0], np.cumsum(s[of])])
    cum_end = np.concatenate([[0], np.cumsum(s[ol])])
    started = cum_start[np.searchsorted(f[of], steps, side="right")]
    ended = cum_end[np.searchsorted(l[ol], steps, side="left")]
    return steps, started - ended


def lower_bound(sizes: Sequence[int], firsts: Sequence[int], lasts: Sequence[int]) -> int:
    """Max over steps of the bytes live at that step (0 for no buffers)."""
    _, live = live_profile(sizes, firsts, lasts)
    return int(live.max()) if live.size else 0
