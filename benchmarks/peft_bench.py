#!/usr/bin/env python3
"""Fine-tuning modes side by side: full fine-tuning vs LoRA r=8 vs bias-only vs last-block-only.

    $DEVENV/bin/python scripts/export_peft_models.py     # once: the two transformers (dev-only)
    .venv/bin/python benchmarks/peft_bench.py [--models benchmarks/.peft_models] [--optimizer adam]

For the MobileNetV2 sample (batch 2 and 8) and, when exported, a Llama-style decoder and a BERT-style
encoder (transformers, torch.onnx dynamo; 4 layers, hidden 128) at batch 2 and 8 and sequence
lengths 32 and 128, memplan's plan (memplan profile, Adam) for each mode:
  planned   the planned arena (bytes)
  weights   every weight in memory (trained or frozen: the "trainable" category)
  trained   bytes of the parameters that train (= their gradients)
  optimizer the optimizer state (Adam: 2 x trained)
  act@peak  activations, back-props and scratch live at the plan's peak
Modes: full (every op trains); LoRA r=8 on the attention query / value projections (the default
targets; MobileNetV2 has none, so its classifier); bias-only (`--train biases`); last block only
(Llama: layers.3 + final norm + lm_head; BERT: layer.3 + pooler + classifier; MobileNetV2: block_16
and the head, `-t 7`).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from memplan_cli import analyze  # noqa: E402
from memplan_cli.errors import MemplanError  # noqa: E402

MOBILENET = os.path.join(REPO, "sample_models", "mobilenetv2.circle")

MODES = {
    "mobilenetv2": [("full", {}), ("LoRA r=8 (classifier)", {"lora": 8, "lora_targets": "FullyConnected"}),
                    ("bias-only", {"train": "biases"}), ("last block", {"trainable_ops": 7})],
    "llama": [("full", {}), ("LoRA r=8 (q,v)", {"lora": 8}), ("bias-only", {"train": "biases"}),
              ("last block", {"train": ["ops:*layers.3.*", "ops:*model.norm*", "ops:*lm_head*"]})],
    "bert": [("full", {}), ("LoRA r=8 (q,v)", {"lora": 8}), ("bias-only", {"train": "biases"}),
             ("last block", {"train": ["ops:*layer.3.*", "ops:*pooler*", "ops:*classifier*"]})],
}
ACTIVATIONS = ("non-const", "back-prop", "disposable", "extra")


def mib(n: int) -> str:
    return f"{n / 2**20:9.2f} MiB"


def row(path: str, batch: int, optimizer: str, kw: dict) -> tuple[dict, float]:
    t = time.perf_counter()
    r = analyze(path, batch_size=batch, optimizer=optimizer, loss="cce", compare_onert=False, **kw)
    dt = time.perf_counter() - t
    d = r.report
    cats = d["categories"]
    peak = d["peak"]["categories"]
    return {"planned": d["totals"]["planned"], "weights": cats["trainable"]["naive"],
            "trained": cats["gradient"]["naive"], "optimizer": cats["opt-variable"]["naive"],
            "act": sum(peak.get(c, 0) for c in ACTIVATIONS)}, dt


def table(title: str, path: str, batch: int, optimizer: str, modes) -> None:
    print(f"\n== {title}: batch {batch}, {optimizer}")
    print(f"{'mode':24s} {'planned':>13s} {'weights':>13s} {'trained':>13s} {'optimizer':>13s} {'act@peak':>13s}"
          f" {'vs full':>8s} {'s':>5s}")
    full = None
    for name, kw in modes:
        try:
            f, dt = row(path, batch, optimizer, kw)
        except MemplanError as e:
            print(f"{name:24s} n/a: {e}")
            continue
        full = full or f["planned"]
        print(f"{name:24s} {mib(f['planned'])} {mib(f['weights'])} {mib(f['trained'])} {mib(f['optimizer'])} "
              f"{mib(f['act'])} {f['planned'] / full:7.3f}x {dt:5.2f}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=os.path.join(REPO, "benchmarks", ".peft_models"))
    ap.add_argument("--optimizer", default="adam")
    args = ap.parse_args(argv)
    for b in (2, 8):
        table("MobileNetV2 sample (224x224)", MOBILENET, b, args.optimizer, MODES["mobilenetv2"])
    for name in ("llama", "bert"):
        for seq in (32, 128):
            path = os.path.join(args.models, f"{name}_s{seq}.onnx")
            if not os.path.exists(path):
                print(f"\n({path} missing: run $DEVENV/bin/python scripts/export_peft_models.py)")
                continue
            for b in (2, 8):
                table(f"{name} (4 layers, hidden 128), sequence {seq}", path, b, args.optimizer, MODES[name])
    return 0


if __name__ == "__main__":
    sys.exit(main())
