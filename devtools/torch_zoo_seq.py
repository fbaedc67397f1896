"""Transformer and sequence modules for the torch oracle (devtools/torch_oracle.py; dev-only, needs
torch, transformers and timm): the repository's own real exports run in eager at the same config, and
small Hugging Face / timm / torch.nn networks as users export them. Random init, nothing downloaded.

Each entry is (family, builder, input shape without batch) as in torch_oracle.ZOO; token ids are
("ids", sequence length, vocabulary). FILES names the committed export an entry is checked against
(memplan re-batches it) instead of a fresh export.
"""
from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def _wrap(model, key="logits"):
    import torch

    class W(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, *args):
            out = self.m(*args, return_dict=True)
            return out[key]

    return W()


def _hf(cfg_name, model_name, key="logits", attn="eager", **kw):
    """A transformers model from a small config; `attn` is the attention implementation eager runs
    ("eager": the matmul / softmax path the exporters write; "sdpa": torch's fused kernel)."""
    def make():
        import transformers as tr

        cfg = getattr(tr, cfg_name)(**kw)
        if attn:  # None: the model has no attention to choose (RWKV)
            cfg._attn_implementation = attn
        return _wrap(getattr(tr, model_name)(cfg), key)
    return make


def _timm(name, **kw):
    def make():
        import timm

        return timm.create_model(name, pretrained=False, **kw)
    return make


# the repository's tiny exports (scripts/build_corpus.py test_models, scripts/build_params_corpus.py),
# same configs; exported in eval mode by dynamo, so the dropout of GPT-2 / CLIP is not in the file:
# these run with their dropout probabilities at 0 in eager, with transformers' default attention (sdpa)
# as when they were exported (see docs/torchprof.md)
_SMALL = dict(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
              max_position_embeddings=16, use_cache=False)
_IDS8 = ("ids", 8, 100)
CORPUS = {
    "tx_gpt2_file": ("transformer", _hf("GPT2Config", "GPT2LMHeadModel", attn="sdpa", vocab_size=100, n_embd=32, n_layer=1,
                                        n_head=2, n_positions=16, use_cache=False, resid_pdrop=0.0,
                                        embd_pdrop=0.0, attn_pdrop=0.0), _IDS8),
    "tx_llama_file": ("transformer", _hf("LlamaConfig", "LlamaForCausalLM", attn="sdpa", vocab_size=100, hidden_size=32,
                                         intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                                         num_key_value_heads=2, max_position_embeddings=16, use_cache=False), _IDS8),
    "tx_clip_text_file": ("transformer", _hf("CLIPTextConfig", "CLIPTextModel", "pooler_output", attn="sdpa", vocab_size=100,
                                             hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                             num_attention_heads=2, max_position_embeddings=16), _IDS8),
    "tx_qwen3_file": ("transformer", _hf("Qwen3Config", "Qwen3ForCausalLM", attn="sdpa", intermediate_size=64,
                                         num_key_value_heads=2, head_dim=8, **_SMALL), _IDS8),
    "tx_gpt_neox_file": ("transformer", _hf("GPTNeoXConfig", "GPTNeoXForCausalLM", attn="sdpa", intermediate_size=64,
                                            rotary_pct=0.25, **_SMALL), _IDS8),
    "tx_falcon_file": ("transformer", _hf("FalconConfig", "FalconForCausalLM", attn="sdpa",
                                          **{k: v for k, v in _SMALL.items() if k != "max_position_embeddings"}),
                       _IDS8),
    "tx_rwkv_file": ("sequence", _hf("RwkvConfig", "RwkvForCausalLM", attn=None, vocab_size=100, hidden_size=32,
                                     attention_hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                     context_length=16, rescale_every=0, use_cache=False), _IDS8),
    "tx_tinyvit_file": ("vision-transformer", _timm("tiny_vit_5m_224", num_classes=4, embed_dims=(8, 16, 16, 24),
                                                    depths=(1, 1, 1, 1), num_heads=(1, 1, 2, 2),
                                                    window_sizes=(4, 4, 4, 2)), (3, 64, 64)),
    "tx_levit_file": ("vision-transformer", _timm("levit_128s", img_size=64, num_classes=4, embed_dim=(16, 24, 32),
                                                  key_dim=4, num_heads=(1, 2, 2), depth=(1, 1, 1)), (3, 64, 64)),
    "tx_sequencer2d_file": ("sequence", _timm("sequencer2d_s", img_size=64, num_classes=4, layers=(1, 1, 1, 1),
                                              embed_dims=(8, 8, 8, 8), hidden_sizes=(4, 4, 4, 4),
                                              mlp_ratios=(1.0, 1.0, 1.0, 1.0)), (3, 64, 64)),
}
FILES = {"tx_gpt2_file": "tests/corpus/gpt2_tiny_dynamo.onnx", "tx_llama_file": "tests/corpus/llama_tiny_dynamo.onnx",
         "tx_clip_text_file": "tests/corpus/clip_text_tiny_dynamo.onnx"}
