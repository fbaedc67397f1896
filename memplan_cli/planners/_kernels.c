/* Compiled cores of memplan's greedy and exact planners, loaded with ctypes (planners/_native.py).

The same algorithms as the Python kernels in _greedy_kernel.py and _exact_kernel.py, which stay
as the readable reference and the fallback when this library is not built; tests check that both
give the same offsets, arenas, statuses and node counts. Built by setup.py on `pip install`
(plain C99; the only Python API used is the empty module at the end, which lets importlib
find the library's path).

Arrays are passed as pointers to NumPy buffers owned by the caller (int64 unless noted).
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(_WIN32)
#define EXPORT __declspec(dllexport)
#else
#define EXPORT __attribute__((visibility("default")))
#endif

typedef int64_t i64;
typedef int32_t i32;
typedef uint8_t u8;

/* ---- greedy ---------------------------------------------------------------------------------- */

/* Fills start_ids / touch_ids, the CSR lists whose pointers the caller computed (see
   _greedy_kernel.build_index): start lists hold the buffers whose first rank is in a block,
   touch lists the buffers alive somewhere in it, each in buffer order. */
EXPORT void mp_fill_index(i64 n, const i64 *f, const i64 *l, i64 width, const i64 *start_ptr,
                          i64 *start_ids, const i64 *touch_ptr, i64 *touch_ids, i64 nb) {
    i64 *sfill = (i64 *)malloc(sizeof(i64) * (size_t)(nb > 0 ? nb : 1));
    i64 *tfill = (i64 *)malloc(sizeof(i64) * (size_t)(nb > 0 ? nb : 1));
    memcpy(sfill, start_ptr, sizeof(i64) * (size_t)nb);
    memcpy(tfill, touch_ptr, sizeof(i64) * (size_t)nb);
    for (i64 i = 0; i < n; i++) {
        i64 b0 = f[i] / width;
        start_ids[sfill[b0]++] = i;
        for (i64 b = b0; b <= l[i] / width; b++) touch_ids[tfill[b]++] = i;
    }
    free(sfill);
    free(tfill);
}

typedef struct { i64 off, end; } block;       /* a placed buffer's bytes [off, end) */
typedef struct { i64 f, l, off, end; } rec;   /* a buffer: ranks, bytes; off < 0 until placed */

/* Sorts v[0:w] by offset: quicksort with a three-way partition (runs of equal offsets, common
   among a long buffer's candidates, cost one pass), insertion sort on short ranges. */
static void sort_blocks(block *v, i64 w) {
    while (w > 16) {
        i64 x = v[0].off, y = v[w / 2].off, z = v[w - 1].off;
        i64 piv = x < y ? (y < z ? y : (x < z ? z : x)) : (x < z ? x : (y < z ? z : y));
        i64 lt = 0, i = 0, gt = w;
        while (i < gt) {
            i64 o = v[i].off;
            if (o < piv) { block t = v[lt]; v[lt++] = v[i]; v[i++] = t; }
            else if (o > piv) { block t = v[--gt]; v[gt] = v[i]; v[i] = t; }
            else i++;
        }
        /* recurse into the smaller side, loop on the larger */
        if (lt < w - gt) { sort_blocks(v, lt); v += gt; w -= gt; }
        else { sort_blocks(v + gt, w - gt); w = lt; }
    }
    for (i64 q = 1; q < w; q++) {
        block c = v[q];
        i64 r = q - 1;
        while (r >= 0 && v[r].off > c.off) { v[r + 1] = v[r]; r--; }
        v[r + 1] = c;
    }
}

/* The first-fit (best-fit) offset of `s` bytes among the blocks cand[0:m]. They are
   bucket-sorted by offset into `srt` (power-of-two buckets), each bucket sorted when reached,
   so first fit can stop early. The answer depends only on the set of blocks, so it equals the
   Python kernel's. */
