#!/usr/bin/env python3
"""`memplan verify` on the samples: does every plan hold, by how much do the arena and the reference
runs differ, and how long does it take; then (when onert is installed) memplan's executor against
the real onert on mnist.

    .venv/bin/python benchmarks/verify_bench.py [--quick] [--no-onert] [--json]

Each verification is a fresh `python -m memplan_cli verify ... -f json` process (so the seconds
include start-up, loading and planning; `plan` and `run` split them); peak RSS comes from wait4().
Target (issue 7): every configuration passes and MobileNetV2 batch 2 takes under 2 minutes on the
2-core development machine. The onert comparison runs one training step of mnist (batch 8, MSE) in
onert 0.1.0 and in memplan's executor inside memplan's plan, from the model's weights and the same
inputs and labels, and compares the loss, every updated weight (onert's `train_export_circle`) and
the second step's loss (see `devtools/onert_check.py`).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MNIST = os.path.join(REPO, "sample_models", "mnist.circle")
MOBILENET = os.path.join(REPO, "sample_models", "mobilenetv2.circle")

# (label, model, batch, optimizer, profile)
CONFIGS = [
    ("mnist", MNIST, 8, "sgd", "memplan"), ("mnist", MNIST, 8, "sgd", "onert"),
    ("mnist", MNIST, 8, "adam", "memplan"), ("mnist", MNIST, 8, "adam", "onert"),
    ("mobilenetv2", MOBILENET, 2, "sgd", "memplan"), ("mobilenetv2", MOBILENET, 2, "sgd", "onert"),
    ("mobilenetv2", MOBILENET, 2, "adam", "memplan"), ("mobilenetv2", MOBILENET, 2, "adam", "onert"),
]
QUICK = {0, 1, 2, 3, 4, 5}
ONERT_CASES = [("sgd", 0.01), ("adam", 0.001)]


def verify(model: str, batch: int, optimizer: str, profile: str) -> dict:
    argv = [sys.executable, "-m", "memplan_cli", "verify", model, "-b", str(batch), "-O", optimizer,
            "--profile", profile, "-f", "json", "-v"]
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(argv, stdout=out, stderr=err, cwd=REPO)
        _, status, usage = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        text, etext = out.read(), err.read()
    rss = usage.ru_maxrss / 1024
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        tail = (etext or text).strip().splitlines()
        return {"passed": False, "error": tail[-1] if tail else "no output", "wall_s": wall, "rss_mb": rss}
    doc.update(wall_s=wall, rss_mb=rss, exit=p.returncode)
    return doc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="mnist and MobileNetV2 SGD only")
    ap.add_argument("--no-onert", action="store_true", help="skip the comparison with the real onert")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    args = ap.parse_args()

    rows, ok = [], True
    for k, (label, model, batch, opt, profile) in enumerate(CONFIGS):
        if args.quick and k not in QUICK:
            continue
        d = verify(model, batch, opt, profile)
        secs = d.get("seconds", {})
        row = {"model": label, "batch": batch, "optimizer": opt, "profile": profile, "passed": bool(d.get("passed")),
               "max_difference": d.get("max_difference"), "steps": d.get("steps"),
               "tensors_compared": d.get("tensors_compared"), "arena_bytes": d.get("arena_bytes"),
               "plan_s": secs.get("plan"), "run_s": secs.get("run"), "wall_s": d["wall_s"],
               "peak_rss_mb": d["rss_mb"], "failure": d.get("failure") or d.get("error")}
        ok &= row["passed"]
        rows.append(row)
        if not args.json:
            if len(rows) == 1:
                print(f"{'model':12s} {'batch':>5s} {'opt':5s} {'profile':8s} {'result':6s} {'max diff':>9s} "
                      f"{'steps':>5s} {'compared':>8s} {'arena B':>12s} {'plan s':>7s} {'run s':>7s} "
                      f"{'total s':>8s} {'RSS MB':>7s}")
            print(f"{label:12s} {batch:5d} {opt:5s} {profile:8s} {'PASS' if row['passed'] else 'FAIL':6s} "
                  f"{_g(row['max_difference']):>9s} {row['steps'] or 0:5d} {row['tensors_compared'] or 0:8d} "
                  f"{row['arena_bytes'] or 0:12,d} {_f(row['plan_s']):>7s} {_f(row['run_s']):>7s} "
                  f"{row['wall_s']:8.2f} {row['peak_rss_mb']:7.0f}", flush=True)
            if not row["passed"]:
                print(f"    {row['failure']}")

    onert = []
    if not args.no_onert:
        sys.path.insert(0, REPO)
        from devtools.onert_check import available, compare_with_onert

        if not available():
            if not args.json:
                print("\nonert is not importable: comparison with the real runtime skipped")
        else:
            if not args.json:
                print("\nmnist batch 8, MSE: one training step in memplan's executor (memplan plan) vs onert 0.1.0")
                print(f"{'opt':5s} {'lr':>6s} {'loss memplan':>13s} {'loss onert':>13s} {'step-2 loss diff':>16s} "
                      f"{'weights':>7s} {'max |w diff|':>12s} {'max |step|':>10s} {'seconds':>8s}")
            for opt, lr in ONERT_CASES:
                t0 = time.perf_counter()
                r = compare_with_onert(MNIST, batch=8, optimizer=opt, learning_rate=lr, loss="mse")
                r["seconds"] = time.perf_counter() - t0
                r.update(optimizer=opt, learning_rate=lr)
                onert.append(r)
                if not args.json:
                    print(f"{opt:5s} {lr:6g} {r['loss'][0]:13.7g} {r['loss'][1]:13.7g} "
                          f"{abs(r['loss2'][0] - r['loss2'][1]):16.3g} {r['weights']:7d} "
                          f"{_g(r['max_weight_diff']):>12s} {_g(r['max_update']):>10s} {r['seconds']:8.2f}")
                    if r["export_error"]:
                        print(f"    onert's trained weights could not be read: {r['export_error']}")
    if args.json:
        print(json.dumps({"verify": rows, "onert": onert}, indent=2, default=float))
    return 0 if ok else 1


def _g(v) -> str:
    return "-" if v is None else f"{v:.3g}"


def _f(v) -> str:
    return "-" if v is None else f"{v:.2f}"


if __name__ == "__main__":
    sys.exit(main())
