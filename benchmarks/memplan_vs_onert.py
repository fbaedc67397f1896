"""memplan's plan against onert's allocation, side by side in one run.

For every sample model, several batch sizes and both optimizers it prints: naive (every tensor of
the training step its own bytes: no reuse, no in-place, no views), memplan planned (one arena), the lower bound of that arena (peak live bytes), onert's
total (the sum of the onert profile's ALLOC lines), and the ratios the memplan profile targets:
planned <= 0.45 x onert on MobileNetV2 b10 Adam, <= 0.40 x on mnist b32 Adam, planned <= 1.01 x
lower bound. Every memplan plan is checked by the overlap verifier and by the schedule
checker (inside the profile's build).

    .venv/bin/python benchmarks/memplan_vs_onert.py [--quick] [--models mnist,mobilenetv2]
    .venv/bin/python benchmarks/memplan_vs_onert.py --rules   # what each saving rule saves

`--rules` switches each saving rule of the memplan profile off in turn (MobileNetV2 b10 and mnist b32,
Adam) and prints the arena's lower bound (peak live bytes) without it, and what the rule saves. The
"separate arenas" row plans each category in its own arena (the sum of the per-category bounds).

"""
from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from memplan_cli.config import TrainConfig  # noqa: E402
from memplan_cli.loaders import load_model  # noqa: E402
from memplan_cli.profiles.memplan import PROFILE, peak_figures  # noqa: E402

SAMPLES = os.path.join(os.path.dirname(HERE), "sample_models")
BATCHES = {"mnist": (1, 8, 32, 64), "mobilenetv2": (1, 4, 10)}
QUICK = {"mnist": (32,), "mobilenetv2": (10,)}
TARGETS = {("mnist", 32, "adam"): 0.40, ("mobilenetv2", 10, "adam"): 0.45}


def plan_memplan(graph, cfg, **opts):
    """(buffer list, planned bytes, planner, lower bound, verified?)."""
    from memplan_cli.check.overlap import check_plan
    from memplan_cli.planners import get_planner
    from memplan_cli.planners.bound import lower_bound

    bl = PROFILE.build(graph, cfg, **opts)
    b = bl.buffers
    sizes, firsts, lasts = [x.size for x in b], [x.first for x in b], [x.last for x in b]
    plan = get_planner(bl.pools[0].planner)(sizes, firsts, lasts)
    check_plan(sizes, firsts, lasts, plan.offsets, plan.arena, names=[x.name for x in b])  # raises on overlap
    bl.plan = plan
    return bl, plan.arena, plan.planner, lower_bound(sizes, firsts, lasts), "yes"


def run_plan(bl, offsets, arena, optimizer) -> str:
    """Execute the training step inside the plan (memplan's NumPy executor) against separate
    allocations; 'passed' when every step's results agree."""
    from memplan_cli.execute.executor import execute
    from memplan_cli.execute.layout import layout_from_offsets

    tg = bl.training_graph
    lay = layout_from_offsets(tg, bl, {b.name: o for b, o in zip(bl.buffers, offsets)}, {"arena": arena})
    r = execute(tg, lay, optimizer=optimizer)
    return "passed" if r.passed else f"FAILED: {r.message}"


def onert_total(graph, cfg):
    from memplan_cli.analysis import analyze_graph
    from memplan_cli.errors import MemplanError

    try:
        return analyze_graph(graph, cfg, profile="onert").planned_total
    except MemplanError as e:  # onert cannot train this model: say why
        return f"- ({str(e)[:60]})"


def separate_arenas_bound(bl) -> int:
    """Sum over categories of each category's own peak live bytes (a lower bound on separate arenas)."""
    from memplan_cli.buffers import BufferList

    total = 0
    for c in {b.category for b in bl.buffers}:
        sub = BufferList([b for b in bl.buffers if b.category == c], bl.steps)
        total += peak_figures(sub)["peak_live_bytes"]
    return total


