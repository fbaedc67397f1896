#!/usr/bin/env python3
"""Build a corpus of REAL exporter output at small sizes, for scripts/survey_corpus.py (dev-only).

    $DEVENV/bin/python scripts/build_corpus.py                    # everything -> ../corpus
    $DEVENV/bin/python scripts/build_corpus.py --only bert,resnet # names containing these
    $DEVENV/bin/python scripts/build_corpus.py --skip tflite      # families: torchvision timm
                                                                       # transformers tflite zoo

Needs a dev environment that memplan never needs at run time: torch, torchvision, timm,
transformers, onnx, onnxscript (torch.onnx's dynamo exporter) and tensorflow-cpu (the TF Lite
converter); see requirements-dev.txt. Nothing here is downloaded: weights are random (every
framework's constructor without pretrained weights), the onnx package ships its zoo "light" models.

Rules:
- Each PyTorch model is exported twice where the exporter allows: torch.onnx dynamo
  (`dynamo=True`, `external_data=False`) and TorchScript (`dynamo=False`), in eval mode (what
  people ship); a few also in training mode (TorchScript `training=TRAINING`, keeps Dropout and
  BatchNormalization's training form).
- Keras models go through `tf.lite.TFLiteConverter.from_keras_model` (float32, no quantization).
- Sizes are small (inputs 32-64 px, tiny transformer configs from transformers' config classes) so
  that `memplan verify` can run a step of each.
- manifest.json records per model: name, file, family, source (the constructor), exporter (with
  its version), input shapes, and `params`: the framework's count of trainable float parameters
  (torch: `parameters()`, which counts a tied weight once; Keras: `trainable_weights`), the truth
  for "trainable bytes = 4 x float params". Keras BatchNormalization's moving statistics are
  non-trainable (`params_nontrainable`); the TFLite converter folds BatchNormalization into the
  convolution before it, so a .tflite file's float constants differ from Keras' count by design.
- A model whose export fails is listed under `failed` with the exporter's last error line.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import traceback
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from devtools.exports import strip_file  # noqa: E402

warnings.filterwarnings("ignore")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


# ------------------------------------------------------------------ PyTorch models
def torchvision_models():
    import torch
    import torchvision.models as tvm
    from torchvision.models.convnext import CNBlockConfig, ConvNeXt
    from torchvision.models.swin_transformer import SwinTransformer
    from torchvision.models.vision_transformer import VisionTransformer

    img = lambda s=64: (torch.randn(1, 3, s, s),)  # noqa: E731
    yield "tv_resnet18", "torchvision.models.resnet18(num_classes=10)", lambda: tvm.resnet18(num_classes=10), img()
    yield "tv_mobilenet_v2", "torchvision.models.mobilenet_v2(num_classes=10, width_mult=0.5)", \
        lambda: tvm.mobilenet_v2(num_classes=10, width_mult=0.5), img()
    yield "tv_mobilenet_v3_small", "torchvision.models.mobilenet_v3_small(num_classes=10)", \
        lambda: tvm.mobilenet_v3_small(num_classes=10), img()
    yield "tv_mobilenet_v3_large", "torchvision.models.mobilenet_v3_large(num_classes=10, width_mult=0.5)", \
        lambda: tvm.mobilenet_v3_large(num_classes=10, width_mult=0.5), img()
    yield "tv_shufflenet_v2", "torchvision.models.shufflenet_v2_x0_5(num_classes=10)", \
        lambda: tvm.shufflenet_v2_x0_5(num_classes=10), img()
    yield "tv_densenet121", "torchvision.models.densenet121(num_classes=10)", lambda: tvm.densenet121(num_classes=10), img(32)
    yield "tv_efficientnet_b0", "torchvision.models.efficientnet_b0(num_classes=10)", \
        lambda: tvm.efficientnet_b0(num_classes=10), img()
    yield "tv_squeezenet1_1", "torchvision.models.squeezenet1_1(num_classes=10)", lambda: tvm.squeezenet1_1(num_classes=10), img()
    yield "tv_convnext_small", "torchvision ConvNeXt([CNBlockConfig(32,64,2), CNBlockConfig(64,None,2)], num_classes=10)", \
        lambda: ConvNeXt([CNBlockConfig(32, 64, 2), CNBlockConfig(64, None, 2)], num_classes=10), img()
    yield "tv_vit_tiny", "torchvision VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=64, mlp_dim=128, num_classes=10)", \
        lambda: VisionTransformer(32, 8, 2, 2, 64, 128, num_classes=10), img(32)
    yield "tv_swin_tiny", "torchvision SwinTransformer(patch_size=[4,4], embed_dim=32, depths=[2,2], num_heads=[2,4], window_size=[4,4], num_classes=10)", \
        lambda: SwinTransformer([4, 4], 32, [2, 2], [2, 4], [4, 4], num_classes=10), img(32)
    yield "tv_mnasnet0_5", "torchvision.models.mnasnet0_5(num_classes=10)", lambda: tvm.mnasnet0_5(num_classes=10), img()
    yield "tv_googlenet", "torchvision.models.googlenet(num_classes=10, aux_logits=False, init_weights=True)", \
        lambda: tvm.googlenet(num_classes=10, aux_logits=False, init_weights=True), img()
    yield "tv_regnet_y_400mf", "torchvision.models.regnet_y_400mf(num_classes=10)", \
        lambda: tvm.regnet_y_400mf(num_classes=10), img()
    yield "tv_resnext50", "torchvision.models.resnext50_32x4d(num_classes=10)", lambda: tvm.resnext50_32x4d(num_classes=10), img()
    yield "tv_inception_v3", "torchvision.models.inception_v3(num_classes=10, aux_logits=False, init_weights=True)", \
        lambda: tvm.inception_v3(num_classes=10, aux_logits=False, init_weights=True), img(80)


def timm_models():
    import timm
    import torch

    img = lambda s=64: (torch.randn(1, 3, s, s),)  # noqa: E731
    yield "timm_ghostnet", "timm.create_model('ghostnet_050', num_classes=10)", \
        lambda: timm.create_model("ghostnet_050", pretrained=False, num_classes=10), img()
    yield "timm_mobilevit_xxs", "timm.create_model('mobilevit_xxs', num_classes=10)", \
        lambda: timm.create_model("mobilevit_xxs", pretrained=False, num_classes=10), img()
    yield "timm_deit_tiny", "timm.create_model('deit_tiny_patch16_224', img_size=32, depth=2, num_classes=10)", \
        lambda: timm.create_model("deit_tiny_patch16_224", pretrained=False, img_size=32, depth=2, num_classes=10), img(32)
    yield "timm_regnetx_002", "timm.create_model('regnetx_002', num_classes=10)", \
        lambda: timm.create_model("regnetx_002", pretrained=False, num_classes=10), img()


class _Logits:
    """Wraps a transformers model so the export has one float output (the model's first)."""

    def __new__(cls, model, key=None):
        import torch

        class W(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = model

            def forward(self, *args):
                out = self.m(*args, return_dict=True)
                return out[key] if key else out[0]

        return W()


def transformers_models():
    import torch
    import transformers as tr

    ids = (torch.randint(0, 1000, (1, 16)),)
    small = dict(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                 intermediate_size=128, max_position_embeddings=64)

    def bert():
        return _Logits(tr.BertForSequenceClassification(tr.BertConfig(**small, num_labels=3)), "logits")

    def distilbert():
        c = tr.DistilBertConfig(vocab_size=1000, dim=64, n_layers=2, n_heads=2, hidden_dim=128,
                                max_position_embeddings=64, num_labels=3)
        return _Logits(tr.DistilBertForSequenceClassification(c), "logits")

    def gpt2():
        c = tr.GPT2Config(vocab_size=1000, n_embd=64, n_layer=2, n_head=2, n_positions=64, use_cache=False)
        return _Logits(tr.GPT2LMHeadModel(c), "logits")

    def llama():
        c = tr.LlamaConfig(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                           use_cache=False)
        return _Logits(tr.LlamaForCausalLM(c), "logits")

    def whisper_encoder():
        # the token ids must lie inside the small vocabulary (the defaults are GPT-2's, 50256)
        c = tr.WhisperConfig(vocab_size=1000, num_mel_bins=16, d_model=64, encoder_layers=2, decoder_layers=2,
                             encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=128,
                             decoder_ffn_dim=128, max_source_positions=32, max_target_positions=32,
                             pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)
        return _Logits(tr.WhisperModel(c).get_encoder(), "last_hidden_state")

    def t5_encoder():
        c = tr.T5Config(vocab_size=1000, d_model=64, d_ff=128, d_kv=32, num_layers=2, num_heads=2)
        return _Logits(tr.T5EncoderModel(c), "last_hidden_state")

    yield "hf_bert", "BertForSequenceClassification(BertConfig(hidden 64, 2 layers, 2 heads, ffn 128, vocab 1000))", bert, ids
    yield "hf_distilbert", "DistilBertForSequenceClassification(dim 64, 2 layers, 2 heads, ffn 128, vocab 1000)", distilbert, ids
    yield "hf_gpt2", "GPT2LMHeadModel(n_embd 64, 2 layers, 2 heads, vocab 1000; tied lm_head)", gpt2, ids
    yield "hf_llama", "LlamaForCausalLM(hidden 64, ffn 128, 2 layers, 4 heads, 2 kv heads, vocab 1000)", llama, ids
    yield "hf_whisper_encoder", "WhisperModel(d_model 64, 2 layers, 16 mel bins, 32 positions).encoder", \
        whisper_encoder, (torch.randn(1, 16, 64),)
    yield "hf_t5_encoder", "T5EncoderModel(d_model 64, d_ff 128, 2 layers, 2 heads, vocab 1000)", t5_encoder, ids
    img = (torch.randn(1, 3, 64, 64),)
    yield "hf_roberta", "RobertaForSequenceClassification(hidden 64, 2 layers, 2 heads, ffn 128, vocab 1000)", \
        lambda: _Logits(tr.RobertaForSequenceClassification(tr.RobertaConfig(**{**small, "max_position_embeddings": 66},
                                                                             num_labels=3)), "logits"), ids
    yield "hf_albert", "AlbertForSequenceClassification(embedding 32, hidden 64, 2 layers, 2 heads, ffn 128)", \
        lambda: _Logits(tr.AlbertForSequenceClassification(tr.AlbertConfig(**small, embedding_size=32, num_labels=3)),
                        "logits"), ids
    yield "hf_mobilebert", "MobileBertForSequenceClassification(hidden 64, embedding 32, bottleneck 32, 2 layers)", \
        lambda: _Logits(tr.MobileBertForSequenceClassification(tr.MobileBertConfig(
            **small, embedding_size=32, intra_bottleneck_size=32, num_labels=3)), "logits"), ids
    yield "hf_vit", "ViTForImageClassification(image 32, patch 8, hidden 32, 2 layers, 2 heads)", \
        lambda: _Logits(tr.ViTForImageClassification(tr.ViTConfig(image_size=32, patch_size=8, hidden_size=32,
                                                                   num_hidden_layers=2, num_attention_heads=2,
                                                                   intermediate_size=64, num_labels=3)), "logits"), \
        (torch.randn(1, 3, 32, 32),)
    yield "hf_wav2vec2", "Wav2Vec2ForSequenceClassification(hidden 32, 2 layers, conv (16,16) strides (5,2))", \
        lambda: _Logits(tr.Wav2Vec2ForSequenceClassification(tr.Wav2Vec2Config(
            vocab_size=32, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
            conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16,
            num_conv_pos_embedding_groups=4, num_labels=3)), "logits"), (torch.randn(1, 800),)
    yield "hf_mobilevit", "MobileViTForImageClassification(image 64, hidden [32,48,64])", \
        lambda: _Logits(tr.MobileViTForImageClassification(tr.MobileViTConfig(
            image_size=64, hidden_sizes=[32, 48, 64], neck_hidden_sizes=[8, 16, 24, 32, 48, 64, 80], num_labels=3)),
            "logits"), img
    yield "hf_convnext", "ConvNextForImageClassification(hidden [8,16,24,32], depths [1,1,1,1])", \
        lambda: _Logits(tr.ConvNextForImageClassification(tr.ConvNextConfig(hidden_sizes=[8, 16, 24, 32],
                                                                             depths=[1, 1, 1, 1], num_labels=3)),
                        "logits"), img
    yield "hf_swin", "SwinForImageClassification(image 64, embed 16, depths [1,1], window 4)", \
        lambda: _Logits(tr.SwinForImageClassification(tr.SwinConfig(image_size=64, patch_size=4, embed_dim=16,
                                                                    depths=[1, 1], num_heads=[2, 2], window_size=4,
                                                                    num_labels=3)), "logits"), img


# ------------------------------------------------------------------ a wider net (second and third probes)
def wide_models():
    """More architectures, each as people export it: timm, transformers and torchvision models beyond
    the first set, and small hand-written PyTorch nets (a U-Net, LSTM / GRU classifiers, an
    nn.TransformerEncoder, a 1-D audio CNN)."""
    import timm
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    import torchvision.models as tvm
    import torchvision.models.segmentation as seg
    import transformers as tr

    img = lambda s=64: (torch.randn(1, 3, s, s),)  # noqa: E731
    ids = (torch.randint(3, 1000, (1, 16)),)
    tokens = (torch.randint(0, 100, (1, 12)),)

    def T(n, **k):
        src = ", ".join([repr(n), "num_classes=10"] + [f"{a}={v!r}" for a, v in k.items()])
        return f"timm.create_model({src})", lambda: timm.create_model(n, pretrained=False, num_classes=10, **k)

    for name, n, k, inp in [
            ("efficientnet_b0", "efficientnet_b0", {}, img()), ("mixnet_s", "mixnet_s", {}, img()),
            ("rexnet_100", "rexnet_100", {}, img()), ("lcnet_050", "lcnet_050", {}, img()),
            ("tinynet_e", "tinynet_e", {}, img()), ("hrnet_w18_small", "hrnet_w18_small", {}, img()),
            ("dla34", "dla34", {}, img()), ("resnest14d", "resnest14d", {}, img()),
            ("skresnet18", "skresnet18", {}, img()), ("res2net50_14w_8s", "res2net50_14w_8s", {}, img()),
            ("dpn68", "dpn68", {}, img()), ("levit_128s", "levit_128s", {"img_size": 64}, img()),
            ("poolformer_s12", "poolformer_s12", {}, img()), ("mixer_s16", "mixer_s16_224", {"img_size": 64}, img()),
            ("resmlp_12", "resmlp_12_224", {"img_size": 64}, img()), ("gmlp_ti16", "gmlp_ti16_224", {"img_size": 64}, img()),
            ("edgenext_xx_small", "edgenext_xx_small", {}, img()), ("mobileone_s0", "mobileone_s0", {}, img()),
            ("repvgg_a0", "repvgg_a0", {}, img()), ("fastvit_t8", "fastvit_t8", {}, img()),
            ("cait_xxs24", "cait_xxs24_224", {"img_size": 32, "depth": 2}, img(32)),
            ("xcit_nano", "xcit_nano_12_p16_224", {"img_size": 32, "depth": 2}, img(32)),
            ("pit_ti", "pit_ti_224", {"img_size": 64}, img()),
            ("convit_tiny", "convit_tiny", {"img_size": 32, "depth": 2}, img(32)),
            ("swinv2_tiny", "swinv2_tiny_window8_256", {"img_size": 64, "window_size": 4}, img()),
            ("nfnet_l0", "nfnet_l0", {}, img()), ("regnety_002", "regnety_002", {}, img()),
            ("tresnet_m", "tresnet_m", {}, img()), ("densenet121", "densenet121", {}, img()),
            ("mobilevitv2_050", "mobilevitv2_050", {}, img()), ("ghostnetv2_100", "ghostnetv2_100", {}, img()),
            ("hgnetv2_b0", "hgnetv2_b0", {}, img()), ("convnextv2_atto", "convnextv2_atto", {}, img()),
            ("vgg11", "vgg11", {}, img()), ("inception_v4", "inception_v4", {}, img(96)),
            ("efficientvit_b0", "efficientvit_b0", {}, img()),
            ("eva02_tiny", "eva02_tiny_patch14_224", {"img_size": 28, "depth": 2}, img(28)),
            ("coat_lite_tiny", "coat_lite_tiny", {"img_size": 64}, img()),
            ("twins_pcpvt_small", "twins_pcpvt_small", {"img_size": 64}, img()),
            ("visformer_tiny", "visformer_tiny", {"img_size": 64}, img()),
            ("tnt_s", "tnt_s_patch16_224", {"img_size": 32}, img(32)),
            ("mobilenetv4_small", "mobilenetv4_conv_small", {}, img()),
            ("vit_small_reg", "vit_small_patch16_reg4_dinov2", {"img_size": 32, "depth": 2}, img(32)),
            ("efficientvit_m0", "efficientvit_m0", {"img_size": 64}, img()), ("pvt_v2_b0", "pvt_v2_b0", {}, img()),
            ("cspdarknet53", "cspdarknet53", {}, img()), ("dm_nfnet_f0", "dm_nfnet_f0", {}, img())]:
        src, make = T(n, **k)
        yield "timm_" + name, src, make, inp

    for name, src, make, inp in [
            ("squeezenet1_1", "tvm.squeezenet1_1(num_classes=10)", lambda: tvm.squeezenet1_1(num_classes=10), img()),
            ("efficientnet_v2_s", "tvm.efficientnet_v2_s(num_classes=10)", lambda: tvm.efficientnet_v2_s(num_classes=10), img()),
            ("regnet_y_400mf", "tvm.regnet_y_400mf(num_classes=10)", lambda: tvm.regnet_y_400mf(num_classes=10), img()),
            ("shufflenet_v2_x0_5", "tvm.shufflenet_v2_x0_5(num_classes=10)", lambda: tvm.shufflenet_v2_x0_5(num_classes=10), img()),
            ("swin_v2_t", "tvm.swin_v2_t(num_classes=10)", lambda: tvm.swin_v2_t(num_classes=10), img()),
            ("alexnet", "tvm.alexnet(num_classes=10)", lambda: tvm.alexnet(num_classes=10), img(96)),
            ("fcn_resnet50", "segmentation.fcn_resnet50(num_classes=3, aux_loss=False)",
             lambda: seg.fcn_resnet50(num_classes=3, weights_backbone=None, aux_loss=False), img()),
            ("lraspp_mobilenet_v3", "segmentation.lraspp_mobilenet_v3_large(num_classes=3)",
             lambda: seg.lraspp_mobilenet_v3_large(num_classes=3, weights_backbone=None), img()),
            ("deeplabv3_mobilenet_v3", "segmentation.deeplabv3_mobilenet_v3_large(num_classes=3, aux_loss=False)",
             lambda: seg.deeplabv3_mobilenet_v3_large(num_classes=3, weights_backbone=None, aux_loss=False), img())]:
        yield "tv_" + name, src, make, inp

    class UNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.e1 = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
            self.e2 = nn.Sequential(nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())
            self.up = nn.ConvTranspose2d(16, 8, 2, stride=2)
            self.d1 = nn.Sequential(nn.Conv2d(16, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 2, 1))

        def forward(self, x):
            a = self.e1(x)
            return self.d1(torch.cat([a, self.up(self.e2(F.max_pool2d(a, 2)))], 1))

    class Recurrent(nn.Module):
        def __init__(self, kind):
            super().__init__()
            self.emb, self.rnn, self.fc = nn.Embedding(100, 16), getattr(nn, kind)(16, 32, batch_first=True), nn.Linear(32, 3)

        def forward(self, x):
            return self.fc(self.rnn(self.emb(x))[0][:, -1])

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(100, 32)
            self.enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(32, 2, 64, batch_first=True, dropout=0.0), 2)
            self.fc = nn.Linear(32, 3)

        def forward(self, x):
            return self.fc(self.enc(self.emb(x)).mean(1))

    class Audio1d(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.bn = nn.Conv1d(1, 8, 9, stride=2), nn.BatchNorm1d(8)
            self.c2, self.fc = nn.Conv1d(8, 16, 5, dilation=2), nn.Linear(16, 4)

        def forward(self, x):
            return self.fc(F.adaptive_avg_pool1d(F.gelu(self.c2(F.relu(self.bn(self.c1(x))))), 1).flatten(1))

    yield "pt_unet", "U-Net: Conv-BN-ReLU, max pool, ConvTranspose2d, skip concat", UNet, img()
    yield "pt_lstm", "Embedding(100, 16) -> nn.LSTM(16, 32, batch_first) -> Linear", lambda: Recurrent("LSTM"), tokens
    yield "pt_gru", "Embedding(100, 16) -> nn.GRU(16, 32, batch_first) -> Linear", lambda: Recurrent("GRU"), tokens
    yield "pt_transformer_encoder", "nn.TransformerEncoder(2 layers, d 32, 2 heads, batch_first)", Encoder, tokens
    yield "pt_conv1d_audio", "Conv1d-BN-ReLU, dilated Conv1d, GELU, average pool, Linear on 200 samples", Audio1d, \
        (torch.randn(1, 1, 200),)

    small = dict(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
                 max_position_embeddings=64)
    dec = dict(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
               max_position_embeddings=64, use_cache=False)
    audio = dict(vocab_size=32, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                 conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16,
                 num_conv_pos_embedding_groups=4, num_labels=3)
    hf = [
        ("electra", lambda: _Logits(tr.ElectraForSequenceClassification(tr.ElectraConfig(**small, embedding_size=32, num_labels=3)), "logits"), ids),
        ("deberta_v2", lambda: _Logits(tr.DebertaV2ForSequenceClassification(tr.DebertaV2Config(**small, num_labels=3)), "logits"), ids),
        ("xlm_roberta", lambda: _Logits(tr.XLMRobertaForSequenceClassification(tr.XLMRobertaConfig(**{**small, "max_position_embeddings": 66}, num_labels=3)), "logits"), ids),
        ("opt", lambda: _Logits(tr.OPTForCausalLM(tr.OPTConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2, ffn_dim=128, num_attention_heads=2, max_position_embeddings=64, word_embed_proj_dim=64, use_cache=False)), "logits"), ids),
        ("mistral", lambda: _Logits(tr.MistralForCausalLM(tr.MistralConfig(**dec, num_key_value_heads=2)), "logits"), ids),
        ("qwen2", lambda: _Logits(tr.Qwen2ForCausalLM(tr.Qwen2Config(**dec, num_key_value_heads=2)), "logits"), ids),
        ("phi", lambda: _Logits(tr.PhiForCausalLM(tr.PhiConfig(**dec)), "logits"), ids),
        ("gemma", lambda: _Logits(tr.GemmaForCausalLM(tr.GemmaConfig(**dec, num_key_value_heads=1, head_dim=16)), "logits"), ids),
        ("bloom", lambda: _Logits(tr.BloomForCausalLM(tr.BloomConfig(vocab_size=1000, hidden_size=64, n_layer=2, n_head=2, use_cache=False)), "logits"), ids),
        ("clip_text", lambda: _Logits(tr.CLIPTextModel(tr.CLIPTextConfig(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2, max_position_embeddings=64)), "pooler_output"), ids),
        ("clip_vision", lambda: _Logits(tr.CLIPVisionModel(tr.CLIPVisionConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2, image_size=32, patch_size=8)), "pooler_output"), img(32)),
        ("dinov2", lambda: _Logits(tr.Dinov2Model(tr.Dinov2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, mlp_ratio=2, image_size=32, patch_size=8)), "pooler_output"), img(32)),
        ("segformer", lambda: _Logits(tr.SegformerForSemanticSegmentation(tr.SegformerConfig(num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32], num_attention_heads=[1, 2], decoder_hidden_size=32, num_labels=3, patch_sizes=[7, 3], strides=[4, 2], mlp_ratios=[2, 2])), "logits"), img()),
        ("hubert", lambda: _Logits(tr.HubertForSequenceClassification(tr.HubertConfig(**audio)), "logits"), (torch.randn(1, 800),)),
        ("wavlm", lambda: _Logits(tr.WavLMForSequenceClassification(tr.WavLMConfig(**audio)), "logits"), (torch.randn(1, 800),)),
        ("squeezebert", lambda: _Logits(tr.SqueezeBertForSequenceClassification(tr.SqueezeBertConfig(**small, embedding_size=64, num_labels=3)), "logits"), ids),
        ("resnet", lambda: _Logits(tr.ResNetForImageClassification(tr.ResNetConfig(embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], num_labels=3)), "logits"), img()),
        ("levit", lambda: _Logits(tr.LevitForImageClassification(tr.LevitConfig(image_size=64, hidden_sizes=[32, 48, 64], num_attention_heads=[1, 2, 2], depths=[1, 1, 1], key_dim=[8, 8, 8], num_labels=3)), "logits"), img()),
        ("ast", lambda: _Logits(tr.ASTForAudioClassification(tr.ASTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, max_length=32, num_mel_bins=32, num_labels=3)), "logits"), (torch.randn(1, 32, 32),)),
        ("gpt2_seqcls", lambda: _Logits(tr.GPT2ForSequenceClassification(tr.GPT2Config(vocab_size=1000, n_embd=64, n_layer=2, n_head=2, n_positions=64, num_labels=3, pad_token_id=0, use_cache=False)), "logits"), ids),
        ("distilbert_qa", lambda: _Logits(tr.DistilBertForQuestionAnswering(tr.DistilBertConfig(vocab_size=1000, dim=64, n_layers=2, n_heads=2, hidden_dim=128, max_position_embeddings=64)), "start_logits"), ids),
        ("convbert", lambda: _Logits(tr.ConvBertForSequenceClassification(tr.ConvBertConfig(**small, embedding_size=64, num_labels=3)), "logits"), ids),
        ("mpnet", lambda: _Logits(tr.MPNetForSequenceClassification(tr.MPNetConfig(**{**small, "max_position_embeddings": 66}, num_labels=3)), "logits"), ids),
        ("xlnet", lambda: _Logits(tr.XLNetForSequenceClassification(tr.XLNetConfig(vocab_size=1000, d_model=64, n_layer=2, n_head=2, d_inner=128, num_labels=3)), "logits"), ids),
        ("siglip_vision", lambda: _Logits(tr.SiglipVisionModel(tr.SiglipVisionConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2, image_size=32, patch_size=8)), "pooler_output"), img(32)),
        ("beit", lambda: _Logits(tr.BeitForImageClassification(tr.BeitConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, image_size=32, patch_size=8, use_relative_position_bias=True, num_labels=3)), "logits"), img(32)),
        ("yolos", lambda: _Logits(tr.YolosForObjectDetection(tr.YolosConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, image_size=[32, 32], patch_size=8, num_detection_tokens=4)), "logits"), img(32)),
        ("mobilenet_v2", lambda: _Logits(tr.MobileNetV2ForImageClassification(tr.MobileNetV2Config(image_size=64, depth_multiplier=0.35, num_labels=3)), "logits"), img()),
        ("regnet", lambda: _Logits(tr.RegNetForImageClassification(tr.RegNetConfig(embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], groups_width=8, num_labels=3)), "logits"), img()),
        ("poolformer", lambda: _Logits(tr.PoolFormerForImageClassification(tr.PoolFormerConfig(hidden_sizes=[16, 32, 48, 64], depths=[1, 1, 1, 1], num_labels=3)), "logits"), img()),
        ("vit_mae", lambda: _Logits(tr.ViTMAEModel(tr.ViTMAEConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, image_size=32, patch_size=8, mask_ratio=0.0)), "last_hidden_state"), img(32)),
    ]
    for name, make, inp in hf:
        yield "hf_" + name, f"transformers {name} (tiny config: see scripts/build_corpus.py wide_models)", make, inp


