"""Small networks built around the reductions PyTorch code uses (issue 39): a z-loss (logsumexp of the
logits), an MoE router's z-loss, attention with a logsumexp gate (attention sinks), L2-normalised
features and classifier weights (F.normalize, a cosine classifier), a norm-clipped embedding, global
max pooling (amax, and max over a dim), a product of gates (prod) and an L1 norm of activations.
Each is written with torch alone, so that the reductions' torch facts are checked on networks built
here (TorchScript and dynamo exports), not only on the drawn ones.
Dev-only, needs torch.

    python devtools/torch_reduce_zoo.py red_zloss red_lse_attn -b 4 -O adam [--dynamo]
"""
from __future__ import annotations

import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IDS = ("ids", 32, 1000)
SEQ = (32, 64)
FEAT = (256,)


class ZLossLM(nn.Module):
    """Token embedding, an MLP, a 1000-way head; the logits shifted by a z-loss term (1e-4 logsumexp²,
    PaLM's auxiliary loss), so that its gradient runs through logsumexp's backward."""

    def __init__(self, vocab=1000, d=64):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
        self.head = nn.Linear(d, vocab)

    def forward(self, ids):
        h = self.emb(ids)
        logits = self.head(h + self.mlp(h))
        z = torch.logsumexp(logits, dim=-1)
        return logits - 1e-4 * z.pow(2).unsqueeze(-1)


class MoEZLoss(nn.Module):
    """A dense mixture of experts: a router's softmax weights over 8 expert MLPs; the router's z-loss
    (logsumexp of its logits, squared, averaged: ST-MoE's) added to the head's output."""

    def __init__(self, d=64, experts=8, classes=10):
        super().__init__()
        self.inp = nn.Linear(SEQ[1], d)
        self.router = nn.Linear(d, experts)
        self.experts = nn.ModuleList(nn.Sequential(nn.Linear(d, d), nn.GELU()) for _ in range(experts))
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        h = self.inp(x)
        r = self.router(h)
        z = torch.logsumexp(r, dim=-1).pow(2).mean()
        w = F.softmax(r, dim=-1)
        y = torch.stack([e(h) for e in self.experts], dim=-2)
        h = h + (w.unsqueeze(-1) * y).sum(-2)
        return self.head(h) + 1e-3 * z


class SinkAttention(nn.Module):
    """Causal attention whose output is scaled by sigmoid(logsumexp(scores) - sink) per head and query:
    an extra softmax-denominator logit (attention sinks), as granite_swa writes it."""

    def __init__(self, d, heads):
        super().__init__()
        self.h, self.hd = heads, d // heads
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.sinks = nn.Parameter(torch.zeros(heads))

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = (p(x).view(b, s, self.h, self.hd).transpose(1, 2) for p in (self.q, self.k, self.v))
        a = q @ k.transpose(-1, -2) * self.hd ** -0.5
        a = a + torch.full((s, s), -1e4).triu(1)
        gate = torch.sigmoid(torch.logsumexp(a, dim=-1) - self.sinks.view(1, -1, 1))
        y = (F.softmax(a, dim=-1) @ v) * gate.unsqueeze(-1)
        return self.o(y.transpose(1, 2).reshape(b, s, d))


class SinkLM(nn.Module):
    def __init__(self, d=64, heads=4, layers=2, classes=10):
        super().__init__()
        self.inp = nn.Linear(SEQ[1], d)
        self.blocks = nn.ModuleList(SinkAttention(d, heads) for _ in range(layers))
        self.norms = nn.ModuleList(nn.LayerNorm(d) for _ in range(layers))
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        h = self.inp(x)
        for blk, n in zip(self.blocks, self.norms):
            h = h + blk(n(h))
        return self.head(h)


