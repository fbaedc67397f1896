"""Dev-only oracle for `--profile torch`: what PyTorch eager really allocates for a training step on
CPU, measured, next to what the profile predicts from the module's ONNX export.

Needs torch (never a memplan dependency); run it with an interpreter that has torch:

    python devtools/torch_oracle.py                 # the whole zoo, table on stdout
    python devtools/torch_oracle.py mlp cnn_bn -b 4  # some modules, one batch size
    python devtools/torch_oracle.py --json out.json

For each (module, optimizer, batch) it
- exports the module with torch.onnx (TorchScript exporter in training mode, so BatchNorm and Dropout
  stay as they train; `--dynamo` for the dynamo exporter: it folds BatchNorm into Conv);
- trains three steps `out = m(x); loss = lossfn(out, y); loss.backward(); opt.step();
  opt.zero_grad(set_to_none=True)` on 1 thread, every layer run (LayerDrop off: `every_layer`; torch
  and NumPy seeded), and measures the third: peak = bytes held by live
  tensors before the step (parameters, buffers, optimizer state, input and label; unique storages)
  + the peak of the running sum of the CPU allocator's alloc / free events during the step
  (`torch.profiler` with `profile_memory=True`), the way shared/research/torch-memory.md describes;
- measures the same step again under `torch.distributed._tools.mem_tracker.MemTracker` (peak per
  category: PARAM, BUFFER, OPT, GRAD, ACT, TEMP);
- runs `memplan analyze --profile torch -f json` on the export (the project's venv, a subprocess)
  and compares.
"""
from __future__ import annotations

import argparse
import gc
import json
import math
import os
import re
import subprocess
import sys
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---- the zoo ---------------------------------------------------------------------------------

class LoRALinear(nn.Module):
    """A frozen Linear plus a trained low-rank update B(A(x)) * scale (hand-written, no peft)."""

    def __init__(self, d_in, d_out, r=4, alpha=8):
        super().__init__()
        self.base = nn.Linear(d_in, d_out)
        self.base.weight.requires_grad_(False)
        self.base.bias.requires_grad_(False)
        self.lora_A = nn.Linear(d_in, r, bias=False)
        self.lora_B = nn.Linear(r, d_out, bias=False)
        nn.init.normal_(self.lora_B.weight, std=0.02)
        self.scale = alpha / r

    def forward(self, x):
        return self.base(x) + self.lora_B(self.lora_A(x)) * self.scale


class Attention(nn.Module):
    def __init__(self, d, heads, causal=False, lora=0):
        super().__init__()
        lin = (lambda a, b: LoRALinear(a, b, lora)) if lora else nn.Linear
        self.q, self.k, self.v = lin(d, d), nn.Linear(d, d), lin(d, d)
        self.o = nn.Linear(d, d)
        self.h, self.causal = heads, causal
        if lora:
            for m in (self.k, self.o):
                m.requires_grad_(False)

    def forward(self, x):
        b, s, d = x.shape
        h, hd = self.h, d // self.h
        q = self.q(x).view(b, s, h, hd).transpose(1, 2)
        k = self.k(x).view(b, s, h, hd).transpose(1, 2)
        v = self.v(x).view(b, s, h, hd).transpose(1, 2)
        a = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(hd)
        if self.causal:
            mask = torch.triu(torch.full((s, s), float("-inf")), diagonal=1)
            a = a + mask
        a = torch.softmax(a, dim=-1)
        y = torch.matmul(a, v).transpose(1, 2).reshape(b, s, d)
        return self.o(y)


class Block(nn.Module):
    def __init__(self, d, heads, causal=False, lora=0, act="gelu"):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.att = Attention(d, heads, causal, lora)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.act = nn.GELU() if act == "gelu" else nn.ReLU()
        if lora:
            for m in (self.ln1, self.ln2, self.fc1, self.fc2):
                m.requires_grad_(False)

    def forward(self, x):
        x = x + self.att(self.ln1(x))
        return x + self.fc2(self.act(self.fc1(self.ln2(x))))


class Transformer(nn.Module):
    """Token ids are not an ONNX-friendly float input for memplan's loaders: the input is an
    embedded sequence (B, S, D); the head predicts `classes` per token."""

    def __init__(self, d=64, heads=4, layers=2, classes=50, causal=False, lora=0, act="gelu"):
        super().__init__()
        self.blocks = nn.Sequential(*[Block(d, heads, causal, lora, act) for _ in range(layers)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, classes)
        if lora:  # only the adapters train
            self.ln.requires_grad_(False)
            self.head.requires_grad_(False)

    def forward(self, x):
        return self.head(self.ln(self.blocks(x)))


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride=1, bn=True):
        super().__init__()
        norm = nn.BatchNorm2d if bn else (lambda c: nn.Identity())
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=not bn)
        self.b1 = norm(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=not bn)
        self.b2 = norm(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=not bn), norm(cout))

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        y = self.b2(self.c2(y))
        return F.relu(y + (x if self.down is None else self.down(x)))


class ResNet(nn.Module):
    def __init__(self, bn=True, width=16, classes=10):
        super().__init__()
        norm = nn.BatchNorm2d if bn else (lambda c: nn.Identity())
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=not bn), norm(width), nn.ReLU(),
                                  nn.MaxPool2d(2))
        self.layers = nn.Sequential(BasicBlock(width, width, 1, bn), BasicBlock(width, 2 * width, 2, bn),
                                    BasicBlock(2 * width, 4 * width, 2, bn))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(4 * width, classes)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.layers(self.stem(x))), 1))


