"""Core of the greedy planner (the Python counterpart of `_kernels.c`, used when it is not built):
place buffers one by one in a given order, each at the first-fit or best-fit offset among the
already-placed buffers whose lifetimes intersect its own. `place` and `fit_sorted` work on whole
NumPy arrays per buffer (MobileNetV2 b10 plans within 2 x the C kernel); `fit` is the scalar
statement of the same rule, which `_kernels.c` follows.

Time is compressed to ranks and cut into blocks of `width` ranks. For each block the index keeps
the buffers that start in it and the buffers that touch it; the placed buffers intersecting
buffer i are found among those touching i's first block plus those starting in later blocks up to
its last, so each candidate is seen once.
"""
from __future__ import annotations

import numpy as np



def build_index(f, l, width):
    """CSR lists per block: `start_ptr/start_ids` (buffers whose first rank is in the block) and
    `touch_ptr/touch_ids` (buffers alive somewhere in the block), each list in buffer order."""
    f = np.asarray(f, np.int64)
    l = np.asarray(l, np.int64)
    n = f.shape[0]
    b0, b1 = f // width, l // width
    nb = int(b1.max()) + 1 if n else 1
    start_ptr = np.zeros(nb + 1, np.int64)
    np.cumsum(np.bincount(b0, minlength=nb), out=start_ptr[1:])
    start_ids = np.argsort(b0, kind="stable").astype(np.int64)
    span = b1 - b0 + 1
    ids = np.repeat(np.arange(n, dtype=np.int64), span)
    # block of each (buffer, block) pair: b0 of its buffer plus its position in the buffer's run
    run_start = np.repeat(np.cumsum(span) - span, span)
    blocks = np.repeat(b0, span) + (np.arange(ids.size, dtype=np.int64) - run_start)
    touch_ptr = np.zeros(nb + 1, np.int64)
    np.cumsum(np.bincount(blocks, minlength=nb), out=touch_ptr[1:])
    touch_ids = ids[np.argsort(blocks, kind="stable")]
    return start_ptr, start_ids, touch_ptr, touch_ids


def place(sizes, f, l, order, best_fit, width, start_ptr, start_ids, touch_ptr, touch_ids,
          stop_above):
    """Offsets for `order`; returns (offsets, arena). Stops early (arena = -1) once the arena
    exceeds `stop_above` (> 0), since a worse plan than one already known is of no use. The
    candidates of each buffer are gathered and fitted with NumPy (one buffer at a time)."""
    n = sizes.shape[0]
    offsets = np.zeros(n, np.int64)
    ends = np.zeros(n, np.int64)
    live = np.zeros(n, np.bool_)  # placed, with bytes
    sz, fl, ll = sizes.tolist(), f.tolist(), l.tolist()
    sp, tp = start_ptr.tolist(), touch_ptr.tolist()
    arena = 0
    for i in order.tolist():
        s = sz[i]
        off = 0
        if s > 0:
            fi, li = fl[i], ll[i]
            b0, b1 = fi // width, li // width
            a = touch_ids[tp[b0]:tp[b0 + 1]]
            a = a[live[a]]
            a = a[(f[a] <= li) & (l[a] >= fi)]
            if b1 > b0:
                b = start_ids[sp[b0 + 1]:sp[b1 + 1]]
                b = b[live[b]]
                a = np.concatenate((a, b[f[b] <= li]))
            if a.size:
                off = fit_sorted(offsets[a], ends[a], s, best_fit)
            offsets[i] = off
            ends[i] = off + s
            live[i] = True
        if off + s > arena:
            arena = off + s
            if stop_above > 0 and arena > stop_above:
                return offsets, -1
    return offsets, arena


def fit_sorted(off, end, s, best_fit):
    """`fit` over whole arrays: the gaps between the blocks sorted by offset, the first (or the
    smallest, earliest on ties) that holds `s` bytes. The order among equal offsets does not
    matter: once one of them is passed, the gap before the others is negative."""
    k = np.argsort(off, kind="stable")
    o = off[k]
    reach = np.maximum.accumulate(end[k])
    before = np.empty_like(reach)
    before[0] = 0
    before[1:] = reach[:-1]
    gaps = o - before
    ok = np.flatnonzero(gaps >= s)
    if ok.size == 0:
        return int(reach[-1])
    if best_fit:
        return int(before[ok[np.argmin(gaps[ok])]])
    return int(before[ok[0]])


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
