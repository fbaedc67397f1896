"""Core of the greedy planner (the Python reference of `_kernels.c`, used when it is not built): place buffers one by one in a given order, each at the
first-fit or best-fit offset among the already-placed buffers whose lifetimes intersect its own.

Time is compressed to ranks and cut into blocks of `width` ranks. For each block the index keeps
the buffers that start in it and the buffers that touch it; the placed buffers intersecting
buffer i are found among those touching i's first block plus those starting in later blocks up to
its last, so each candidate is seen once.
"""
from __future__ import annotations

import numpy as np



def build_index(f, l, width):
    """CSR lists per block: `start_ptr/start_ids` (buffers whose first rank is in the block) and
    `touch_ptr/touch_ids` (buffers alive somewhere in the block)."""
    n = f.shape[0]
    nb = 1
    for i in range(n):
        b = l[i] // width + 1
        if b > nb:
            nb = b
    scount = np.zeros(nb + 1, np.int64)
    tcount = np.zeros(nb + 1, np.int64)
    for i in range(n):
        scount[f[i] // width + 1] += 1
        for b in range(f[i] // width, l[i] // width + 1):
            tcount[b + 1] += 1
    start_ptr = np.cumsum(scount)
    touch_ptr = np.cumsum(tcount)
    start_ids = np.empty(n, np.int64)
    touch_ids = np.empty(touch_ptr[nb], np.int64)
    sfill = start_ptr[:-1].copy()
    tfill = touch_ptr[:-1].copy()
    for i in range(n):
        b0 = f[i] // width
        start_ids[sfill[b0]] = i
        sfill[b0] += 1
        for b in range(b0, l[i] // width + 1):
            touch_ids[tfill[b]] = i
            tfill[b] += 1
    return start_ptr, start_ids, touch_ptr, touch_ids


def place(sizes, f, l, order, best_fit, width, start_ptr, start_ids, touch_ptr, touch_ids,
          stop_above):
    """Offsets for `order`; returns (offsets, arena). Stops early (arena = -1) once the arena
    exceeds `stop_above` (> 0), since a worse plan than one already known is of no use."""
    n = sizes.shape[0]
    offsets = np.zeros(n, np.int64)
    placed = np.zeros(n, np.bool_)
    cand_off = np.empty(n, np.int64)
    cand_end = np.empty(n, np.int64)
    srt = np.empty(n, np.int64)
    cnt = np.zeros(n + 2, np.int64)
    arena = 0
    for k in range(n):
        i = order[k]
        s = sizes[i]
        fi = f[i]
        li = l[i]
        m = 0
        if s > 0:
            b0 = fi // width
            for p in range(touch_ptr[b0], touch_ptr[b0 + 1]):
                j = touch_ids[p]
                if placed[j] and sizes[j] > 0 and f[j] <= li and l[j] >= fi:
                    cand_off[m] = offsets[j]
                    cand_end[m] = offsets[j] + sizes[j]
                    m += 1
            for b in range(b0 + 1, li // width + 1):
                for p in range(start_ptr[b], start_ptr[b + 1]):
                    j = start_ids[p]
                    if placed[j] and sizes[j] > 0 and f[j] <= li:
                        cand_off[m] = offsets[j]
                        cand_end[m] = offsets[j] + sizes[j]
                        m += 1
        off = 0
        if m > 0:
            off = fit(cand_off, cand_end, m, s, best_fit, srt, cnt)
        offsets[i] = off
        placed[i] = True
        if off + s > arena:
            arena = off + s
            if stop_above > 0 and arena > stop_above:
                return offsets, -1
    return offsets, arena


def fit(cand_off, cand_end, m, s, best_fit, srt, cnt):
    """The first-fit (or best-fit) offset of a block of `s` bytes among the blocks
    [cand_off[k], cand_end[k]) for k < m. Candidates are bucket-sorted by offset (O(m) on
    spread-out offsets; each bucket is insertion-sorted when reached), so first fit can stop early."""
    lo = cand_off[0]
    hi = cand_off[0]
    for k in range(1, m):
        o = cand_off[k]
        if o < lo:
            lo = o
        elif o > hi:
            hi = o
    nb = m // 2 + 1
    scale = nb / (hi - lo + 1.0)
    for b in range(nb + 1):
        cnt[b] = 0
    for k in range(m):
        b = int((cand_off[k] - lo) * scale)
        if b >= nb:
            b = nb - 1
        cnt[b + 1] += 1
    for b in range(nb):
        cnt[b + 1] += cnt[b]
    # scatter; cnt[b] becomes the end of bucket b
    for k in range(m):
        b = int((cand_off[k] - lo) * scale)
        if b >= nb:
            b = nb - 1
        srt[cnt[b]] = k
        cnt[b] += 1
    nxt = 0
    best = -1
    best_gap = 0
    start = 0
    for b in range(nb):
        end = cnt[b]
        if end - start > 24:
            # a crowded bucket (many equal offsets): sort it properly
            sub = srt[start:end].copy()
            srt[start:end] = sub[np.argsort(cand_off[sub], kind="mergesort")]
        # insertion sort of srt[start:end] by offset (a no-op after the sort above)
        for q in range(start + 1, end):
            c = srt[q]
            v = cand_off[c]
            r = q - 1
            while r >= start and cand_off[srt[r]] > v:
                srt[r + 1] = srt[r]
                r -= 1
            srt[r + 1] = c
        for q in range(start, end):
            c = srt[q]
            base = cand_off[c]
            if best_fit:
                if base - nxt >= s and (best < 0 or base - nxt < best_gap):
                    best = nxt
                    best_gap = base - nxt
            elif nxt + s <= base:
                return nxt
            if cand_end[c] > nxt:
                nxt = cand_end[c]
        start = end
    if best_fit and best >= 0:
        return best
    return nxt