class InvertedResidual(nn.Module):
    """MobileNetV2 (ReLU6) or EfficientNet (SiLU + squeeze-excite) block."""

    def __init__(self, cin, cout, stride, expand, se=False):
        super().__init__()
        mid = cin * expand
        act = nn.SiLU if se else nn.ReLU6
        layers = [nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid), act(),
                  nn.Conv2d(mid, mid, 3, stride, 1, groups=mid, bias=False), nn.BatchNorm2d(mid), act()]
        self.body = nn.Sequential(*layers)
        self.se = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(mid, max(1, cin // 4), 1), nn.SiLU(),
                                nn.Conv2d(max(1, cin // 4), mid, 1), nn.Sigmoid()) if se else None
        self.proj = nn.Sequential(nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.res = stride == 1 and cin == cout

    def forward(self, x):
        y = self.body(x)
        if self.se is not None:
            y = y * self.se(y)
        y = self.proj(y)
        return x + y if self.res else y


class MobileNet(nn.Module):
    def __init__(self, se=False, classes=10, dropout=0.2):
        super().__init__()
        act = nn.SiLU if se else nn.ReLU6
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), act())
        self.blocks = nn.Sequential(InvertedResidual(16, 16, 1, 1, se), InvertedResidual(16, 24, 2, 4, se),
                                    InvertedResidual(24, 24, 1, 4, se), InvertedResidual(24, 32, 2, 4, se))
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(dropout), nn.Linear(32, classes))

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)))


def _cnn(bn: bool, dropout: float = 0.0):
    def block(cin, cout):
        return [nn.Conv2d(cin, cout, 3, padding=1)] + ([nn.BatchNorm2d(cout)] if bn else []) + [nn.ReLU()]
    layers = block(3, 16) + [nn.MaxPool2d(2)] + block(16, 32) + [nn.MaxPool2d(2)] + block(32, 32)
    layers += [nn.Flatten(), nn.Linear(32 * 8 * 8, 64), nn.ReLU()]
    layers += [nn.Dropout(dropout)] if dropout else []
    return nn.Sequential(*layers, nn.Linear(64, 10))


def _mnist():
    # the Kaggle MNIST CNN's shape (sample_models/mnist), on a 28x28 grey input
    return nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(64 * 12 * 12, 128), nn.ReLU(), nn.Linear(128, 10))


def _kaggle_mnist():
    # the Kaggle MNIST CNN of sample_models/mnist (484,714 parameters), NCHW, logits out
    return nn.Sequential(nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.Conv2d(32, 32, 5, padding=2), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(),
                         nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))


class _Logits(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, ids):
        return self.m(input_ids=ids).logits


def _hf_bert(lora: int):
    """Hugging Face BertForMaskedLM (hidden 256, 4 layers, 4 heads, vocabulary 8000, eager attention),
    logits out; with `lora`, LoRA adapters of that rank on query / value and everything else frozen."""
    from transformers import BertConfig, BertForMaskedLM

    cfg = BertConfig(vocab_size=8000, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                     intermediate_size=1024, max_position_embeddings=128)
    cfg._attn_implementation = "eager"
    m = BertForMaskedLM(cfg)
    if lora:
        m.requires_grad_(False)
        for layer in m.bert.encoder.layer:
            att = layer.attention.self
            for name in ("query", "value"):
                base = getattr(att, name)
                ad = LoRALinear(base.in_features, base.out_features, lora, 2 * lora)
                ad.base = base
                setattr(att, name, ad)
    return _Logits(m)


def _hf_bert_cls(peft_rank: int):
    """The research note's BERT (shared/research/torch-memory.md): Hugging Face
    BertForSequenceClassification (hidden 256, 4 layers, 4 heads, vocabulary 8000, its default 512
    positions and 2 labels, eager attention). With `peft_rank`, peft's own LoRA of that rank on query /
    value (its defaults otherwise: alpha 8, no dropout), the rest frozen, as peft leaves it."""
    from transformers import BertConfig, BertForSequenceClassification

    cfg = BertConfig(vocab_size=8000, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                     intermediate_size=1024)
    cfg._attn_implementation = "eager"
    m = BertForSequenceClassification(cfg)
    if peft_rank:
        from peft import LoraConfig, get_peft_model

        m = get_peft_model(m, LoraConfig(r=peft_rank, target_modules=["query", "value"]))
    return _Logits(m)


class Misc(nn.Module):
    """Padding, cropping, a where, an expanded gate: the less common ops."""

    def __init__(self):
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 3)
        self.pad = nn.ZeroPad2d(1)
        self.fc = nn.Linear(8 * 14 * 14, 10)

    def forward(self, x):
        y = self.c2(self.pad(torch.tanh(self.c1(x))))
        y = y[:, :, 1:-1, 1:-1]
        y = torch.where(y > 0, y, 0.1 * y)
        g = torch.sigmoid(y.mean((2, 3), keepdim=True))
        return self.fc(torch.flatten(y * g.expand_as(y), 1))


class LoraMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.l2 = LoRALinear(256, 512, 8), LoRALinear(512, 512, 8)
        self.head = nn.Linear(512, 10)
        self.head.requires_grad_(False)  # only the adapters train

    def forward(self, x):
        return self.head(F.relu(self.l2(F.relu(self.l1(x)))))


