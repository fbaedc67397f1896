"""memplan's planners against each other, the runtimes' planners and omnimalloc, on public and
synthetic instances. Prints figures; it is not a test (nothing here fails the suite).

Per instance: buffers, naive/LB, and for each planner arena/LB and seconds; then omnimalloc's
allocators (`omni`, `greedy_by_all`, `supermalloc`) when `import omnimalloc` works, each in its own
subprocess under a wall-clock cap, and the best of them next to memplan's best.

Instances:
- minimalloc/A..K: MiniMalloc's 11 "challenging" instances (../shared/benchmarks/minimalloc);
- idealloc/*: resnet50, G_1, pangu_2.6B, S_1, Y_1 (816 to 62,185 buffers; same CSV format);
- model/*: the sample models' training graphs with the memplan profile (one arena), built the way
  `memplan analyze` builds them: mnist.circle batch 32 Adam, mobilenetv2.circle batch 10 Adam;
  onert/*: the onert profile's planned pools (WIC pools with >= 10 buffers) for the same models;
- synth/chain-N: a chain of N/7 layers trained with Adam (activations kept for backward, with a
  residual every 3 layers, derivatives for two steps, weight gradients applied at once, weights
  and optimizer state live throughout, a workspace per forward step); fixed seed;
- synth/tiling-N: a width x height rectangle (steps x bytes) cut recursively (guillotine) into N
  pieces, each a buffer: the pieces tile the rectangle, so optimum = LB = height by construction.
  N in 10^2 .. 10^5 (chain only to 10^4: its overlapping pairs grow as N^2, see the note printed).

Planners: memplan's greedy, exact and best (the last two when registered), and the replays of
onert's firstfit and wic, singa, nntrainer-v1 (nntrainer's default). `--time-limit` goes to exact,
best and omnimalloc's supermalloc; greedy and the replays always run to completion. Planners too
slow for an instance's size are skipped with a note (pure-Python replays, exact above 2,000).
Every memplan plan and every omnimalloc plan is checked by `memplan_cli.check.overlap.check_plan`.

    .venv/bin/python benchmarks/plan_bench.py [--quick] [--time-limit 10] [--only 'idealloc/*']
                                              [--csv out.csv] [--planners greedy,best] [--no-omnimalloc]

omnimalloc: `.venv/bin/pip install -e '.[bench]'` (or `pip install omnimalloc`).
"""
from __future__ import annotations

import argparse
import csv
import fnmatch
import glob
import heapq
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