static i64 fit(const block *cand, i64 m, i64 s, int best_fit, block *srt, i64 *cnt) {
    i64 lo = cand[0].off, hi = cand[0].off;
    for (i64 k = 1; k < m; k++) {
        i64 o = cand[k].off;
        if (o < lo) lo = o;
        else if (o > hi) hi = o;
    }
    /* the smallest shift with at most ~m/2 buckets */
    int sh = 0;
    i64 span = hi - lo, want = m / 2 + 1;
    while ((span >> sh) >= want) sh++;
    i64 nb = (span >> sh) + 1;
    for (i64 b = 0; b <= nb; b++) cnt[b] = 0;
    for (i64 k = 0; k < m; k++) cnt[((cand[k].off - lo) >> sh) + 1]++;
    for (i64 b = 0; b < nb; b++) cnt[b + 1] += cnt[b];
    for (i64 k = 0; k < m; k++) srt[cnt[(cand[k].off - lo) >> sh]++] = cand[k];
    /* cnt[b] is now the end of bucket b */
    i64 nxt = 0, best = -1, best_gap = 0, start = 0;
    for (i64 b = 0; b < nb; b++) {
        i64 end = cnt[b];
        sort_blocks(srt + start, end - start);
        for (i64 q = start; q < end; q++) {
            i64 base = srt[q].off;
            if (best_fit) {
                if (base - nxt >= s && (best < 0 || base - nxt < best_gap)) { best = nxt; best_gap = base - nxt; }
            } else if (nxt + s <= base) {
                return nxt;
            }
            if (srt[q].end > nxt) nxt = srt[q].end;
        }
        start = end;
    }
    if (best_fit && best >= 0) return best;
    return nxt;
}

/* Offsets for `order` (first or best fit); returns the arena, or -1 once it exceeds
   stop_above (> 0). */
EXPORT i64 mp_place(i64 n, const i64 *sizes, const i64 *f, const i64 *l, const i64 *order,
                    i64 best_fit, i64 width, const i64 *start_ptr, const i64 *start_ids,
                    const i64 *touch_ptr, const i64 *touch_ids, i64 stop_above, i64 *offsets) {
    size_t nn = (size_t)(n > 0 ? n : 1);
    rec *r = (rec *)malloc(sizeof(rec) * nn);
    block *cand = (block *)malloc(sizeof(block) * nn);
    block *srt = (block *)malloc(sizeof(block) * nn);
    i64 *cnt = (i64 *)malloc(sizeof(i64) * (nn + 2));
    i64 arena = 0;
    for (i64 i = 0; i < n; i++) {
        offsets[i] = 0;
        r[i].f = f[i]; r[i].l = l[i]; r[i].off = -1; r[i].end = 0;
    }
    for (i64 k = 0; k < n; k++) {
        i64 i = order[k], s = sizes[i], fi = f[i], li = l[i], m = 0;
        if (s > 0) {
            i64 b0 = fi / width;
            for (i64 p = touch_ptr[b0]; p < touch_ptr[b0 + 1]; p++) {
                const rec *e = &r[touch_ids[p]];
                if (e->off >= 0 && e->f <= li && e->l >= fi) {
                    cand[m].off = e->off;
                    cand[m].end = e->end;
                    m++;
                }
            }
            for (i64 b = b0 + 1; b <= li / width; b++) {
                for (i64 p = start_ptr[b]; p < start_ptr[b + 1]; p++) {
                    const rec *e = &r[start_ids[p]];
                    if (e->off >= 0 && e->f <= li) {
                        cand[m].off = e->off;
                        cand[m].end = e->end;
                        m++;
                    }
                }
            }
        }
        i64 off = 0;
        if (m > 0) off = fit(cand, m, s, (int)best_fit, srt, cnt);
        offsets[i] = off;
        if (s > 0) { r[i].off = off; r[i].end = off + s; }  /* zero-size buffers never block */
        if (off + s > arena) {
            arena = off + s;
            if (stop_above > 0 && arena > stop_above) { arena = -1; break; }
        }
    }
    free(r); free(cand); free(srt); free(cnt);
    return arena;
}

/* ---- exact ----------------------------------------------------------------------------------- */