TRAINING_MODE = {"tv_resnet18", "tv_mobilenet_v2", "hf_bert"}  # also exported in training mode


def export_torch(name, source, make, args, out, family, only):
    import torch

    entries, failed = [], []
    # the TorchScript exporter has no ONNX form of MultiheadAttention's eval fast path
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        model = make().eval()
    except Exception as e:
        return [], [{"name": name, "family": family, "exporter": "-", "error": f"constructor: {type(e).__name__}: {e}"}]
    params = sum(p.numel() for p in model.parameters() if p.dtype.is_floating_point)
    variants = [("dynamo", dict(dynamo=True, external_data=False)), ("ts", dict(dynamo=False))]
    if name in TRAINING_MODE:
        variants.append(("ts_train", dict(dynamo=False, training=torch.onnx.TrainingMode.TRAINING,
                                          do_constant_folding=False)))
    for tag, kw in variants:
        full = f"{name}_{tag}"
        if only and not any(k in full for k in only):
            continue
        path = os.path.join(out, family, full + ".onnx")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        exporter = (f"torch.onnx dynamo (torch {torch.__version__})" if kw["dynamo"]
                    else f"torch.onnx TorchScript (torch {torch.__version__})")
        if tag == "ts_train":
            exporter += " training mode"
        try:
            with torch.no_grad():
                torch.onnx.export(model, args, path, **kw)
            import onnx

            m = onnx.load(path, load_external_data=False)
            opset = max(o.version for o in m.opset_import if o.domain in ("", "ai.onnx"))
            entries.append({"name": full, "file": os.path.relpath(path, out), "family": family,
                            "source": source, "exporter": exporter, "opset": opset,
                            "inputs": [list(a.shape) for a in args], "params": params,
                            "bytes": os.path.getsize(path)})
            print(f"ok   {full}: {params:,} params, {len(m.graph.node)} nodes, opset {opset}", file=sys.stderr)
        except Exception as e:
            last = (str(e).strip().splitlines() or [type(e).__name__])[-1][:300]
            failed.append({"name": full, "family": family, "exporter": exporter, "error": f"{type(e).__name__}: {last}"})
            print(f"FAIL {full}: {type(e).__name__}: {last}", file=sys.stderr)
            if os.environ.get("CORPUS_DEBUG"):
                traceback.print_exc()
            if os.path.exists(path):
                os.remove(path)
    return entries, failed


