"""Networks in no other zoo, run through devtools/torch_oracle.py only after the facts were settled
(a stand-in for held-out networks): torchvision / timm CNNs and small Hugging Face encoders and
decoders at their defaults. Dev-only, needs torch, torchvision, timm and transformers.

    python devtools/torch_holdout_zoo.py ho_resnet34 ho_deit_tiny -b 2 -O adam [--dynamo]
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "devtools"))
sys.path.insert(0, ROOT)
import torch_oracle as T  # noqa: E402
from torch_vision_zoo import _timm, _tv  # noqa: E402


def _hf(kind, **kw):
    def build():
        import transformers as tr
        if kind == "roberta":
            cfg = tr.RobertaConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                   intermediate_size=128, max_position_embeddings=80)
            cfg._attn_implementation = kw.get("attn", "eager")
            m = tr.RobertaForSequenceClassification(cfg)
        elif kind == "gpt2":
            cfg = tr.GPT2Config(vocab_size=1000, n_embd=64, n_layer=2, n_head=4, n_positions=64)
            cfg._attn_implementation = kw.get("attn", "eager")
            m = tr.GPT2LMHeadModel(cfg)
        elif kind == "distilbert":
            cfg = tr.DistilBertConfig(vocab_size=1000, dim=64, n_layers=2, n_heads=4, hidden_dim=128,
                                      max_position_embeddings=64)
            cfg._attn_implementation = kw.get("attn", "sdpa")
            m = tr.DistilBertForSequenceClassification(cfg)
        return T._Logits(m)
    return build


IMG = (3, 64, 64)
HO = {
    "ho_resnet34": ("residual", _tv("resnet34", num_classes=10), IMG),
    "ho_shufflenet_v2_x1_0": ("depthwise", _tv("shufflenet_v2_x1_0", num_classes=10), IMG),
    "ho_squeezenet1_0": ("cnn", _tv("squeezenet1_0", num_classes=10), IMG),
    "ho_mnasnet1_0": ("depthwise", _tv("mnasnet1_0", num_classes=10), IMG),
    "ho_regnet_x_800mf": ("residual", _tv("regnet_x_800mf", num_classes=10), IMG),
    "ho_efficientnet_b1": ("depthwise", _tv("efficientnet_b1", num_classes=10), IMG),
    "ho_resnet10t": ("residual", _timm("resnet10t", num_classes=10), IMG),
    "ho_mobilenetv3_small_050": ("depthwise", _timm("mobilenetv3_small_050", num_classes=10), IMG),
    "ho_efficientnet_lite0": ("depthwise", _timm("efficientnet_lite0", num_classes=10), IMG),
    "ho_lcnet_050": ("depthwise", _timm("lcnet_050", num_classes=10), IMG),
    "ho_mixnet_s": ("depthwise", _timm("mixnet_s", num_classes=10), IMG),
    "ho_repvgg_a0": ("cnn", _timm("repvgg_a0", num_classes=10), IMG),
    "ho_deit_tiny": ("transformer", _timm("deit_tiny_patch16_224", num_classes=10, img_size=64), IMG),
    "ho_roberta": ("transformer", _hf("roberta"), ("ids", 64, 1000)),
    "ho_gpt2_eager": ("transformer", _hf("gpt2"), ("ids", 64, 1000)),
    "ho_distilbert_sdpa": ("transformer", _hf("distilbert"), ("ids", 64, 1000)),
}
T.ZOO.update(HO)

if __name__ == "__main__":
    T.main()
