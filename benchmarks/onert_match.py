"""memplan's `onert` profile against the real onert 0.1.0: every ALLOC line, byte for byte.

For each configuration it predicts onert's `[ ALLOC ] allocation capacity: N` lines with
`predict_alloc_lines`, compiles the same model in the real runtime (a child process with
ONERT_LOG_ENABLE=1 and CPU_MEMORY_PLANNER set, see devtools/onert_runtime.py) and
prints one row: the configuration, the number of ALLOC lines, lines equal / total, the first
mismatch if any, memplan's time (load + predict) and onert's (load + compile, measured inside the
child).

Matrix: mnist (batch 1, 32) and MobileNetV2 (batch 1, 10) x SGD, Adam x planners wic, bump,
firstfit x trainable ops all, 1, 2, 10 (96 configurations), then every test-zoo model
(devtools/zoo.py) at six configurations, and the zoo models onert cannot train (a row
matches when memplan refuses the model and onert fails too; those run one training step, since
onert rejects a fused TANH only when it trains).

    .venv/bin/python benchmarks/onert_match.py                # full matrix (~75 s on 2 cores)
    .venv/bin/python benchmarks/onert_match.py --quick        # a representative subset (~10 s)
    .venv/bin/python benchmarks/onert_match.py --only mobilenetv2,b10,firstfit
    .venv/bin/python benchmarks/onert_match.py --json out.json

`--only` keeps the rows whose label has every comma-separated term as a word (labels look like
`mnist b32 adam t=all wic` and `zoo residual b2 sgd t=5 bump`).

Timings: memplan's column is load + predict, measured first, one at a time; onert's is load +
compile inside the child, with ONERT_LOG_ENABLE=1 (needed to read the ALLOC lines; about 20% on
MobileNetV2). `--jobs 2` runs two onert processes at once, starting one only when
/proc/meminfo's MemAvailable covers the predicted allocation (the sum of its ALLOC lines, plus a
margin) of every running one; a config whose prediction alone exceeds that runs by itself. It is
not the default: on a 2-core machine two concurrent onert compiles each take 4-8x longer (two
MobileNetV2 b10 compiles: 5 s each instead of 0.6 s), so the whole matrix is no faster and the
timing column is wrong. Exit status 1 when a row does not match.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from memplan_cli.config import TrainConfig  # noqa: E402
from memplan_cli.errors import MemplanError  # noqa: E402
from memplan_cli.loaders import load_model  # noqa: E402
from memplan_cli.profiles.onert import predict_alloc_lines  # noqa: E402
from devtools.onert_runtime import available, run_onert  # noqa: E402
from devtools import zoo  # noqa: E402

SAMPLES = os.path.join(os.path.dirname(HERE), "sample_models")
MODELS = {"mnist": (1, 32), "mobilenetv2": (1, 10)}
OPTIMIZERS = ("sgd", "adam")
PLANNERS = ("wic", "bump", "firstfit")
TRAINABLE = (-1, 1, 2, 10)
# (batch, optimizer, trainable ops, planner) for every zoo model
ZOO_CONFIGS = [(2, "adam", -1, "wic"), (3, "sgd", -1, "firstfit"), (1, "adam", -1, "bump"),
               (2, "sgd", 2, "firstfit"), (5, "adam", 3, "wic"), (4, "sgd", 1, "bump")]
QUICK = [("mnist", 32, "adam", -1, p) for p in PLANNERS] + [
    ("mnist", 1, "sgd", 2, "firstfit"), ("mnist", 32, "sgd", 10, "wic"),
    ("mobilenetv2", 1, "adam", -1, "wic"), ("mobilenetv2", 1, "sgd", 10, "firstfit"),
    ("mobilenetv2", 1, "sgd", 2, "bump")]
QUICK_ZOO = [(3, "sgd", -1, "firstfit"), (2, "sgd", 2, "firstfit")]
NAMES = ["non-const", "trainable", "opt-variable", "back-prop", "gradient", "disposable"]
MARGIN = 400 << 20  # the child interpreter, numpy, onert's libraries and its unplanned buffers


def label(model, batch, opt, trainable, planner, zoo_model=False):
    t = "all" if trainable < 0 else str(trainable)
    return f"{'zoo ' if zoo_model else ''}{model} b{batch} {opt} t={t} {planner}"


def line_name(k, n):
    if k < len(NAMES):
        return NAMES[k]
    return "layer-scope" if k == n - 1 else f"kernel #{k - len(NAMES)}"


def configs(args, tmp):
    """[(label, group, path, batch, opt, trainable, planner, zoo?)]"""
    out = []
    rows = QUICK if args.quick else [(m, b, o, t, p) for m, bs in MODELS.items() for b in bs
                                     for o in OPTIMIZERS for t in TRAINABLE for p in PLANNERS]
    for m, b, o, t, p in rows:
        out.append((label(m, b, o, t, p), f"{m} b{b}", os.path.join(SAMPLES, m + ".circle"), b, o, t, p, False))
    if not args.no_zoo:
        zcfg = QUICK_ZOO if args.quick else ZOO_CONFIGS
        for name, fn in {**zoo.ZOO, **zoo.UNTRAINABLE}.items():
            path = fn().save(os.path.join(tmp, name + ".circle"))
            group = "zoo (onert refuses)" if name in zoo.UNTRAINABLE else "zoo"
            for b, o, t, p in (zcfg[:1] if name in zoo.UNTRAINABLE else zcfg):
                out.append((label(name, b, o, t, p, True), group, path, b, o, t, p, True))
    if args.only:
        terms = [x for x in args.only.split(",") if x]
        out = [c for c in out if all(x in c[0].split() for x in terms)]
    return out


def predict(path, batch, opt, trainable, planner):
    """(lines or None, refusal reason or None, seconds) - memplan loads and predicts."""
    t0 = time.perf_counter()
    try:
        g = load_model(path, batch_size=batch)
        cfg = TrainConfig(batch_size=batch, optimizer=opt, trainable=trainable if trainable >= 0 else "all")
        lines = predict_alloc_lines(g, cfg, planner=planner, threads=os.cpu_count())
        return lines, None, time.perf_counter() - t0
    except MemplanError as e:
        return None, str(e), time.perf_counter() - t0


def mem_available() -> int:
    try:
        with open("/proc/meminfo") as f:
            for ln in f:
                if ln.startswith("MemAvailable:"):
                    return int(ln.split()[1]) * 1024
    except OSError:
        pass
    return 1 << 62


class MemoryGate:
    """Lets a job start when MemAvailable covers it on top of the reservations of running jobs."""

    def __init__(self):
        self.cv = threading.Condition()
        self.reserved = 0
        self.running = 0

    def acquire(self, need: int):
        with self.cv:
            while True:
                avail = mem_available() - self.reserved
                if self.running == 0 or need <= avail:
                    self.reserved += need
                    self.running += 1
                    return
                self.cv.wait(timeout=2)

    def release(self, need: int):
        with self.cv:
            self.reserved -= need
            self.running -= 1
            self.cv.notify_all()


def compare(want, refusal, got):
    """(status, equal, total, first mismatch)."""
    if refusal is not None:
        if got["ok"]:
            return "MISMATCH", 0, len(got["alloc_lines"]), f"memplan refuses ({refusal}) but onert trains"
        return "match", 0, 0, f"both refuse; onert: {got['error'] or (got['tail'] or ['?'])[-1]}"
    if not got["ok"]:
        why = got["error"] or (got["tail"] or ["?"])[-1]
        return "MISMATCH", 0, len(want), f"onert failed: {why[:100]}"
    have = got["alloc_lines"]
    n = max(len(want), len(have))
    eq = sum(1 for a, b in zip(want, have) if a == b)
    if want == have:
        return "match", eq, n, ""
    for k in range(n):
        a = want[k] if k < len(want) else None
        b = have[k] if k < len(have) else None
        if a != b:
            first = f"line {k + 1} ({line_name(k, len(have))}): memplan {a} onert {b}"
            break
    if len(want) != len(have):
        first += f"; {len(want)} lines vs onert's {len(have)}"
    return "MISMATCH", eq, n, first


def run_one(cfg, pred, gate, python):
    lab, group, path, batch, opt, trainable, planner, _ = cfg
    want, refusal, t_mem = pred
    need = sum(want or []) + MARGIN
    gate.acquire(need)
    try:
        # a refused model runs one training step too: onert rejects some only when it trains
        got = run_onert(path, batch=batch, optimizer=opt, trainable_ops=trainable, planner=planner,
                        python=python, steps=1 if refusal is not None else 0)
    finally:
        gate.release(need)
    status, eq, total, first = compare(want, refusal, got)
    return {"label": lab, "group": group, "status": status, "lines": len(got["alloc_lines"]),
            "equal": eq, "total": total, "first_mismatch": first, "memplan_s": t_mem,
            "onert_compile_s": got["compile_s"], "predicted": want, "onert": got["alloc_lines"]}


def fmt_s(x):
    return "-" if x is None else f"{x * 1000:8.1f}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="a representative subset")
    ap.add_argument("--only", help="comma-separated words every kept row's label contains (e.g. mnist,b32,wic)")
    ap.add_argument("--no-zoo", action="store_true", help="skip the test-zoo models")
    ap.add_argument("--jobs", type=int, default=1, choices=(1, 2),
                    help="onert processes at once (default 1: on 2 cores two concurrent compiles "
                         "each run 4-8x slower, see the module doc)")
    ap.add_argument("--python", help="interpreter with onert installed (default: this one)")
    ap.add_argument("--json", help="also write every row (with both line lists) to this file")
    args = ap.parse_args(argv)
    py = args.python or sys.executable
    if not available(py):
        print(f"onert is not importable from {py}: nothing to compare against", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="onert_match_") as tmp:
        cfgs = configs(args, tmp)
        if not cfgs:
            print("no configuration matches --only", file=sys.stderr)
            return 2
        # predictions first, one at a time, so memplan's timings do not share the CPU with onert
        predict(*cfgs[0][2:7])  # warm-up: imports
        preds = [predict(*c[2:7]) for c in cfgs]
        gate = MemoryGate()
        t0 = time.perf_counter()
        width = max(len(c[0]) for c in cfgs)
        print(f"{'configuration':<{width}}  {'lines':>5}  {'equal':>7}  {'memplan ms':>10}  "
              f"{'onert ms':>9}  first mismatch")
        rows = []
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as ex:
            for r in ex.map(lambda cp: run_one(cp[0], cp[1], gate, py), zip(cfgs, preds)):
                rows.append(r)
                eq = f"{r['equal']}/{r['total']}" if r["total"] else "-"
                note = r["first_mismatch"] if r["status"] != "match" else (r["first_mismatch"] or "")
                print(f"{r['label']:<{width}}  {r['lines']:>5}  {eq:>7}  {fmt_s(r['memplan_s']):>10}  "
                      f"{fmt_s(r['onert_compile_s']):>9}  {'' if r['status'] == 'match' else 'MISMATCH '}{note}",
                      flush=True)
        wall = time.perf_counter() - t0
    print()
    print(f"{'group':<22} {'configs matching':>16} {'lines equal':>14} {'memplan ms (mean)':>18} "
          f"{'onert ms (mean)':>16}")
    groups = {}
    for r in rows:
        groups.setdefault(r["group"], []).append(r)
    for g, rs in groups.items():
        ok = sum(r["status"] == "match" for r in rs)
        eq, tot = sum(r["equal"] for r in rs), sum(r["total"] for r in rs)
        tm = sum(r["memplan_s"] for r in rs) / len(rs)
        to = [r["onert_compile_s"] for r in rs if r["onert_compile_s"] is not None]
        print(f"{g:<22} {f'{ok}/{len(rs)}':>16} {f'{eq}/{tot}':>14} {tm * 1000:>18.1f} "
              f"{(sum(to) / len(to) * 1000 if to else float('nan')):>16.1f}")
    ok = sum(r["status"] == "match" for r in rows)
    print(f"\n{ok}/{len(rows)} configurations match, "
          f"{sum(r['equal'] for r in rows)}/{sum(r['total'] for r in rows)} ALLOC lines equal "
          f"({wall:.0f} s wall, {args.jobs} onert jobs)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0 if ok == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