# ------------------------------------------------------------------ Keras -> TF Lite
def keras_models():
    import tensorflow as tf

    ka = tf.keras.applications
    shp = (64, 64, 3)
    yield "keras_mobilenet", "keras.applications.MobileNet(alpha=0.25, input_shape=(64,64,3), weights=None, classes=10)", \
        lambda: ka.MobileNet(input_shape=shp, alpha=0.25, weights=None, classes=10)
    yield "keras_mobilenet_v2", "keras.applications.MobileNetV2(alpha=0.35, input_shape=(64,64,3), weights=None, classes=10)", \
        lambda: ka.MobileNetV2(input_shape=shp, alpha=0.35, weights=None, classes=10)
    yield "keras_mobilenet_v3_small", "keras.applications.MobileNetV3Small(alpha=0.75, input_shape=(64,64,3), weights=None, classes=10)", \
        lambda: ka.MobileNetV3Small(input_shape=shp, alpha=0.75, weights=None, classes=10)
    yield "keras_mobilenet_v3_large", "keras.applications.MobileNetV3Large(alpha=0.75, input_shape=(64,64,3), weights=None, classes=10)", \
        lambda: ka.MobileNetV3Large(input_shape=shp, alpha=0.75, weights=None, classes=10)
    yield "keras_resnet50", "keras.applications.ResNet50(input_shape=(64,64,3), weights=None, classes=10)", \
        lambda: ka.ResNet50(input_shape=shp, weights=None, classes=10)
    yield "keras_efficientnet_b0", "keras.applications.EfficientNetB0(input_shape=(64,64,3), weights=None, classes=10)", \
        lambda: ka.EfficientNetB0(input_shape=shp, weights=None, classes=10)
    yield "keras_densenet121", "keras.applications.DenseNet121(input_shape=(64,64,3), weights=None, classes=10)", \
        lambda: ka.DenseNet121(input_shape=shp, weights=None, classes=10)
    big = (96, 96, 3)  # Xception, InceptionV3 and NASNetMobile need more than 64 pixels
    yield "keras_xception", "keras.applications.Xception(input_shape=(96,96,3), weights=None, classes=10)", \
        lambda: ka.Xception(input_shape=big, weights=None, classes=10)
    yield "keras_inception_v3", "keras.applications.InceptionV3(input_shape=(96,96,3), weights=None, classes=10)", \
        lambda: ka.InceptionV3(input_shape=big, weights=None, classes=10)
    yield "keras_nasnet_mobile", "keras.applications.NASNetMobile(input_shape=(96,96,3), weights=None, classes=10)", \
        lambda: ka.NASNetMobile(input_shape=big, weights=None, classes=10)
    yield "keras_efficientnet_v2_b0", "keras.applications.EfficientNetV2B0(input_shape=(96,96,3), weights=None, classes=10)", \
        lambda: ka.EfficientNetV2B0(input_shape=big, weights=None, classes=10)
    yield "keras_convnext_tiny", "keras.applications.ConvNeXtTiny(input_shape=(96,96,3), weights=None, classes=10)", \
        lambda: ka.ConvNeXtTiny(input_shape=big, weights=None, classes=10)
    yield "keras_resnet50_v2", "keras.applications.ResNet50V2(input_shape=(64,64,3), weights=None, classes=10)", \
        lambda: ka.ResNet50V2(input_shape=shp, weights=None, classes=10)

    def text_conv():
        L = tf.keras.layers
        x = L.Input((32,), dtype="int32")
        h = L.Embedding(1000, 32)(x)
        h = L.Conv1D(32, 3, padding="same", activation="relu")(h)
        h = L.GlobalAveragePooling1D()(h)
        y = L.Dense(4, activation="softmax")(L.Dense(32, activation="relu")(h))
        return tf.keras.Model(x, y)

    def text_attention():
        L = tf.keras.layers
        x = L.Input((32,), dtype="int32")
        h = L.Embedding(1000, 32)(x)
        a = L.MultiHeadAttention(num_heads=2, key_dim=16)(h, h)
        h = L.LayerNormalization()(h + a)
        f = L.Dense(32)(L.Dense(64, activation="gelu")(h))
        h = L.LayerNormalization()(h + f)
        h = L.GlobalAveragePooling1D()(h)
        return tf.keras.Model(x, L.Dense(4, activation="softmax")(h))

    L = tf.keras.layers

    def seq(inp, *layers):
        x = i = tf.keras.Input(inp)
        for layer in layers:
            x = layer(x)
        return tf.keras.Model(i, x)

    def unet():
        i = tf.keras.Input((32, 32, 3))
        a = L.Conv2D(8, 3, padding="same", activation="relu")(i)
        b = L.Conv2D(16, 3, padding="same", activation="relu")(L.MaxPooling2D()(a))
        x = L.Concatenate()([a, L.Conv2DTranspose(8, 3, strides=2, padding="same")(b), L.UpSampling2D()(b),
                             L.UpSampling2D(interpolation="bilinear")(b)])
        return tf.keras.Model(i, L.Conv2D(2, 1)(x))

    yield "keras_unet", "Keras U-Net: Conv2DTranspose, UpSampling2D nearest and bilinear, Concatenate", unet
    yield "keras_resizing", "Keras Conv2D + Resizing(24, 30) + Conv2D + pooling + Dense", \
        lambda: seq((20, 20, 3), L.Conv2D(4, 3), L.Resizing(24, 30), L.Conv2D(4, 3), L.GlobalAveragePooling2D(), L.Dense(3))
    yield "keras_conv1d_audio", "Keras Conv1D + BatchNormalization + MaxPooling1D + dilated Conv1D + GlobalMaxPooling1D", \
        lambda: seq((200, 1), L.Conv1D(8, 9, strides=2, activation="relu"), L.BatchNormalization(), L.MaxPooling1D(2),
                    L.Conv1D(16, 5, dilation_rate=2), L.GlobalMaxPooling1D(), L.Dense(4))
    yield "keras_separable", "Keras SeparableConv2D, AveragePooling2D, dilated Conv2D, swish, ZeroPadding2D, Dropout", \
        lambda: seq((32, 32, 3), L.SeparableConv2D(8, 3, padding="same", activation="relu6"), L.AveragePooling2D(2),
                    L.Conv2D(8, 3, dilation_rate=2), L.Activation("swish"), L.ZeroPadding2D(1), L.Conv2D(4, 3, strides=2),
                    L.Flatten(), L.Dropout(0.2), L.Dense(3, activation="softmax"))
    yield "keras_prelu", "Keras PReLU, LeakyReLU, elu, sigmoid output", \
        lambda: seq((16, 16, 3), L.Conv2D(8, 3), L.PReLU(), L.Conv2D(8, 3), L.LeakyReLU(), L.Conv2D(8, 3, activation="elu"),
                    L.GlobalAveragePooling2D(), L.Dense(3, activation="sigmoid"))
    yield "keras_vgg16", "keras.applications.VGG16(input_shape=(32,32,3), weights=None, classes=10)", \
        lambda: ka.VGG16(input_shape=(32, 32, 3), weights=None, classes=10)
    yield "keras_text_conv", "Keras Embedding(1000,32) + Conv1D(32,3) + GlobalAveragePooling1D + Dense(32) + Dense(4)", text_conv
    yield "keras_text_attention", "Keras Embedding(1000,32) + MultiHeadAttention(2 heads, key 16) + LayerNormalization + Dense FFN (gelu) + pooling + Dense(4)", text_attention