class CosineClassifier(nn.Module):
    """An MLP's features and the classifier's weights, each L2-normalised (F.normalize), their scaled
    dot product the logits; one more F.normalize over the batch's features' channel groups (a
    non-last axis)."""

    def __init__(self, d=256, classes=10):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(FEAT[0], 512), nn.ReLU(), nn.Linear(512, d))
        self.w = nn.Parameter(torch.randn(classes, d) * 0.05)

    def forward(self, x):
        f = self.mlp(x)
        f = F.normalize(f.view(-1, 16, f.shape[-1] // 16), dim=1).reshape(f.shape)
        f = F.normalize(f, dim=-1)
        return 16.0 * f @ F.normalize(self.w, dim=-1).t()


class NormClippedEmbedding(nn.Module):
    """An embedding whose rows are scaled down to norm at most 1 on the fly (e * 1 / max(|e|, 1)), an
    MLP, a head."""

    def __init__(self, vocab=1000, d=64, classes=10):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
        self.head = nn.Linear(d, classes)

    def forward(self, ids):
        e = self.emb(ids)
        e = e / e.norm(dim=-1, keepdim=True).clamp(min=1.0)
        return self.head(e + self.mlp(e))


class MaxPoolTokens(nn.Module):
    """Token MLPs, then a global max over the sequence: `amax` (True) or `max(dim).values` (False), and
    over the channels of each token for a per-token scale."""

    def __init__(self, use_amax=True, d=128, classes=10):
        super().__init__()
        self.use_amax = use_amax
        self.mlp = nn.Sequential(nn.Linear(SEQ[1], d), nn.GELU(), nn.Linear(d, d))
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        h = self.mlp(x)
        if self.use_amax:
            h = h * torch.sigmoid(h.amax(-1, keepdim=True))
            p = h.amax(1)
        else:
            h = h * torch.sigmoid(h.max(-1, keepdim=True).values)
            p = h.max(1).values
        return self.head(p)


class ProdGates(nn.Module):
    """Token features gated by the product of 4 sigmoid gates per channel group (prod over a dim)."""

    def __init__(self, d=128, classes=10):
        super().__init__()
        self.inp = nn.Linear(SEQ[1], d)
        self.gates = nn.Linear(d, 4 * d)
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        h = self.inp(x)
        b, s, d = h.shape
        g = torch.sigmoid(self.gates(h)).view(b, s, d, 4).prod(-1)
        return self.head(F.gelu(h * g))


class _TokenMLP(nn.Module):
    """A token MLP's three linears (inp: the sequence's features -> d, mid: d -> d, head: d -> classes);
    each subclass puts its reduction between them in forward."""

    def __init__(self, d, classes=10):
        super().__init__()
        self.inp = nn.Linear(SEQ[1], d)
        self.mid = nn.Linear(d, d)
        self.head = nn.Linear(d, classes)


class L1Norm(_TokenMLP):
    """Token features divided by their L1 norm (torch.norm p=1, linalg.vector_norm of order 1)."""

    def __init__(self, d=128, classes=10):
        super().__init__(d, classes)

    def forward(self, x):
        h = F.gelu(self.inp(x))
        h = h / (h.norm(p=1, dim=-1, keepdim=True) + 1e-6) * h.shape[-1]
        return self.head(F.gelu(self.mid(h)))


class NormalizedTokens(_TokenMLP):
    """Token features L2-normalised over channels (F.normalize, dim -1) and over the sequence (dim 1,
    cross-covariance attention's q and k), wide enough that the norms' backward holds the peak."""

    def __init__(self, d=256, classes=10):
        super().__init__(d, classes)

    def forward(self, x):
        h = F.normalize(self.inp(x), dim=-1) * 16.0
        h = F.gelu(self.mid(h))
        return self.head(F.normalize(h, dim=1) + h)


class LogSumExpPool(_TokenMLP):
    """log_softmax written as `x - logsumexp(x, -1, keepdim=True)` over a token MLP's channels, then a
    logsumexp pooling over the sequence (a non-last axis)."""

    def __init__(self, d=256, classes=10):
        super().__init__(d, classes)

    def forward(self, x):
        h = self.inp(x)
        h = h - torch.logsumexp(h, dim=-1, keepdim=True)
        h = F.gelu(self.mid(h))
        return self.head(torch.logsumexp(h, dim=1))


class ManualSoftmax(_TokenMLP):
    """Softmax and logsumexp written out, as hand-written attention does: `e = (x - x.max(-1,
    keepdim=True)[0]).exp(); e / e.sum(-1, keepdim=True)` (max.dim, gradient through it), and a
    logsumexp over the channels with the max detached (amax; eager frees its backward node at once)."""

    def __init__(self, d=128, classes=10):
        super().__init__(d, classes)

    def forward(self, x):
        h = self.inp(x)
        e = (h - h.max(-1, keepdim=True)[0]).exp()
        h = F.gelu(self.mid(e / e.sum(-1, keepdim=True)))
        m = h.amax(-1, keepdim=True).detach()
        lse = (h - m).exp().sum(-1, keepdim=True).log() + m
        return self.head(h - lse)


class VectorQuantizer(nn.Module):
    """VQ-VAE's quantizer: squared distances to a codebook (a sum over channels), the nearest code
    (argmin: no gradient), its row gathered, the codebook loss against the detached features, and the
    straight-through estimator `z + (q - z).detach()`."""

    def __init__(self, d=64, codes=128, classes=10):
        super().__init__()
        self.inp = nn.Linear(SEQ[1], d)
        self.codebook = nn.Parameter(torch.randn(codes, d) * 0.1)
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        z = self.inp(x)
        dist = (z.unsqueeze(-2) - self.codebook).pow(2).sum(-1)
        q = self.codebook[dist.argmin(-1)]
        codebook_loss = (q - z.detach()).pow(2).mean()
        q = z + (q - z).detach()
        return self.head(q) + codebook_loss


class MaxWithIndices(nn.Module):
    """Global max pooling over the sequence that also uses where the maxima are (`values, idx =
    h.max(1)`): the indices, as a float feature, scale the pooled values."""

    def __init__(self, d=128, classes=10):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(SEQ[1], d), nn.GELU(), nn.Linear(d, d))
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        v, i = self.mlp(x).max(1)
        return self.head(v * (1.0 + i.float() / SEQ[0]))


class MaxNormEmbedding(NormClippedEmbedding):
    """The same network with nn.Embedding(max_norm=1.0): eager renormalises the looked-up rows of the
    table in place (embedding_renorm_, without autograd) before each lookup."""

    def __init__(self, vocab=1000, d=64, classes=10):
        super().__init__(vocab, d, classes)
        self.emb = nn.Embedding(vocab, d, max_norm=1.0)

    def forward(self, ids):
        e = self.emb(ids)
        return self.head(e + self.mlp(e))


class AttentionPool(nn.Module):
    """Attention pooling: softmax weights over the tokens, the weighted sum `(a * h).sum(1)` (sum's
    backward hands an expanded gradient to the product), then a head."""

    def __init__(self, d=128, classes=10):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(SEQ[1], d), nn.GELU(), nn.Linear(d, d))
        self.score = nn.Linear(d, 1)
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        h = self.mlp(x)
        a = F.softmax(self.score(h), dim=1)
        return self.head((a * h).sum(1))


