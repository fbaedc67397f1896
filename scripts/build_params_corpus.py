#!/usr/bin/env python3
"""Export the tiny real models of issue 27 (items 3-5) for tests/corpus/params (dev-only).

    python scripts/build_params_corpus.py tests/corpus/params [--only NAMES]   # needs torch, timm, transformers, onnxscript

Families whose exports hold constants that are not parameters (rotary tables, causal masks,
cached attention biases, an RNN's initial state made at the file's batch) or a negative Pad:
tiny transformers configs (Llama, Qwen3, GPT-NeoX, Falcon, RWKV) and timm TinyViT, LeViT and
Sequencer2d, all random init (nothing downloaded), exported by torch.onnx dynamo in eval mode.
Weights lose their bytes before writing (memplan never reads them), nodes their stack traces.
OUT_DIR/exports.json records each file's source, exporter and the truth for the tests:
`params`, torch's count of trainable float parameters (`parameters()`, tied weights once).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from devtools.exports import strip_stack_traces  # noqa: E402

warnings.filterwarnings("ignore")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def models():
    import timm
    import torch
    import transformers as tr
    from build_corpus import _Logits

    ids = (torch.randint(0, 100, (1, 8)),)
    img = lambda s: (torch.randn(1, 3, s, s),)  # noqa: E731

    def lm(cfg_cls, model_cls, **kw):
        return lambda: _Logits(model_cls(cfg_cls(**kw)), "logits")

    small = dict(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                 max_position_embeddings=16, use_cache=False)
    yield ("qwen3_tiny_dynamo.onnx", "Qwen3ForCausalLM(hidden 32, ffn 64, 1 layer, 4 heads, 2 kv heads, head_dim 8)",
           lm(tr.Qwen3Config, tr.Qwen3ForCausalLM, intermediate_size=64, num_key_value_heads=2, head_dim=8, **small), ids)
    yield ("gpt_neox_tiny_dynamo.onnx", "GPTNeoXForCausalLM(hidden 32, ffn 64, 1 layer, 4 heads, rotary_pct 0.25)",
           lm(tr.GPTNeoXConfig, tr.GPTNeoXForCausalLM, intermediate_size=64, rotary_pct=0.25, **small), ids)
    yield ("falcon_tiny_dynamo.onnx", "FalconForCausalLM(hidden 32, 1 layer, 4 heads, rotary, new_decoder_architecture=False)",
           lm(tr.FalconConfig, tr.FalconForCausalLM, **{k: v for k, v in small.items()
                                                        if k != "max_position_embeddings"}), ids)
    yield ("rwkv_tiny_dynamo.onnx", "RwkvForCausalLM(hidden 32, ffn 64, 2 layers (its init divides by layers - 1), context 16)",
           lm(tr.RwkvConfig, tr.RwkvForCausalLM, vocab_size=100, hidden_size=32, attention_hidden_size=32,
              intermediate_size=64, num_hidden_layers=2, context_length=16, rescale_every=0, use_cache=False), ids)
    yield ("tinyvit_tiny_dynamo.onnx", "timm tiny_vit_5m_224(embed_dims (8,16,16,24), depths 1,1,1,1, heads 1,1,2,2, img 64)",
           lambda: timm.create_model("tiny_vit_5m_224", pretrained=False, num_classes=4,
                                     embed_dims=(8, 16, 16, 24), depths=(1, 1, 1, 1), num_heads=(1, 1, 2, 2),
                                     window_sizes=(4, 4, 4, 2)), img(64))
    yield ("levit_tiny_dynamo.onnx", "timm levit_128s(embed_dim (16,24,32), key_dim 4, heads 1,2,2, depth 1,1,1, img 64)",
           lambda: timm.create_model("levit_128s", pretrained=False, img_size=64, num_classes=4,
                                     embed_dim=(16, 24, 32), key_dim=4, num_heads=(1, 2, 2), depth=(1, 1, 1)), img(64))
    yield ("sequencer2d_tiny_dynamo.onnx", "timm sequencer2d_s(layers 1,1,1,1, embed_dims 8,8,8,8, hidden 4,4,4,4, img 64)",
           lambda: timm.create_model("sequencer2d_s", pretrained=False, img_size=64, num_classes=4,
                                     layers=(1, 1, 1, 1), embed_dims=(8, 8, 8, 8),
                                     hidden_sizes=(4, 4, 4, 4), mlp_ratios=(1.0, 1.0, 1.0, 1.0)), img(64))


def _shrink(path: str) -> None:
    """Weights without their bytes (dims kept: memplan never reads them) and nodes without the
    exporter's stack traces (file paths of this machine); the fx_node and name-scope records stay."""
    import numpy as np
    import onnx

    m = onnx.load(path)
    for t in m.graph.initializer:
        n = int(np.prod(t.dims)) if len(t.dims) else 1
        if t.data_type == onnx.TensorProto.FLOAT and n > 64:
            t.ClearField("raw_data")
            t.ClearField("float_data")
    strip_stack_traces(m)
    onnx.save(m, path)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--only", default=None)
    args = ap.parse_args(argv)
    import onnx
    import torch

    os.makedirs(args.out, exist_ok=True)
    doc_path = os.path.join(args.out, "exports.json")
    doc = json.load(open(doc_path)) if os.path.exists(doc_path) else []
    only = args.only.split(",") if args.only else None
    for fn, source, make, inputs in models():
        if only and not any(o in fn for o in only):
            continue
        torch.manual_seed(0)
        try:
            model = make().eval()
            params = sum(p.numel() for p in model.parameters() if p.requires_grad and p.dtype.is_floating_point)
            path = os.path.join(args.out, fn)
            with torch.no_grad():
                torch.onnx.export(model, inputs, path, dynamo=True, external_data=False)
            _shrink(path)
        except Exception as e:  # one family failing must not stop the others
            print(f"FAIL {fn}: {type(e).__name__}: {str(e).strip().splitlines()[-1][:300] if str(e).strip() else ''}",
                  file=sys.stderr)
            continue
        m = onnx.load(path, load_external_data=False)
        opset = max(o.version for o in m.opset_import if o.domain in ("", "ai.onnx"))
        doc = [d for d in doc if d["file"] != fn]
        doc.append({"file": fn, "source": source, "params": params, "bytes": os.path.getsize(path),
                    "exporter": f"torch.onnx dynamo (torch {torch.__version__}), opset {opset}",
                    "inputs": [list(a.shape) for a in inputs]})
        print(f"ok   {fn}: {params:,} params, {os.path.getsize(path):,} B", file=sys.stderr)
    with open(doc_path, "w") as f:
        json.dump(sorted(doc, key=lambda d: d["file"]), f, indent=1, sort_keys=True)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
