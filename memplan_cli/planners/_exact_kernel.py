"""Core of the exact planner (the Python reference of `_kernels.c`, used when it is not built): a resumable depth-first search that decides whether the
buffers fit under a capacity `cap` (MiniMalloc's decision procedure, written anew from its
published ideas).

Model. Time is cut into sections (the spans between consecutive lifetime events); buffer c
covers sections a[c]..b[c], and two buffers are live together iff their section ranges meet.
m[c] is the lowest offset where unplaced c can go on top of every placed buffer it meets
(the highest floor over its sections). Placing b puts it at m[b] and raises m[w] of each
unplaced neighbour w to at least m[b] + s[b].

Rules. Buffers are placed one at a time, each at its m, in non-decreasing offset order (ties by
rank). Let S* be a plan under `cap` with the smallest sum of offsets: S* is compact (each
buffer at 0 or on top of one it meets), and placing its buffers in (offset, rank) order is a
path of this search. Each rule keeps S*'s path (else moving one buffer of S* down would lower
the sum), so the search finds a plan whenever one exists:
- monotonic: after a placement at offset o with rank r, b may come next only if m[b] > o, or
  m[b] == o and rank[b] > r;
- dominance: b may be placed only if m[b] < m[c] + s[c] for every other unplaced c (else c
  fits for good in the bytes left empty below b). So a node where some m[c] + s[c] <= o is
  dead, and the candidates are the b with o <= m[b] < min(m[c] + s[c]);
- hatless: if no other unplaced buffer meeting b has m < m[b] + s[b], S* has b at m[b], so the
  candidates after b in (m, rank) order are skipped (a lone candidate is a forced move);
- capacity: max(m[c], o) + s[c] <= cap for every unplaced c;
- sections: the unplaced buffers of a section stack up from at least min(max(m[c], o)) over
  them, so that floor plus their total size must fit under cap;
- decomposition: when the unplaced buffers of the current part fall into groups that never
  meet in time, each group is a problem of its own (given what is placed). Each is solved in
  turn from scratch: offsets from 0 again (the rules hold per group, with the group's own S*)
  and ranks recomputed from the group's remaining section totals (as MiniMalloc does; this
  re-ranking is what solves E, H and I of its benchmark). If one group fails, the node that
  split fails without retrying choices made inside the groups solved before it.
Ranks come from a static preorder (keys `pre`: 0 = largest section total, 1 = lifetime,
2 = area, each descending, then list position); the dynamic order is (m, rank).

State. Everything the search needs lives in the arrays passed in (`new_state`), so a call can
stop after `budget` nodes (PAUSED) and a later call resumes where it stopped: the caller
checks the clock between calls.
"""
from __future__ import annotations

import numpy as np


FOUND = 1
INFEASIBLE = 2
PAUSED = 3

# modes of the search loop
_EXPAND = 0
_NEXT = 1
_FAIL = 2
_COMPLETE = 3

# scalar slots in `sc`
S_D, S_MODE, S_CAND, S_TRAIL, S_CF, S_POOL, S_LABEL, S_NODES = range(8)
N_SCALARS = 8

# columns of the split-frame table `cf`: depth of the node that split, label of the part that
# split, its buffers in pool[PSTART:PEND], first label of its groups, number of groups, group
# being solved, is_root and candidate-pool top of the splitting node (restored on failure)
C_DEPTH, C_PLABEL, C_PSTART, C_PEND, C_FIRST, C_NCHILD, C_CHILD, C_ROOT, C_CAND = range(9)
N_CF = 9

INF = 1 << 62


