"""`--profile nntrainer` against the measured nntrainer 0.6.0 pools (tests/fixtures/nntrainer): one row
per configuration with both pools' real and predicted sizes and how many requests (bytes + validity)
and offsets agree; then the same planner with a stable sort instead of libstdc++'s std::sort, to show
what the tie order changes.

    .venv/bin/python benchmarks/nntrainer_match.py
"""
from __future__ import annotations

import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from memplan_cli.analysis import plan_buffer_list  # noqa: E402
from memplan_cli.config import TrainConfig  # noqa: E402
from memplan_cli.loaders import load_model  # noqa: E402
from memplan_cli.planners import nntrainer as planners  # noqa: E402
from memplan_cli.profiles.nntrainer import PROFILE  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "nntrainer"
MODELS = ("mnist_cnn", "mlp", "resnet_small", "bn_cnn")


def rows():
    for m in MODELS:
        for c in json.loads((FIXTURES / f"{m}.json").read_text())["configurations"]:
            g = load_model(str(FIXTURES / f"{m}.onnx"), batch_size=c["batch"])
            bl = PROFILE.build(g, TrainConfig(batch_size=c["batch"], optimizer=c["optimizer"], loss="cce"),
                               memory_optimization=c["memory_optimization"])
            plans = {p.pool.name: p for p in plan_buffer_list(bl)}
            out = {"model": m, "batch": c["batch"], "optimizer": c["optimizer"],
                   "memory_optimization": c["memory_optimization"]}
            for pool in ("weight", "tensor"):
                real, p = c["pools"][pool], plans[f"{pool}_pool"]
                reqs = [(b.size, b.first, b.last + 1) for b in p.buffers]
                same_req = sum(a == tuple(r[1:4]) for a, r in zip(reqs, real["requests"]))
                same_off = sum(o == r[4] for o, r in zip(p.plan.offsets, real["requests"]))
                out[pool] = (real["size"], p.plan.arena, same_req, same_off, len(real["requests"]), len(reqs))
            yield out


def main() -> None:
    print(f"{'configuration':34} {'weight real':>12} {'memplan':>12} {'tensor real':>12} {'memplan':>12}  "
          f"requests  offsets")
    n = exact = 0
    for r in rows():
        w, t = r["weight"], r["tensor"]
        mode = "on" if r["memory_optimization"] else "off"
        name = f"{r['model']} b{r['batch']} {r['optimizer']} opt-{mode}"
        ok = all(x[0] == x[1] and x[2] == x[3] == x[4] == x[5] for x in (w, t))
        n, exact = n + 1, exact + ok
        print(f"{name:34} {w[0]:12,d} {w[1]:12,d} {t[0]:12,d} {t[1]:12,d}  "
              f"{w[2] + t[2]:4d}/{w[4] + t[4]:<4d} {w[3] + t[3]:4d}/{w[4] + t[4]:<4d}")
    print(f"\n{exact}/{n} configurations byte-exact (both pool sizes, every request, every offset)")
    # the tie order: a stable sort places equal intervals in request order, nntrainer's introsort does not
    stable = lambda idx, firsts, lasts: sorted(idx, key=lambda i: (firsts[i], lasts[i]))  # noqa: E731
    real_sort, planners._requests = planners._requests, stable
    try:
        pools = diff_off = diff_size = 0
        for r in rows():
            if not r["memory_optimization"]:
                continue
            for pool in ("weight", "tensor"):
                pools += 1
                size, arena, _, same_off, total, _ = r[pool]
                diff_off += same_off != total
                diff_size += arena != size
    finally:
        planners._requests = real_sort
    print(f"with a stable sort instead: offsets differ in {diff_off} of {pools} OptimizedV1 pools, "
          f"sizes in {diff_size}")


if __name__ == "__main__":
    main()