IMG = (3, 32, 32)
SEQ = (32, 64)
# name -> (family, builder, input shape without batch, classes per row)
ZOO = {
    "mlp": ("mlp", lambda: nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                                         nn.Linear(512, 10)), (256,)),
    "mlp_gelu_dropout": ("mlp", lambda: nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Dropout(0.1),
                                                      nn.Linear(512, 10)), (256,)),
    "mnist_cnn": ("cnn", _mnist, (1, 28, 28)),
    "kaggle_mnist": ("cnn", _kaggle_mnist, (1, 28, 28)),
    "cnn": ("cnn", lambda: _cnn(False), IMG),
    "cnn_bn": ("cnn", lambda: _cnn(True), IMG),
    "cnn_bn_dropout": ("cnn", lambda: _cnn(True, 0.3), IMG),
    "resnet_bn": ("residual", lambda: ResNet(True), IMG),
    "resnet_nobn": ("residual", lambda: ResNet(False), IMG),
    "mobilenet": ("depthwise", lambda: MobileNet(False), IMG),
    "efficientnet": ("depthwise", lambda: MobileNet(True), IMG),
    "encoder": ("transformer", lambda: Transformer(), SEQ),
    "encoder_relu": ("transformer", lambda: Transformer(act="relu", layers=1), SEQ),
    "decoder": ("transformer", lambda: Transformer(causal=True), SEQ),
    "lora_encoder": ("lora", lambda: Transformer(lora=4), SEQ),
    "lora_decoder": ("lora", lambda: Transformer(causal=True, lora=8), SEQ),
    "lora_mlp": ("lora", LoraMLP, (256,)),
    "misc": ("cnn", Misc, (3, 16, 16)),
}
# larger real networks, run only when named (`python devtools/torch_oracle.py tv_resnet18 -b 8 -O adam`):
# the research note's figures (shared/research/torch-memory.md), random init, no downloads
HEAVY = {
    "tv_resnet18": ("residual", lambda: __import__("torchvision").models.resnet18(), (3, 224, 224)),
    "tv_mobilenet_v2": ("depthwise", lambda: __import__("torchvision").models.mobilenet_v2(), (3, 224, 224)),
    "hf_bert": ("transformer", lambda: _hf_bert(0), ("ids", 128, 8000)),
    "hf_bert_lora": ("lora", lambda: _hf_bert(8), ("ids", 128, 8000)),
    "hf_bert_cls": ("transformer", lambda: _hf_bert_cls(0), ("ids", 128, 8000)),
    "hf_bert_cls_peft": ("lora", lambda: _hf_bert_cls(8), ("ids", 128, 8000)),  # needs peft
}


class _PadConv(nn.Module):
    """Asymmetric zero pads before convolutions with their own padding (the dynamo exporter folds both)."""

    def __init__(self):
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(3, 16, 3, padding=1), nn.Conv2d(16, 16, 3, stride=2, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(16)
        self.fc = nn.Linear(16 * 10 * 11, 10)

    def forward(self, x):
        y = F.relu(self.c1(F.pad(x, (1, 2, 0, 1))))
        y = F.relu(self.bn(self.c2(nn.functional.pad(y, (1, 1, 1, 1)))))
        return self.fc(torch.flatten(y, 1))


def _warm(m, shape):
    """Running statistics moved off their initial values (the exporter then writes a folded bias)."""
    with torch.no_grad():
        m(torch.randn(4, *shape))
    return m


# what the dynamo exporter's optimizer folds, beyond the zoo (run only when named): BatchNorm after a
# Linear and after a convolution with a bias (warm statistics), asymmetric zero pads
DYNFOLD = {
    "dyn_mlp_bn": ("mlp", lambda: nn.Sequential(nn.Linear(64, 128), nn.BatchNorm1d(128), nn.ReLU(),
                                                nn.Linear(128, 10)), (64,)),
    "dyn_conv_bias_bn": ("cnn", lambda: _warm(nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.Conv2d(16, 32, 3, stride=2),
        nn.BatchNorm2d(32), nn.ReLU(), nn.Flatten(), nn.Linear(32 * 7 * 7, 10)), (3, 16, 16)), (3, 16, 16)),
    "dyn_pad_conv": ("cnn", _PadConv, (3, 16, 16)),
}
DEFAULT = list(ZOO)
ZOO.update(HEAVY)
ZOO.update(DYNFOLD)
try:  # vision networks (torchvision / timm), run with --vision or by name
    from devtools.torch_vision_zoo import LARGE, VISION
except ImportError:
    sys.path.insert(0, ROOT)
    from devtools.torch_vision_zoo import LARGE, VISION
from devtools.torch_vision_zoo import CONVNEXT, CONVNEXT_LARGE  # noqa: E402 (on the path by now)
ZOO.update(VISION)
ZOO.update(CONVNEXT)
ZOO.update(CONVNEXT_LARGE)
ZOO.update(LARGE)
from devtools.torch_vision_zoo import CONVSCRATCH  # patchify stems, transposed convolutions (--set convscratch)
from devtools.torch_vision_zoo import WIDECONV  # kernels 14 wide and more (--set wideconv)

ZOO.update(CONVSCRATCH)
ZOO.update(WIDECONV)
# transformer and sequence networks, the repository's own exports among them (`--set seq`)
try:
    from devtools import torch_zoo_seq as _seq
except ImportError:  # run as a script: devtools/ is on the path, the repository is not
    sys.path.insert(0, ROOT)
    from devtools import torch_zoo_seq as _seq
ZOO.update(_seq.ZOO)
SETS = {"seq": [n for n in _seq.ZOO if n not in _seq.TC], "tc": list(_seq.TC), "convscratch": list(CONVSCRATCH),
        "wideconv": list(WIDECONV),
        "convnext": ["vis_convnext_atto"] + list(CONVNEXT)}