def new_state(rank, n_sections: int, trail_size: int):
    """Fresh search state for n buffers (every buffer unplaced, at the root node), starting
    from the static ranks `rank` (a copy is kept: splits re-rank their parts)."""
    n = rank.size
    tri = n * (n + 1) // 2 + n + 1
    return (
        rank.astype(np.int64).copy(),    # rank
        np.zeros(n, np.uint8),            # placed
        np.zeros(n, np.int64),            # off
        np.zeros(n, np.int64),            # m
        np.zeros(n, np.int64),            # lab: the part (group of a split) of each buffer
        np.zeros(n + 1, np.int64),        # chosen[d]: buffer placed at depth d
        np.zeros(n + 1, np.int64),        # o_at[d]
        np.full(n + 1, -1, np.int64),     # r_at[d]
        np.zeros(n + 1, np.uint8),        # is_root[d]: node d is the root of a split part
        np.zeros(n + 1, np.int64),        # cstart[d]
        np.zeros(n + 1, np.int64),        # cend[d]
        np.zeros(n + 1, np.int64),        # cpos[d]
        np.zeros(n + 1, np.int64),        # tstart[d]: trail position before depth d's placement
        np.zeros(tri, np.int32),          # cand pool
        np.zeros(max(trail_size, 1), np.int32),   # trail: buffer
        np.zeros(max(trail_size, 1), np.int64),   # trail: its old m
        np.zeros((n + 1, N_CF), np.int64),         # split frames
        np.zeros(tri, np.int32),          # pool of the buffers of each split
        np.zeros(tri, np.int32),          # their ranks before the split
        np.zeros(n, np.int64),            # act (scratch)
        np.zeros(n_sections + 1, np.int64),        # tot (scratch)
        np.zeros(n_sections + 1, np.int64),        # low (scratch)
        np.zeros(n_sections + 1, np.int64),        # cover (scratch)
        np.zeros(N_SCALARS, np.int64),             # sc
    )


