"""Dev-only check of `--dim` (docs/dims.md): a transformer exported once with a symbolic sequence
length, analysed under `--dim seq=N`, against the same model exported at fixed length N.

Needs torch, transformers and onnxscript (never memplan dependencies); run it with an interpreter
that has them:

    python devtools/symbolic_dims_check.py                     # every export, N = 64, 256, 1024
    python devtools/symbolic_dims_check.py --models bert_ts --seq 64 --out exports/

Exports (random init, eager attention): `bert_ts` (transformers BertForMaskedLM, TorchScript
exporter in training mode, `dynamic_axes`), `bert_dynamo` (the same model, dynamo exporter,
`dynamic_shapes`), `gpt2_dynamo` (GPT2LMHeadModel, dynamo), `gpt2_ts` (the same, TorchScript: the
module passes an all-ones attention mask, because without one transformers checks for packed
sequences with torch.diff, which the TorchScript exporter cannot export), `distilbert_dynamo`
(DistilBertForMaskedLM) and `llama_dynamo` (LlamaForCausalLM, grouped-query attention, rotary
positions). Each export has `batch` and `seq` symbolic, or both fixed (batch 2, seq N). memplan runs as devtools/torch_oracle.py
runs it ($MEMPLAN_PYTHON, else the repository's .venv): `analyze -b 2 -O adam -l cce -f json` per
profile (memplan, torch); the table prints planned / naive / lower bound of both and the difference.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from devtools.torch_oracle import ROOT, memplan_cmd  # noqa: E402

MODELS = ("bert_ts", "bert_dynamo", "gpt2_dynamo", "gpt2_ts", "distilbert_dynamo", "llama_dynamo")
BATCH = 2


def _model(name: str):
    import torch
    import transformers as tr

    class Logits(torch.nn.Module):
        def __init__(self, m, mask):
            super().__init__()
            self.m = m
            self.mask = mask

        def forward(self, ids):
            if self.mask:
                return self.m(ids, attention_mask=torch.ones_like(ids), return_dict=True)["logits"]
            return self.m(ids, return_dict=True)["logits"]

    torch.manual_seed(0)
    family = name.rsplit("_", 1)[0]
    if family == "bert":
        cfg = tr.BertConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                            intermediate_size=128, max_position_embeddings=1024)
        cls = tr.BertForMaskedLM
    elif family == "distilbert":
        cfg = tr.DistilBertConfig(vocab_size=1000, dim=64, n_layers=2, n_heads=4, hidden_dim=128,
                                  max_position_embeddings=1024)
        cls = tr.DistilBertForMaskedLM
    elif family == "llama":
        cfg = tr.LlamaConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                             num_key_value_heads=2, intermediate_size=128, max_position_embeddings=1024,
                             use_cache=False)
        cls = tr.LlamaForCausalLM
    else:
        cfg = tr.GPT2Config(vocab_size=1000, n_embd=64, n_layer=2, n_head=4, n_positions=1024, use_cache=False)
        cls = tr.GPT2LMHeadModel
    cfg._attn_implementation = "eager"
    return Logits(cls(cfg), mask=name == "gpt2_ts")


def export(name: str, seq: int | None, path: str) -> None:
    """`seq` None: batch and seq symbolic (the example input has seq 32)."""
    import torch

    model = _model(name)
    x = torch.randint(0, 1000, (BATCH, seq or 32))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if name.endswith("_ts"):
            kw = {} if seq else {"dynamic_axes": {"ids": {0: "batch", 1: "seq"}}}
            torch.onnx.export(model, (x,), path, dynamo=False, training=torch.onnx.TrainingMode.TRAINING,
                              do_constant_folding=False, input_names=["ids"], output_names=["logits"], **kw)
        else:
            kw = {} if seq else {"dynamic_shapes": {"ids": {0: torch.export.Dim("batch"),
                                                            1: torch.export.Dim("seq", max=1024)}}}
            torch.onnx.export(model, (x,), path, dynamo=True, external_data=False, input_names=["ids"], **kw)


def analyze(path: str, profile: str, flags=()) -> dict:
    r = subprocess.run(memplan_cmd() + ["analyze", path, "-b", str(BATCH), "-O", "adam", "-l", "cce", "-p", profile,
                                        "-f", "json", *flags], capture_output=True, text=True, cwd=ROOT)
    if r.returncode:
        return {"error": (r.stderr or r.stdout).strip().splitlines()[-1]}
    t = json.loads(r.stdout)["totals"]
    return {k: t[k] for k in ("planned", "naive", "lower_bound")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS), help=f"comma-separated: {', '.join(MODELS)}")
    ap.add_argument("--seq", default="64,256,1024", help="the fixed lengths N to compare (comma-separated)")
    ap.add_argument("--out", default=None, help="keep the exports in this directory (default: a temporary one)")
    ap.add_argument("--json", default=None, help="also write the rows here")
    a = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        out = a.out or tmp
        os.makedirs(out, exist_ok=True)
        print("| export | N | profile | symbolic, `--dim seq=N` | fixed at N | planned |")
        print("|---|---:|---|---:|---:|---:|")
        for name in a.models.split(","):
            sym = os.path.join(out, f"{name}_sym.onnx")
            export(name, None, sym)
            for n in (int(s) for s in a.seq.split(",")):
                fixed = os.path.join(out, f"{name}_s{n}.onnx")
                export(name, n, fixed)
                for profile in ("memplan", "torch"):
                    s, f = analyze(sym, profile, ("--dim", f"seq={n}")), analyze(fixed, profile)
                    rows.append({"export": name, "seq": n, "profile": profile, "symbolic": s, "fixed": f})
                    if "error" in s or "error" in f:
                        print(f"| {name} | {n} | {profile} | {s.get('error', '')} | {f.get('error', '')} | |")
                        continue
                    cell = lambda d: f"{d['planned']:,d} / {d['naive']:,d} / {d['lower_bound']:,d}"  # noqa: E731
                    diff = s["planned"] - f["planned"]
                    pct = 100 * diff / f["planned"]
                    print(f"| {name} | {n} | {profile} | {cell(s)} | {cell(f)} | "
                          f"{'equal' if diff == 0 else f'{diff:+,d} B ({pct:+.5f} %)'} |", flush=True)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
