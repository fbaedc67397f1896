"""Dev-only: export torchvision resnet18 / shufflenet_v2_x0_5 and a tiny GPT-2 with the PyTorch -> TF Lite
converters (litert-torch, onnx2tf), then check each file the way docs/formats.md reports it.

    python devtools/tflite_converters.py export OUT [--batch N] [--size HW] [--only NAMES] [--converters ...]
    python devtools/tflite_converters.py check OUT/*.tflite

Needs a venv with torch, torchvision, transformers, litert-torch, onnx2tf and tensorflow-cpu
(requirements-dev.txt names the ones the corpus was made with); memplan never imports it.
Weights are random (torch's init, seeded); the norms get random scale, shift and statistics, as a
trained network has them, so the converter's folded biases are distinct constants (at their init
they are equal zeros, which the converter writes once and shares).

`check` prints, per file: whether `memplan analyze F -b B -O adam -l cce` and `memplan verify F -b 2
-O adam -l cce` pass, the elements memplan trains (its gradient bytes / 4), the file's float
constants of more than one element, and the normalisations noted as merged into the next layer.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

NAMES = ("resnet18", "shufflenet_v2_x0_5", "gpt2_tiny")


def _lm():
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    class LM(torch.nn.Module):
        """GPT-2 (n_embd 32, 2 layers, 2 heads, vocab 100, 16 positions; lm_head tied), logits only."""

        def __init__(self):
            super().__init__()
            cfg = GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=100, n_positions=16, use_cache=False,
                             attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0)
            cfg._attn_implementation = "eager"
            self.m = GPT2LMHeadModel(cfg)

        def forward(self, ids):
            return self.m(input_ids=ids, use_cache=False).logits

    return LM()


def model(name: str, batch: int, size: int):
    import torch
    import torchvision

    torch.manual_seed(0)
    if name == "gpt2_tiny":
        return _lm(), torch.randint(0, 100, (batch, 8))
    return getattr(torchvision.models, name)(num_classes=10), torch.randn(batch, 3, size, size)


def randomize_norms(m) -> None:
    import torch

    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, (torch.nn.BatchNorm2d, torch.nn.LayerNorm)):
                mod.weight.copy_(torch.rand(mod.weight.shape, generator=g) + 0.5)
                mod.bias.copy_(torch.rand(mod.bias.shape, generator=g) - 0.5)
            if isinstance(mod, torch.nn.BatchNorm2d):
                mod.running_mean.copy_(torch.rand(mod.running_mean.shape, generator=g) - 0.5)
                mod.running_var.copy_(torch.rand(mod.running_var.shape, generator=g) + 0.5)


def parameter_counts(m) -> dict:
    """The module's parameters (tied ones once), and what its BatchNorms and LayerNorms hold."""
    import torch

    unique = {id(p): p for p in m.parameters()}
    bn = [mod for mod in m.modules() if isinstance(mod, torch.nn.BatchNorm2d)]
    ln = [mod for mod in m.modules() if isinstance(mod, torch.nn.LayerNorm)]
    return {"params": sum(p.numel() for p in unique.values()),
            "batchnorm_params": sum(2 * b.num_features for b in bn), "batchnorm_channels": sum(b.num_features for b in bn),
            "layernorm_params": sum(2 * n.weight.numel() for n in ln), "layernorms": len(ln)}


def _onnx2tf_sample_images(folder: str) -> None:
    """onnx2tf checks an image model's outputs on 20 sample images it downloads unless its working folder
    holds them (calibration_image_sample_data_20x128x128x3_float32.npy): random ones, written here,
    since this machine has no network; they decide nothing in the converted file."""
    import numpy as np

    p = os.path.join(folder, "calibration_image_sample_data_20x128x128x3_float32.npy")
    if not os.path.exists(p):
        np.save(p, np.random.default_rng(0).random((20, 128, 128, 3), dtype=np.float32))


def export(out: str, batch: int, size: int, only, converters, onnx_exporter: str = "dynamo") -> None:
    os.makedirs(out, exist_ok=True)
    info = {}
    for name in only:
        m, x = model(name, batch, size)
        m.eval()
        randomize_norms(m)
        counts = parameter_counts(m)
        if "litert-torch" in converters:
            import litert_torch

            p = os.path.join(out, f"{name}_b{batch}_litert.tflite")
            try:
                litert_torch.convert(m, (x,)).export(p)
                info[os.path.basename(p)] = {"source": name, "converter": "litert-torch", **counts}
            except Exception as e:  # noqa: BLE001 - the report says what failed
                info[os.path.basename(p)] = {"source": name, "converter": "litert-torch", "error": f"{type(e).__name__}: {e}"}
        if "onnx2tf" in converters:
            import torch

            o = os.path.join(out, f"{name}_b{batch}.onnx")
            d = os.path.join(out, f"{name}_b{batch}_onnx2tf")
            # dynamo by default: TorchScript has no ONNX form of transformers 5's aten::diff (GPT-2's mask), and
            # onnx2tf fails on its shufflenet (the channel shuffle's computed shapes leave a dim unknown)
            dynamo = onnx_exporter == "dynamo"
            torch.onnx.export(m, (x,), o, dynamo=dynamo, opset_version=18 if dynamo else 17, input_names=["x"],
                              output_names=["y"], **({"external_data": False} if dynamo else {}))
            _onnx2tf_sample_images(out)
            r = subprocess.run([os.path.join(os.path.dirname(sys.executable), "onnx2tf"), "-i", os.path.abspath(o),
                                "-o", os.path.abspath(d), "-n"], capture_output=True, text=True, cwd=out)
            p = os.path.join(out, f"{name}_b{batch}_onnx2tf.tflite")
            made = sorted(f for f in os.listdir(d) if f.endswith("_float32.tflite")) if os.path.isdir(d) else []
            if r.returncode == 0 and made:
                os.replace(os.path.join(d, made[0]), p)
                info[os.path.basename(p)] = {"source": name, "converter": f"onnx2tf ({'dynamo' if dynamo else 'TorchScript'} ONNX)", **counts}
            else:
                info[os.path.basename(p)] = {"source": name, "converter": "onnx2tf", "error": (r.stdout + r.stderr)[-2000:]}
        print(json.dumps({k: v for k, v in info.items() if v["source"] == name}), flush=True)
    path = os.path.join(out, f"exports_b{batch}.json")
    old = json.load(open(path)) if os.path.exists(path) else {}
    with open(path, "w") as f:
        json.dump({**old, **info}, f, indent=1, sort_keys=True)