# memplan flags that say what the module trains
FLAGS = {"lora_encoder": ["--train", "ops:*lora*"], "lora_decoder": ["--train", "ops:*lora*"],
         "hf_bert_lora": ["--train", "ops:*lora*"],
         "lora_mlp": ["--train", "ops:*lora*"]}
FLAGS.update(_seq.FLAGS)
# modules checked against a committed export (memplan re-batches it) instead of a fresh one
FILES = dict(_seq.FILES)


def build(name: str, batch: int, seed: int = 0):
    """The module, its batch and labels, as PRECISION trains them, every layer run (`every_layer`)."""
    model, x, y = build_float32(name, batch, seed)
    every_layer(model)
    return (*_in_precision(model, x), y)


LAYERDROP = re.compile(r"(?:^|_)layerdrop$")


def every_layer(model) -> list[str]:
    """LayerDrop off: each float attribute named `layerdrop` or `*_layerdrop` (transformers' and
    fairseq's name for the probability that a training step skips a layer; the encoders read it from
    the module or from its `config`) set to 0 on every submodule and every config a submodule holds.
    The measured step is then the step that runs every layer, the one that sets the peak of a run
    (training reaches it on a share (1 - p)^layers of its steps); a step that skipped a layer is lower
    by that layer's tensors. What else the module draws (dropout masks, timm's drop_path masks) keeps
    its shape and is left as it is. Returns the attributes set, as `module.attribute=old` (module ''
    for the root)."""
    done, seen = [], set()
    for mname, mod in model.named_modules():
        for owner, label in ((mod, mname), (getattr(mod, "config", None), f"{mname}.config".lstrip("."))):
            if owner is None or id(owner) in seen:
                continue
            seen.add(id(owner))
            for k, v in list((getattr(owner, "__dict__", None) or {}).items()):  # a dict config has none
                if LAYERDROP.search(k) and isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0:
                    setattr(owner, k, 0.0)
                    done.append(f"{label}.{k}={v}".lstrip("."))
    return done


def example_batch(shape: tuple, batch: int):
    """A batch for a zoo input shape: random floats, or token ids for ("ids", sequence length,
    vocabulary)."""
    if shape[0] == "ids":
        return torch.randint(0, shape[2], (batch, shape[1]))
    return torch.randn(batch, *shape)


def build_float32(name: str, batch: int, seed: int = 0):
    """The module in float32 (what is exported), its batch and labels."""
    torch.manual_seed(seed)
    _seed_numpy(seed)  # a forward that draws with numpy (wav2vec2's LayerDrop) traces the same each time
    fam, fn, shape = ZOO[name]
    model = fn()
    model.train()
    x = example_batch(shape, batch)
    with torch.no_grad():
        out = model(x)
    return model, x, labels_for(out)


def _seed_numpy(seed: int) -> None:
    try:
        import numpy as np
    except ImportError:
        return
    np.random.seed(seed)


def labels_for(out):
    """Class labels for a module's output: one tensor, or (for a tuple of outputs, as a question-answering
    head's start and end logits) one per output, each over that output's last axis."""
    if isinstance(out, (tuple, list)):
        return tuple(labels_for(o) for o in out)
    return torch.randint(0, out.shape[-1], out.shape[:-1])


# ---- --precision: what is measured (memplan's --precision names) ---------------------------------
# 32-true: as it was; bf16-mixed: forward and loss under torch.autocast("cpu", dtype=torch.bfloat16),
# backward and the optimizer outside it; bf16-true: model.to(torch.bfloat16) and a bfloat16 batch
PRECISION = "32-true"
PRECISIONS = ("32-true", "bf16-mixed", "bf16-true")


def _in_precision(model, x):
    """The module and its batch as PRECISION trains them (bf16-true: both converted; an id batch stays)."""
    if PRECISION == "bf16-true":
        model = model.to(torch.bfloat16)
        if x.is_floating_point():
            x = x.to(torch.bfloat16)
    return model, x


def _autocast():
    """The context the forward and the loss run in: autocast for bf16-mixed, else nothing."""
    import contextlib

    if PRECISION == "bf16-mixed":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def _measured_key(name: str, optimizer: str, batch: int) -> str:
    """The --cache key of a measurement: the 32-true keys are those of before --precision."""
    key = f"{name}/{optimizer}/{batch}"
    return key if PRECISION == "32-true" else f"{key}/{PRECISION}"


def predict_memplan(path: str, optimizer: str, batch: int, flags=()) -> int | None:
    """memplan's own planned bytes for the export under PRECISION (the issue-43 target: at most 0.9 x
    PyTorch's measured peak under the same precision)."""
    r = subprocess.run(memplan_cmd() + ["analyze", path, "-b", str(batch), "-O", optimizer, "-l", "cce", "-f", "json",
                                        "--precision", PRECISION, *flags], capture_output=True, text=True, cwd=ROOT)
    if r.returncode != 0:
        return None
    return json.loads(r.stdout)["totals"]["planned"]


# ---- measuring -------------------------------------------------------------------------------

def _loss(out, y):
    """Cross-entropy over the last axis; for several outputs the sum of one per output, in order, which
    is what `memplan analyze -l cce` trains (one loss per output, summed)."""
    if isinstance(out, (tuple, list)):
        total = _loss(out[0], y[0])
        for o, t in zip(out[1:], y[1:]):
            total = total + _loss(o, t)
        return total
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


