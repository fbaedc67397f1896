#!/usr/bin/env python3
"""Remat over the whole budget range: at floor + k/8 x (plain - floor), k = 1..7, a fresh solve per
budget (problem built, ladder, bound, arena: what one `analyze --budget` does), printing the planned
arena, the FLOPs ratio, the proven least FLOPs ratio of any plan under that budget (remat/full.py)
and the CPU seconds of the solve (this process, one core; the machine may be shared).

    .venv/bin/python benchmarks/remat_sweep.py --model PATH[:BATCH] [--model ...] [--optimizer sgd]

"plain" is memplan's own plan without a budget and "floor" what no plan's live bytes go below, both
as `memplan analyze MODEL --budget 1 -f json` reports them (remat.floor). Checks printed per model:
every k >= 2 fits, arena <= budget, FLOPs non-increasing in k.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from memplan_cli.config import TrainConfig  # noqa: E402
from memplan_cli.loaders import load_model  # noqa: E402
from memplan_cli.remat.problem import RematProblem  # noqa: E402
from memplan_cli.remat.solve import floor, plan_arena, solve  # noqa: E402


def mib(n: int) -> str:
    return f"{n / 2**20:9.2f}"


def sweep(path: str, batch: int, optimizer: str) -> list:
    g = load_model(path, batch_size=batch)
    cfg = TrainConfig(batch_size=batch, optimizer=optimizer, loss="cce")
    p = RematProblem(g, cfg)
    plain, fl = plan_arena(p, ()), floor(p)[0]
    print(f"\n== {os.path.basename(path)} b{batch} {optimizer}: plain {mib(plain)} MiB, floor {mib(fl)} MiB, "
          f"{len(g.operations)} ops, {len(p.candidates)} candidates")
    print(f"{'k':>2} {'budget MiB':>10} {'arena MiB':>10} {'FLOPs x':>8} {'bound x':>8} {'status':>10} {'cpu s':>6}")
    rows = []
    for k in range(1, 8):
        budget = fl + (plain - fl) * k // 8
        c0 = time.process_time()
        r = solve(RematProblem(g, cfg), budget)
        cpu = time.process_time() - c0
        lo = f"{r.ratio_lower:8.4f}" if r.ratio_lower is not None else f"{'-':>8}"
        arena = mib(r.arena) if r.fits else f"{'none':>9}"
        ratio = f"{r.ratio:8.4f}" if r.fits else f"{'-':>8}"
        print(f"{k:>2} {mib(budget):>10} {arena:>10} {ratio} {lo} {r.status:>10} {cpu:6.1f}", flush=True)
        rows.append((k, budget, r, cpu))
    fits = [(k, r) for k, _, r, _ in rows if r.fits]
    ok_fit = all(r.fits for k, _, r, _ in rows if k >= 2)
    ok_arena = all(r.arena <= b for _, b, r, _ in rows if r.fits)
    ok_mono = all(a.ratio >= b.ratio for (_, a), (_, b) in zip(fits, fits[1:]))
    worst = max(r.ratio for _, r in fits) if fits else None
    print(f"k>=2 all fit: {ok_fit}; arena <= budget: {ok_arena}; FLOPs non-increasing in k: {ok_mono}; "
          f"worst FLOPs x: {worst:.4f}" if worst else "nothing fits", flush=True)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", action="append", default=[], metavar="PATH[:BATCH]", required=True)
    ap.add_argument("--optimizer", default="sgd")
    args = ap.parse_args()
    for spec in args.model:
        path, _, b = spec.partition(":")
        sweep(path, int(b or 8), args.optimizer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