def _timm(name, **kw):
    def make():
        import timm

        return timm.create_model(name, pretrained=False, **kw)
    return make


RED = {
    "red_zloss": ("logsumexp", ZLossLM, IDS),
    "red_moe_zloss": ("logsumexp", MoEZLoss, SEQ),
    "red_lse_attn": ("logsumexp", SinkLM, SEQ),
    "red_normalize": ("l2norm", CosineClassifier, FEAT),
    "red_normclip_emb": ("l2norm", NormClippedEmbedding, IDS),
    "red_amax": ("amax", lambda: MaxPoolTokens(True), SEQ),
    "red_maxdim": ("amax", lambda: MaxPoolTokens(False), SEQ),
    "red_prod": ("prod", ProdGates, SEQ),
    "red_l1": ("l1norm", L1Norm, SEQ),
    "red_normalize_seq": ("l2norm", NormalizedTokens, SEQ),
    "red_lse_pool": ("logsumexp", LogSumExpPool, SEQ),
    "red_manual_softmax": ("amax", ManualSoftmax, SEQ),
    "red_vq": ("argmin", VectorQuantizer, SEQ),
    "red_max_indices": ("amax", MaxWithIndices, SEQ),
    "red_emb_maxnorm": ("l2norm", MaxNormEmbedding, IDS),
    "red_attn_pool": ("sum", AttentionPool, SEQ),
    # timm's fast pooling: x.amax((2, 3)) (fastmax) and its mean beside it (fastavgmax)
    "red_timm_resnet18_fastmax": ("amax", _timm("resnet18", num_classes=10, global_pool="fastmax"), (3, 64, 64)),
    "red_timm_resnet18_fastavgmax": ("amax", _timm("resnet18", num_classes=10, global_pool="fastavgmax"),
                                     (3, 64, 64)),
}

sys.path.insert(0, os.path.join(ROOT, "devtools"))
sys.path.insert(0, ROOT)
import torch_oracle as T  # noqa: E402

T.ZOO.update(RED)

if __name__ == "__main__":
    T.main()
