#!/usr/bin/env python3
"""Export the small transformers the fine-tuning benchmark measures (dev-only: torch, transformers).

    $DEVENV/bin/python scripts/export_peft_models.py [--out benchmarks/.peft_models]

Writes, with torch.onnx's dynamo exporter (random weights, every parameter drawn from N(0, 0.02) so
that no two share a value and the exporter keeps each its own initializer; nothing downloaded), a Llama-style decoder
(LlamaForCausalLM: hidden 128, 4 layers, 4 heads, 2 kv heads, ffn 256, vocab 1000) and a BERT-style
encoder (BertForSequenceClassification: hidden 128, 4 layers, 4 heads, ffn 512, vocab 1000) at
sequence lengths 32 and 128, batch 1 (memplan re-batches them): `llama_s32.onnx`, `llama_s128.onnx`,
`bert_s32.onnx`, `bert_s128.onnx`, and `models.json` (source, exporter, framework parameter counts).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

SEQS = (32, 128)


class _Logits:
    """Wrap a transformers model so the export has one output: its logits."""

    def __new__(cls, model):
        import torch

        class Wrapped(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = model

            def forward(self, ids):
                return self.m(input_ids=ids).logits

        return Wrapped()


def models():
    import transformers as tr

    def llama():
        c = tr.LlamaConfig(vocab_size=1000, hidden_size=128, intermediate_size=256, num_hidden_layers=4,
                           num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256, use_cache=False)
        return tr.LlamaForCausalLM(c)

    def bert():
        c = tr.BertConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=4, num_attention_heads=4,
                          intermediate_size=512, max_position_embeddings=256, num_labels=4)
        return tr.BertForSequenceClassification(c)

    yield "llama", "LlamaForCausalLM(hidden 128, 4 layers, 4 heads, 2 kv heads, ffn 256, vocab 1000)", llama
    yield "bert", "BertForSequenceClassification(hidden 128, 4 layers, 4 heads, ffn 512, vocab 1000)", bert


def main(argv=None) -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                                  "benchmarks", ".peft_models"))
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(0)
    doc = []
    for name, source, make in models():
        model = make().eval()
        # random-init biases are all zero and norm scales all one: the exporter would store each set
        # as one shared initializer. Trained checkpoints have distinct values: draw them
        with torch.no_grad():
            for p in model.parameters():
                p.normal_(0.0, 0.02)
        params = sum(p.numel() for p in model.parameters())
        for seq in SEQS:
            path = os.path.join(args.out, f"{name}_s{seq}.onnx")
            ids = torch.randint(0, 1000, (1, seq))
            with torch.no_grad():
                torch.onnx.export(_Logits(model).eval(), (ids,), path, dynamo=True, external_data=False)
            doc.append({"file": os.path.basename(path), "source": source, "seq": seq, "params": params,
                        "exporter": f"torch.onnx dynamo (torch {torch.__version__})"})
            print(f"{path}: {os.path.getsize(path):,} B, {params:,} params", file=sys.stderr)
    with open(os.path.join(args.out, "models.json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
