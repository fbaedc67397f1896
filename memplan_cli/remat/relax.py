"""A MILP of the single-recompute remat space (each op whose results backward reads kept or recomputed
once, from kept inputs): the search's seeds (solved with HiGHS). It bounds that narrower space only,
so nothing is called proven from it; proofs come from `full.py`, the relaxation of the whole space.

The true figure of a plan D (a set of dropped candidate ops) is the lower bound of the buffer list
the rematerialization and aliasing passes build for it. The model counts, at each step t of the
plain plan P0, only bytes that are certainly live at the same step of D, so its memory is never more
than D's true one and its optimum never more than the cheapest plan that truly fits.

Rules (P0: the plan without remat; groups: P0's alias groups; x_k = 1 when op k is dropped):
- A tensor no dropped op writes is live at t in D whenever it is in P0: its writer and readers are
  the same steps, recompute steps only add reads. Its group counts at t.
- A tensor u written by candidate k is live at t while t <= lf_u (its writer or last forward reader).
  After that, up to the first post-forward step touching a write of k (fb_k), it is live only when
  kept (1 - x_k) or when its copy exists already: k was recomputed early because a dropped op d that
  reads k's output in its forward was recomputed by t (z_{k,t} = x_k and some such d has z_{d,t};
  z_{d,t} = x_d from fb_d on; exact by linear constraints both ways). From fb_k on the original or
  its copy is live (the copy lives to u's last reader).
- An input v of a dropped op d lives on to d's recompute: at every t after its last P0 read and
  before fb_d, it counts x_d - z_{d,t}, less x_j when v's writer j is a candidate (dropped, j's
  copy is read instead).
- A group counts with its smallest member's aligned size (a group's buffer is its largest member),
  in units of the sizes' greatest common divisor, so the model's arithmetic is exact.
- A group born at step t as the destination of a possible in-place pair of that step counts 0 at t:
  D may compute it over its source where P0 could not (the source's later reads moved to a copy).
- Left out (so the bound stays a bound): recompute steps' own working sets.
- Steps where the model cannot exceed the target whatever is dropped are left out.

`linear_model` writes it as a 0-1 program (min added FLOPs under a target, or `peak=True`: min the
largest row, the least peak any plan reaches); `solve_highs` solves it single-threaded with a fixed
seed and a node limit. `tests/remat/test_relax.py` checks model <= true lower bound on random plans
of real models, and the solver against brute force.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from memplan_cli.passes.execution_order import inplace_results
from memplan_cli.passes.rematerialize import forward_end
from memplan_cli.passes.training_graph import align_up

MAX_NODES = 2000  # branch-and-bound nodes per solve (work, not seconds)
ABS_GAP = 1e-5  # HiGHS may stop within this fraction of the step's FLOPs of its bound; the answer then
# says feasible, with the bound (a FLOPs ratio printed to 3 decimals cannot tell the difference)


@dataclass
class Row:
    """Memory at one step: const + sum(coef * x_k) + sum(weight * surv) <= target, in units (Relaxation.unit)."""
    step: int
    const: int = 0
    lin: dict = field(default_factory=dict)  # k -> coefficient on x_k
    survs: list = field(default_factory=list)  # (weight, reasons): the group lives if any reason holds
    most: int = 0  # the row's largest value (every variable term at its most)


@dataclass
class Relaxation:
    rows: list
    consumers: dict  # k -> candidate ops whose forward reads a write of k
    fb: dict  # k -> first post-forward step touching a write of k
    f: int  # first post-forward step
    unit: int  # bytes per model unit


def build(problem, target: int) -> Relaxation:
    tg = problem.relaxed_step()
    steps = tg.steps
    f = forward_end(tg)
    end = len(steps) - 1
    cands = list(problem.narrow)
    cset = set(cands)
    fwd = {s.op: s for s in steps[:f]}
    writer: dict[int, int] = {}
    for k in cands:
        for t in fwd[k].writes:
            writer[t] = k
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    lastf: dict[int, int] = {}
    for s in steps:
        for t in s.touched():
            first.setdefault(t, s.index)
            last[t] = s.index
            if s.index < f:
                lastf[t] = s.index
    for t in tg.live_out:
        if t in first:
            last[t] = end
    for t in tg.persistent:
        first[t], last[t] = 0, end
    fb: dict[int, int] = {}
    for s in steps[f:]:
        for t in s.touched():
            k = writer.get(t)
            if k is not None and k not in fb:
                fb[k] = s.index
    consumers: dict[int, list[int]] = {k: [] for k in cands}
    for d in cands:
        for t in fwd[d].reads:
            k = writer.get(t)
            if k is not None and k != d and d not in consumers[k]:
                consumers[k].append(d)
    members: dict[int, list[int]] = {}
    for t in first:
        members.setdefault(tg.root(t), []).append(t)
    # (step, group) excluded at that step
    born_inplace = {(k, tg.root(dst)) for k, dst in inplace_results(tg, steps)}

    # extensions: a recompute step reads its forward inputs again, so a kept input lives on to the
    # recompute (before fb_d) when d is dropped: (d, writer of v or None) over (last[v], fb_d)
    ext: dict[int, list] = {}
    for d in cands:
        for v in fwd[d].reads:
            if v in tg.persistent or v not in last or last[v] + 1 >= fb[d]:
                continue
            ext.setdefault(tg.root(v), []).append((last[v] + 1, fb[d] - 1, d, writer.get(v)))

    size = {g: min(align_up(tg.tensors[u].nbytes, problem.align) for u in mem) for g, mem in members.items()}
    unit = 0  # the sizes' common divisor: the model counts in whole units, exactly
    for v in size.values():
        unit = math.gcd(unit, v)
    unit = unit or 1
    n = len(steps)
    const = [0] * (n + 1)  # difference array of constant bytes (units)
    rows: dict[int, Row] = {}
    varmax = [0] * n  # the variable terms' most

    def row(t):
        r = rows.get(t)
        if r is None:
            r = rows[t] = Row(t)
        return r

    for g, mem in members.items():
        w = size[g] // unit
        a = min(first[u] for u in mem)
        b = max(last[u] for u in mem)
        born = {t for (t, gg) in born_inplace if gg == g} if born_inplace else set()
        exts = ext.get(g, ())
        if not any(u in writer for u in mem) and not born and not exts:
            const[a] += w
            const[b + 1] -= w
            continue
        hi = max([b] + [e[1] for e in exts])
        for t in range(a, hi + 1):
            live = [u for u in mem if first[u] <= t <= last[u]]
            if t in born and live and all(first[u] == t for u in live):
                continue
            why: list = []
            fixed = False
            for u in live:
                k = writer.get(u)
                if k is None or t <= lastf.get(u, first[u]) or t >= fb.get(k, n):
                    fixed = True
                    break
                why.append(("keep", k))
                if t >= f and consumers[k]:
                    why.append(("z", k))
            if fixed:
                const[t] += w
                const[t + 1] -= w
                continue
            for lo_, hi_, d, j in exts:
                if lo_ <= t <= hi_:
                    why.append(("ext", d, j))
            if not why:
                continue
            why = sorted(set(why), key=repr)
            varmax[t] += w
            r = row(t)
            if len(why) == 1 and why[0][0] == "keep":
                r.const += w  # lives unless dropped: w (1 - x_k)
                r.lin[why[0][1]] = r.lin.get(why[0][1], 0) - w
            elif len(why) == 1 and why[0][0] == "ext" and why[0][2] is None and (t < f or not consumers[why[0][1]]):
                r.lin[why[0][1]] = r.lin.get(why[0][1], 0) + w  # lives when d is dropped: w x_d
            else:
                r.survs.append((w, tuple(why)))
    acc = 0
    base = [0] * n
    for t in range(n):
        acc += const[t]
        base[t] = acc
    tcap = target // unit
    out = []
    for t in range(n):
        if base[t] + varmax[t] <= tcap:  # fits whatever is dropped
            continue
        r = rows.get(t) or Row(t)
        r.const += base[t]
        r.most = base[t] + varmax[t]
        out.append(r)
    return Relaxation(out, consumers, fb, f, unit)


def recomputed_by(rel: Relaxation, drop, k: int, t: int, memo: dict) -> bool:
    """True when dropped op k has run again by step t (P0 index) in plan `drop`."""
    if k not in drop or t < rel.f:
        return False
    if t >= rel.fb.get(k, 1 << 60):
        return True
    key = (k, t)
    if key not in memo:
        memo[key] = any(recomputed_by(rel, drop, d, t, memo) for d in rel.consumers[k])
    return memo[key]


def model_bytes(rel: Relaxation, drop) -> int:
    """The model's most bytes at one step for plan `drop` (<= the plan's true lower bound: tests)."""
    return max(row_units(rel, drop), default=0) * rel.unit


def row_units(rel: Relaxation, drop) -> list[int]:
    """The model's memory (units) at each row's step for plan `drop`."""
    memo: dict = {}
    out = []
    for r in rel.rows:
        m = r.const + sum(v for k, v in r.lin.items() if k in drop)
        for w, why in r.survs:
            for reason in why:
                kind, k = reason[0], reason[1]
                if kind == "keep" and k not in drop:
                    break
                if kind == "z" and recomputed_by(rel, drop, k, r.step, memo):
                    break
                if (kind == "ext" and k in drop and not recomputed_by(rel, drop, k, r.step, memo)
                        and (reason[2] is None or reason[2] not in drop)):
                    break
            else:
                continue
            m += w
        out.append(m)
    return out


def _need_z(k, t, consumers, fb, seen):
    if (k, t) in seen or t >= fb.get(k, 1 << 60) or not consumers[k]:
        return
    seen[(k, t)] = True
    for d in consumers[k]:
        _need_z(d, t, consumers, fb, seen)


def _quiet_highs(highspy):
    """A Highs instance without its banner: the C++ constructor prints it on file descriptor 1, which
    would corrupt a JSON report on stdout."""
    import os
    import sys

    if sys.stdout is not None:
        sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no file descriptor 1 (closed stdout): nothing to protect
        h = highspy.Highs()
        h.setOptionValue("output_flag", False)
        return h
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 1)
            h = highspy.Highs()
            h.setOptionValue("output_flag", False)
    finally:
        os.dup2(saved, 1)
        os.close(saved)
    return h


@dataclass
class MilpAnswer:
    drop: frozenset | None  # the model's optimum (None: the model has no solution)
    lower: float  # proven lower bound on the added FLOPs of any plan whose true bound <= target
    optimal: bool  # the model was solved to optimality (lower is the model's optimum)
    nodes: int = 0


@dataclass
class LinearModel:
    """The relaxation as a 0-1 linear program, backend-neutral: columns 0..nx-1 are the binary x_k
    (in `cands` order), the rest continuous in [0, 1] (integral whenever the x are); every
    coefficient and bound is an integer (None: unbounded)."""
    cands: list
    nx: int
    ncols: int
    cost: list  # per x column, FLOPs (int)
    rows: list  # (lb | None, ub | None, [(col, coef)])
    peak: int | None = None  # the peak column (units, unbounded above) when minimising the peak


def linear_model(problem, rel: Relaxation, target: int, rows=None, cuts=(), peak: bool = False) -> LinearModel:
    """Min sum(cost_k x_k) subject to `rows` (indices into rel.rows; default all): any subset is a
    relaxation too. `cuts`: plans excluded (no-good cuts). `peak`: instead, min P subject to every
    row <= P (the least peak any plan reaches; `target` is ignored)."""
    cands = list(problem.narrow)
    col = {k: i for i, k in enumerate(cands)}
    nx = len(cands)
    use = [rel.rows[i] for i in (range(len(rel.rows)) if rows is None else rows)]
    z_needed: dict = {}
    for r in use:
        if r.step >= rel.f:
            for _, why in r.survs:
                for reason in why:
                    if reason[0] in ("z", "ext"):
                        _need_z(reason[1], r.step, rel.consumers, rel.fb, z_needed)
    zcol: dict = {}
    for key in sorted(z_needed):
        zcol[key] = nx + len(zcol)
    ncols = nx + len(zcol)
    out: list = []
    tcap = target // rel.unit  # whole units: a plan of target bytes or fewer has at most this many

    def zterm(k, t):
        """column for 'k has run again by t' (x_k from fb_k on); None: cannot be (constant 0)."""
        if t >= rel.fb.get(k, 1 << 60):
            return col[k]
        return zcol.get((k, t))

    for (k, t), j in zcol.items():  # z exact: x_k and some consumer run again by t
        ups = [(j, 1)]
        out.append((None, 0, [(j, 1), (col[k], -1)]))  # z_kt <= x_k
        for d in rel.consumers[k]:
            zd = zterm(d, t)
            if zd is None:
                continue
            out.append((-1, None, [(j, 1), (col[k], -1), (zd, -1)]))  # z_kt >= x_k + z_dt - 1
            ups.append((zd, -1))
        out.append((None, 0, ups))  # z_kt <= sum_d z_dt
    for r in use:
        entries = [(col[k], v) for k, v in r.lin.items()]
        for w, why in r.survs:
            sc = ncols
            ncols += 1
            entries.append((sc, w))
            for reason in why:
                kind, k = reason[0], reason[1]
                if kind == "keep":
                    out.append((1, None, [(sc, 1), (col[k], 1)]))  # surv >= 1 - x_k
                elif kind == "z":
                    zk = zterm(k, r.step)
                    if zk is not None:
                        out.append((0, None, [(sc, 1), (zk, -1)]))  # surv >= z_kt
                else:  # surv >= x_d - z_dt - x_j
                    ent = [(sc, 1), (col[k], -1)]
                    zk = zterm(k, r.step) if r.step >= rel.f else None
                    if zk is not None:
                        ent.append((zk, 1))
                    if reason[2] is not None:
                        ent.append((col[reason[2]], 1))
                    out.append((0, None, ent))
        if peak:
            entries.append((-1, -1))  # the peak column, numbered below
        out.append((None, (0 if peak else tcap) - r.const, entries))
    if peak:
        out = [(lb, ub, [(ncols if j == -1 else j, v) for j, v in ent]) for lb, ub, ent in out]
        ncols += 1
    for d in cuts:  # no-good: differ from plan d in at least one candidate
        out.append((1 - len(d), None, [(col[k], -1 if k in d else 1) for k in cands]))
    return LinearModel(cands, nx, ncols, [int(problem.cost[k] or 0) for k in cands], out,
                       ncols - 1 if peak else None)


def solve_model(problem, rel: Relaxation, target: int, rows=None, cuts=(), max_nodes: int = MAX_NODES
                ) -> MilpAnswer:
    """`linear_model` solved with HiGHS: single thread, fixed seed, a node limit (work, not time)."""
    gap = ABS_GAP * (problem.flops.total or 0)
    return solve_highs(linear_model(problem, rel, target, rows, cuts), max_nodes, gap)


def solve_highs(lm: LinearModel, max_nodes: int = MAX_NODES, abs_gap: float = 0.0) -> MilpAnswer:
    import highspy
    import numpy as np

    h = _quiet_highs(highspy)
    scale = max(lm.cost, default=0) or 1  # FLOPs up to 1e11: the objective in units of the largest
    for k, v in (("threads", 1), ("random_seed", 0), ("mip_rel_gap", 0.0), ("mip_abs_gap", abs_gap / scale),
                 ("mip_max_nodes", int(max_nodes))):
        h.setOptionValue(k, v)
    inf = highspy.kHighsInf
    n = lm.ncols
    obj = np.zeros(n)
    hi = np.ones(n)
    if lm.peak is None:
        obj[:lm.nx] = np.array(lm.cost, dtype=float) / scale
    else:
        scale = 1.0
        obj[lm.peak] = 1.0
        hi[lm.peak] = inf
    h.addVars(n, np.zeros(n), hi)
    h.changeColsCost(n, np.arange(n, dtype=np.int32), obj)
    h.changeColsIntegrality(lm.nx, np.arange(lm.nx, dtype=np.int32),
                            np.array([highspy.HighsVarType.kInteger] * lm.nx))
    if lm.rows:
        starts, idx, vals = [], [], []
        for _, _, ent in lm.rows:
            starts.append(len(idx))
            for j, v in ent:
                idx.append(j)
                vals.append(float(v))
        h.addRows(len(lm.rows), np.array([-inf if lb is None else float(lb) for lb, _, _ in lm.rows]),
                  np.array([inf if ub is None else float(ub) for _, ub, _ in lm.rows]), len(idx),
                  np.array(starts, dtype=np.int32), np.array(idx, dtype=np.int32), np.array(vals))
    h.run()
    st = h.getModelStatus()
    info = h.getInfo()
    nodes = int(getattr(info, "mip_node_count", 0) or 0)
    if st == highspy.HighsModelStatus.kInfeasible:
        return MilpAnswer(None, float("inf"), True, nodes)
    sol = h.getSolution().col_value
    has = info.primal_solution_status == 2 if hasattr(info, "primal_solution_status") else bool(sol)
    drop = frozenset(k for i, k in enumerate(lm.cands) if sol[i] > 0.5) if has else None
    lower = max(0.0, float(info.mip_dual_bound)) * scale
    # optimal: the incumbent meets the dual bound (HiGHS also stops, as "optimal", within abs_gap)
    exact = False
    if drop is not None and st == highspy.HighsModelStatus.kOptimal:
        value = sol[lm.peak] if lm.peak is not None else sum(c for k, c in zip(lm.cands, lm.cost) if k in drop)
        exact = value <= lower * (1 + 1e-9) + 1e-6
    return MilpAnswer(drop, lower, exact, nodes)