def search(s, a, b, adj_ptr, adj, width, area, pre, cap, budget, decompose, rerank,
           rank, placed, off, m, lab, chosen, o_at, r_at, is_root, cstart, cend, cpos, tstart,
           cand, t_idx, t_old, cf, pool, pool_rank, act, tot, low, cover, sc):
    """Run the search for at most `budget` more nodes. Returns FOUND (offsets in `off`),
    INFEASIBLE (no plan fits under cap) or PAUSED (call again to go on). `decompose` and
    `rerank` switch the decomposition and the re-ranking of its groups (both on by default;
    off only to measure them)."""
    n = s.shape[0]
    d = sc[S_D]
    mode = sc[S_MODE]
    ctop = sc[S_CAND]
    ttop = sc[S_TRAIL]
    cft = sc[S_CF]
    ptop = sc[S_POOL]
    nlab = sc[S_LABEL]
    nodes = 0
    status = PAUSED
    while True:
        if mode == _EXPAND:
            if nodes >= budget:
                break
            nodes += 1
            ctx = 0
            if cft > 0:
                ctx = cf[cft - 1, C_FIRST] + cf[cft - 1, C_CHILD]
            o = o_at[d]
            rl = r_at[d]
            cstart[d] = ctop
            cend[d] = ctop
            cpos[d] = ctop
            # the unplaced buffers of this part; capacity and dominance at node level
            na = 0
            m1 = INF
            dead = False
            for c in range(n):
                if placed[c] == 0 and lab[c] == ctx:
                    act[na] = c
                    na += 1
                    lo = m[c] if m[c] > o else o
                    if lo + s[c] > cap:
                        dead = True
                    if m[c] + s[c] < m1:
                        m1 = m[c] + s[c]
            if na == 0:
                mode = _COMPLETE
                continue
            if dead or m1 <= o:
                mode = _FAIL
                continue
            # section inference
            smin = INF
            smax = -1
            for k in range(na):
                c = act[k]
                if a[c] < smin:
                    smin = a[c]
                if b[c] > smax:
                    smax = b[c]
            for t in range(smin, smax + 1):
                tot[t] = 0
                low[t] = INF
                cover[t] = 0
            for k in range(na):
                c = act[k]
                lo = m[c] if m[c] > o else o
                for t in range(a[c], b[c] + 1):
                    tot[t] += s[c]
                    if lo < low[t]:
                        low[t] = lo
                # edges a[c]..b[c]-1 are crossed by c (difference array)
                cover[a[c]] += 1
                cover[b[c]] -= 1
            for t in range(smin, smax + 1):
                if tot[t] > 0 and low[t] + tot[t] > cap:
                    dead = True
                    break
            if dead:
                mode = _FAIL
                continue
            # decomposition: an edge between sections t and t+1 that no buffer crosses splits
            if decompose:
                run = 0
                nsplit = 0
                for t in range(smin, smax):
                    run += cover[t]
                    if run == 0:
                        nsplit += 1
                    cover[t] = nsplit      # part id of the buffers starting at t + 1
                if nsplit > 0:
                    # part ids of used sections, renumbered to 0..K-1 in time order
                    for t in range(smin, smax + 1):
                        low[t] = -1
                    for k in range(na):
                        c = act[k]
                        pid = 0 if a[c] == smin else cover[a[c] - 1]
                        low[pid + smin] = 0
                    nk = 0
                    for t in range(smin, smax + 1):
                        if low[t] == 0:
                            low[t] = nk
                            nk += 1
                    f = cft
                    cf[f, C_DEPTH] = d
                    cf[f, C_PLABEL] = ctx
                    cf[f, C_PSTART] = ptop
                    cf[f, C_FIRST] = nlab
                    cf[f, C_NCHILD] = nk
                    cf[f, C_CHILD] = 0
                    cf[f, C_ROOT] = is_root[d]
                    cf[f, C_CAND] = ctop
                    for k in range(na):
                        c = act[k]
                        pool[ptop] = c
                        pool_rank[ptop] = rank[c]
                        ptop += 1
                        pid = 0 if a[c] == smin else cover[a[c] - 1]
                        lab[c] = nlab + low[pid + smin]
                    if rerank:
                        _rerank(act, na, a, b, tot, width, area, pre, rank)
                    cf[f, C_PEND] = ptop
                    nlab += nk
                    cft += 1
                    is_root[d] = 1
                    o_at[d] = 0
                    r_at[d] = -1
                    nodes -= 1
                    continue          # expand the same depth again, in the first part
            # candidates: o <= m < m1, ties at o only above the last rank; sorted by (m, rank)
            k0 = ctop
            for k in range(na):
                c = act[k]
                mc = m[c]
                if mc >= o and mc < m1 and (mc > o or rank[c] > rl):
                    # insertion into cand[k0:ctop] by (m, rank)
                    p = ctop
                    while p > k0:
                        q = cand[p - 1]
                        if m[q] < mc or (m[q] == mc and rank[q] < rank[c]):
                            break
                        cand[p] = q
                        p -= 1
                    cand[p] = c
                    ctop += 1
            # hatless: stop after the first candidate that nothing unplaced can get under
            for p in range(k0, ctop):
                c = cand[p]
                top = m[c] + s[c]
                hat = False
                for q in range(adj_ptr[c], adj_ptr[c + 1]):
                    w = adj[q]
                    if placed[w] == 0 and m[w] < top:
                        hat = True
                        break
                if not hat:
                    ctop = p + 1
                    break
            cend[d] = ctop
            if ctop == k0:
                mode = _FAIL
                continue
            mode = _NEXT
        elif mode == _NEXT:
            if cpos[d] == cend[d]:
                mode = _FAIL
                continue
            c = cand[cpos[d]]
            cpos[d] += 1
            # place c at m[c]; raise its unplaced neighbours, remembering old values
            top = m[c] + s[c]
            off[c] = m[c]
            placed[c] = 1
            tstart[d] = ttop
            for q in range(adj_ptr[c], adj_ptr[c + 1]):
                w = adj[q]
                if placed[w] == 0 and m[w] < top:
                    t_idx[ttop] = w
                    t_old[ttop] = m[w]
                    ttop += 1
                    m[w] = top
            chosen[d] = c
            o_at[d + 1] = off[c]
            r_at[d + 1] = rank[c]
            is_root[d + 1] = 0
            d += 1
            mode = _EXPAND
        elif mode == _FAIL:
            ctop = cstart[d]
            if is_root[d] == 1 and cft > 0:
                # a part failed: the node that split fails; undo the parts solved before
                f = cft - 1
                dn = cf[f, C_DEPTH]
                while d > dn:
                    d -= 1
                    ttop = _unplace(d, chosen, placed, tstart, ttop, m, t_idx, t_old)
                for p in range(cf[f, C_PSTART], cf[f, C_PEND]):
                    lab[pool[p]] = cf[f, C_PLABEL]
                    rank[pool[p]] = pool_rank[p]
                ptop = cf[f, C_PSTART]
                nlab = cf[f, C_FIRST]
                is_root[d] = cf[f, C_ROOT]
                ctop = cf[f, C_CAND]
                cft -= 1
                continue          # still _FAIL, now at the splitting node
            if d == 0:
                status = INFEASIBLE
                break
            d -= 1
            ttop = _unplace(d, chosen, placed, tstart, ttop, m, t_idx, t_old)
            ctop = cend[d]
            mode = _NEXT
        else:  # _COMPLETE: the current part has nothing left to place
            if cft == 0:
                status = FOUND
                break
            f = cft - 1
            cf[f, C_CHILD] += 1
            if cf[f, C_CHILD] < cf[f, C_NCHILD]:
                o_at[d] = 0
                r_at[d] = -1
                is_root[d] = 1
                mode = _EXPAND
            else:
                # every part done, so the part that split is done too
                ptop = cf[f, C_PSTART]
                cft -= 1
    sc[S_D] = d
    sc[S_MODE] = mode
    sc[S_CAND] = ctop
    sc[S_TRAIL] = ttop
    sc[S_CF] = cft
    sc[S_POOL] = ptop
    sc[S_LABEL] = nlab
    sc[S_NODES] += nodes
    return status