def rules_table(models):
    from memplan_cli.passes.policy import Policy

    default = Policy()
    for model, b in models:
        path = os.path.join(SAMPLES, f"{model}.circle")
        if not os.path.exists(path):
            continue
        graph = load_model(path, batch_size=b)
        cfg = TrainConfig(batch_size=b, optimizer="adam", loss="cce")
        base = peak_figures(PROFILE.build(graph, cfg))["peak_live_bytes"]
        print(f"\n{model} b{b} Adam: every rule on, lower bound {base:,d} B")
        print(f"  {'rule switched off':<26} {'lower bound':>13} {'saves':>13} {'saves %':>7}")
        rows = [(n, {n: not getattr(default, n)}) for n in Policy.names()]
        rows.append(("one_arena", {"one_arena": False}))
        rows.append(("all rules (onert-like)", {n: getattr(Policy.baseline(), n) for n in Policy.names()}))
        for name, opts in rows:
            bl = PROFILE.build(graph, cfg, **{k: v for k, v in opts.items() if k != "one_arena"})
            lb = separate_arenas_bound(bl) if name == "one_arena" else peak_figures(bl)["peak_live_bytes"]
            print(f"  {name:<26} {lb:>13,d} {lb - base:>13,d} {100 * (lb - base) / lb:>6.1f}%")
        bl = PROFILE.build(graph, cfg, **{n: getattr(Policy.baseline(), n) for n in Policy.names()})
        lb = separate_arenas_bound(bl)
        print(f"  {'all rules + separate arenas':<26} {lb:>13,d} {lb - base:>13,d} {100 * (lb - base) / lb:>6.1f}%")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="only the two target configurations")
    ap.add_argument("--models", default="mnist,mobilenetv2")
    ap.add_argument("--format", default="circle", help="sample file format (onert reads circle/tflite)")
    ap.add_argument("--rules", action="store_true", help="what each saving rule saves (lower bounds)")
    ap.add_argument("--execute", action="store_true",
                    help="also run each plan with batch <= 4 in the NumPy executor (slow)")
    args = ap.parse_args(argv)
    if args.rules:
        rules_table([("mobilenetv2", 10), ("mnist", 32)])
        return 0
    hdr = (f"{'model':<12} {'b':>3} {'opt':<5} {'naive':>13} {'planned':>13} {'lower bound':>13} "
           f"{'pl/lb':>6} {'onert':>13} {'pl/onert':>8} {'target':>6} {'planner':<8} {'verified':<8} {'s':>5}")
    print(hdr)
    print("-" * len(hdr))
    failed = []
    for model in args.models.split(","):
        path = os.path.join(SAMPLES, f"{model}.{args.format}")
        if not os.path.exists(path):
            print(f"{model:<12} (no {path})")
            continue
        for b in (QUICK if args.quick else BATCHES)[model]:
            graph = load_model(path, batch_size=b)
            for opt in ("adam",) if args.quick else ("sgd", "adam"):
                cfg = TrainConfig(batch_size=b, optimizer=opt, loss="cce")
                t = time.perf_counter()
                bl, planned, planner, lb, verified = plan_memplan(graph, cfg)
                on = onert_total(graph, cfg)
                dt = time.perf_counter() - t
                ratio = f"{planned / on:.3f}" if isinstance(on, int) and on else "-"
                target = TARGETS.get((model, b, opt))
                tgt = f"{target:.2f}" if target else ""
                if target and isinstance(on, int) and planned > target * on:
                    failed.append(f"{model} b{b} {opt}: planned/onert {ratio} > {target}")
                if planned > 1.01 * lb:
                    failed.append(f"{model} b{b} {opt}: planned/lower bound {planned / lb:.4f} > 1.01")
                on_s = f"{on:>13,d}" if isinstance(on, int) else f"{'-':>13}"
                print(f"{model:<12} {b:>3} {opt:<5} {bl.naive_total():>13,d} {planned:>13,d} {lb:>13,d} "
                      f"{planned / lb:>6.3f} {on_s} {ratio:>8} {tgt:>6} {planner:<8} {verified:<8} {dt:>5.1f}")
                if not isinstance(on, int) and (model, b, opt) in TARGETS:
                    print(f"   onert: {on}")
                if args.execute and b <= 4:
                    res = run_plan(bl, bl.plan.offsets, planned, opt)
                    print(f"   executed inside the plan: {res}")
                    if res != "passed":
                        failed.append(f"{model} b{b} {opt}: execution {res}")
    print()
    print("targets missed:" if failed else "all targets are met")
    for f in failed:
        print("  " + f)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