def _optimizer(model, name):
    params = [p for p in model.parameters() if p.requires_grad]
    if name == "adam":
        return torch.optim.Adam(params, lr=1e-3)
    return torch.optim.SGD(params, lr=1e-3, momentum=0.9 if name == "momentum" else 0.0)


def _step(model, opt, x, y):
    with _autocast():
        out = model(x)
        loss = _loss(out, y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return float(loss.detach())


def _held(model, opt, x, y) -> int:
    """Bytes of the unique storages alive before the step."""
    seen, total = set(), 0
    tensors = list(model.parameters()) + list(model.buffers()) + [x] + (list(y) if isinstance(y, tuple) else [y])
    for st in opt.state.values():
        tensors += [v for v in st.values() if torch.is_tensor(v)]
    for t in tensors:
        s = t.untyped_storage()
        if s.data_ptr() not in seen:
            seen.add(s.data_ptr())
            total += s.nbytes()
    return total


def _before_third_step(name: str, optimizer: str, batch: int):
    """The module, its optimizer and its batch after two training steps on one thread: the third
    step is the one measured (Adam's state exists by then)."""
    torch.set_num_threads(1)
    model, x, y = build(name, batch)
    opt = _optimizer(model, optimizer)
    for _ in range(2):
        _step(model, opt, x, y)
    gc.collect()
    return model, opt, x, y


def allocator_peak(fn) -> tuple[int, int]:
    """(peak, end) of the running sum of the CPU allocator's alloc / free events while `fn()` runs
    (`torch.profiler` with `profile_memory=True`), events in the order they happened: what a step
    allocates beyond the bytes held before it, at its peak and when it returns."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    ev = sorted((e.start_ns(), i, e.nbytes()) for i, e in enumerate(prof.profiler.kineto_results.events())
                if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU)
    run = peak = 0
    for _, _, n in ev:
        run += n
        peak = max(peak, run)
    return peak, run


def measure(name: str, optimizer: str, batch: int) -> dict:
    model, opt, x, y = _before_third_step(name, optimizer, batch)
    held = _held(model, opt, x, y)
    peak, run = allocator_peak(lambda: _step(model, opt, x, y))
    out = {"held": held, "step_peak": peak, "peak": held + peak, "end_delta": run}
    out["memtracker"] = memtracker(model, opt, x, y)
    return out


def step_peaks(name: str, optimizer: str, batch: int, steps: int) -> list[int]:
    """The peak of each of the first `steps` training steps, measured as `measure` measures the third
    (held bytes + the allocator events' running peak): a network whose steps differ after the second
    draws something that changes what runs (what `every_layer` sets off, or one it does not know)."""
    torch.set_num_threads(1)
    model, x, y = build(name, batch)
    opt = _optimizer(model, optimizer)
    out = []
    for _ in range(steps):
        gc.collect()
        held = _held(model, opt, x, y)
        out.append(held + allocator_peak(lambda: _step(model, opt, x, y))[0])
    return out


def unread_parameters(name: str, batch: int) -> list[tuple[str, int]]:
    """(name, bytes) of each parameter a forward and backward leave without a gradient, frozen ones
    made trainable for it: modules the forward never enters (LUKE's entity embeddings under a
    word-only input). Eager holds their bytes all step; with no gradient Adam keeps no state for
    them; an export cannot size them (a dynamo file names them, a TorchScript file drops them)."""
    torch.set_num_threads(1)
    model, x, y = build(name, batch)
    frozen = {n for n, p in model.named_parameters() if not p.requires_grad}
    for p in model.parameters():  # a frozen parameter the forward reads then gets a gradient too
        p.requires_grad_(True)
    with _autocast():
        loss = _loss(model(x), y)
    loss.backward()
    return [(n + (" (frozen)" if n in frozen else ""), p.numel() * p.element_size())
            for n, p in model.named_parameters() if p.grad is None]


def memtracker(model, opt, x, y) -> dict:
    from torch.distributed._tools.mem_tracker import MemTracker

    mt = _frozen_hooked(MemTracker(), model)
    try:
        mt.track_external(model, opt, x, *(y if isinstance(y, tuple) else (y,)))
        with mt:
            _step(model, opt, x, y)
    except RuntimeError as e:
        return {"error": str(e).splitlines()[0]}
    snap = mt.get_tracker_snapshot("peak")
    dev = next(iter(snap))
    return {str(k): int(v) for k, v in snap[dev].items()}


class _NoHook:
    def remove(self):
        pass


def _frozen_hooked(mt, model):
    """MemTracker hooks every parameter's gradient, which fails on a frozen one (LoRA): mark those as
    hooked already (a private table of torch 2.14's MemTracker; dev-only)."""
    for prm in model.parameters():
        if not prm.requires_grad:
            mt._param_to_grad_hook_handles[prm] = (_NoHook(), _NoHook())
    return mt


def memtracker_peak(name: str, optimizer: str, batch: int) -> dict:
    """What MemTracker holds at its peak on the third step: the op running then, and each tensor
    storage (bytes, MemTracker's category, the op that made it). Hooks private parts of torch 2.14's
    MemTracker (dev-only)."""
    from torch.distributed._tools import mem_tracker as MT

    model, opt, x, y = _before_third_step(name, optimizer, batch)
    cur, best = ["(before any op)"], {"total": -1}

    class Tracker(MT.MemTracker):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            cur[0] = str(func)
            return super().__torch_dispatch__(func, types, args, kwargs)

        def _update_peak_stats(self, peak_state):
            super()._update_peak_stats(peak_state)
            for snap in self._curr_mem_snap.values():
                if snap[MT._TOTAL_KEY] > best["total"]:
                    best.update(total=snap[MT._TOTAL_KEY], op=cur[0], live=sorted(
                        ((w.mem_consumed, str(w.reftype).split(".")[-1], getattr(w, "made_by", "(held)"))
                         for w, _ in self._WINFO.values()), key=lambda t: -t[0]))

    create = MT._WeakRefInfo.create_winfo

    def create_noting(st, device, reftype, callback=None):  # each storage notes the op that made it
        made = create(st, device, reftype, callback)
        made[0].made_by = cur[0]
        return made

    MT._WeakRefInfo.create_winfo = staticmethod(create_noting)
    try:
        mt = _frozen_hooked(Tracker(), model)
        mt.track_external(model, opt, x, *(y if isinstance(y, tuple) else (y,)))
        with mt:
            _step(model, opt, x, y)
    finally:
        MT._WeakRefInfo.create_winfo = create
    return best


def phase_peaks(name: str, optimizer: str, batch: int) -> dict:
    """torch's peak in the forward pass (with the loss) and in backward plus `optimizer.step()`, each
    the bytes held before the step plus the running sum of the allocator's events up to there: where
    two peaks are close, which one wins decides the split at the peak."""
    from torch.profiler import ProfilerActivity, profile

    model, opt, x, y = _before_third_step(name, optimizer, batch)
    held = _held(model, opt, x, y)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        with torch.profiler.record_function("memplan::forward"), _autocast():
            loss = _loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    res = prof.profiler.kineto_results
    fwd_end = next(e.end_ns() for e in res.events() if e.name() == "memplan::forward")
    run, peaks = 0, {"forward": 0, "backward": 0}
    for t, n in sorted((e.start_ns(), e.nbytes()) for e in res.events()
                       if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU):
        run += n
        part = "forward" if t <= fwd_end else "backward"
        peaks[part] = max(peaks[part], run)
    return {k: held + v for k, v in peaks.items()}


# ---- memplan ---------------------------------------------------------------------------------

OPTIMIZE = True  # the dynamo exporter's optimizer (--no-optimize: off)


def export(name: str, batch: int, path: str, dynamo: bool = False, eval_mode: bool = False) -> None:
    """TorchScript exporter in training mode (BatchNorm and Dropout as they train), or in eval mode
    (`eval_mode`: BatchNorm folded into Conv, Dropout gone), or the dynamo exporter (`dynamo`)."""
    import shutil
    import warnings

    if name in FILES:
        shutil.copyfile(os.path.join(ROOT, FILES[name]), path)
        return
    model, x, _ = build_float32(_seq.EXPORT_AS.get(name, name), batch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            if eval_mode:  # --dynamo --eval-export: the dynamo exporter on the module in eval mode
                model.eval()
            torch.onnx.export(model, (x,), path, dynamo=True, external_data=False, optimize=OPTIMIZE)
        elif eval_mode:
            model.eval()
            torch.onnx.export(model, (x,), path, dynamo=False)
        else:
            torch.onnx.export(model, (x,), path, dynamo=False, training=torch.onnx.TrainingMode.TRAINING,
                              do_constant_folding=False)


def memplan_cmd() -> list[str]:
    """The interpreter that runs memplan: $MEMPLAN_PYTHON, else the repository's .venv, else this one."""
    venv = os.path.join(ROOT, ".venv", "bin", "python")
    py = os.environ.get("MEMPLAN_PYTHON") or (venv if os.path.exists(venv) else sys.executable)
    return [py, "-m", "memplan_cli"]


def predict(path: str, optimizer: str, batch: int, flags=()) -> dict:
    prec = () if PRECISION == "32-true" else ("--precision", PRECISION)
    r = subprocess.run(memplan_cmd() + ["analyze", path, "-p", "torch", "-b", str(batch), "-O", optimizer,
                                        "-l", "cce", "-f", "json", *prec, *flags], capture_output=True, text=True,
                       cwd=ROOT)
    if r.returncode != 0:
        return {"error": (r.stderr or r.stdout).strip().splitlines()[-1]}
    doc = json.loads(r.stdout)
    return doc.get("figures", {}).get("torch", {}) | {"planned": doc["totals"]["planned"]}


# MemTracker's categories -> the profile's split (profiles/torch/figures.py PARTS)
MT_PARTS = {"parameters": ("PARAM", "BUFFER"), "optimizer": ("OPT",), "gradients": ("GRAD",),
            "activations": ("ACT",), "temporaries": ("TEMP",), "batch": ("OTH",)}


def split_error(split, mt) -> dict | None:
    """Per part: (profile - MemTracker) / MemTracker's part, and over MemTracker's total; None when
    either side is missing."""
    if not split or "Total" not in mt:
        return None
    out = {}
    for part, keys in MT_PARTS.items():
        m = sum(mt.get(f"_MemRefType.{k}", 0) for k in keys)
        p = split.get(part, 0)
        out[part] = {"profile": p, "memtracker": m, "of_part": (p - m) / m if m else (0.0 if p == 0 else None),
                     "of_total": (p - m) / mt["Total"]}
    return out


def run(names, optimizers, batches, dynamo=False, eval_mode=False, cache=None, exports=None) -> list[dict]:
    """`cache`: a JSON file of earlier measurements (torch's side only: the same module, optimizer and
    batch measure the same), read and extended, so that re-checking the profile re-measures nothing.
    `exports`: a folder that keeps the exports (one per module, batch and exporter) and reuses them, so
    that re-checking the profile re-exports nothing either."""
    rows = []
    seen = {}
    if cache and os.path.exists(cache):
        with open(cache) as f:
            seen = json.load(f)
    kind = ("dyn" if dynamo else "ts") + ("_eval" if eval_mode else "") + ("" if OPTIMIZE else "_noopt")
    if exports:  # a missing folder would fail every export as if the exporter could not take the module
        os.makedirs(exports, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            for b in batches:
                path = os.path.join(exports or tmp, f"{name}_b{b}_{kind}.onnx")
                try:
                    if not (exports and os.path.exists(path)):
                        part = path[:-len(".onnx")] + ".part.onnx"  # a killed export leaves no file
                        export(name, b, part, dynamo, eval_mode)
                        os.replace(part, path)
                except Exception as e:  # an exporter that cannot take the module: said, not fatal
                    line = -1
                    while e.__cause__ is not None:  # torch.onnx's ConversionError: why is its cause's first line
                        e, line = e.__cause__, 0
                    why = (str(e).strip().splitlines() or [type(e).__name__])[line][:200]
                    print(f"{name:18s} b{b:<3d} export failed: {type(e).__name__}: {why}", flush=True)
                    rows += [{"module": name, "family": ZOO[name][0], "export": kind, "optimizer": o, "batch": b,
                              "export_error": f"{type(e).__name__}: {why}"} for o in optimizers]
                    continue
                for o in optimizers:
                    key = _measured_key(name, o, b)
                    m = seen.get(key) or measure(name, o, b)
                    if cache and key not in seen:
                        seen[key] = m
                        with open(cache, "w") as f:
                            json.dump(seen, f, indent=1, sort_keys=True)
                    p = predict(path, o, b, FLAGS.get(name, ()))
                    row = {"module": name, "family": ZOO[name][0], "export": kind, "optimizer": o, "batch": b, **m,
                           "profile": p}
                    if PRECISION != "32-true":
                        row["precision"] = PRECISION
                        row["memplan_planned"] = predict_memplan(path, o, b, FLAGS.get(name, ()))
                    if "peak" in p:
                        row["error"] = p["peak"] / m["peak"] - 1
                    row["split_error"] = split_error((p.get("tensors") or {}).get("split"), m["memtracker"])
                    rows.append(row)
                    print(_line(row), flush=True)
    return rows


def _line(r) -> str:
    p = r["profile"]
    pk = p.get("peak")
    err = f"{100 * r['error']:+6.2f}%" if "error" in r else "   n/a "
    mt = r["memtracker"]
    se = r.get("split_error")
    worst = "split n/a"
    if se:
        k, v = max(se.items(), key=lambda kv: abs(kv[1]["of_total"]))
        worst = f"split worst {k} {100 * v['of_total']:+.2f}% of total"
    return (f"{r['module']:18s} {r['optimizer']:4s} b{r['batch']:<3d} torch {r['peak']:>12,d}  "
            f"memtracker {mt.get('Total', 0):>12,d}  profile {pk if pk is not None else p.get('error', '?')!s:>12}  {err}"
            f"  {worst}")


def markdown(rows) -> str:
    out = ["| module | family | optimizer | batch | torch allocator peak | `--profile torch` | error | MemTracker peak | "
           "profile tensor peak | error | largest split gap (of MemTracker's total) |",
           "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        if "export_error" in r:
            why = re.split(r" to ONNX| is not supported", r["export_error"])[0].split(": ", 1)[-1]
            out.append(f"| {r['module']} | {r['family']} | {r['optimizer']} | {r['batch']} | not exported: "
                       f"{why} |  |  |  |  |  |  |")
            continue
        p, mt = r["profile"], r["memtracker"]
        if "peak" not in p:
            why = re.match(r"op #\d+ \S+ \([^)]*\)(?: \([^)]*\))?:? ?(.*)", p.get("error", "?").split("torch profile: ")[-1])
            if not why:  # not the profile's refusal: memplan's own error, after the file's name
                why = re.match(r"(.*)", p.get("error", "?").split(".onnx: ")[-1])
            why = re.split(r"[:,]", why.group(1) if why else "?")[0]
            out.append(f"| {r['module']} | {r['family']} | {r['optimizer']} | {r['batch']} | {r['peak']:,d} | "
                       f"refused: {why} |  |  |  |  |  |")
            continue
        tp = (p.get("tensors") or {}).get("peak")
        mtt = mt.get("Total")
        se = r.get("split_error")
        worst = "n/a"
        if se:
            k, v = max(se.items(), key=lambda kv: abs(kv[1]["of_total"]))
            worst = f"{k} {100 * v['of_total']:+.2f} %"
        terr = f"{100 * (tp / mtt - 1):+.2f} %" if tp and mtt else "n/a"
        out.append(f"| {r['module']} | {r['family']} | {r['optimizer']} | {r['batch']} | {r['peak']:,d} | "
                   f"{p.get('peak', 0):,d} | {100 * r.get('error', float('nan')):+.2f} % | "
                   f"{mtt if mtt is None else format(mtt, ',d')} | {tp if tp is None else format(tp, ',d')} | {terr} | "
                   f"{worst} |")
    return "\n".join(out)


def precision_markdown(rows) -> str:
    """The --precision table: PyTorch's measured peak, `--profile torch` and its error, memplan's own plan
    and its ratio to PyTorch's peak (issue 43's target: at most 0.9)."""
    out = ["| module | family | precision | optimizer | batch | torch allocator peak | `--profile torch` | error | "
           "memplan planned | memplan / torch |", "|---|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if "export_error" in r:
            continue
        p = r["profile"]
        msg = p.get("error", "?").split("torch profile: ")[-1]
        why = re.split(r"[;,]", msg.split(": ", 1)[-1] if "under --precision" in msg else msg)[0]
        prof = f"{p['peak']:,d}" if "peak" in p else f"refused: {why}"
        err = f"{100 * r['error']:+.2f} %" if "error" in r else ""
        mp = r.get("memplan_planned")
        ratio = f"{mp / r['peak']:.3f}" if mp else "n/a"
        out.append(f"| {r['module']} | {r['family']} | {r.get('precision', '32-true')} | {r['optimizer']} | {r['batch']} | "
                   f"{r['peak']:,d} | {prof} | {err} | {format(mp, ',d') if mp else 'n/a'} | {ratio} |")
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("modules", nargs="*", help=f"zoo modules (default: all but {', '.join(HEAVY)}): {', '.join(ZOO)}")
    ap.add_argument("--set", choices=sorted(SETS), help="run this set of modules (seq: transformer and sequence "
                                                        "networks; tc: more Hugging Face families; convscratch: "
                                                        "convolution networks; convnext: channels-last convolutions; wideconv: "
                                                        "kernels 14 wide and more)")
    ap.add_argument("-b", "--batch", type=int, action="append", help="batch sizes (default 4 and 16)")
    ap.add_argument("-O", "--optimizer", action="append", choices=("sgd", "momentum", "adam"))
    ap.add_argument("--dynamo", action="store_true", help="export with the dynamo exporter")
    ap.add_argument("--no-optimize", action="store_true",
                    help="with --dynamo: torch.onnx.export(..., optimize=False), the exporter's optimizer off")
    ap.add_argument("--eval-export", action="store_true",
                    help="export in eval mode (TorchScript): BatchNorm folded, Dropout gone; torch still trains")
    ap.add_argument("--vision", action="store_true", help="add the vision networks (devtools/torch_vision_zoo.py)")
    ap.add_argument("--cache", metavar="MEASURED.json",
                    help="reuse (and add to) torch's measurements kept in this file")
    ap.add_argument("--exports", metavar="DIR", help="keep the exports in this folder and reuse them")
    ap.add_argument("--memtracker-peak", action="store_true",
                    help="print what MemTracker holds at its peak (one module, optimizer and batch)")
    ap.add_argument("--unread", action="store_true",
                    help="print the parameters (frozen ones included) a forward and backward leave without a gradient, "
                         "and their bytes "
                         "(eager holds them; no op of an export reads them)")
    ap.add_argument("--steps", type=int, metavar="N",
                    help="print the peak of each of the first N training steps (one module, optimizer and batch): "
                         "steps after the second that differ draw what runs")
    ap.add_argument("--phases", action="store_true",
                    help="print torch's peak in forward and in backward + step (one module, optimizer and batch)")
    ap.add_argument("--precision", choices=PRECISIONS, default="32-true",
                    help="train in this precision (memplan's --precision names): bf16-mixed under torch.autocast, "
                         "bf16-true after model.to(torch.bfloat16); the export is float32 either way")
    ap.add_argument("--json", help="write the rows as JSON here")
    ap.add_argument("--markdown", metavar="ROWS.json", help="print the rows of an earlier --json run as a table")
    a = ap.parse_args(argv)
    global OPTIMIZE, PRECISION
    OPTIMIZE = not a.no_optimize
    PRECISION = a.precision
    if a.markdown:
        with open(a.markdown) as f:
            rows = json.load(f)
        print(precision_markdown(rows) if any("precision" in r for r in rows) else markdown(rows))
        return
    if a.memtracker_peak:
        p = memtracker_peak(a.modules[0], (a.optimizer or ["sgd"])[0], (a.batch or [4])[0])
        print(f"MemTracker peak {p['total']:,d} B during {p['op']}")
        for nb, kind, made_by in p["live"]:
            if kind not in ("PARAM", "BUFFER", "OPT"):
                print(f"  {nb:>12,d}  {kind:5s}  made by {made_by}")
        return
    if a.unread:
        for m in a.modules:
            un = unread_parameters(m, (a.batch or [4])[0])
            print(f"{m}: {len(un)} parameter(s) without a gradient, {sum(b for _, b in un):,d} B")
            for n, b in un:
                print(f"  {b:>12,d}  {n}")
        return
    if a.steps:
        for m in a.modules:
            peaks = step_peaks(m, (a.optimizer or ["sgd"])[0], (a.batch or [4])[0], a.steps)
            print(f"{m}: " + " ".join(f"{p:,d}" for p in peaks)
                  + ("" if len(set(peaks[1:])) <= 1 else "  (steps after the first differ)"))
        return
    if a.phases:
        p = phase_peaks(a.modules[0], (a.optimizer or ["sgd"])[0], (a.batch or [4])[0])
        print(f"forward peak {p['forward']:,d} B, backward + step peak {p['backward']:,d} B")
        return
    names = list(a.modules) + (list(VISION) if a.vision else []) + SETS.get(a.set, [])
    rows = run(names or DEFAULT, a.optimizer or ["sgd", "adam"], a.batch or [4, 16], a.dynamo, a.eval_export,
               a.cache, a.exports)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    rows_ok = [r for r in rows if "export_error" not in r]
    bad = [r for r in rows_ok if abs(r.get("error", 1)) > 0.03]
    print(f"{len(rows_ok) - len(bad)}/{len(rows_ok)} within 3 %"
          + (f" ({len(rows) - len(rows_ok)} not exported)" if len(rows_ok) < len(rows) else ""))


if __name__ == "__main__":
    main()