SHARED = os.environ.get("MEMPLAN_SHARED_BENCHMARKS", os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..", "shared", "benchmarks"))
SAMPLES = os.path.join(ROOT, "sample_models")

PLANNERS = ("greedy", "exact", "best", "firstfit", "wic", "singa", "nntrainer-v1")
# planners that take --time-limit (searches); the others run to completion
TIMED = {"exact", "best"}
# largest instance each planner is run on by default, and why (measured on the 2-core dev box)
MAX_N = {
    "exact": (2000, "exact search; only for n <= ~2k (planning.md section 0)"),
    "wic": (20000, "pure-Python O(n^2) replay: 33 s at 18.7k, > 100 s at 28.5k"),
    "nntrainer-v3": (30000, "pure-Python replay: 68 s at 62k"),
    "nntrainer-v1": (70000, "pure-Python replay, its stack grows with the arena: 40 s on tiling-30000"),
    "firstfit": (70000, "pure-Python replay: 8 s on tiling-30000, 16 s on Y_1"),
}
NAME_W = 38
OMNI = ("omni", "greedy_by_all", "supermalloc")
OMNI_MAX_N = {"supermalloc": (20000, "11 GB and 35-45 s on 28k-62k buffers in omnimalloc-bench.md")}

QUICK_ONLY = ("minimalloc/A", "minimalloc/C", "minimalloc/K", "idealloc/resnet50", "idealloc/G_1",
              "model/*", "synth/*-100", "synth/*-1000")


# ---- instances ----------------------------------------------------------------------------------
@dataclass
class Instance:
    name: str
    sizes: list[int]
    firsts: list[int]
    lasts: list[int]
    note: str = ""
    optimum: int | None = None   # when known by construction


def csv_instances(folder: str, prefix: str):
    from memplan_cli.plancsv import read_buffers_csv

    for path in sorted(glob.glob(os.path.join(SHARED, folder, "*.csv"))):
        stem = os.path.basename(path)[:-4]
        name = f"{prefix}/{stem.split('.')[0] if prefix == 'minimalloc' else stem}"
        yield name, (lambda p=path: _from_table(read_buffers_csv(p)))


def _from_table(t):
    return t.sizes, t.firsts, t.lasts


def model_instances():
    from memplan_cli.commands.options import config_from_flags
    from memplan_cli.loaders import load_model
    from memplan_cli.profiles import get_profile

    for model, batch in (("mnist", 32), ("mobilenetv2", 10)):
        path = os.path.join(SAMPLES, f"{model}.circle")
        tag = f"{model}-b{batch}-adam"
        cache = {}

        def build(profile, path=path, batch=batch, cache=cache):
            if profile not in cache:
                graph = load_model(path, batch_size=batch)
                cfg = config_from_flags(graph.metadata, batch_size=batch, optimizer="adam")
                cache[profile] = get_profile(profile).build(graph, cfg)
            return cache[profile]

        def whole(build=build):
            b = build("memplan").buffers
            return [x.size for x in b], [x.first for x in b], [x.last for x in b]

        yield f"model/{tag}", whole
        for pool in ("non-const", "trainable", "opt-variable", "back-prop", "gradient", "disposable"):
            def one_pool(build=build, pool=pool):
                bl = build("onert")
                b = bl.in_pool(f"onert:{pool}")
                return [x.size for x in b], [x.first for x in b], [x.last for x in b]
            yield f"onert/{model}-b{batch}/{pool}", one_pool


def chain_training(n: int, seed: int = 0, residual_every: int = 3):
    """A synthetic training step of a chain of layers, about n buffers (7 per layer)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    L = max(2, n // 7)
    act = np.exp(rng.uniform(np.log(2**12), np.log(2**22), L + 1)).astype(np.int64)
    wsz = np.exp(rng.uniform(np.log(2**8), np.log(2**21), L + 1)).astype(np.int64)
    tmp = np.exp(rng.uniform(np.log(2**8), np.log(2**18), L + 1)).astype(np.int64)

    def base(k):  # step of layer k's calcGradient; +1 calcDerivative, +2 applyGradient
        return L + 2 + 3 * (L - k)

    end = base(1) + 2
    S, F, T = [], [], []

    def add(s, f, l):
        S.append(int(s))
        F.append(int(f))
        T.append(int(l))

    for k in range(L + 1):                     # activations a_0 (the input) .. a_L, kept for backward
        last = L + 1 if k == L else base(k + 1)
        if residual_every and k % residual_every == 0 and k + residual_every <= L:
            last = max(last, base(k + residual_every))
        add(act[k], k, last)
    for k in range(1, L + 1):
        add(tmp[k], k, k)                                   # forward workspace
        add(act[k], L + 1 if k == L else base(k + 1) + 1, base(k) + 1)   # dLoss/da_k
        add(wsz[k], base(k), base(k) + 2)                   # dW_k, applied at once
        for _ in range(3):                                  # W_k, Adam m_k and v_k
            add(wsz[k], 0, end)
    return S, F, T


def tiling(n: int, seed: int = 0, height: int = 1 << 30):
    """Guillotine cuts of a (8n steps) x height rectangle into n pieces: optimum = LB = height."""
    import numpy as np

    rng = np.random.default_rng(seed)
    width = 8 * n
    heap = [(-(width * height), 0, width, 0, height)]
    done = []
    while heap and len(heap) + len(done) < n:
        _, x0, x1, y0, y1 = heapq.heappop(heap)
        if x1 - x0 > 1 and (y1 - y0 <= 1 or rng.random() < 0.5):
            c = int(rng.integers(x0 + 1, x1))
            parts = [(x0, c, y0, y1), (c, x1, y0, y1)]
        elif y1 - y0 > 1:
            c = int(rng.integers(y0 + 1, y1))
            parts = [(x0, x1, y0, c), (x0, x1, c, y1)]
        else:
            done.append((x0, x1, y0, y1))
            continue
        for p0, p1, q0, q1 in parts:
            heapq.heappush(heap, (-((p1 - p0) * (q1 - q0)), p0, p1, q0, q1))
    pieces = done + [h[1:] for h in heap]
    return [y1 - y0 for _, _, y0, y1 in pieces], [x0 for x0, _, _, _ in pieces], [x1 - 1 for _, x1, _, _ in pieces]


CHAIN_NS = (100, 1000, 10000)
TILING_NS = (100, 1000, 10000, 100000)


def synth_instances():
    for n in CHAIN_NS:
        yield f"synth/chain-{n}", (lambda n=n: chain_training(n))
    for n in TILING_NS:
        yield f"synth/tiling-{n}", (lambda n=n: tiling(n))


def all_instances():
    yield from csv_instances("minimalloc", "minimalloc")
    yield from csv_instances("idealloc", "idealloc")
    yield from model_instances()
    yield from synth_instances()


def selected(name: str, patterns) -> bool:
    if not patterns:
        return True
    for p in patterns:
        if any(c in p for c in "*?["):
            if fnmatch.fnmatch(name, p):
                return True
        elif p in name:
            return True
    return False


# ---- omnimalloc, in a subprocess --------------------------------------------------------------
def omni_worker(alloc: str, data_path: str, timeout: float) -> int:
    """Child: plan the instance in `data_path` (JSON sizes/firsts/lasts) with omnimalloc's `alloc`,
    print {"offsets", "seconds"} as JSON. Zero-size buffers are left out (omnimalloc rejects them)."""
    import omnimalloc as om

    with open(data_path) as f:
        d = json.load(f)
    sizes, firsts, lasts = d["sizes"], d["firsts"], d["lasts"]
    keep = [i for i, s in enumerate(sizes) if s > 0]
    allocs = tuple(om.Allocation(id=k, size=sizes[i], start=firsts[i], end=lasts[i] + 1) for k, i in enumerate(keep))
    pool = om.Pool(id="arena", allocations=allocs)
    if alloc == "supermalloc":
        from omnimalloc.allocators import SupermallocAllocator

        allocator = SupermallocAllocator(timeout=timeout)
    else:
        allocator = alloc
    t0 = time.perf_counter()
    placed = om.allocate(pool, allocator)
    seconds = time.perf_counter() - t0
    offsets = [0] * len(sizes)
    by_id = {a.id: a.offset for a in placed.allocations}
    for k, i in enumerate(keep):
        offsets[i] = int(by_id[k])
    json.dump({"offsets": offsets, "seconds": seconds}, sys.stdout)
    return 0


def have_omnimalloc() -> bool:
    try:
        import omnimalloc  # noqa: F401
    except ImportError:
        return False
    return True


def _limit_memory(gb: float):
    def f():
        b = int(gb * 1024**3)
        resource.setrlimit(resource.RLIMIT_AS, (b, b))
    return f


def run_omni(alloc: str, data_path: str, timeout: float, cap: float, mem_gb: float) -> dict:
    """{"offsets", "seconds"} or {"error"}; the child runs in its own session and is killed at `cap`."""
    cmd = [sys.executable, os.path.abspath(__file__), "--omni-worker", alloc, data_path, str(timeout)]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                         preexec_fn=_limit_memory(mem_gb))
    t0 = time.perf_counter()
    try:
        out, err = p.communicate(timeout=cap)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        return {"error": f">{cap:.0f} s (killed)"}
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        last = (err.strip().splitlines() or ["?"])[-1]
        return {"error": f"failed: {last[:80]}", "wall": wall}
    r = json.loads(out)
    r["wall"] = wall
    return r


# ---- running --------------------------------------------------------------------------------
@dataclass
class Cell:
    arena: int | None = None
    seconds: float | None = None
    note: str = ""
    status: str = ""

    def text(self, lb: int) -> str:
        if self.arena is None:
            return self.note or "-"
        r = self.arena / lb if lb else float("nan")
        return f"{r:.4f} {self.seconds:.2f}s"


@dataclass
class Row:
    name: str
    n: int
    lb: int
    naive: int
    pairs: int
    optimum: int | None
    cells: dict = field(default_factory=dict)


def overlapping_pairs(firsts, lasts) -> int:
    import numpy as np

    f = np.asarray(firsts, np.int64)
    l = np.asarray(lasts, np.int64)
    sf, sl = np.sort(f), np.sort(l)
    c = np.searchsorted(sf, l, side="right") - np.searchsorted(sl, f, side="left") - 1
    return int(c.sum() // 2)


def bench_instance(name, sizes, firsts, lasts, planners, args, omni: bool, optimum=None) -> Row:
    from memplan_cli.check.overlap import check_plan
    from memplan_cli.planners.bound import lower_bound
    from memplan_cli.planrun import plan_buffers

    n = len(sizes)
    lb = lower_bound(sizes, firsts, lasts)
    row = Row(name, n, lb, sum(sizes), overlapping_pairs(firsts, lasts), optimum)
    for p in planners:
        cap = MAX_N.get(p)
        if cap and n > cap[0] and not args.no_caps:
            row.cells[p] = Cell(note=f"skip n>{cap[0]}")
            continue
        tl = args.time_limit if p in TIMED else None
        r = plan_buffers(p, sizes, firsts, lasts, time_limit=tl, lower_bound=lb)  # verified inside
        row.cells[p] = Cell(r.arena, r.seconds, status=r.status)
    if omni:
        with tempfile.TemporaryDirectory(prefix="plan_bench_") as tmp:
            data = os.path.join(tmp, "instance.json")
            with open(data, "w") as f:
                json.dump({"sizes": list(map(int, sizes)), "firsts": list(map(int, firsts)),
                           "lasts": list(map(int, lasts))}, f)
            for a in OMNI:
                cap = OMNI_MAX_N.get(a)
                if cap and n > cap[0] and not args.no_caps:
                    row.cells["om:" + a] = Cell(note=f"skip n>{cap[0]}")
                    continue
                r = run_omni(a, data, args.time_limit, args.omni_cap, args.omni_mem_gb)
                if "error" in r:
                    row.cells["om:" + a] = Cell(note=r["error"])
                    continue
                offs = r["offsets"]
                arena = max((o + s for o, s in zip(offs, sizes)), default=0)
                check_plan(sizes, firsts, lasts, offs, arena)  # omnimalloc's plans are checked too
                row.cells["om:" + a] = Cell(arena, r["seconds"])
    return row


def best_of(row: Row, keys) -> tuple[str, Cell] | None:
    got = [(k, row.cells[k]) for k in keys if k in row.cells and row.cells[k].arena is not None]
    if not got:
        return None
    return min(got, key=lambda kc: (kc[1].arena, kc[1].seconds))


# ---- printing ----------------------------------------------------------------------------------
def print_header(planners, omni):
    cols = ["instance", "n", "naive/LB"] + list(planners) + (["omnimalloc best"] if omni else [])
    widths = [NAME_W, 6, 8] + [15] * len(planners) + ([30] if omni else [])
    line = " ".join(f"{c:<{w}}" if i == 0 else f"{c:>{w}}" for i, (c, w) in enumerate(zip(cols, widths)))
    print(line)
    print("-" * len(line), flush=True)
    return widths


def print_row(row: Row, planners, omni, widths):
    naive = f"{row.naive / row.lb:.2f}" if row.lb else "-"
    vals = [row.name, str(row.n), naive] + [row.cells[p].text(row.lb) if p in row.cells else "-" for p in planners]
    if omni:
        b = best_of(row, ["om:" + a for a in OMNI])
        vals.append(f"{b[1].text(row.lb)} {b[0][3:]}" if b else
                    "; ".join(f"{a}: {row.cells['om:' + a].note}" for a in OMNI if "om:" + a in row.cells))
    print(" ".join(f"{v:<{w}}" if i == 0 else f"{v:>{w}}" for i, (v, w) in enumerate(zip(vals, widths))), flush=True)


def omni_detail(rows):
    print("\nomnimalloc allocators (arena/LB, seconds of the allocate call; in a subprocess each):")
    print(f"{'instance':<{NAME_W}} " + " ".join(f"{a:>22}" for a in OMNI))
    for r in rows:
        print(f"{r.name:<{NAME_W}} " + " ".join(f"{r.cells.get('om:' + a, Cell()).text(r.lb):>22}" for a in OMNI))


def summary(rows, planners, omni, args):
    mine = [p for p in ("greedy", "exact", "best") if p in planners]
    print("\nper instance: memplan's best (greedy/exact/best) against omnimalloc's best")
    print(f"{'instance':<{NAME_W}} {'n':>6} {'LB':>16} {'memplan':>24} {'omnimalloc':>28} {'verdict':>10}")
    worse = []
    for r in rows:
        m = best_of(r, mine)
        o = best_of(r, ["om:" + a for a in OMNI]) if omni else None
        mt = f"{m[1].arena / r.lb:.4f} {m[0]}" if m and r.lb else "-"
        ot = f"{o[1].arena / r.lb:.4f} {o[0][3:]}" if o and r.lb else "-"
        verdict = "-"
        if m and o:
            verdict = "better" if m[1].arena < o[1].arena else "tie" if m[1].arena == o[1].arena else "WORSE"
            if verdict == "WORSE":
                worse.append(r.name)
        print(f"{r.name:<{NAME_W}} {r.n:>6} {r.lb:>16,} {mt:>24} {ot:>28} {verdict:>10}")

    print("\ntargets")
    models = [r for r in rows if r.name.startswith("model/")]
    for r in models:
        for p in mine:
            c = r.cells.get(p)
            if c and c.arena is not None:
                ok = c.arena <= 1.01 * r.lb
                print(f"  {r.name} {p}: arena/LB {c.arena / r.lb:.4f} {'<=' if ok else '>'} 1.01"
                      f"{'' if ok else '  MISSED'}")
    for r in rows:
        if r.name == "idealloc/Y_1":
            for p in ("greedy", "best"):
                c = r.cells.get(p)
                if c and c.arena is not None:
                    ok = c.seconds <= 10
                    print(f"  Y_1 (62,185 buffers) {p}: {c.seconds:.1f} s {'<=' if ok else '>'} 10 s"
                          f"{'' if ok else '  MISSED'}")
    if omni:
        print(f"  never worse than omnimalloc's best: "
              f"{'yes' if not worse else 'NO, worse on ' + ', '.join(worse)}")
    tiles = [r for r in rows if r.optimum is not None]
    if tiles:
        print("  tiling (optimum = LB by construction): " + ", ".join(
            f"{r.name.split('/')[-1]} best {best_of(r, mine)[1].arena / r.lb:.4f}" for r in tiles if best_of(r, mine)))


def write_csv(path, rows, keys):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["instance", "n", "lower_bound", "naive", "overlapping_pairs", "planner", "arena",
                    "arena_over_lb", "seconds", "status", "note"])
        for r in rows:
            for k in keys:
                c = r.cells.get(k)
                if c is None:
                    continue
                ratio = f"{c.arena / r.lb:.6f}" if c.arena is not None and r.lb else ""
                sec = f"{c.seconds:.4f}" if c.seconds is not None else ""
                w.writerow([r.name, r.n, r.lb, r.naive, r.pairs, k.replace("om:", "omnimalloc:"),
                            "" if c.arena is None else c.arena, ratio, sec, c.status, c.note])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a subset that finishes in well under a minute")
    ap.add_argument("--time-limit", type=float, default=None,
                    help="seconds for exact, best and supermalloc (default 10; 1 with --quick)")
    ap.add_argument("--only", action="append", default=[], metavar="PATTERN",
                    help="instances whose name matches (glob, or a substring); repeatable")
    ap.add_argument("--csv", metavar="FILE", help="also write every cell to FILE (long format)")
    ap.add_argument("--planners", default=None, help=f"comma list (default: {','.join(PLANNERS)}, those registered)")
    ap.add_argument("--no-omnimalloc", action="store_true", help="skip omnimalloc even when installed")
    ap.add_argument("--omni-cap", type=float, default=None,
                    help="wall-clock cap per omnimalloc run, seconds (default 60; 20 with --quick)")
    ap.add_argument("--omni-mem-gb", type=float, default=8.0, help="address-space cap per omnimalloc run")
    ap.add_argument("--no-caps", action="store_true", help="run every planner on every instance, however slow")
    ap.add_argument("--omni-worker", nargs=3, metavar=("ALLOC", "DATA", "TIMEOUT"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.omni_worker:
        a, data, timeout = args.omni_worker
        return omni_worker(a, data, float(timeout))
    if args.time_limit is None:
        args.time_limit = 1.0 if args.quick else 10.0
    if args.omni_cap is None:
        args.omni_cap = 20.0 if args.quick else 60.0

    from memplan_cli.planners import planner_names

    known = planner_names()
    wanted = args.planners.split(",") if args.planners else list(PLANNERS)
    planners = [p for p in wanted if p in known]
    missing = [p for p in wanted if p not in known]
    omni = not args.no_omnimalloc and have_omnimalloc()
    patterns = list(args.only) or (list(QUICK_ONLY) if args.quick else [])
    if args.quick and args.only:
        patterns = list(args.only)

    print(f"plan_bench: planners {', '.join(planners)}"
          + (f" (not registered: {', '.join(missing)})" if missing else ""))
    timed = sorted(TIMED & set(planners)) + (["omnimalloc supermalloc"] if omni else [])
    print(f"time limit {args.time_limit:g} s for {', '.join(timed) or 'no planner'}; "
          "greedy and the replays run to completion")
    print("omnimalloc: " + (f"{', '.join(OMNI)}, each in a subprocess capped at {args.omni_cap:g} s / "
                            f"{args.omni_mem_gb:g} GB" if omni else "not installed (pip install omnimalloc)"
                            if not args.no_omnimalloc else "skipped"))
    caps = "; ".join(f"{p} above {c[0]:,} ({c[1]})" for p, c in MAX_N.items() if p in planners)
    if caps and not args.no_caps:
        print(f"skipped: {caps}")
    if omni and not args.no_caps:
        print("skipped: " + "; ".join(f"omnimalloc {a} above {c[0]:,} ({c[1]})" for a, c in OMNI_MAX_N.items()))
    print("cells: arena/LB and the planner's wall seconds; every plan checked by check_plan\n")

    widths = print_header(planners, omni)
    rows = []
    t_all = time.perf_counter()
    for name, load in all_instances():
        if not selected(name, patterns):
            continue
        try:
            sizes, firsts, lasts = load()
        except Exception as e:  # a missing sample or profile: say so, keep going
            print(f"{name:<{NAME_W}} not built: {type(e).__name__}: {str(e)[:80]}", flush=True)
            continue
        if not sizes:
            continue
        optimum = None
        if name.startswith("synth/tiling"):
            optimum = 1 << 30
        row = bench_instance(name, sizes, firsts, lasts, planners, args, omni, optimum)
        if optimum is not None:
            assert row.lb == optimum, (name, row.lb)
        rows.append(row)
        print_row(row, planners, omni, widths)
    if omni:
        omni_detail(rows)
    summary(rows, planners, omni, args)
    if any(r.name == f"synth/chain-{CHAIN_NS[-1]}" for r in rows):
        last = max((r for r in rows if r.name.startswith("synth/chain")), key=lambda r: r.n)
        print(f"\nnote: chain-{CHAIN_NS[-1] * 10} is left out: a chain's activations nest and its weights and "
              f"optimizer state span the whole step, so overlapping pairs grow as n^2 "
              f"({last.pairs:,} at n={last.n:,}); greedy's work is proportional to them")
    if args.csv:
        keys = list(planners) + ["om:" + a for a in OMNI]
        write_csv(args.csv, rows, keys)
        print(f"\nwrote {args.csv}")
    print(f"\ntotal {time.perf_counter() - t_all:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
