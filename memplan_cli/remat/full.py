"""A relaxation of the whole remat space: any forward op recomputed any number of times, chains
included, at any point of the step. Its figures are what `analyze --budget`, `fit` and `verify
--budget` may call proven.

The space: the plain step's steps (P0) keep their order; any forward op that can run again
(`passes.rematerialize.candidates`) may run again any number of times anywhere. At P0's step t a
plan needs live, at least:
- persistent tensors (weights, optimizer state), and tensors read after the step (live-out) from
  their first access on;
- the working set of step t (every tensor it reads or writes), except a result born at t that may be
  computed in place over one of the step's inputs (it may share that input's memory), as many as
  the inputs can host: one output per input (a Mul's dA and dB both over dY: one of them counts);
- every value P0 holds across t whose next access is a read: it must exist at t unless it is
  recomputed after t, which only a candidate's result can be, at the cost of one more run of its op.
Values P0 holds across t whose next access is a write count nothing. A value counts with its own
aligned size; the members of one alias group (views, in-place chains) count once, with the smallest.
Recompute steps' own working sets and copies live longer than P0's are left out (they only add).

So for any plan, with x_k = 1 when op k runs again at least once, its added FLOPs are at least
sum(c_k x_k) and at each step t: must_t + sum over the variable groups g live at t of
w_g (1 - [every op of g runs again]) <= its peak. Hence:
- `floor`: max_t must_t (every candidate recomputed): no plan's live bytes go below it;
- `lower_flops(target)`: min sum(c_k x_k) under those rows at `target` (HiGHS; a 0-1 program under a
  node limit, its dual bound when it stops early; a model of more than `MIP_COLS` columns as its
  linear program, whose optimum is a bound too): no plan whose live bytes fit `target` adds fewer FLOPs.
`tests/remat/test_full.py` checks both against the true figures of random plans of real models.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from memplan_cli.passes.execution_order import resolve
from memplan_cli.passes.rematerialize import forward_end
from memplan_cli.passes.training_graph import align_up

MAX_NODES = 200  # branch-and-bound nodes per solve (work, not seconds; its dual bound stands when it stops)
FIRST_ROWS = 24  # steps in the first round of the lazy row loop, and added per round
ROUNDS = 3  # solves at most
MIP_COLS = 600  # a model with more columns is solved as its linear program (a bound too, found much faster)
DEPTH = 1  # levels of "a recompute needs its inputs" modelled (more: a tighter bound, a larger model)


@dataclass
class Full:
    must: list  # per P0 step, units no plan avoids
    terms: list  # per P0 step, {ops tuple: units} of values that are absent only when all those ops run again
    unit: int  # bytes per unit (the sizes' common divisor: exact arithmetic)
    labels: list  # per P0 step, "step i (kind of label)"
    inputs: dict  # candidate -> [(value key, units, writer candidate or None)] its forward step reads
    counted: dict  # value key (tensor, or ("g", root) for a group with views) -> [(a, b)] steps where it counts

    def counts(self, key, t) -> bool:
        return any(a <= t <= b for a, b in self.counted.get(key, ()))

    @property
    def floor(self) -> tuple[int, str]:
        t = max(range(len(self.must)), key=lambda i: (self.must[i], -i))
        return self.must[t] * self.unit, self.labels[t]


def build(problem) -> Full:
    tg = problem.relaxed_step()
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
    pers = set(tg.persistent)
    size = {t: align_up(tg.tensors[t].nbytes, problem.align) for t in acc}
    for t in pers:
        size.setdefault(t, align_up(tg.tensors[t].nbytes, problem.align))
    born = hosted_results(tg, steps, size)  # (step, tensor) results that may be computed in place
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

    counted: dict[int, list] = {}

    def add(g, a, b, w, kind, k, single, u):
        """Value u of group g counts w units over steps a..b: kind 'must' or 'var' (absent when k reruns)."""
        if a > b:
            return
        counted.setdefault(u, []).append((a, b))
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
                add(g, 0, end, w, "must", None, single, u)
                continue
            ev = acc[u]
            k = writer.get(u)
            for i, (a, _) in enumerate(ev):  # the access itself: the working set of step a
                if (a, u) not in born:
                    add(g, a, a, w, "must", None, single, u)
                if i + 1 < len(ev):
                    b, reads = ev[i + 1]
                    if reads:
                        add(g, a + 1, b - 1, w, "must" if k is None else "var", k, single, u)
            if u in tg.live_out:
                add(g, ev[-1][0] + 1, end, w, "must", None, single, u)
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
    # a view shares its source's bytes: a group holding one is keyed by its root, and skipped where
    # any member counts (an in-place chain's members are distinct values: keyed by tensor)
    viewed: set[int] = set()
    for s in steps[:f]:
        rule = tg.rules.get(s.op)
        if rule is not None and rule.view is not None:
            for o in rule.view:
                if o in tg.fwd:
                    viewed.add(tg.root(tg.fwd[o]))
    for g in viewed:
        if g in members:
            counted[("g", g)] = [iv for u in members[g] for iv in counted.get(u, ())]
    inputs: dict[int, list] = {}
    for s in steps[:f]:
        if s.op in cset:
            ins = set()
            for v in s.reads:
                g = tg.root(v)
                if v in pers or v not in size or g in pers:
                    continue
                key = ("g", g) if g in viewed else v
                w = min(size[u] for u in members[g]) if g in viewed else size[v]
                ins.add((key, w // unit, writer.get(v)))
            inputs[s.op] = sorted(ins, key=repr)
    return Full(must, terms, unit, labels, inputs, counted)


def hosted_results(tg, steps, size) -> set[tuple[int, int]]:
    """(step, tensor) for the results a step may compute in place over one of its reads, as many as
    the reads can host: an input's memory holds at most one output of the step (the aliasing pass's
    rule; unless the op's rule says its in-place outputs are equal, an Add's dA = dB = dY), and an
    output already sharing it in this step (a Mul's dA over dY) takes that place. Of the outputs
    competing for the places, the set of most bytes that some assignment hosts (greedy by size with
    augmenting paths: a transversal matroid, so the greedy is optimal); the others count."""
    out: set[tuple[int, int]] = set()
    for s in steps:
        rule = tg.rules.get(s.op)
        if rule is None or not rule.inplace:
            continue
        writes, reads = set(s.writes), set(s.reads)
        hosts: dict[int, list[int]] = {}  # output -> the input groups it may take over
        for src_ref, dst_ref in rule.inplace:
            try:
                src, dst = resolve(tg, s.op, src_ref), resolve(tg, s.op, dst_ref)
            except KeyError:
                continue
            if dst in writes and src in reads:
                hosts.setdefault(dst, []).append(tg.root(src))
        if rule.inplace_equal:
            out.update((s.index, d) for d, rs in hosts.items() if any(r != tg.root(d) for r in rs))
            continue
        # an output sharing an input's memory already keeps that place (its group counts once)
        taken = {tg.root(d) for d, rs in hosts.items() if tg.root(d) in rs}
        free = {d: [r for r in rs if r not in taken] for d, rs in hosts.items() if tg.root(d) not in taken}
        match: dict[int, int] = {}  # input group -> the output it hosts
        for d in sorted(free, key=lambda d: (-size.get(d, 0), d)):
            _augment(d, free, match, set())
        out.update((s.index, d) for d in match.values())
    return out


def _augment(d, hosts, match, seen) -> bool:
    for r in hosts[d]:
        if r in seen:
            continue
        seen.add(r)
        if r not in match or _augment(match[r], hosts, match, seen):
            match[r] = d
            return True
    return False


@dataclass
class Bound:
    lower: float  # no plan whose live bytes fit the target adds fewer FLOPs (inf: none fits)
    optimal: bool  # the model was solved to optimality
    ops: frozenset  # the model's plan: ops that run again (a hint for the search)


def lower_flops(problem, full: Full, target: int, max_nodes: int = MAX_NODES, depth_max: int = DEPTH,
                first_rows: int = FIRST_ROWS, rounds: int = ROUNDS) -> Bound:
    """The least added FLOPs of any plan whose live bytes fit `target`. Rows (steps) enter lazily:
    solve on the steps that exceed the target most, add the steps the answer leaves over it, solve
    again. A subset of the rows is a relaxation too, so every round's dual bound stands; the best
    is returned (`optimal` when the last answer meets every row)."""
    cap = target // full.unit
    rows = []
    for t in range(len(full.must)):
        tot = full.must[t] + sum(full.terms[t].values())
        if tot <= cap:
            continue
        if full.must[t] > cap:
            return Bound(float("inf"), True, frozenset())
        rows.append((t, (tot - cap, full.terms[t])))
    if not rows:
        return Bound(0.0, True, frozenset())
    order = sorted(range(len(rows)), key=lambda i: (-rows[i][1][0], i))
    active = set(order[:first_rows])
    best = Bound(0.0, False, frozenset())
    for _ in range(rounds):
        b = _solve(problem, full, [rows[i] for i in sorted(active)], max_nodes, depth_max)
        if b.lower == float("inf"):
            return b
        left = [i for i in order if i not in active and not _meets(full, rows[i], b.ops, depth_max)]
        best = Bound(max(best.lower, b.lower), b.optimal and not left, b.ops)
        if not left:
            break
        active |= set(left[:first_rows])
    return best


def _meets(full: Full, row, ops, depth_max) -> bool:
    """Row (t, (need, terms)) holds when the ops `ops` run again after t (y = x, one choice of the
    row's variables: False may be a row the model could still meet, which only adds a row)."""
    t, (need, tm) = row
    got = sum(w for ks, w in tm.items() if set(ks) <= ops)
    held: dict = {}
    frontier = [(k, 0) for ks in tm for k in ks if len(ks) == 1 and k in ops]
    seen = set()
    while frontier:
        k, depth = frontier.pop()
        if (k, depth) in seen or depth >= depth_max:
            continue
        seen.add((k, depth))
        for key, w, j in full.inputs.get(k, ()):
            if full.counts(key, t):
                continue
            if j is not None and j in ops:
                frontier.append((j, depth + 1))
            else:
                held[key] = w
    return got - sum(held.values()) >= need


def _solve(problem, full: Full, rows, max_nodes, depth_max) -> Bound:
    import highspy
    import numpy as np

    from memplan_cli.remat.relax import _quiet_highs  # lazy: `memplan analyze --budget 30MiB` does not load it

    inf = highspy.kHighsInf
    # columns: x_k (binary: k runs again), then per row t: y_kt (k runs again after t, <= x_k)
    # and m_gt (group g held at t for a recompute after t that reads it)
    cols: dict = {}
    cost: list = []

    def col(key, c=0.0):
        j = cols.get(key)
        if j is None:
            j = cols[key] = len(cost)
            cost.append(c)
        return j

    lo, hi, starts, idx, vals = [], [], [], [], []

    def row(lb, ub, ent):
        lo.append(lb)
        hi.append(ub)
        starts.append(len(idx))
        for j, v in ent:
            idx.append(j)
            vals.append(float(v))

    def x(k):
        return col(("x", k), float(problem.cost[k] or 0))

    for t, (need, tm) in rows:
        ent = []
        ys: dict = {}

        def y(k, depth):
            j = ys.get(k)
            if j is None:
                j = ys[k] = col(("y", k, t))
                row(-inf, 0.0, [(j, 1), (x(k), -1)])
                if depth < depth_max:  # its recompute reads its inputs after t
                    for g, w, jw in full.inputs.get(k, ()):
                        if full.counts(g, t):
                            continue
                        m = cols.get(("m", g, t))
                        if m is None:
                            m = col(("m", g, t))
                            ent.append((m, -w))
                        row(0.0, inf, [(m, 1), (j, -1)] + ([(y(jw, depth + 1), 1)] if jw is not None else []))
            return j

        for ks, w in sorted(tm.items()):
            if len(ks) == 1:
                ent.append((y(ks[0], 0), w))
            else:
                j = col(("g", ks, t))
                for k in ks:
                    row(-inf, 0.0, [(j, 1), (x(k), -1)])
                ent.append((j, w))
        row(float(need), inf, ent)  # the absent values cover the excess (less what recomputes hold)
    xs = sorted((k[1], j) for k, j in cols.items() if k[0] == "x")
    ncols = len(cost)
    scale = max(cost, default=0.0) or 1.0
    h = _quiet_highs(highspy)
    for k, v in (("threads", 1), ("random_seed", 0), ("mip_rel_gap", 0.0), ("mip_abs_gap", 0.0),
                 ("mip_max_nodes", int(max_nodes))):
        h.setOptionValue(k, v)
    h.addVars(ncols, np.zeros(ncols), np.ones(ncols))
    h.changeColsCost(ncols, np.arange(ncols, dtype=np.int32), np.array(cost) / scale)
    xi = np.array([j for _, j in xs], dtype=np.int32)
    mip = ncols <= MIP_COLS  # larger models: the LP relaxation (its optimum is a bound too, and near)
    if mip:
        h.changeColsIntegrality(len(xi), xi, np.array([highspy.HighsVarType.kInteger] * len(xi)))
    h.addRows(len(lo), np.array(lo), np.array(hi), len(idx), np.array(starts, dtype=np.int32),
              np.array(idx, dtype=np.int32), np.array(vals))
    h.run()
    st = h.getModelStatus()
    if st == highspy.HighsModelStatus.kInfeasible:
        return Bound(float("inf"), True, frozenset())
    info = h.getInfo()
    if mip:
        lower = max(0.0, float(info.mip_dual_bound)) * scale
    elif st == highspy.HighsModelStatus.kOptimal:
        lower = max(0.0, float(info.objective_function_value)) * scale * (1 - 1e-7)  # the LP's tolerance
    else:
        lower = 0.0
    sol = h.getSolution().col_value
    ops = frozenset(k for k, j in xs if len(sol) > j and sol[j] > 0.5)
    return Bound(lower, mip and st == highspy.HighsModelStatus.kOptimal, ops)
