#!/usr/bin/env python3
"""memplan's remat beside what people use: Chen's sqrt(n) segments and PyTorch's
`torch.utils.checkpoint.checkpoint_sequential`, on the same networks (dev-only: torch, torchvision
and onnx are never memplan's runtime dependencies).

    .venv/bin/python benchmarks/remat_torch.py --torch-python PY [--quick]

PY: a Python with torch, torchvision and onnx (a dev environment); it runs the PyTorch side and
exports the networks (`--torch-part DIR`), this process the memplan side.

For each network (torchvision resnet18 and mobilenet_v2, 64 x 64 input, batch 8, SGD, BatchNorm in
training mode, random weights):
- PyTorch, on CPU, one thread: the peak of one training step (MemTracker: live tensor storages,
  after a warm-up step) and its FLOPs (FlopCounterMode, which also counts what checkpointed
  segments run again in backward), plain and with the network's body checkpointed in 2, 3, 4 and
  ceil(sqrt(n)) segments. Each as a fraction of the plain step: memory and FLOPs ratios.
- memplan, on the same network exported to ONNX (TorchScript, training mode): the plain planned
  arena, Chen's sqrt(n) segments over its candidates, and its remat solver at PyTorch's memory
  fraction of memplan's own plain plan ("FLOPs at equal memory") and the least memory fraction
  whose plan needs no more FLOPs than PyTorch's ratio ("memory at equal recompute", bisection on
  the budget, 10 solves).
The two sides count different bytes (PyTorch's saved tensors, memplan's plan) and different FLOPs
(PyTorch counts matmul and convolution FLOPs only, memplan every op): the comparison is between
fractions of each side's own plain step.
"""
from __future__ import annotations

import argparse

import os
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)


def torch_side(name, segments_list, batch=8, size=64):
    import torch
    import torchvision.models as tvm
    from torch.distributed._tools.mem_tracker import MemTracker
    from torch.utils.checkpoint import checkpoint_sequential
    from torch.utils.flop_counter import FlopCounterMode

    torch.manual_seed(0)
    torch.set_num_threads(1)
    if name == "resnet18":
        m = tvm.resnet18(num_classes=10)
        body = torch.nn.Sequential(m.conv1, m.bn1, m.relu, m.maxpool, m.layer1, m.layer2, m.layer3, m.layer4)
        head = torch.nn.Sequential(m.avgpool, torch.nn.Flatten(), m.fc)
    else:
        m = tvm.mobilenet_v2(num_classes=10)
        body = m.features
        head = torch.nn.Sequential(torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), m.classifier)
    for mod in m.modules():  # an in-place ReLU at a segment boundary would overwrite a checkpoint
        if hasattr(mod, "inplace"):
            mod.inplace = False
    m.train()
    opt = torch.optim.SGD(m.parameters(), lr=1e-3)
    x = torch.randn(batch, 3, size, size)
    y = torch.randint(0, 10, (batch,))

    def step(seg):
        h = checkpoint_sequential(body, seg, x, use_reentrant=False) if seg else body(x)
        loss = torch.nn.functional.cross_entropy(head(h), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    rows = []
    for seg in [0] + segments_list(len(body)):
        step(seg)  # warm-up
        mt = MemTracker()
        mt.track_external(m, opt)
        with mt:
            step(seg)
        peak = mt.get_tracker_snapshot("peak")[torch.device("cpu")]["Total"]
        with FlopCounterMode(display=False) as fc:
            step(seg)
        rows.append((seg, peak, fc.get_total_flops()))
    return m, x, rows


def export(m, x, path):
    import torch

    m.train()
    torch.onnx.export(m, (x[:1],), path, dynamo=False, training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False)


def torch_part(out: str, names) -> None:
    import json
    import warnings

    warnings.filterwarnings("ignore")  # the exporter's notes on every BatchNorm counter
    import math as _m

    for name in names:
        m, x, rows = torch_side(name, lambda n: sorted({2, 3, 4, _m.ceil(_m.sqrt(n))}))
        export(m, x, os.path.join(out, f"{name}.onnx"))
        with open(os.path.join(out, f"{name}.json"), "w") as fh:
            json.dump({"rows": rows, "batch": int(x.shape[0])}, fh)


def main() -> int:
    import json
    import subprocess

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="resnet18 only")
    ap.add_argument("--torch-python", default=os.environ.get("MEMPLAN_TORCH_PYTHON", ""),
                    help="a Python with torch, torchvision and onnx (or MEMPLAN_TORCH_PYTHON)")
    ap.add_argument("--torch-part", metavar="DIR", help=argparse.SUPPRESS)
    args = ap.parse_args()
    names = ["resnet18"] if args.quick else ["resnet18", "mobilenet_v2"]
    if args.torch_part:
        torch_part(args.torch_part, names)
        return 0
    if not args.torch_python:
        print("remat_torch.py: give --torch-python (a Python with torch, torchvision and onnx)", file=sys.stderr)
        return 2
    from memplan_cli.config import TrainConfig
    from memplan_cli.loaders import load_model
    from memplan_cli.remat import chen
    from memplan_cli.remat.problem import RematProblem
    from memplan_cli.remat.solve import close, floor, plan_arena, solve

    with tempfile.TemporaryDirectory() as d:
        subprocess.run([args.torch_python, os.path.abspath(__file__), "--torch-part", d]
                       + (["--quick"] if args.quick else []), check=True)
        loaded = {n: (load_model(os.path.join(d, f"{n}.onnx"), batch_size=8),
                      json.load(open(os.path.join(d, f"{n}.json")))) for n in names}
    for name, (g, meta) in loaded.items():
        batch, rows = meta["batch"], meta["rows"]
        cfg = TrainConfig(batch_size=batch, optimizer="sgd", loss="cce")
        p = RematProblem(g, cfg)
        plain, fl = plan_arena(p, ()), floor(p)[0]
        step = p.flops.total
        c = close(p, chen.sqrt_n(p.narrow))
        print(f"\n== {name}: batch {batch}, 64 x 64, SGD, BatchNorm in training mode")
        print(f"memplan: plain plan {plain / 2**20:.2f} MiB, floor {fl / 2**20:.2f} MiB ({fl / plain:.3f} x); "
              f"Chen sqrt(n) over its {len(p.narrow)} candidates: arena {plan_arena(p, c) / plain:.3f} x, "
              f"FLOPs {(step + p.added_flops(c)) / step:.3f} x")
        p0, f0 = rows[0][1], rows[0][2]
        print(f"PyTorch: plain step peak {p0 / 2**20:.2f} MiB, {f0 / 1e9:.2f} GFLOPs")
        print(f"{'segments':>8} {'torch mem x':>11} {'torch FLOPs x':>13} | {'memplan FLOPs x at torch mem x':>30} "
              f"| {'memplan mem x at torch FLOPs x':>30}")
        for seg, peak, flops in rows[1:]:
            mem_r, fl_r = peak / p0, flops / f0
            r = solve(RematProblem(g, cfg), int(plain * mem_r))
            at_mem = f"{r.ratio:.3f} ({r.status})" if r.fits else "nothing fits"
            lo, hi = fl, plain  # least budget whose plan needs <= torch's FLOPs ratio
            for _ in range(10):
                mid = (lo + hi) // 2
                rr = solve(RematProblem(g, cfg), mid)
                if rr.fits and rr.ratio <= fl_r:
                    hi = mid
                else:
                    lo = mid
            print(f"{seg:>8} {mem_r:>11.3f} {fl_r:>13.3f} | {at_mem:>30} | {hi / plain:>30.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