FILES.update({k: f"tests/corpus/params/{k[3:-5]}_tiny_dynamo.onnx" for k in CORPUS if k not in FILES})

def _lstm(kind="LSTM", vocab=1000, d=64, hidden=96, layers=1, classes=20):
    """Embedding -> torch.nn.LSTM / GRU (batch_first) -> a Linear head per step."""
    import torch.nn as nn

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(vocab, d)
            self.rnn = getattr(nn, kind)(d, hidden, num_layers=layers, batch_first=True)
            self.head = nn.Linear(hidden, classes)

        def forward(self, ids):
            return self.head(self.rnn(self.emb(ids))[0])
    return M()


def _sdpa_lm(p=0.0, d=64, heads=4, layers=2, vocab=500, causal=True):
    """A hand-written pre-norm decoder on F.scaled_dot_product_attention (dropout `p` inside it and after
    the projections): what torch users write without transformers."""
    import torch.nn as nn
    import torch.nn.functional as F

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.o = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
            self.drop = nn.Dropout(p)

        def forward(self, x):
            b, n, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, n, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=p if self.training else 0.0, is_causal=causal)
            x = x + self.drop(self.o(y.transpose(1, 2).reshape(b, n, d)))
            return x + self.drop(self.fc2(F.gelu(self.fc1(self.ln2(x)))))

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(vocab, d)
            self.blocks = nn.Sequential(*[Block() for _ in range(layers)])
            self.ln = nn.LayerNorm(d)
            self.head = nn.Linear(d, vocab)

        def forward(self, ids):
            return self.head(self.ln(self.blocks(self.emb(ids))))
    return LM()


def _lora(make, names=("q_proj", "v_proj"), r=8):
    """`make`'s module with the hand-written LoRA Linear (devtools/torch_oracle.py: PEFT's lora.Linear
    without dropout, alpha = 2r) on the Linear layers named `names`; every other weight frozen."""
    def build():
        import torch.nn as nn

        from devtools.torch_oracle import LoRALinear

        m = make()
        m.requires_grad_(False)
        for mod in list(m.modules()):
            for name, child in list(mod.named_children()):
                if name in names and isinstance(child, nn.Linear):
                    ad = LoRALinear(child.in_features, child.out_features, r, 2 * r)
                    ad.base = child
                    setattr(mod, name, ad)
        return m
    return build


_GPT2 = dict(vocab_size=1000, n_embd=64, n_layer=2, n_head=4, n_positions=128, use_cache=False)
_LLAMA = dict(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=128, use_cache=False)
_BERT = dict(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
             max_position_embeddings=128)
_IDS32 = ("ids", 32, 1000)
SEQ = {
    "tx_sdpa": ("transformer", lambda: _sdpa_lm(0.0), ("ids", 64, 500)),
    "tx_sdpa_drop": ("transformer", lambda: _sdpa_lm(0.1), ("ids", 64, 500)),
    "tx_gpt2_sdpa_nodrop": ("transformer", _hf("GPT2Config", "GPT2LMHeadModel", attn="sdpa", resid_pdrop=0.0,
                                               embd_pdrop=0.0, attn_pdrop=0.0, **_GPT2), _IDS32),
    # "eager" attention: the matmul / softmax path the export shows; "sdpa": transformers' default
    "tx_gpt2": ("transformer", _hf("GPT2Config", "GPT2LMHeadModel", **_GPT2), _IDS32),
    "tx_gpt2_sdpa": ("transformer", _hf("GPT2Config", "GPT2LMHeadModel", attn="sdpa", **_GPT2), _IDS32),
    "tx_llama": ("transformer", _hf("LlamaConfig", "LlamaForCausalLM", **_LLAMA), _IDS32),
    "tx_llama_sdpa": ("transformer", _hf("LlamaConfig", "LlamaForCausalLM", attn="sdpa", **_LLAMA), _IDS32),
    "tx_qwen3": ("transformer", _hf("Qwen3Config", "Qwen3ForCausalLM", head_dim=16, **_LLAMA), _IDS32),
    "tx_bert": ("transformer", _hf("BertConfig", "BertForMaskedLM", **_BERT), _IDS32),
    "tx_distilbert": ("transformer", _hf("DistilBertConfig", "DistilBertForMaskedLM", vocab_size=1000, dim=64,
                                         n_layers=2, n_heads=4, hidden_dim=128, max_position_embeddings=128),
                      _IDS32),
    "tx_vit": ("vision-transformer", _timm("vit_tiny_patch16_224", img_size=64, depth=2, num_classes=10),
               (3, 64, 64)),
    "tx_lstm": ("sequence", lambda: _lstm("LSTM"), _IDS32),
    "tx_gru": ("sequence", lambda: _lstm("GRU"), _IDS32),
}
def _torch_encoder(p=0.1, act="relu", d=64, heads=4, layers=2, vocab=500, norm_first=False):
    """torch.nn.TransformerEncoder (batch_first) on an embedding, a Linear head per token."""
    import torch.nn as nn

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(vocab, d)
            layer = nn.TransformerEncoderLayer(d, heads, 2 * d, p, act, batch_first=True, norm_first=norm_first)
            self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
            self.head = nn.Linear(d, vocab)

        def forward(self, ids):
            return self.head(self.enc(self.emb(ids)))
    return M()