def check(files, batch: int) -> None:
    from click.testing import CliRunner

    from memplan_cli.cli import main
    from memplan_cli.config import TrainConfig
    from memplan_cli.loaders import load_model
    from memplan_cli.passes.pipeline import build_training_graph

    print("| file | analyze -b %d | verify -b 2 | trained elements | float constants (> 1 element) | merged norms |"
          % batch)
    print("|---|---|---|---|---|---|")
    for f in files:
        runs = []
        for cmd in (["analyze", f, "-b", str(batch)], ["verify", f, "-b", "2"]):
            r = CliRunner().invoke(main, cmd + ["-O", "adam", "-l", "cce", "-q"])
            runs.append("ok" if r.exit_code == 0 else f"exit {r.exit_code}: {(r.stderr or r.output).strip()[:160]}")
        trained = floats = merged = "-"
        try:
            g = load_model(f, batch_size=batch)
            tg = build_training_graph(g, TrainConfig(optimizer="adam", loss="cce", batch_size=batch))
            trained = f"{sum(g.operands[o].num_elements for o in tg.grad):,d}"
            floats = f"{sum(o.num_elements for o in g.operands if o.is_const and o.dtype == 'float32' and o.num_elements > 1):,d}"
            merged = str(len(g.metadata.get("merged_parameters", ())))
        except Exception as e:  # noqa: BLE001
            trained = f"{type(e).__name__}"
        print(f"| {os.path.basename(f)} | {runs[0]} | {runs[1]} | {trained} | {floats} | {merged} |", flush=True)


def _tiny(name: str):
    """The tiny exports kept in tests/corpus (random init, seeded): (module, sample input)."""
    import torch

    torch.manual_seed(0)
    if name == "maxpool":  # torch's padded max-pool: the converters' PADV2 (lowest float / -inf) + VALID pool
        m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                torch.nn.MaxPool2d(3, 2, padding=1), torch.nn.Conv2d(8, 8, 3, padding=1),
                                torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 4))
        return m, torch.randn(2, 3, 16, 16)

    class EmbedLN(torch.nn.Module):  # nn.Embedding (EMBEDDING_LOOKUP), a LayerNorm merged into the Linear after it
        def __init__(self):
            super().__init__()
            self.emb, self.ln, self.fc = torch.nn.Embedding(50, 16), torch.nn.LayerNorm(16), torch.nn.Linear(16, 4)

        def forward(self, ids):
            return self.fc(self.ln(self.emb(ids)))

    return EmbedLN(), torch.randint(0, 50, (2, 8))


def corpus(out: str) -> None:
    """tests/corpus's converter exports (batch 2, the corpus tests' batch: no re-batch)."""
    import litert_torch

    for name, fname in (("maxpool", "litert_maxpool_tiny.tflite"), ("embed_ln", "litert_embed_ln_tiny.tflite")):
        m, x = _tiny(name)
        m.eval()
        randomize_norms(m)
        litert_torch.convert(m, (x,)).export(os.path.join(out, fname))
        print(fname, parameter_counts(m), flush=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export")
    e.add_argument("out")
    e.add_argument("--batch", type=int, default=1)
    e.add_argument("--size", type=int, default=96, help="image side for the CNNs")
    e.add_argument("--only", default=",".join(NAMES))
    e.add_argument("--converters", default="litert-torch,onnx2tf")
    e.add_argument("--onnx-exporter", choices=("dynamo", "torchscript"), default="dynamo", help="for onnx2tf")
    c = sub.add_parser("check")
    c.add_argument("files", nargs="+")
    c.add_argument("--batch", type=int, default=4)
    k = sub.add_parser("corpus", help="write tests/corpus's tiny litert-torch exports into OUT")
    k.add_argument("out")
    a = ap.parse_args(argv)
    if a.cmd == "export":
        export(a.out, a.batch, a.size, a.only.split(","), a.converters.split(","), a.onnx_exporter)
    elif a.cmd == "corpus":
        corpus(a.out)
    else:
        check(a.files, a.batch)


if __name__ == "__main__":
    main()
