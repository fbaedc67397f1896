"""A relaxation of the whole remat space: any forward op recomputed any number of times, chains
included, at any point of the step. Its figures are what `analyze --budget`, `fit` and `verify
--budget` may call proven.

The space: the plain step's steps (P0) keep their order; any forward op that can run again
(`passes.rematerialize.candidates`) may run again any number of times anywhere. At P0's step t a
plan needs live, at least:
- persistent tensors (weights, optimizer state), and tensors read after the step (live-out) from
  their first access on;
- the working set of step t (every tensor it reads or writes), except a result born at t that may be
  computed in place over one of the step's inputs (it may share that input's memory);
- every value P0 holds across t whose next access is a read: it must exist at t unless it is
  recomputed after t, which only a candidate's result can be, at the cost of one more run of its op.
Values P0 holds across t whose next access is a write count nothing. A value counts with its own
aligned size; the members of one alias group (views, in-place chains) count once, with the smallest.
Recompute steps' own working sets and copies live longer than P0's are left out (they only add).

So for any plan, with x_k = 1 when op k runs again at least once, its added FLOPs are at least
sum(c_k x_k) and at each step t: must_t + sum over the variable groups g live at t of
w_g (1 - [every op of g runs again]) <= its peak. Hence:
- `floor`: max_t must_t (every candidate recomputed): no plan's live bytes go below it;
- `lower_flops(target)`: min sum(c_k x_k) under those rows at `target` (HiGHS, a node limit, the dual
  bound when it stops early): no plan whose live bytes fit `target` adds fewer FLOPs.
`tests/remat/test_full.py` checks both against the true figures of random plans of real models.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from memplan_cli.passes.execution_order import resolve
from memplan_cli.passes.rematerialize import forward_end
from memplan_cli.passes.training_graph import align_up

MAX_NODES = 2000  # branch-and-bound nodes (work, not seconds)


@dataclass
class Full:
    must: list  # per P0 step, units no plan avoids
    terms: list  # per P0 step, {ops tuple: units} of values that are absent only when all those ops run again
    unit: int  # bytes per unit (the sizes' common divisor: exact arithmetic)
    labels: list  # per P0 step, "step i (kind of label)"

    @property
    def floor(self) -> tuple[int, str]:
        t = max(range(len(self.must)), key=lambda i: (self.must[i], -i))
        return self.must[t] * self.unit, self.labels[t]


def build(problem) -> Full:
    tg = problem.build(())
    steps = tg.steps
    n = len(steps)
    end = n - 1
    f = forward_end(tg)
    cset = set(problem.candidates)
    writer: dict[int, int] = {}
    for s in steps[:f]:
        if s.op in cset:
            for t in s.writes:
                writer[t] = s.op
    acc: dict[int, list] = {}  # tensor -> [(step, reads it)]
    for s in steps:
        rd = set(s.reads) | {a for a, _, _ in s.accumulate} | {d for _, d, first in s.accumulate if not first}
        for t in s.touched():
            acc.setdefault(t, []).append((s.index, t in rd))
    born: set[tuple[int, int]] = set()  # (step, tensor) results that may be computed in place
    for s in steps:
        rule = tg.rules.get(s.op)
        for src_ref, dst_ref in (rule.inplace if rule is not None else ()):
            try:
                src, dst = resolve(tg, s.op, src_ref), resolve(tg, s.op, dst_ref)
            except KeyError:
                continue
            if dst in s.writes and src in s.reads and tg.root(src) != tg.root(dst):
                born.add((s.index, dst))
    pers = set(tg.persistent)
    size = {t: align_up(tg.tensors[t].nbytes, problem.align) for t in acc}
    for t in pers:
        size.setdefault(t, align_up(tg.tensors[t].nbytes, problem.align))
    unit = 0
    for v in size.values():
        unit = math.gcd(unit, v)
    unit = unit or 1
    must_d = [0] * (n + 1)  # difference array of must units (single-member groups)
    terms: list[dict] = [dict() for _ in range(n)]
    members: dict[int, list[int]] = {}
    for t in set(acc) | pers:
        members.setdefault(tg.root(t), []).append(t)
    multi: dict[tuple[int, int], list] = {}  # (step, group) -> [(units, kind, op)]

    def add(g, a, b, w, kind, k, single):
        """Value of group g counts w units over steps a..b: kind 'must' or 'var' (absent when k reruns)."""
        if a > b:
            return
        if single and kind == "must":
            must_d[a] += w
            must_d[b + 1] -= w
        elif single:
            for t in range(a, b + 1):
                d = terms[t]
                d[(k,)] = d.get((k,), 0) + w
        else:
            for t in range(a, b + 1):
                multi.setdefault((t, g), []).append((w, kind, k))

    for g, mem in members.items():
        single = len(mem) == 1
        for u in mem:
            w = size[u] // unit
            if u in pers:
                add(g, 0, end, w, "must", None, single)
                continue
            ev = acc[u]
            k = writer.get(u)
            for i, (a, _) in enumerate(ev):  # the access itself: the working set of step a
                if (a, u) not in born:
                    add(g, a, a, w, "must", None, single)
                if i + 1 < len(ev):
                    b, reads = ev[i + 1]
                    if reads:
                        add(g, a + 1, b - 1, w, "must" if k is None else "var", k, single)
            if u in tg.live_out:
                add(g, ev[-1][0] + 1, end, w, "must", None, single)
    must = []
    c = 0
    for t in range(n):
        c += must_d[t]
        must.append(c)
    for (t, g), vals in multi.items():
        w = min(v[0] for v in vals)
        if any(v[1] == "must" for v in vals):
            must[t] += w
        else:
            ks = tuple(sorted({v[2] for v in vals}))
            terms[t][ks] = terms[t].get(ks, 0) + w
    labels = [f"step {s.index} ({s.kind} of {s.label})" for s in steps]
    return Full(must, terms, unit, labels)


@dataclass
class Bound:
    lower: float  # no plan whose live bytes fit the target adds fewer FLOPs (inf: none fits)
    optimal: bool  # the model was solved to optimality
    ops: frozenset  # the model's plan: ops that run again (a hint for the search)


def lower_flops(problem, full: Full, target: int, max_nodes: int = MAX_NODES) -> Bound:
    cap = target // full.unit
    rows = []
    for t in range(len(full.must)):
        tot = full.must[t] + sum(full.terms[t].values())
        if tot <= cap:
            continue
        if full.must[t] > cap:
            return Bound(float("inf"), True, frozenset())
        rows.append((tot - cap, full.terms[t]))
    if not rows:
        return Bound(0.0, True, frozenset())
    import highspy
    import numpy as np

    from memplan_cli.remat.relax import _quiet_highs

    cands = sorted({k for _, tm in rows for ks in tm for k in ks})
    col = {k: i for i, k in enumerate(cands)}
    nx = len(cands)
    multi = sorted({ks for _, tm in rows for ks in tm if len(ks) > 1})
    ycol = {ks: nx + i for i, ks in enumerate(multi)}
    ncols = nx + len(multi)
    cost = [float(problem.cost[k] or 0) for k in cands]
    scale = max(cost, default=0.0) or 1.0
    h = _quiet_highs(highspy)
    for k, v in (("threads", 1), ("random_seed", 0), ("mip_rel_gap", 0.0), ("mip_abs_gap", 0.0),
                 ("mip_max_nodes", int(max_nodes))):
        h.setOptionValue(k, v)
    inf = highspy.kHighsInf
    h.addVars(ncols, np.zeros(ncols), np.ones(ncols))
    obj = np.zeros(ncols)
    obj[:nx] = np.array(cost) / scale
    h.changeColsCost(ncols, np.arange(ncols, dtype=np.int32), obj)
    h.changeColsIntegrality(nx, np.arange(nx, dtype=np.int32), np.array([highspy.HighsVarType.kInteger] * nx))
    lo, hi, starts, idx, vals = [], [], [], [], []

    def row(lb, ub, ent):
        lo.append(lb)
        hi.append(ub)
        starts.append(len(idx))
        for j, v in ent:
            idx.append(j)
            vals.append(float(v))

    for ks, j in ycol.items():  # y_g <= x_k for every op of g
        for k in ks:
            row(-inf, 0.0, [(j, 1), (col[k], -1)])
    for need, tm in rows:  # the absent values cover the excess
        row(float(need), inf, [((col[ks[0]] if len(ks) == 1 else ycol[ks]), w) for ks, w in sorted(tm.items())])
    h.addRows(len(lo), np.array(lo), np.array(hi), len(idx), np.array(starts, dtype=np.int32),
              np.array(idx, dtype=np.int32), np.array(vals))
    h.run()
    st = h.getModelStatus()
    if st == highspy.HighsModelStatus.kInfeasible:
        return Bound(float("inf"), True, frozenset())
    info = h.getInfo()
    lower = max(0.0, float(info.mip_dual_bound)) * scale
    sol = h.getSolution().col_value
    ops = frozenset(k for i, k in enumerate(cands) if len(sol) > i and sol[i] > 0.5)
    return Bound(lower, st == highspy.HighsModelStatus.kOptimal, ops)