SEQ["tx_nn_encoder"] = ("transformer", lambda: _torch_encoder(0.1), ("ids", 64, 500))
SEQ["tx_nn_encoder_nodrop"] = ("transformer", lambda: _torch_encoder(0.0, "gelu", norm_first=True), ("ids", 64, 500))
# the corpus's timm vision transformers exported afresh (training mode, BatchNorm kept)
SEQ["tx_tinyvit"] = ("vision-transformer", CORPUS["tx_tinyvit_file"][1], (3, 64, 64))
SEQ["tx_levit"] = ("vision-transformer", CORPUS["tx_levit_file"][1], (3, 64, 64))
# longer sequences: the attention's S x S terms grow
SEQ["tx_llama_sdpa_s128"] = ("transformer", SEQ["tx_llama_sdpa"][1], ("ids", 128, 1000))
SEQ["tx_gpt2_s128"] = ("transformer", SEQ["tx_gpt2"][1], ("ids", 128, 1000))
# LoRA: adapters in the export (only they train), or the base model exported and `--lora 8` adding them
SEQ["tx_llama_lora"] = ("lora", _lora(SEQ["tx_llama_sdpa"][1]), _IDS32)
SEQ["tx_llama_lora_flag"] = ("lora", _lora(SEQ["tx_llama_sdpa"][1]), _IDS32)
FLAGS = {"tx_llama_lora": ["--train", "ops:*lora*"], "tx_llama_lora_flag": ["--lora", "8"]}
# modules whose export is another's (the base model of a `--lora` run)
EXPORT_AS = {"tx_llama_lora_flag": "tx_llama_sdpa"}
ZOO = {**CORPUS, **SEQ}

# ---- transformer coverage (`--set tc`): Hugging Face families as users export them, small configs
# (hidden 64, 2 layers, 4 heads), each with its default attention unless named otherwise


