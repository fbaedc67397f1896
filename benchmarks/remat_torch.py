#!/usr/bin/env python3
"""memplan's remat beside PyTorch's activation checkpointing, in bytes (dev-only: torch, torchvision,
transformers and onnx are never memplan's runtime dependencies).

    .venv/bin/python benchmarks/remat_torch.py --torch-python PY [--keep DIR] [NET ...]

PY: a Python with torch, torchvision, transformers and onnx; it runs the PyTorch side and exports the
networks (`--torch-part DIR`), this process the memplan side. NET: resnet18 mobilenet_v2
efficientnet_b0 densenet121 bert gpt2 (default: all).

Networks (random weights, training mode, SGD, cross-entropy): torchvision resnet18, mobilenet_v2 and
efficientnet_b0 at batch 8 and densenet121 at batch 4, 224 x 224, 1000 classes; BERT (BertLayer) and
GPT-2 (GPT2Block, causal mask) stacks of 8 layers, hidden 128, 4 heads, sequence 128, vocabulary
1000, batch 4, dropout 0 (small configs: the full ones do not fit a shared 2-core machine's time).
The network is a module `pre -> blocks -> post`; the same module is exported (TorchScript, training
mode) for memplan.

PyTorch, on CPU, one thread, the third step measured: peak = bytes held before the step + the peak
of the CPU allocator's running sum during it (torch.profiler, as devtools/torch_oracle.py measures),
and FLOPs (FlopCounterMode: matmul and convolution FLOPs only, recomputes included), for
- plain: no checkpointing;
- seq K: `checkpoint_sequential` over the blocks in K = 2..8 segments (non-reentrant);
- SAC: every block checkpointed with selective activation checkpointing: matmul and convolution
  outputs saved, every other op recomputed (`create_selective_checkpoint_contexts`).
memplan, on the export: its plain plan (planned arena, FLOPs of every op), then its remat solver
- at PyTorch's bytes: `analyze --budget` at the PyTorch point's peak: the FLOPs ratio it needs;
- at PyTorch's FLOPs: the smallest planned arena among budgets floor + k/N x (plain - floor),
  k = 0..N (`--grid N`, default 16), whose FLOPs ratio is at most the PyTorch point's ratio (its
  own plain step = 1).
FLOPs ratios are each side's FLOPs over its own plain step (PyTorch's counter sees only matmuls and
convolutions, so its ratio leaves out the elementwise ops it recomputes: the comparison is tilted
toward PyTorch). memplan dominates a PyTorch point when some plan needs no more bytes at no more
FLOPs ratio.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

NETS = ("resnet18", "mobilenet_v2", "efficientnet_b0", "densenet121", "bert", "gpt2")
BATCH = {"densenet121": 4, "bert": 4, "gpt2": 4}
SEQ, VOCAB = 128, 1000
GRID = 16


# ---- PyTorch side --------------------------------------------------------------------------------
def build(name):
    """(module with .blocks, input, labels)."""
    import torch
    import torch.nn as nn

    torch.manual_seed(0)
    b = BATCH.get(name, 8)

    class Net(nn.Module):
        def __init__(self, pre, blocks, post):
            super().__init__()
            self.pre, self.blocks, self.post = pre, nn.Sequential(*blocks), post
            self.mode = None

        def forward(self, x):
            h = self.pre(x)
            h = run_blocks(self.blocks, h, self.mode)
            return self.post(h)

    if name in ("bert", "gpt2"):
        import transformers as tr

        if name == "bert":
            cfg = tr.BertConfig(vocab_size=VOCAB, hidden_size=128, num_hidden_layers=8, num_attention_heads=4,
                                intermediate_size=512, max_position_embeddings=SEQ, hidden_dropout_prob=0.0,
                                attention_probs_dropout_prob=0.0)
            cfg._attn_implementation = "eager"
            m = tr.BertForMaskedLM(cfg)
            pre, layers, post = m.bert.embeddings, list(m.bert.encoder.layer), m.cls
            mask = None
        else:
            cfg = tr.GPT2Config(vocab_size=VOCAB, n_embd=128, n_layer=8, n_head=4, n_positions=SEQ, resid_pdrop=0.0,
                                embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False)
            cfg._attn_implementation = "eager"
            m = tr.GPT2LMHeadModel(cfg)
            t = m.transformer

            class Embed(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.wte, self.wpe = t.wte, t.wpe
                    self.register_buffer("pos", torch.arange(SEQ), persistent=False)

                def forward(self, ids):
                    return self.wte(ids) + self.wpe(self.pos)
            pre, layers, post = Embed(), list(t.h), nn.Sequential(t.ln_f, m.lm_head)
            mask = torch.triu(torch.full((1, 1, SEQ, SEQ), float("-inf")), diagonal=1)

        class Layer(nn.Module):  # a block called with its mask only: a function of one tensor
            def __init__(self, layer):
                super().__init__()
                self.layer = layer
                self.register_buffer("mask", mask, persistent=False)

            def forward(self, h):
                out = self.layer(h, attention_mask=self.mask)
                return out[0] if isinstance(out, tuple) else out
        net = Net(pre, [Layer(la) for la in layers], post)
        x = torch.randint(0, VOCAB, (b, SEQ))
        y = torch.randint(0, VOCAB, (b, SEQ))
    else:
        import torchvision.models as tvm

        m = getattr(tvm, name)()
        if name == "resnet18":
            blocks = [m.conv1, m.bn1, m.relu, m.maxpool, m.layer1, m.layer2, m.layer3, m.layer4]
            post = nn.Sequential(m.avgpool, nn.Flatten(), m.fc)
        elif name == "densenet121":
            blocks = list(m.features)
            post = nn.Sequential(nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), m.classifier)
        else:
            blocks = list(m.features)
            post = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), m.classifier)
        net = Net(nn.Identity(), blocks, post)
        x = torch.randn(b, 3, 224, 224)
        y = torch.randint(0, 1000, (b,))
    for mod in net.modules():  # an in-place ReLU at a segment boundary would overwrite a checkpoint
        if hasattr(mod, "inplace"):
            mod.inplace = False
    net.train()
    return net, x, y


def run_blocks(blocks, h, mode):
    import functools

    import torch
    from torch.utils.checkpoint import (CheckpointPolicy, checkpoint, checkpoint_sequential,
                                        create_selective_checkpoint_contexts)

    if mode is None:
        return blocks(h)
    if mode == "sac":
        aten = torch.ops.aten
        save = {aten.mm.default, aten.addmm.default, aten.bmm.default, aten.baddbmm.default,
                aten.convolution.default, aten._convolution.default}

        def policy(ctx, op, *args, **kwargs):
            return CheckpointPolicy.MUST_SAVE if op in save else CheckpointPolicy.PREFER_RECOMPUTE
        ctx_fn = functools.partial(create_selective_checkpoint_contexts, policy)
        for blk in blocks:
            h = checkpoint(blk, h, use_reentrant=False, context_fn=ctx_fn)
        return h
    return checkpoint_sequential(blocks, mode, h, use_reentrant=False)


def torch_point(net, x, y, mode):
    import torch
    from torch.profiler import ProfilerActivity, profile
    from torch.utils.flop_counter import FlopCounterMode

    sys.path.insert(0, os.path.join(REPO, "devtools"))
    import torch_oracle as O

    net.mode = mode
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)

    def step():
        out = net(x)
        loss = torch.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()
    step()
    held = O._held(net, opt, x, y)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    ev = sorted((e.start_ns(), i, e.nbytes()) for i, e in enumerate(prof.profiler.kineto_results.events())
                if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU)
    run = peak = 0
    for _, _, n in ev:
        run += n
        peak = max(peak, run)
    with FlopCounterMode(display=False) as fc:
        step()
    return held + peak, fc.get_total_flops()


def torch_part(out: str, names) -> None:
    import warnings

    import torch

    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    for name in names:
        net, x, y = build(name)
        rows = []
        for mode in [None] + [k for k in range(2, 9) if k <= len(net.blocks)] + ["sac"]:
            peak, flops = torch_point(net, x, y, mode)
            rows.append({"mode": mode, "peak": peak, "flops": flops})
            print(f"{name} {mode}: {peak:,d} B, {flops:,d} FLOPs", file=sys.stderr, flush=True)
        net.mode = None
        path = os.path.join(out, f"{name}.onnx")
        if not os.path.exists(path):
            torch.onnx.export(net, (x,), path, dynamo=False, training=torch.onnx.TrainingMode.TRAINING,
                              do_constant_folding=False)
        with open(os.path.join(out, f"{name}.json"), "w") as fh:
            json.dump({"rows": rows, "batch": int(x.shape[0])}, fh)


# ---- memplan side --------------------------------------------------------------------------------
def memplan_side(path: str, batch: int, rows: list, grid_n: int = GRID) -> list[str]:
    import time

    from memplan_cli.config import TrainConfig
    from memplan_cli.loaders import load_model
    from memplan_cli.remat.problem import RematProblem
    from memplan_cli.remat.solve import floor, plan_arena, solve

    t0 = time.process_time()
    g = load_model(path, batch_size=batch)
    cfg = TrainConfig(batch_size=batch, optimizer="sgd", loss="cce")
    p = RematProblem(g, cfg)
    plain, fl = plan_arena(p, ()), floor(p)[0]
    grid = []  # (budget, arena, FLOPs ratio) of the plans found at floor + k/GRID x (plain - floor)
    for k in range(grid_n + 1):
        r = solve(p, fl + k * (plain - fl) // grid_n)
        if r.fits:
            grid.append((r.budget, r.arena, r.ratio))
    mib = 2 ** 20
    t_plain = rows[0]
    out = [f"memplan: plain plan {plain / mib:.2f} MiB, {p.flops.total / 1e9:.2f} GFLOPs (every op); floor "
           f"{fl / mib:.2f} MiB; PyTorch plain step {t_plain['peak'] / mib:.2f} MiB, "
           f"{t_plain['flops'] / 1e9:.2f} GFLOPs (matmul/conv)",
           f"{'PyTorch':>8} {'MiB':>8} {'FLOPs x':>7} | {'memplan at its bytes':>20} | "
           f"{'memplan at its FLOPs x':>22} | dominated"]
    for row in rows:
        t_bytes, t_ratio = row["peak"], row["flops"] / t_plain["flops"]
        r = solve(p, t_bytes)
        at_bytes = f"{r.arena / mib:8.2f} {r.ratio:6.3f}x" if r.fits else f"{'none found':>16}"
        fits = [(a, q) for _, a, q in grid if q <= t_ratio + 1e-12]
        best = min(fits) if fits else None
        at_flops = f"{best[0] / mib:8.2f} MiB {best[1]:6.3f}x" if best else f"{'none in grid':>22}"
        dom = (r.fits and r.arena <= t_bytes and r.ratio <= t_ratio + 1e-12) or bool(best and best[0] <= t_bytes)
        mode = {None: "plain", "sac": "SAC"}.get(row["mode"], f"seq {row['mode']}")
        out.append(f"{mode:>8} {t_bytes / mib:8.2f} {t_ratio:7.3f} | {at_bytes:>20} | {at_flops:>22} | "
                   f"{'yes' if dom else 'NO'}")
    out.append(f"(memplan side: {time.process_time() - t0:.0f} s CPU, {len(grid)} of {grid_n + 1} grid budgets fit)")
    return out


def main() -> int:
    import subprocess

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("nets", nargs="*", choices=[[], *NETS], default=[], help=f"networks (default: all): {NETS}")
    ap.add_argument("--torch-python", default=os.environ.get("MEMPLAN_TORCH_PYTHON", ""),
                    help="a Python with torch, torchvision, transformers and onnx (or MEMPLAN_TORCH_PYTHON)")
    ap.add_argument("--keep", metavar="DIR", help="keep the exports and PyTorch's figures here (and reuse them)")
    ap.add_argument("--grid", type=int, default=GRID, help=f"memplan budgets floor + k/N x (plain - floor), "
                                                            f"k = 0..N (default N = {GRID})")
    ap.add_argument("--torch-part", metavar="DIR", help=argparse.SUPPRESS)
    args = ap.parse_args()
    names = list(args.nets) or list(NETS)
    if args.torch_part:
        torch_part(args.torch_part, names)
        return 0
    if not args.torch_python:
        print("remat_torch.py: give --torch-python (a Python with torch, torchvision and onnx)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        d = args.keep or tmp
        os.makedirs(d, exist_ok=True)
        todo = [n for n in names if not os.path.exists(os.path.join(d, f"{n}.json"))]
        if todo:
            subprocess.run([args.torch_python, os.path.abspath(__file__), "--torch-part", d, *todo], check=True)
        for name in names:
            with open(os.path.join(d, f"{name}.json")) as fh:
                meta = json.load(fh)
            print(f"\n== {name}: batch {meta['batch']}, SGD, cce")
            for line in memplan_side(os.path.join(d, f"{name}.onnx"), meta["batch"], meta["rows"], args.grid):
                print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
