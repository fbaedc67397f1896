#!/usr/bin/env python3
"""memplan's remat beside PyTorch's activation checkpointing, in bytes (dev-only: torch, torchvision,
transformers and onnx are never memplan's runtime dependencies).

    .venv/bin/python benchmarks/remat_torch.py --torch-python PY [--keep DIR] [--check N] [NET ...]

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
and FLOPs (FlopCounterMode: matmul and convolution FLOPs only, recomputes included; a convolution's
backward counted per group, `conv_backward_flops`), for
- plain: no checkpointing;
- seq K: `checkpoint_sequential` over the blocks in K = 2..8 segments (non-reentrant);
- SAC: every block checkpointed with selective activation checkpointing: matmul and convolution
  outputs saved, every other op recomputed (`create_selective_checkpoint_contexts`).
memplan, on the export: one remat search (`Front`: the solver's front does not depend on the budget,
so it answers every budget as `analyze --budget` would; `--check N` runs `analyze --budget` at N
budgets and stops unless it agrees), its plain plan (planned arena, FLOPs of every op), then
- at PyTorch's bytes: the plan `analyze --budget` gives at the PyTorch point's peak: planned arena,
  FLOPs ratio of every op (`x`) and of matmuls and convolutions only (`mm x`, what PyTorch counts);
- at PyTorch's FLOPs: the smallest planned arena of any plan `analyze --budget` gives at some budget
  whose `mm x` is at most the PyTorch point's.
FLOPs ratios are each side's FLOPs over its own plain step. memplan dominates a PyTorch point when one
of its plans needs no more bytes at no more matmul/convolution FLOPs ratio (like for like).
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
COUNTER = "conv-backward-per-group"  # the FLOPs count kept figures were made with (`conv_backward_flops`)


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
    peak, _ = O.allocator_peak(step)
    with FlopCounterMode(display=False, custom_mapping={torch.ops.aten.convolution_backward: conv_backward_flops}) as fc:
        step()
    return held + peak, fc.get_total_flops()


def conv_backward_flops(grad_out_shape, x_shape, w_shape, _bias, _stride, _padding, _dilation, transposed,
                        _output_padding, _groups, output_mask, out_shape=None, **kwargs) -> int:
    """dX and dW of a convolution each cost what its forward costs: 2 x |Y| x prod(W's shape but its
    first dimension) (|X| for a transposed one). FlopCounterMode's own formula (torch 2.14.1) counts
    dW as if the convolution had one group: a depthwise convolution's backward came out 33 x its
    forward at 32 channels instead of 2 x, which swelled MobileNet's and EfficientNet's plain step
    and shrank every ratio over it."""
    import math

    forward = 2 * math.prod(x_shape if transposed else grad_out_shape) * math.prod(w_shape[1:])
    return forward * (int(bool(output_mask[0])) + int(bool(output_mask[1])))


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
            json.dump({"rows": rows, "batch": int(x.shape[0]), "counter": COUNTER}, fh)


# ---- memplan side --------------------------------------------------------------------------------
PRODUCT_FAMILIES = ("conv", "matmul")  # what PyTorch's FlopCounterMode counts: mm/bmm/addmm, convolution


def product_flops(tg) -> int:
    """FLOPs of the step's matmuls and convolutions (forward runs, recomputes included, and backward):
    the ops PyTorch's FlopCounterMode counts, so the two sides' ratios compare like for like."""
    from memplan_cli import ops as registry
    from memplan_cli.passes.cost import step_flops

    ops = tg.graph.operations
    return sum(o.forward + o.backward for k, o in step_flops(tg).ops.items()
               if getattr(registry.get(ops[k].type), "family", None) in PRODUCT_FAMILIES)


class Front:
    """Every budget's answer from one remat search: the solver's front (`remat.solve.ladder`, which
    does not depend on the budget) with each plan's planned arena and FLOPs, and the answer for a
    budget chosen as `solve` chooses it (below the floor: none; the plain plan when it fits; else the
    cheapest front plan whose bound and planned arena are at or under the budget). `solve` also
    computes a proven bound per budget (a HiGHS solve): that is what made one solve per budget slow,
    and the answer does not depend on it. `check` compares answers with `memplan analyze --budget`."""

    def __init__(self, path: str, batch: int):
        from memplan_cli.config import TrainConfig
        from memplan_cli.loaders import load_model
        from memplan_cli.remat.problem import RematProblem
        from memplan_cli.remat.solve import floor, ladder, plan_arena

        self.path, self.batch = path, batch
        p = self.problem = RematProblem(load_model(path, batch_size=batch),
                                        TrainConfig(batch_size=batch, optimizer="sgd", loss="cce"))
        self.floor = floor(p)[0]
        self.plans = ladder(p)  # in FLOPs order
        self.step_flops = p.flops.total
        self.plain_products = product_flops(p.build(()))
        self.fig = {}  # plan -> (planned arena, bound, FLOPs ratio, matmul/conv FLOPs ratio)
        for d in [frozenset()] + list(self.plans):
            self.fig[d] = (plan_arena(p, d), p.bound(d), (self.step_flops + p.added_flops(d)) / self.step_flops,
                           product_flops(p.build(d)) / self.plain_products)
        self.plain = self.fig[frozenset()][0]
        # memplan's plans: what `analyze --budget` answers at some budget (each front plan's own need)
        self.answers = {self.answer(max(self.fig[d][:2])) for d in self.fig}
        self.answers.discard(None)

    def answer(self, budget: int):
        if budget < self.floor:
            return None
        if self.plain <= budget:
            return frozenset()
        return next((d for d in self.plans if self.fig[d][1] <= budget and self.fig[d][0] <= budget), None)

    def smallest_within(self, ratio: float):
        """memplan's plan with the least planned arena whose matmul/convolution FLOPs ratio is at
        most `ratio`."""
        fits = [d for d in self.answers if self.fig[d][3] <= ratio + 1e-12]
        return min(fits, key=lambda d: (self.fig[d][0], self.fig[d][3])) if fits else None

    def check(self, budget: int) -> str:
        """`memplan analyze --budget` at `budget` gives the answer chosen here (arena, FLOPs)."""
        import subprocess

        out = subprocess.run([sys.executable, "-m", "memplan_cli", "analyze", self.path, "-b", str(self.batch), "-O", "sgd", "-l", "cce",
                              "--budget", str(budget), "-f", "json"], capture_output=True, text=True)
        try:
            r = json.loads(out.stdout)["remat"]
        except (ValueError, KeyError):
            raise SystemExit(f"remat_torch.py: analyze --budget {budget} failed (exit {out.returncode}): "
                             f"{out.stderr.strip()[-300:]}") from None
        d = self.answer(budget)
        want = (False,) if d is None else (True, self.fig[d][0], self.problem.added_flops(d))
        got = (False,) if not r.get("fits") else (True, r["arena"], r["added_flops"])
        if got != want:
            raise SystemExit(f"remat_torch.py: {os.path.basename(self.path)} at budget {budget:,d}: analyze "
                             f"gives {got}, the front {want} (exit {out.returncode})")
        return f"{budget:,d} B: {'arena {:,d} B, +{:,d} FLOPs'.format(*got[1:]) if got[0] else 'none'}"


def memplan_side(path: str, batch: int, rows: list, check: int = 0) -> list[str]:
    import time

    t0 = time.process_time()
    f = Front(path, batch)
    mib = 2 ** 20
    t_plain = rows[0]
    out = [f"memplan: plain {f.plain / mib:.2f} MiB, floor {f.floor / mib:.2f} MiB, {f.step_flops / 1e9:.2f} "
           f"GFLOPs, {f.plain_products / 1e9:.2f} mm/conv",
           f"PyTorch: plain {t_plain['peak'] / mib:.2f} MiB, {t_plain['flops'] / 1e9:.2f} GFLOPs mm/conv",
           f"{'PyTorch':>7} {'MiB':>7} {'mm x':>6} | {'memplan at its MiB':>20} | "
           f"{'at its mm x':>15} | dom",
           f"{'':>7} {'':>7} {'':>6} | {'MiB':>7} {'x':>5} {'mm x':>6} | {'MiB':>7} {'mm x':>7} |"]
    for row in rows:
        t_bytes, t_ratio = row["peak"], row["flops"] / t_plain["flops"]
        d = f.answer(t_bytes)
        at_bytes = (f"{f.fig[d][0] / mib:7.2f} {f.fig[d][2]:5.3f} {f.fig[d][3]:6.3f}" if d is not None
                    else f"{'none found':>20}")
        best = f.smallest_within(t_ratio)
        at_flops = f"{f.fig[best][0] / mib:7.2f} {f.fig[best][3]:7.3f}" if best is not None else f"{'none':>15}"
        dom = best is not None and f.fig[best][0] <= t_bytes
        mode = {None: "plain", "sac": "SAC"}.get(row["mode"], f"seq {row['mode']}")
        out.append(f"{mode:>7} {t_bytes / mib:7.2f} {t_ratio:6.3f} | {at_bytes} | {at_flops} | "
                   f"{'yes' if dom else 'NO'}")
    out.append(f"(memplan: one search, {len(f.plans)} front plans, {len(f.answers)} answers; "
               f"{time.process_time() - t0:.0f} s CPU)")
    if check:  # PyTorch's smallest peak, and a quarter and half of the way from memplan's floor to plain
        low = min(r["peak"] for r in rows)
        for b in sorted({low, (f.floor + f.plain) // 2, f.floor + (f.plain - f.floor) // 4})[:check]:
            out.append(f"  analyze --budget {f.check(b)} (as the front)")
    return out


def _kept(path: str) -> bool:
    """PyTorch's figures are kept in `path`, counted by this FLOPs counter (else measured again)."""
    if not os.path.exists(path):
        return False
    with open(path) as fh:
        return json.load(fh).get("counter") == COUNTER


def main() -> int:
    import subprocess

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("nets", nargs="*", choices=[[], *NETS], default=[], help=f"networks (default: all): {NETS}")
    ap.add_argument("--torch-python", default=os.environ.get("MEMPLAN_TORCH_PYTHON", ""),
                    help="a Python with torch, torchvision, transformers and onnx (or MEMPLAN_TORCH_PYTHON)")
    ap.add_argument("--keep", metavar="DIR", help="keep the exports and PyTorch's figures here (and reuse them)")
    ap.add_argument("--check", type=int, default=0, metavar="N",
                    help="also run `memplan analyze --budget` at N (at most 3) budgets per network and stop "
                         "unless it gives the plan the front gives")
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
        todo = [n for n in names if not _kept(os.path.join(d, f"{n}.json"))]
        if todo:
            subprocess.run([args.torch_python, os.path.abspath(__file__), "--torch-part", d, *todo], check=True)
        for name in names:
            with open(os.path.join(d, f"{name}.json")) as fh:
                meta = json.load(fh)
            print(f"\n== {name}: batch {meta['batch']}, SGD, cce")
            for line in memplan_side(os.path.join(d, f"{name}.onnx"), meta["batch"], meta["rows"], args.check):
                print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
