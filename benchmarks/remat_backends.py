#!/usr/bin/env python3
"""HiGHS (MILP) vs OR-Tools CP-SAT on the remat relaxation: the evidence behind memplan's choice.

    .venv/bin/pip install ortools   # dev only (about 30 MB and protobuf; HiGHS is a 3 MB wheel)
    .venv/bin/python benchmarks/remat_backends.py [--model PATH[:BATCH]] ...

For each model and budget (fractions of memplan's plain plan), the same `relax.linear_model` (every
step a row, no lazy rows, so both solvers see the identical problem) is solved by both, single
thread, to optimality: the optimum (added FLOPs, must agree), wall seconds and the model's size.
Models: the MobileNetV2 sample at batch 10 and the tiny BERT export of tests/corpus at batch 64,
plus any `--model`.
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
from memplan_cli.remat import relax  # noqa: E402
from memplan_cli.remat.problem import RematProblem  # noqa: E402
from memplan_cli.remat.solve import plan_arena  # noqa: E402

FRACTIONS = (0.9, 0.7, 0.55)


def solve_cpsat(lm: relax.LinearModel):
    from ortools.sat.python import cp_model

    m = cp_model.CpModel()
    v = [m.NewBoolVar(f"c{i}") for i in range(lm.ncols)]  # integral at integral x: booleans lose nothing
    for lb, ub, ent in lm.rows:
        e = sum(c * v[j] for j, c in ent)
        if lb is not None:
            m.Add(e >= lb)
        if ub is not None:
            m.Add(e <= ub)
    m.Minimize(sum(c * v[i] for i, c in enumerate(lm.cost)))
    s = cp_model.CpSolver()
    s.parameters.num_workers = 1
    s.parameters.random_seed = 0
    st = s.Solve(m)
    if st == cp_model.INFEASIBLE:
        return None
    if st != cp_model.OPTIMAL:
        return "not solved"
    return int(round(s.ObjectiveValue()))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", action="append", default=[], metavar="PATH[:BATCH]")
    args = ap.parse_args()
    models = [(os.path.join(REPO, "sample_models", "mobilenetv2.circle"), 10),
              (os.path.join(REPO, "tests", "corpus", "bert_tiny_dynamo.onnx"), 64)]
    for spec in args.model:
        path, _, b = spec.partition(":")
        models.append((path, int(b or 8)))
    print(f"{'model':<28} {'x plain':>7} {'cols':>6} {'rows':>6} {'HiGHS s':>8} {'CP-SAT s':>9} "
          f"{'HiGHS optimum':>15} {'CP-SAT optimum':>15}")
    for path, b in models:
        g = load_model(path, batch_size=b)
        cfg = TrainConfig(batch_size=b, optimizer="adam", loss="cce")
        p = RematProblem(g, cfg)
        plain = plan_arena(p, ())
        for f in FRACTIONS:
            target = int(plain * f)
            rel = relax.build(p, target)
            lm = relax.linear_model(p, rel, target)
            t0 = time.perf_counter()
            a = relax.solve_highs(lm)
            th = time.perf_counter() - t0
            hv = "infeasible" if a.drop is None else sum(p.cost[k] for k in a.drop)
            t0 = time.perf_counter()
            cv = solve_cpsat(lm)
            tc = time.perf_counter() - t0
            print(f"{os.path.basename(path) + f' b{b}':<28} {f:7.2f} {lm.ncols:6d} {len(lm.rows):6d} {th:8.2f} "
                  f"{tc:9.2f} {str(hv):>15} {str('infeasible' if cv is None else cv):>15}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