def _unplace(d, chosen, placed, tstart, ttop, m, t_idx, t_old):
    """Undo depth `d`: unplace its buffer and restore the section floors it raised (the trail
    above tstart[d]). Returns the new trail top."""
    placed[chosen[d]] = 0
    while ttop > tstart[d]:
        ttop -= 1
        m[t_idx[ttop]] = t_old[ttop]
    return ttop


def _rerank(act, na, a, b, tot, width, area, pre, rank):
    """Rank the buffers act[:na] by the keys `pre` (descending, then list position), the
    section totals being those of the unplaced buffers (MiniMalloc re-sorts each part so).
    A bottom-up merge sort on the key columns (the C kernel does the same, step for step)."""
    nk = pre.shape[0]
    keys = np.empty((na, nk), np.int64)
    for k in range(na):
        c = act[k]
        for j in range(nk):
            if pre[j] == 1:
                keys[k, j] = width[c]
            elif pre[j] == 2:
                keys[k, j] = area[c]
            else:   # the most bytes still to place in one of c's sections
                best = 0
                for t in range(a[c], b[c] + 1):
                    if tot[t] > best:
                        best = tot[t]
                keys[k, j] = best
    idx = np.arange(na)
    tmp = np.empty(na, np.int64)
    w = 1
    while w < na:
        for lo in range(0, na, 2 * w):
            mid = min(lo + w, na)
            hi = min(lo + 2 * w, na)
            i, j, o = lo, mid, lo
            while i < mid and j < hi:
                # take from the right run only when its key is strictly larger (stable)
                right = False
                for q in range(nk):
                    x = keys[idx[i], q]
                    y = keys[idx[j], q]
                    if x != y:
                        right = y > x
                        break
                if right:
                    tmp[o] = idx[j]
                    j += 1
                else:
                    tmp[o] = idx[i]
                    i += 1
                o += 1
            while i < mid:
                tmp[o] = idx[i]
                i += 1
                o += 1
            while j < hi:
                tmp[o] = idx[j]
                j += 1
                o += 1
        for k in range(na):
            idx[k] = tmp[k]
        w *= 2
    for k in range(na):
        rank[act[idx[k]]] = k