def export_keras(name, source, make, out):
    import numpy as np
    import tensorflow as tf

    path = os.path.join(out, "keras", name + ".tflite")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    exporter = f"tf.lite.TFLiteConverter.from_keras_model (tensorflow {tf.__version__})"
    try:
        model = make()
        params = int(sum(np.prod(w.shape) for w in model.trainable_weights))
        nontrain = int(sum(np.prod(w.shape) for w in model.non_trainable_weights))
        data = tf.lite.TFLiteConverter.from_keras_model(model).convert()
        with open(path, "wb") as f:
            f.write(data)
        print(f"ok   {name}: {params:,} params ({nontrain:,} non-trainable), {len(data):,} B", file=sys.stderr)
        return [{"name": name, "file": os.path.relpath(path, out), "family": "keras", "source": source,
                 "exporter": exporter, "inputs": [list(i.shape) for i in model.inputs], "params": params,
                 "params_nontrainable": nontrain, "bytes": len(data)}], []
    except Exception as e:
        last = (str(e).strip().splitlines() or [type(e).__name__])[-1][:300]
        print(f"FAIL {name}: {type(e).__name__}: {last}", file=sys.stderr)
        return [], [{"name": name, "family": "keras", "exporter": exporter, "error": f"{type(e).__name__}: {last}"}]