def _hf_pair(cfg_name, model_name, key="logits", dec_len=None, **kw):
    """An encoder-decoder from a small config, on one ids input: the decoder reads the first
    `dec_len` ids (all when None) as its decoder_input_ids."""
    def make():
        import torch
        import transformers as tr

        m = getattr(tr, model_name)(getattr(tr, cfg_name)(**kw))

        class W(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = m

            def forward(self, ids):
                dec = ids if dec_len is None else ids[:, :dec_len]
                return self.m(input_ids=ids, decoder_input_ids=dec, return_dict=True)[key]
        return W()
    return make


def _hf_default(cfg_name, model_name, key="logits", **kw):
    """A transformers model with its default attention (whatever transformers picks: sdpa today)."""
    def make():
        import transformers as tr

        return _wrap(getattr(tr, model_name)(getattr(tr, cfg_name)(**kw)), key)
    return make


_T5 = dict(vocab_size=1000, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_decoder_layers=2, num_heads=4,
           relative_attention_num_buckets=32, decoder_start_token_id=0, use_cache=False)
_ENC = dict(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
            max_position_embeddings=130)
_DEC = dict(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            max_position_embeddings=128, use_cache=False)
_IMG32 = (3, 32, 32)
TC = {
    "tc_t5": ("transformer", _hf_pair("T5Config", "T5ForConditionalGeneration", dec_len=16, **_T5), _IDS32),
    "tc_t5_gated": ("transformer", _hf_pair("T5Config", "T5ForConditionalGeneration", dec_len=16,
                                            feed_forward_proj="gated-gelu", **_T5), _IDS32),
    "tc_t5_enc": ("transformer", _hf_default("T5Config", "T5EncoderModel", "last_hidden_state", **_T5), _IDS32),
    "tc_roberta": ("transformer", _hf_default("RobertaConfig", "RobertaForMaskedLM", **_ENC), _IDS32),
    "tc_albert": ("transformer", _hf_default("AlbertConfig", "AlbertForMaskedLM", embedding_size=32, **_ENC), _IDS32),
    "tc_electra": ("transformer", _hf_default("ElectraConfig", "ElectraForMaskedLM", embedding_size=32, **_ENC),
                   _IDS32),
    "tc_bert_sdpa": ("transformer", _hf_default("BertConfig", "BertForMaskedLM", **_BERT), _IDS32),
    "tc_opt": ("transformer", _hf_default("OPTConfig", "OPTForCausalLM", vocab_size=1000, hidden_size=64,
                                          ffn_dim=128, num_hidden_layers=2, num_attention_heads=4,
                                          word_embed_proj_dim=64, max_position_embeddings=128, use_cache=False),
               _IDS32),
    "tc_gpt_neo": ("transformer", _hf_default("GPTNeoConfig", "GPTNeoForCausalLM", vocab_size=1000, hidden_size=64,
                                              num_layers=2, num_heads=4, attention_types=[[["global", "local"], 1]],
                                              window_size=16, intermediate_size=128, max_position_embeddings=128,
                                              use_cache=False), _IDS32),
    "tc_mistral": ("transformer", _hf_default("MistralConfig", "MistralForCausalLM", num_key_value_heads=2,
                                              sliding_window=16, **_DEC), _IDS32),
    "tc_phi": ("transformer", _hf_default("PhiConfig", "PhiForCausalLM", partial_rotary_factor=0.5, **_DEC), _IDS32),
    "tc_gemma": ("transformer", _hf_default("GemmaConfig", "GemmaForCausalLM", num_key_value_heads=1, head_dim=16,
                                            **_DEC), _IDS32),
    "tc_vit": ("vision-transformer", _hf_default("ViTConfig", "ViTForImageClassification", image_size=32,
                                                 patch_size=8, num_labels=10, **{k: v for k, v in _ENC.items()
                                                                                 if k not in ("vocab_size",
                                                                                              "max_position_embeddings")}),
               _IMG32),
    "tc_deit": ("vision-transformer", _hf_default("DeiTConfig", "DeiTForImageClassification", image_size=32,
                                                  patch_size=8, num_labels=10, **{k: v for k, v in _ENC.items()
                                                                                  if k not in ("vocab_size",
                                                                                               "max_position_embeddings")}),
                _IMG32),
    "tc_swin": ("vision-transformer", _hf_default("SwinConfig", "SwinForImageClassification", image_size=32,
                                                  patch_size=2, embed_dim=16, depths=[1, 1], num_heads=[2, 4],
                                                  window_size=4, num_labels=10), _IMG32),
}
# sequence 128
TC["tc_t5_s128"] = ("transformer", TC["tc_t5"][1], ("ids", 128, 1000))
TC["tc_bert_sdpa_s128"] = ("transformer", TC["tc_bert_sdpa"][1], ("ids", 128, 1000))
ZOO.update(TC)


def _peft(make, targets, dropout=0.0, r=8):
    """`make`'s module with peft's own LoRA (rank `r`, alpha 16, `lora_dropout` `dropout`) on the modules
    named `targets`; peft freezes everything else."""
    def build():
        from peft import LoraConfig, get_peft_model

        w = make()
        w.m = get_peft_model(w.m, LoraConfig(r=r, lora_alpha=16, lora_dropout=dropout, target_modules=list(targets)))
        return w
    return build


TC["tc_llama_peft"] = ("lora", _peft(_hf_default("LlamaConfig", "LlamaForCausalLM", **_LLAMA), ("q_proj", "v_proj")),
                       _IDS32)
TC["tc_llama_peft_drop"] = ("lora", _peft(_hf_default("LlamaConfig", "LlamaForCausalLM", **_LLAMA),
                                          ("q_proj", "v_proj"), 0.05), _IDS32)
TC["tc_gpt2_peft"] = ("lora", _peft(_hf_default("GPT2Config", "GPT2LMHeadModel", **_GPT2), ("c_attn",)), _IDS32)
TC["tc_t5_peft"] = ("lora", _peft(_hf_pair("T5Config", "T5ForConditionalGeneration", dec_len=16, **_T5), ("q", "v")),
                    _IDS32)
# no flags: memplan trains only the adapters of a peft export by itself
ZOO.update(TC)