enum { FOUND = 1, INFEASIBLE = 2, PAUSED = 3 };
enum { M_EXPAND = 0, M_NEXT = 1, M_FAIL = 2, M_COMPLETE = 3 };
enum { S_D, S_MODE, S_CAND, S_TRAIL, S_CF, S_POOL, S_LABEL, S_NODES };
enum { C_DEPTH, C_PLABEL, C_PSTART, C_PEND, C_FIRST, C_NCHILD, C_CHILD, C_ROOT, C_CAND, N_CF };
#define INF ((i64)1 << 62)
#define CF(r, c) cf[(r) * N_CF + (c)]

static i64 unplace(i64 d, const i64 *chosen, u8 *placed, const i64 *tstart, i64 ttop, i64 *m,
                   const i32 *t_idx, const i64 *t_old) {
    placed[chosen[d]] = 0;
    while (ttop > tstart[d]) {
        ttop--;
        m[t_idx[ttop]] = t_old[ttop];
    }
    return ttop;
}

/* Ranks act[:na] by the keys `pre` (descending, then list position): a stable bottom-up merge
   sort, as _exact_kernel._rerank. */
static void rerank(const i64 *act, i64 na, const i64 *a, const i64 *b, const i64 *tot,
                   const i64 *width, const i64 *area, const i64 *pre, i64 npre, i64 *rank) {
    size_t nn = (size_t)(na > 0 ? na : 1);
    i64 *keys = (i64 *)malloc(sizeof(i64) * nn * (size_t)npre);
    i64 *idx = (i64 *)malloc(sizeof(i64) * nn);
    i64 *tmp = (i64 *)malloc(sizeof(i64) * nn);
    for (i64 k = 0; k < na; k++) {
        i64 c = act[k];
        for (i64 j = 0; j < npre; j++) {
            i64 v;
            if (pre[j] == 1) v = width[c];
            else if (pre[j] == 2) v = area[c];
            else {
                v = 0;
                for (i64 t = a[c]; t <= b[c]; t++) if (tot[t] > v) v = tot[t];
            }
            keys[k * npre + j] = v;
        }
        idx[k] = k;
    }
    for (i64 w = 1; w < na; w *= 2) {
        for (i64 lo = 0; lo < na; lo += 2 * w) {
            i64 mid = lo + w < na ? lo + w : na;
            i64 hi = lo + 2 * w < na ? lo + 2 * w : na;
            i64 i = lo, j = mid, o = lo;
            while (i < mid && j < hi) {
                int right = 0;
                for (i64 q = 0; q < npre; q++) {
                    i64 x = keys[idx[i] * npre + q], y = keys[idx[j] * npre + q];
                    if (x != y) { right = y > x; break; }
                }
                if (right) tmp[o++] = idx[j++];
                else tmp[o++] = idx[i++];
            }
            while (i < mid) tmp[o++] = idx[i++];
            while (j < hi) tmp[o++] = idx[j++];
        }
        memcpy(idx, tmp, sizeof(i64) * (size_t)na);
    }
    for (i64 k = 0; k < na; k++) rank[act[idx[k]]] = k;
    free(keys); free(idx); free(tmp);
}

/* The resumable decision search of _exact_kernel.search, line for line: at most `budget` more
   nodes; returns FOUND (offsets in `off`), INFEASIBLE or PAUSED. */
