"""Dev-only: the allocator scratch of eager PyTorch's bfloat16 `mm` on CPU (oneDNN's brgemm matmul),
one op at a time, next to what `--profile torch` counts (memplan_cli/ops/matmul.py bf16_mm_scratch).
Needs torch; never a memplan dependency.

    python devtools/torch_matmul_sweep.py                       # the default grid, a table on stdout
    python devtools/torch_matmul_sweep.py --one 512,256,64,t,n  # M,K,N, A plain (n) or transposed (t), B too

A linear's forward is (n, t) (x @ W^T), its input's gradient (n, n) (gy @ W), its weight's gradient
(t, n) (gy^T @ x). Each mm runs twice on one thread, then the third is measured with
`torch.profiler`'s CPU memory events: the scratch is the largest allocation after the output.
"""
from __future__ import annotations

import argparse
import itertools
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("KINETO_LOG_LEVEL", "5")


def measure(m: int, k: int, n: int, ta: bool, tb: bool) -> int:
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.set_num_threads(1)
    dt = torch.bfloat16
    a = torch.randn(k, m, dtype=dt).t() if ta else torch.randn(m, k, dtype=dt)
    b = torch.randn(n, k, dtype=dt).t() if tb else torch.randn(k, n, dtype=dt)
    for _ in range(2):
        torch.mm(a, b)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        torch.mm(a, b)
    ev = sorted((e.start_ns(), i, e.nbytes()) for i, e in enumerate(prof.profiler.kineto_results.events())
                if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU)
    allocs = [nb for _, _, nb in ev if nb > 0]
    return max(allocs[1:], default=0)


def predict(m: int, k: int, n: int, ta: bool, tb: bool) -> int:
    sys.path.insert(0, ROOT)
    from memplan_cli.ops.matmul import bf16_mm_scratch

    return bf16_mm_scratch(m, k, n, ta, tb)


GRID = [(m, k, n, la) for m, k, n, la in itertools.product(
    (32, 64, 128, 512, 2048), (64, 256, 512, 1024), (64, 128, 256, 512), ("nn", "nt", "tn"))]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--one", help="M,K,N,a,b with a / b n (plain) or t (transposed)")
    a = ap.parse_args(argv)
    rows = [tuple(a.one.split(","))] if a.one else [(m, k, n, la[0], la[1]) for m, k, n, la in GRID]
    exact = counted = 0
    for m, k, n, ta, tb in rows:
        m, k, n, ta, tb = int(m), int(k), int(n), ta == "t", tb == "t"
        got, want = measure(m, k, n, ta, tb), predict(m, k, n, ta, tb)
        counted += bool(want)
        exact += want == got
        print(f"M={m:5d} K={k:5d} N={n:5d} {'t' if ta else 'n'}{'t' if tb else 'n'}  scratch {got:>9,d}  "
              f"profile {want:>9,d}  {'not counted' if not want else f'{want - got:+,d}'}", flush=True)
    print(f"{exact}/{counted} counted exactly, {len(rows) - counted} not counted")


if __name__ == "__main__":
    main()