# ------------------------------------------------------------------ the onnx package's zoo models
def zoo_models(out, only):
    import onnx

    base = os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/light")
    entries = []
    for fn in sorted(os.listdir(base)):
        if not fn.endswith(".onnx") or (only and not any(k in fn for k in only)):
            continue
        name = "zoo_" + fn[len("light_"):-len(".onnx")]
        dst = os.path.join(out, "zoo", name + ".onnx")
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copyfile(os.path.join(base, fn), dst)
        m = onnx.load(dst, load_external_data=False)
        opset = max(o.version for o in m.opset_import if o.domain in ("", "ai.onnx"))
        # the light models build their weights with ConstantOfShape: no framework count; the survey
        # counts the file's float constants itself
        entries.append({"name": name, "file": os.path.relpath(dst, out), "family": "zoo",
                        "source": f"onnx {onnx.__version__} backend/test/data/light/{fn}",
                        "exporter": "onnx model zoo (light)", "opset": opset, "params": None,
                        "bytes": os.path.getsize(dst)})
    return entries


# ------------------------------------------------------------------ the committed handful (tests/corpus)
def test_models():
    """(file, source, make, inputs) of tiny real exports for tests/corpus: each well under 300 KB."""
    import torch
    import transformers as tr
    from torchvision.models.convnext import CNBlockConfig, ConvNeXt
    from torchvision.models.mobilenetv3 import InvertedResidualConfig, MobileNetV3
    from torchvision.models.shufflenetv2 import ShuffleNetV2

    ids = (torch.randint(0, 100, (1, 8)),)
    img = (torch.randn(1, 3, 32, 32),)

    def bert():
        c = tr.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                          intermediate_size=64, max_position_embeddings=16, num_labels=3)
        return _Logits(tr.BertForSequenceClassification(c), "logits")

    def gpt2():
        c = tr.GPT2Config(vocab_size=100, n_embd=32, n_layer=1, n_head=2, n_positions=16, use_cache=False)
        return _Logits(tr.GPT2LMHeadModel(c), "logits")

    def llama():
        c = tr.LlamaConfig(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                           num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=16, use_cache=False)
        return _Logits(tr.LlamaForCausalLM(c), "logits")

    def mnv3():
        cfg = [InvertedResidualConfig(8, 3, 8, 8, True, "RE", 2, 1, 1.0),
               InvertedResidualConfig(8, 3, 24, 16, False, "HS", 2, 1, 1.0),
               InvertedResidualConfig(16, 5, 32, 16, True, "HS", 1, 1, 1.0)]
        return MobileNetV3(cfg, last_channel=32, num_classes=4)

    yield ("bert_tiny_dynamo.onnx", "BertForSequenceClassification(hidden 32, 1 layer, 2 heads, ffn 64, vocab 100, 16 positions)",
           bert, ids, dict(dynamo=True, external_data=False))
    yield ("gpt2_tiny_dynamo.onnx", "GPT2LMHeadModel(n_embd 32, 1 layer, 2 heads, vocab 100, 16 positions; tied lm_head)",
           gpt2, ids, dict(dynamo=True, external_data=False))
    yield ("llama_tiny_dynamo.onnx", "LlamaForCausalLM(hidden 32, ffn 64, 1 layer, 4 heads, 2 kv heads, vocab 100)",
           llama, ids, dict(dynamo=True, external_data=False))
    yield ("convnext_tiny_ts.onnx", "torchvision ConvNeXt([CNBlockConfig(8,16,1), CNBlockConfig(16,None,1)], num_classes=4)",
           lambda: ConvNeXt([CNBlockConfig(8, 16, 1), CNBlockConfig(16, None, 1)], num_classes=4), img, dict(dynamo=False))
    yield ("mobilenet_v3_tiny_dynamo.onnx", "torchvision MobileNetV3(3 inverted residual blocks (SE, hardswish), last_channel=32, num_classes=4)",
           mnv3, img, dict(dynamo=True, external_data=False))
    yield ("shufflenet_v2_tiny_ts.onnx", "torchvision ShuffleNetV2([1,1,1], [8,16,32,64,64], num_classes=4)",
           lambda: ShuffleNetV2([1, 1, 1], [8, 16, 32, 64, 64], num_classes=4), img, dict(dynamo=False))

    def clip_text():
        c = tr.CLIPTextConfig(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                              num_attention_heads=2, max_position_embeddings=16)
        return _Logits(tr.CLIPTextModel(c), "pooler_output")

    yield ("clip_text_tiny_dynamo.onnx", "CLIPTextModel(hidden 32, ffn 64, 1 layer, 2 heads, vocab 100, 16 positions): "
           "argmax pooling (ArgMax, GatherND)", clip_text, ids, dict(dynamo=True, external_data=False))
    yield ("seg_tiny_ts.onnx", "a tiny segmentation net: Conv-BN-ReLU, max pool, bilinear and bicubic upsampling, "
           "ConvTranspose2d, PixelShuffle, skip concat", _SegTiny, img, dict(dynamo=False))

    def deberta():
        c = tr.DebertaV2Config(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                               intermediate_size=64, max_position_embeddings=64, relative_attention=True,
                               pos_att_type=["p2c", "c2p"], position_buckets=16, max_relative_positions=64,
                               num_labels=3)
        return _Logits(tr.DebertaV2ForSequenceClassification(c), "logits")

    # 64 positions at batch 2: the c2p / p2c indices expanded to batch x heads x seq² (16,384) are more
    # than the ONNX loader folds itself, so they fold on the IR as a broadcast of their seq² values
    yield ("deberta_tiny_ts.onnx", "DebertaV2ForSequenceClassification(hidden 32, 1 layer, 2 heads, ffn 64, vocab "
           "100, 64 positions, c2p and p2c relative attention, 16 buckets)", deberta,
           (torch.randint(0, 100, (2, 64)),), dict(dynamo=False))

    # weight standardisation (timm): trained as it trains, so both exports keep batch_norm over the weight;
    # the dynamo exporter's optimizer folds each standardised weight into one constant
    train_ts = dict(dynamo=False, training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    yield ("wstd_tiny_ts.onnx", "timm StdConv2d(3, 8, 3, stride 2) + ScaledStdConv2d(8, 16, 3, gamma 1.7), "
           "Linear(16, 4), exported in training mode", _WSTiny, (torch.randn(2, 3, 16, 16),), train_ts)
    yield ("wstd_tiny_dynamo.onnx", "the same network, dynamo", _WSTiny, (torch.randn(2, 3, 16, 16),),
           dict(dynamo=True, external_data=False))

    # a symbolic sequence length (and batch), as optimum and `dynamic_axes` users ship transformers: bound
    # with --dim seq=N. gpt2_tiny's config, so --dim seq=8 -b 1 must give gpt2_tiny_dynamo.onnx's figures;
    # batch 2 in the example input (torch.export specializes a dimension of size 1)
    ids2 = (torch.randint(0, 100, (2, 8)),)
    yield ("gpt2_tiny_seq_dynamo.onnx", "GPT2LMHeadModel(n_embd 32, 1 layer, 2 heads, vocab 100, 16 positions; tied "
           "lm_head), dynamic_shapes batch and seq (max 16)", gpt2, ids2,
           dict(dynamo=True, external_data=False, input_names=["ids"],
                dynamic_shapes=(({0: torch.export.Dim("batch"), 1: torch.export.Dim("seq", max=16)},),)))
    yield ("bert_tiny_seq_ts.onnx", "BertForSequenceClassification(hidden 32, 1 layer, 2 heads, ffn 64, vocab 100, "
           "16 positions), dynamic_axes batch and seq", bert, ids2,
           dict(dynamo=False, input_names=["ids"], output_names=["logits"],
                dynamic_axes={"ids": {0: "batch", 1: "seq"}}))


def _WSTiny():
    """timm's weight-standardised convolutions: a StdConv2d stem (no gain), a ScaledStdConv2d with its
    gain and an NFNet activation gamma, a global pool and a Linear head."""
    import torch.nn as nn
    import torch.nn.functional as F
    from timm.layers import ScaledStdConv2d, StdConv2d

    class WSTiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = StdConv2d(3, 8, 3, stride=2)
            self.conv = ScaledStdConv2d(8, 16, 3, gamma=1.7, eps=1e-5)
            self.head = nn.Linear(16, 4)

        def forward(self, x):
            x = F.silu(self.conv(F.relu(self.stem(x)))) * 1.7
            return self.head(x.mean((2, 3)))

    return WSTiny()


def _SegTiny():
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class SegTiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.e1 = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
            self.e2 = nn.Sequential(nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())
            self.up = nn.ConvTranspose2d(16, 8, 2, stride=2)
            self.ps = nn.Sequential(nn.Conv2d(16, 32, 1), nn.PixelShuffle(2))
            self.head = nn.Conv2d(8 + 8 + 8 + 16, 3, 1)

        def forward(self, x):
            a = self.e1(x)
            b = self.e2(F.max_pool2d(a, 2))
            lin = F.interpolate(b, scale_factor=2, mode="bilinear", align_corners=False)
            cub = F.interpolate(b[:, :8], size=a.shape[-2:], mode="bicubic", align_corners=True)
            return self.head(torch.cat([a, self.up(b), self.ps(b), lin[:, :8] + cub, lin[:, 8:]], 1))

    return SegTiny()


def keras_test_models():
    import tensorflow as tf

    L = tf.keras.layers

    def text_conv():
        x = L.Input((16,), dtype="int32")
        h = L.Embedding(100, 16)(x)
        h = L.Conv1D(16, 3, padding="same", activation="relu")(h)
        h = L.GlobalAveragePooling1D()(h)
        return tf.keras.Model(x, L.Dense(4, activation="softmax")(h))

    def mobile_block():
        x = L.Input((32, 32, 3))
        h = L.Conv2D(8, 3, strides=2, padding="same", use_bias=False)(x)
        h = L.BatchNormalization()(h)
        h = L.ReLU(6.0)(h)
        h = L.DepthwiseConv2D(3, padding="same", use_bias=False)(h)
        h = L.BatchNormalization()(h)
        h = L.Activation("hard_swish")(h)
        h = L.Conv2D(16, 1, use_bias=False)(h)
        h = L.BatchNormalization()(h)
        h = L.GlobalAveragePooling2D()(h)
        return tf.keras.Model(x, L.Dense(4, activation="softmax")(h))

    def se_block():
        # keras.applications' squeeze-excite and classifier heads: the converter writes each Reshape /
        # Flatten with a dynamic batch as Shape -> StridedSlice -> Pack -> Reshape
        x = L.Input((16, 16, 3))
        h = L.Conv2D(8, 3, strides=2, padding="same", activation="relu")(x)
        s = L.GlobalAveragePooling2D()(h)
        s = L.Reshape((1, 1, 8))(s)
        s = L.Conv2D(2, 1, activation="relu")(s)
        s = L.Conv2D(8, 1, activation="hard_sigmoid")(s)
        h = L.Multiply()([h, s])
        h = L.Flatten()(L.AveragePooling2D(4)(h))
        return tf.keras.Model(x, L.Dense(4, activation="softmax")(h))

    def seq_dense():
        # Dense on a sequence: the converter writes a Tensordot (Shape, Gather, ReduceProd, Pack,
        # Reshape, FullyConnected, Reshape) whose inner tensors get placeholder shapes (1, 1)
        x = L.Input((8,), dtype="int32")
        h = L.Embedding(20, 8)(x)
        h = L.Dense(16, activation="gelu")(h)
        h = L.LayerNormalization()(L.Dense(8)(h))
        h = L.GlobalAveragePooling1D()(h)
        return tf.keras.Model(x, L.Dense(4, activation="softmax")(h))

    def seq_dense_dynamic():
        # the same with the sequence length left dynamic: -1 at position 1 of the input's shape_signature,
        # the converter's placeholder size 1 in every tensor it reaches
        x = L.Input((None,), dtype="int32", name="ids")
        h = L.Embedding(20, 8)(x)
        h = L.Dense(16, activation="gelu")(h)
        h = L.LayerNormalization()(L.Dense(8)(h))
        h = L.GlobalAveragePooling1D()(h)
        return tf.keras.Model(x, L.Dense(4, activation="softmax")(h))

    def dilated_up():
        # the converter writes each dilated convolution as SpaceToBatchND -> Conv -> BatchToSpaceND (whose
        # batch dims it leaves as placeholders), Conv2DTranspose as TRANSPOSE_CONV, UpSampling2D as RESIZE_*
        x = L.Input((16, 16, 3))
        h = L.Conv2D(4, 3, dilation_rate=2, padding="same", activation="relu")(x)
        d = L.Conv2DTranspose(4, 3, strides=2, padding="same")(L.MaxPooling2D()(h))
        u = L.UpSampling2D(interpolation="bilinear")(L.MaxPooling2D()(h))
        h = L.Concatenate()([h, d, u])
        return tf.keras.Model(x, L.Dense(4, activation="softmax")(L.GlobalAveragePooling2D()(L.Conv2D(4, 1)(h))))

    yield "keras_dilated_up.tflite", "Keras dilated Conv2D (SpaceToBatchND / BatchToSpaceND), Conv2DTranspose, bilinear UpSampling2D", dilated_up
    yield "keras_text_conv.tflite", "Keras Embedding(100,16) + Conv1D(16,3,relu) + GlobalAveragePooling1D + Dense(4, softmax)", text_conv
    yield "keras_seq_dense.tflite", "Keras Embedding(20,8) + Dense(16, gelu) + Dense(8) on the sequence + LayerNormalization + pooling + Dense(4)", seq_dense
    yield "keras_se_block.tflite", "Keras Conv2D, squeeze-excite (pool, Reshape((1,1,C)), Conv 1x1 relu / hard_sigmoid, Multiply), Flatten, Dense(4)", se_block
    yield "keras_mobile_block.tflite", "Keras Conv2D+BatchNorm+ReLU6, DepthwiseConv2D+BatchNorm+hard_swish, Conv2D 1x1+BatchNorm, pooling, Dense(4)", mobile_block
    # last, so that the files above keep their random weights
    yield "keras_seq_dense_dynamic.tflite", "keras_seq_dense's layers on Input((None,), name='ids'): the sequence length dynamic (-1 in shape_signature)", seq_dense_dynamic


def build_tests(out: str, only=None) -> int:
    """Write the committed handful to `out` with exports.json (exporter, version, framework params).
    `only`: file-name substrings; the other files and their entries stay as they are."""
    import numpy as np

    os.makedirs(out, exist_ok=True)
    doc = []
    if only:
        with open(os.path.join(out, "exports.json")) as f:
            doc = [d for d in json.load(f) if not any(o in d["file"] for o in only)]
    torch_names = ("bert_tiny", "gpt2_tiny", "llama_tiny", "convnext_tiny", "mobilenet_v3_tiny", "shufflenet_v2_tiny",
                   "clip_text_tiny", "seg_tiny", "gpt2_tiny_seq", "bert_tiny_seq", "deberta_tiny", "wstd_tiny")
    wanted = [n for n in torch_names if not only or any(o in n for o in only)]
    if wanted:
        import onnx
        import torch

        torch.manual_seed(0)
        torch.backends.mha.set_fastpath_enabled(False)
    for fn, source, make, args, kw in (test_models() if wanted else []):
        if only and not any(o in fn for o in only):
            continue
        model = make().eval()
        params = sum(p.numel() for p in model.parameters() if p.dtype.is_floating_point)
        path = os.path.join(out, fn)
        with torch.no_grad():
            torch.onnx.export(model, args, path, **kw)
        strip_file(path)  # committed files carry no path of the exporting machine
        m = onnx.load(path, load_external_data=False)
        opset = max(o.version for o in m.opset_import if o.domain in ("", "ai.onnx"))
        exporter = f"torch.onnx {'dynamo' if kw['dynamo'] else 'TorchScript'} (torch {torch.__version__}), opset {opset}"
        doc.append({"file": fn, "source": source, "exporter": exporter, "params": params})
    if only and not any(o in fn for fn, *_ in keras_test_models_names() for o in only):
        return _write_tests_doc(out, doc)
    import tensorflow as tf

    tf.keras.utils.set_random_seed(0)
    for fn, source, make in keras_test_models():
        if only and not any(o in fn for o in only):
            continue
        model = make()
        data = tf.lite.TFLiteConverter.from_keras_model(model).convert()
        with open(os.path.join(out, fn), "wb") as f:
            f.write(data)
        params = int(sum(np.prod(w.shape) for w in model.trainable_weights))
        doc.append({"file": fn, "source": source, "params": params,
                    "exporter": f"tf.lite.TFLiteConverter.from_keras_model (tensorflow {tf.__version__}), float32"})
    return _write_tests_doc(out, doc)


def keras_test_models_names():
    return [(fn,) for fn in ("keras_text_conv.tflite", "keras_mobile_block.tflite", "keras_se_block.tflite",
                              "keras_seq_dense.tflite", "keras_dilated_up.tflite", "keras_seq_dense_dynamic.tflite")]


def _write_tests_doc(out, doc) -> int:
    for d in doc:
        d["bytes"] = os.path.getsize(os.path.join(out, d["file"]))
        print(f"{d['file']}: {d['bytes']:,} B, {d['params']:,} params", file=sys.stderr)
    with open(os.path.join(out, "exports.json"), "w") as f:
        json.dump(sorted(doc, key=lambda d: d["file"]), f, indent=1, sort_keys=True)
        f.write("\n")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="../corpus")
    ap.add_argument("--only", default=None, help="comma-separated substrings of model names")
    ap.add_argument("--skip", default="", help="comma-separated families: torchvision,timm,transformers,wide,tflite,zoo")
    ap.add_argument("--tests", default=None, metavar="DIR",
                    help="instead: write the committed handful of tiny exports (tests/corpus) to DIR")
    args = ap.parse_args(argv)
    if args.tests:
        return build_tests(args.tests, args.only.split(",") if args.only else None)
    only = args.only.split(",") if args.only else None
    skip = set(filter(None, args.skip.split(",")))
    os.makedirs(args.out, exist_ok=True)
    mpath = os.path.join(args.out, "manifest.json")
    old = {"models": [], "failed": []}
    if os.path.exists(mpath):
        with open(mpath) as f:
            old = json.load(f)
    entries, failed = [], []
    if "zoo" not in skip:
        entries += zoo_models(args.out, only)
    sources = [("torchvision", torchvision_models), ("timm", timm_models), ("transformers", transformers_models),
               ("wide", wide_models)]
    for family, gen in sources:
        if family in skip:
            continue
        try:
            models = list(gen())
        except Exception as e:
            failed.append({"name": family, "family": family, "exporter": "-", "error": f"{type(e).__name__}: {e}"})
            continue
        for name, source, make, inputs in models:
            if only and not any(k in name for k in only):
                continue
            e, f = export_torch(name, source, make, inputs, args.out, family, only)
            entries += e
            failed += f
    if "tflite" not in skip:
        try:
            models = list(keras_models())
        except Exception as e:
            models = []
            failed.append({"name": "keras", "family": "keras", "exporter": "-", "error": f"{type(e).__name__}: {e}"})
        for name, source, make in models:
            if only and not any(k in name for k in only):
                continue
            e, f = export_keras(name, source, make, args.out)
            entries += e
            failed += f
    # a partial rebuild (--only / --skip) keeps the other models of the manifest
    built = {e["name"] for e in entries} | {f["name"] for f in failed}
    models = [e for e in old["models"] if e["name"] not in built] + entries
    fails = [f for f in old.get("failed", []) if f["name"] not in built] + failed
    doc = {"models": sorted(models, key=lambda e: e["name"]), "failed": sorted(fails, key=lambda e: e["name"])}
    with open(mpath + ".tmp", "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
    os.replace(mpath + ".tmp", mpath)
    print(f"{len(doc['models'])} models, {len(doc['failed'])} failed exports -> {mpath}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