EXPORT i64 mp_search(i64 n, const i64 *s, const i64 *a, const i64 *b, const i64 *adj_ptr,
                     const i64 *adj, const i64 *width, const i64 *area, const i64 *pre, i64 npre,
                     i64 cap, i64 budget, i64 decompose, i64 do_rerank,
                     i64 *rank, u8 *placed, i64 *off, i64 *m, i64 *lab, i64 *chosen, i64 *o_at,
                     i64 *r_at, u8 *is_root, i64 *cstart, i64 *cend, i64 *cpos, i64 *tstart,
                     i32 *cand, i32 *t_idx, i64 *t_old, i64 *cf, i32 *pool, i32 *pool_rank,
                     i64 *act, i64 *tot, i64 *low, i64 *cover, i64 *sc) {
    i64 d = sc[S_D], mode = sc[S_MODE], ctop = sc[S_CAND], ttop = sc[S_TRAIL], cft = sc[S_CF];
    i64 ptop = sc[S_POOL], nlab = sc[S_LABEL];
    i64 nodes = 0, status = PAUSED;
    for (;;) {
        if (mode == M_EXPAND) {
            if (nodes >= budget) break;
            nodes++;
            i64 ctx = 0;
            if (cft > 0) ctx = CF(cft - 1, C_FIRST) + CF(cft - 1, C_CHILD);
            i64 o = o_at[d], rl = r_at[d];
            cstart[d] = ctop; cend[d] = ctop; cpos[d] = ctop;
            i64 na = 0, m1 = INF;
            int dead = 0;
            for (i64 c = 0; c < n; c++) {
                if (placed[c] == 0 && lab[c] == ctx) {
                    act[na++] = c;
                    i64 lo = m[c] > o ? m[c] : o;
                    if (lo + s[c] > cap) dead = 1;
                    if (m[c] + s[c] < m1) m1 = m[c] + s[c];
                }
            }
            if (na == 0) { mode = M_COMPLETE; continue; }
            if (dead || m1 <= o) { mode = M_FAIL; continue; }
            i64 smin = INF, smax = -1;
            for (i64 k = 0; k < na; k++) {
                i64 c = act[k];
                if (a[c] < smin) smin = a[c];
                if (b[c] > smax) smax = b[c];
            }
            for (i64 t = smin; t <= smax; t++) { tot[t] = 0; low[t] = INF; cover[t] = 0; }
            for (i64 k = 0; k < na; k++) {
                i64 c = act[k];
                i64 lo = m[c] > o ? m[c] : o;
                for (i64 t = a[c]; t <= b[c]; t++) {
                    tot[t] += s[c];
                    if (lo < low[t]) low[t] = lo;
                }
                cover[a[c]] += 1;
                cover[b[c]] -= 1;
            }
            for (i64 t = smin; t <= smax; t++) {
                if (tot[t] > 0 && low[t] + tot[t] > cap) { dead = 1; break; }
            }
            if (dead) { mode = M_FAIL; continue; }
            if (decompose) {
                i64 run = 0, nsplit = 0;
                for (i64 t = smin; t < smax; t++) {
                    run += cover[t];
                    if (run == 0) nsplit++;
                    cover[t] = nsplit;
                }
                if (nsplit > 0) {
                    for (i64 t = smin; t <= smax; t++) low[t] = -1;
                    for (i64 k = 0; k < na; k++) {
                        i64 c = act[k];
                        i64 pid = a[c] == smin ? 0 : cover[a[c] - 1];
                        low[pid + smin] = 0;
                    }
                    i64 nk = 0;
                    for (i64 t = smin; t <= smax; t++) if (low[t] == 0) low[t] = nk++;
                    i64 fr = cft;
                    CF(fr, C_DEPTH) = d;
                    CF(fr, C_PLABEL) = ctx;
                    CF(fr, C_PSTART) = ptop;
                    CF(fr, C_FIRST) = nlab;
                    CF(fr, C_NCHILD) = nk;
                    CF(fr, C_CHILD) = 0;
                    CF(fr, C_ROOT) = is_root[d];
                    CF(fr, C_CAND) = ctop;
                    for (i64 k = 0; k < na; k++) {
                        i64 c = act[k];
                        pool[ptop] = (i32)c;
                        pool_rank[ptop] = (i32)rank[c];
                        ptop++;
                        i64 pid = a[c] == smin ? 0 : cover[a[c] - 1];
                        lab[c] = nlab + low[pid + smin];
                    }
                    if (do_rerank) rerank(act, na, a, b, tot, width, area, pre, npre, rank);
                    CF(fr, C_PEND) = ptop;
                    nlab += nk;
                    cft++;
                    is_root[d] = 1;
                    o_at[d] = 0;
                    r_at[d] = -1;
                    nodes--;
                    continue;
                }
            }
            i64 k0 = ctop;
            for (i64 k = 0; k < na; k++) {
                i64 c = act[k], mc = m[c];
                if (mc >= o && mc < m1 && (mc > o || rank[c] > rl)) {
                    i64 p = ctop;
                    while (p > k0) {
                        i64 q = cand[p - 1];
                        if (m[q] < mc || (m[q] == mc && rank[q] < rank[c])) break;
                        cand[p] = (i32)q;
                        p--;
                    }
                    cand[p] = (i32)c;
                    ctop++;
                }
            }
            for (i64 p = k0; p < ctop; p++) {
                i64 c = cand[p], top = m[c] + s[c];
                int hat = 0;
                for (i64 q = adj_ptr[c]; q < adj_ptr[c + 1]; q++) {
                    i64 w = adj[q];
                    if (placed[w] == 0 && m[w] < top) { hat = 1; break; }
                }
                if (!hat) { ctop = p + 1; break; }
            }
            cend[d] = ctop;
            if (ctop == k0) { mode = M_FAIL; continue; }
            mode = M_NEXT;
        } else if (mode == M_NEXT) {
            if (cpos[d] == cend[d]) { mode = M_FAIL; continue; }
            i64 c = cand[cpos[d]];
            cpos[d]++;
            i64 top = m[c] + s[c];
            off[c] = m[c];
            placed[c] = 1;
            tstart[d] = ttop;
            for (i64 q = adj_ptr[c]; q < adj_ptr[c + 1]; q++) {
                i64 w = adj[q];
                if (placed[w] == 0 && m[w] < top) {
                    t_idx[ttop] = (i32)w;
                    t_old[ttop] = m[w];
                    ttop++;
                    m[w] = top;
                }
            }
            chosen[d] = c;
            o_at[d + 1] = off[c];
            r_at[d + 1] = rank[c];
            is_root[d + 1] = 0;
            d++;
            mode = M_EXPAND;
        } else if (mode == M_FAIL) {
            ctop = cstart[d];
            if (is_root[d] == 1 && cft > 0) {
                i64 fr = cft - 1, dn = CF(fr, C_DEPTH);
                while (d > dn) {
                    d--;
                    ttop = unplace(d, chosen, placed, tstart, ttop, m, t_idx, t_old);
                }
                for (i64 p = CF(fr, C_PSTART); p < CF(fr, C_PEND); p++) {
                    lab[pool[p]] = CF(fr, C_PLABEL);
                    rank[pool[p]] = pool_rank[p];
                }
                ptop = CF(fr, C_PSTART);
                nlab = CF(fr, C_FIRST);
                is_root[d] = (u8)CF(fr, C_ROOT);
                ctop = CF(fr, C_CAND);
                cft--;
                continue;
            }
            if (d == 0) { status = INFEASIBLE; break; }
            d--;
            ttop = unplace(d, chosen, placed, tstart, ttop, m, t_idx, t_old);
            ctop = cend[d];
            mode = M_NEXT;
        } else {
            if (cft == 0) { status = FOUND; break; }
            i64 fr = cft - 1;
            CF(fr, C_CHILD) += 1;
            if (CF(fr, C_CHILD) < CF(fr, C_NCHILD)) {
                o_at[d] = 0;
                r_at[d] = -1;
                is_root[d] = 1;
                mode = M_EXPAND;
            } else {
                ptop = CF(fr, C_PSTART);
                cft--;
            }
        }
    }
    sc[S_D] = d; sc[S_MODE] = mode; sc[S_CAND] = ctop; sc[S_TRAIL] = ttop; sc[S_CF] = cft;
    sc[S_POOL] = ptop; sc[S_LABEL] = nlab; sc[S_NODES] += nodes;
    return status;
}

/* An empty Python module: importlib finds the built file's path; the functions above are called
   through ctypes, which releases the GIL during each call (the planners run them on threads). */
static struct PyModuleDef kernels_module = {PyModuleDef_HEAD_INIT, "_kernels",
                                            "memplan's compiled planner kernels (see _native.py)", -1, NULL};

PyMODINIT_FUNC PyInit__kernels(void) { return PyModule_Create(&kernels_module); }
