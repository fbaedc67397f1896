"""Small networks, one per op family the torch profile once missed on networks it was not fitted to
(issue 39): GroupNorm, hand-written attention with baddbmm / bmm and ALiBi, cross-covariance
attention, re-parameterisable BatchNorm branches, disentangled relative attention (Dropout on a
parameter), reduction-conv efficient attention, a conv-attention hybrid, a custom autograd Function
(and the same formula op by op), a norm whose `x - mean` the dynamo exporter merges, EvoNorm's
group standard deviation (`Tensor.var`), the inverse trigonometric and hyperbolic functions and
grouped convolutions (depth multipliers, small groups; channels-last and channels-first) and sdpa
with a float attn_mask (a learned bias, fixed masks of 3 and 4 dims), antialiased resizing of a
learned position table, segment reductions by `scatter_reduce` (amax / amin), and chunked linear
attention's parts (tril / triu masks, the inter-chunk scan's fills and row writes, qwen3_5_text's
gated delta rule without its export-only loop, outer products of two broadcast factors), FNet's
Fourier token mixing (`torch.fft.fftn(x).real`), weight norm (`_weight_norm_interface`), F.fold
(`aten.col2im`), a score branch read only through its top-k indices (DeepSeek-V3.2's
sparse-attention indexer), learned queries viewed and expanded over every position (Inkling's
block attention residual), batched matmuls whose operands broadcast over batch dims (a lambda
layer), depthwise Conv1d and grouped 1x1 kernels on eager's slow path (`fam_dw_conv1d`,
`fam_slow_grouped`), grouped transposed convolutions (`fam_tconv_grouped` unstrided; `fam_tconv_upsample` strided,
depthwise, 4 channels per group), transposed and dilated convolutions on eager's slow kernels
(`fam_tconv_slow`, `fam_dilated_slow`; 3-D: `fam_conv3d_slow`, `fam_conv3d_dilated`;
grouped 3-D ones on oneDNN, named as estimated: `fam_conv3d_grouped`),
ConvTranspose1d (`fam_tconv1d`), transposed
kernels past 4 and strides past 2 (`fam_tconv_large`, `fam_tconv_vocoder`,
`fam_tconv_hifi`), padded strided 1x1 kernels
(`fam_padded_1x1`), 1-D and 3-D upsampling (`fam_upsample_1d`,
`fam_upsample_3d`), heads with several outputs or a tied embedding (`fam_heads_*`: the oracle trains a tuple
of outputs as the sum of one cross-entropy each) and a learned row written where the ids match
(`fam_masked_write`, a boolean-mask index_put), `torch.tensor_split` at a list of indices
(`fam_tensor_split`: TorchScript writes it as a Loop over a sequence), and GPT-2-style attention
slicing a causal table held as a non-persistent buffer, or making the mask each forward (`fam_causal_*`),
and dense stages whose cat of channels-last maps feeds a depthwise convolution (`fam_dense_cat*`).
Each is written with torch alone from the aten ops its family uses, so that the facts are checked
on networks built here and not only on the named ones (timm / transformers entries `fam_hf_*` /
`fam_timm_*` are those; torchvision video: `fam_tv_*`).
Dev-only, needs torch (timm / transformers / torchvision for the named ones).

    python devtools/torch_family_zoo.py fam_groupnorm fam_alibi -b 4 -O adam [--dynamo]
"""
from __future__ import annotations

import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class GNNet(nn.Module):
    """Conv stem, blocks of GroupNorm (1 group: PoolFormer's; 4 groups: Wav2Vec2's feature
    extractor) and a pooling token mixer, a global pool and a Linear head."""

    def __init__(self, groups=(1, 4), c=32, classes=10):
        super().__init__()
        self.stem = nn.Conv2d(3, c, 3, stride=2, padding=1)
        self.norms = nn.ModuleList(nn.GroupNorm(gr, c) for gr in groups)
        self.pool = nn.AvgPool2d(3, 1, 1, count_include_pad=False)
        self.fc = nn.ModuleList(nn.Conv2d(c, c, 1) for _ in groups)
        self.head = nn.Linear(c, classes)

    def forward(self, x):
        x = self.stem(x)
        for n, fc in zip(self.norms, self.fc):
            y = n(x)
            x = x + self.pool(y) - y
            x = x + fc(F.gelu(n(x)))
        return self.head(x.mean((2, 3)))


class GN1d(nn.Module):
    """Wav2Vec2's feature extractor head: a Conv1d, GroupNorm with one group per channel, GELU."""

    def __init__(self, c=32, classes=10):
        super().__init__()
        self.c1 = nn.Conv1d(1, c, 10, stride=5, bias=False)
        self.gn = nn.GroupNorm(c, c)
        self.c2 = nn.Conv1d(c, c, 3, stride=2, bias=False)
        self.head = nn.Linear(c, classes)

    def forward(self, x):
        x = F.gelu(self.gn(self.c1(x)))
        x = F.gelu(self.c2(x))
        return self.head(x.transpose(1, 2))


def _alibi(heads, s):
    slopes = torch.tensor([2 ** (-8 * (i + 1) / heads) for i in range(heads)])
    return slopes[:, None] * torch.arange(s)[None, :]  # (heads, S)


class AlibiAttention(nn.Module):
    """BLOOM's eager attention, written out: a fused qkv Linear, baddbmm of the ALiBi bias with q k^T,
    a float mask filled in (masked_fill with the dtype's minimum), softmax in float32, the cast back,
    bmm with v, the dense projection."""

    def __init__(self, d, heads):
        super().__init__()
        self.h, self.hd = heads, d // heads
        self.qkv = nn.Linear(d, 3 * d)
        self.dense = nn.Linear(d, d)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        b, s, d = x.shape
        h, hd = self.h, self.hd
        q, k, v = self.qkv(x).view(b, s, h, 3, hd).unbind(3)
        q = q.transpose(1, 2).reshape(b * h, s, hd)
        k = k.permute(0, 2, 3, 1).reshape(b * h, hd, s)
        v = v.transpose(1, 2).reshape(b * h, s, hd)
        alibi = _alibi(h, s).repeat(b, 1).view(b * h, 1, s).to(x.dtype)
        scores = alibi.baddbmm(batch1=q, batch2=k, beta=1.0, alpha=1.0 / math.sqrt(hd))
        scores = scores.view(b, h, s, s)
        causal = torch.triu(torch.ones(s, s, dtype=torch.bool), diagonal=1)
        scores = scores.masked_fill(causal, torch.finfo(scores.dtype).min)
        p = F.softmax(scores, dim=-1, dtype=torch.float32).to(x.dtype)
        p = self.drop(p)
        ctx = torch.bmm(p.view(b * h, s, s), v)
        ctx = ctx.view(b, h, s, hd).permute(0, 2, 1, 3).reshape(b, s, d)
        return self.dense(ctx)


class BmmAttention(nn.Module):
    """Hand-written attention on 3-D bmm: addmm projections of the flattened tokens, a float mask
    added (not filled), softmax in float32 of the scores, bmm with v."""

    def __init__(self, d, heads):
        super().__init__()
        self.h = heads
        self.w_qkv = nn.Parameter(torch.randn(d, 3 * d) * 0.05)
        self.b_qkv = nn.Parameter(torch.zeros(3 * d))
        self.o = nn.Linear(d, d)

    def forward(self, x):
        b, s, d = x.shape
        h, hd = self.h, d // self.h
        qkv = torch.addmm(self.b_qkv, x.reshape(b * s, d), self.w_qkv).view(b, s, 3, h, hd)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).reshape(3, b * h, s, hd).unbind(0)
        a = torch.bmm(q, k.transpose(1, 2)) * hd ** -0.5
        mask = torch.zeros(s, s).masked_fill(torch.ones(s, s, dtype=torch.bool).triu(1), -1e4)
        a = (a + mask).float().softmax(-1)
        y = torch.bmm(a, v).view(b, h, s, hd).transpose(1, 2).reshape(b, s, d)
        return self.o(y)


class BufferMaskAttention(nn.Module):
    """GPT's attention (openai-gpt, GPT-2 before sdpa): a causal table registered as a module buffer
    at the longest length, sliced to the sequence (a view) and applied as `w * b - 1e4 * (1 - b)`."""

    def __init__(self, d, heads, n_positions=256):
        super().__init__()
        self.h = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.o = nn.Linear(d, d)
        self.register_buffer("bias", torch.tril(torch.ones(n_positions, n_positions)).view(
            1, 1, n_positions, n_positions), persistent=False)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4).unbind(0)
        w = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d // self.h)
        m = self.bias[:, :, :s, :s]
        w = (w * m + -1e4 * (1 - m)).softmax(-1)
        return self.o(torch.matmul(w, v).transpose(1, 2).reshape(b, s, d))


class SdpaAttention(nn.Module):
    """timm's and Hugging Face's attention through F.scaled_dot_product_attention, with its own
    dropout_p while training (`attn_drop`) and a Dropout after the projection (`proj_drop`): with
    attn_drop 0 the CPU takes the fused flash kernel, above 0 the math path (op by op)."""

    def __init__(self, d, heads, attn_drop=0.1, causal=False):
        super().__init__()
        self.h, self.p, self.causal = heads, attn_drop, causal
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.proj_drop = nn.Dropout(0.1)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4).unbind(0)
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.p if self.training else 0.0,
                                           is_causal=self.causal)
        return self.proj_drop(self.proj(y.transpose(1, 2).reshape(b, s, d)))


class SdpaMaskAttention(nn.Module):
    """Attention through F.scaled_dot_product_attention with a float attn_mask of its own (no dropout):
    `mask` "bias" a learned relative-position bias table gathered by a buffer of indices, (heads, S, S)
    (Swin's, TinyViT's: the mask requires grad), "bias4d" the same as (1, heads, S, S), "fixed3d" a
    fixed (heads, S, S) buffer, "fixed4d" a fixed (1, 1, S, S) buffer. The CPU flash kernel takes a mask
    of 2 dims or of 4 (batch and heads or 1) that needs no gradient; the others run sdpa's math path."""

    def __init__(self, d, heads, mask="bias", s=16):
        super().__init__()
        self.h, self.mask = heads, mask
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        pos = torch.arange(s)
        self.register_buffer("idx", (pos[:, None] - pos[None, :] + s - 1), persistent=False)
        if mask.startswith("bias"):
            self.table = nn.Parameter(0.02 * torch.randn(heads, 2 * s - 1))
        else:
            self.register_buffer("fixed", torch.randn(heads if mask == "fixed3d" else 1, s, s) * 0.1)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4).unbind(0)
        if self.mask.startswith("bias"):
            m = self.table[:, self.idx]
            m = m.unsqueeze(0) if self.mask == "bias4d" else m
        else:
            m = self.fixed.unsqueeze(0) if self.mask == "fixed4d" else self.fixed
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=m)
        return self.proj(y.transpose(1, 2).reshape(b, s, d))


class AAResizeNet(nn.Module):
    """timm's ViT with a dynamic image size: a learned position table on its own grid, resampled each step
    to the input's patch grid with antialiased bicubic (or bilinear) interpolation, added to the patch
    embedding; a pooled head."""

    def __init__(self, mode="bicubic", grid=10, d=64, patch=8, classes=10):
        super().__init__()
        self.mode, self.grid = mode, grid
        self.embed = nn.Conv2d(3, d, patch, patch)
        self.pos = nn.Parameter(0.02 * torch.randn(1, d, grid, grid))
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        x = self.embed(x)
        x = x + F.interpolate(self.pos, size=x.shape[-2:], mode=self.mode, align_corners=False, antialias=True)
        x = x.flatten(2).transpose(1, 2)
        return self.head((x + self.mlp(x)).mean(1))


class AttnLM(nn.Module):
    """Pre-norm blocks of `attn`, a GELU MLP, a LayerNorm and a head over an embedded sequence
    (`act`, `norm`: the MLP's activation and the norms, modules)."""

    def __init__(self, attn, d=64, heads=4, layers=2, classes=50, act=nn.GELU, norm=nn.LayerNorm):
        super().__init__()
        self.ln1 = nn.ModuleList(norm(d) for _ in range(layers))
        self.ln2 = nn.ModuleList(norm(d) for _ in range(layers))
        self.att = nn.ModuleList(attn(d, heads) for _ in range(layers))
        self.mlp = nn.ModuleList(nn.Sequential(nn.Linear(d, 4 * d), act(), nn.Linear(4 * d, d))
                                 for _ in range(layers))
        self.ln = norm(d)
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        for l1, a, l2, m in zip(self.ln1, self.att, self.ln2, self.mlp):
            x = x + a(l1(x))
            x = x + m(l2(x))
        return self.head(self.ln(x))


class StreamsAttention(nn.Module):
    """ProphetNet's ngram-attention layout: q, k and v each `view(b, s, h, d).transpose(1, 2)`, then
    `.contiguous()` (`contig`) and `reshape(b, h, -1, d)` (a view either way), cut into two streams
    along the sequence; the first stream attends by einsum, the second is mixed elementwise. With the
    call, each einsum operand is a view of the whole copy, which its bmm keeps; without, a copy of its
    stream. TorchScript writes no node for the call."""

    def __init__(self, d, heads, contig=True):
        super().__init__()
        self.h, self.contig = heads, contig
        self.qkv = nn.ModuleList(nn.Linear(d, d) for _ in range(3))
        self.o = nn.Linear(d, d)

    def forward(self, x):
        b, s, d = x.shape
        hd = d // self.h

        def heads(t):
            t = t.view(b, s, self.h, hd).transpose(1, 2)
            return (t.contiguous() if self.contig else t).reshape(b, self.h, -1, hd)

        (q1, q2), (k1, k2), (v1, v2) = (heads(lin(x)).chunk(2, dim=2) for lin in self.qkv)
        a = torch.einsum("bntc,bnsc->bnts", q1, k1).softmax(-1)
        o = torch.cat([torch.einsum("bnts,bnsc->bntc", a, v1), q2 * k2 + v2], 2)
        return self.o(o.transpose(1, 2).reshape(b, s, d))


class XCA(nn.Module):
    """Cross-covariance attention (XCiT, EdgeNeXt): q and k L2-normalised over the tokens, attention
    between channels scaled by a learnt temperature, softmax, dropout, applied to v."""

    def __init__(self, d, heads):
        super().__init__()
        self.h = heads
        self.temperature = nn.Parameter(torch.ones(heads, 1, 1))
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.h, c // self.h).permute(2, 0, 3, 4, 1)
        q, k, v = qkv.unbind(0)  # (b, h, c/h, n)
        q = F.normalize(q, dim=-1)
        k = F.normalize(k, dim=-1)
        a = (q @ k.transpose(-2, -1)) * self.temperature
        a = self.drop(a.softmax(dim=-1))
        y = (a @ v).permute(0, 3, 1, 2).reshape(b, n, c)
        return self.proj(y)


class XCANet(nn.Module):
    """EdgeNeXt's split: a conv stem, a channels-first depthwise block, then XCA over the tokens."""

    def __init__(self, c=32, heads=4, classes=10):
        super().__init__()
        self.stem = nn.Conv2d(3, c, 4, stride=4)
        self.dw = nn.Conv2d(c, c, 3, padding=1, groups=c)
        self.bn = nn.BatchNorm2d(c)
        self.ln = nn.LayerNorm(c)
        self.xca = XCA(c, heads)
        self.head = nn.Linear(c, classes)

    def forward(self, x):
        x = self.stem(x)
        x = x + F.gelu(self.bn(self.dw(x)))
        b, c, h, w = x.shape
        t = x.flatten(2).transpose(1, 2)
        t = t + self.xca(self.ln(t))
        return self.head(t.mean(1))


class RepBlock(nn.Module):
    """RepViT / MobileOne in training form: a 3x3 conv + BN, a 1x1 conv + BN and an identity BN of the
    same input, summed; then a channel mixer."""

    def __init__(self, c):
        super().__init__()
        self.c3 = nn.Sequential(nn.Conv2d(c, c, 3, padding=1, groups=c, bias=False), nn.BatchNorm2d(c))
        self.c1 = nn.Sequential(nn.Conv2d(c, c, 1, groups=c, bias=False), nn.BatchNorm2d(c))
        self.idn = nn.BatchNorm2d(c)
        self.mix = nn.Sequential(nn.Conv2d(c, 2 * c, 1, bias=False), nn.BatchNorm2d(2 * c), nn.GELU(),
                                 nn.Conv2d(2 * c, c, 1, bias=False), nn.BatchNorm2d(c))

    def forward(self, x):
        x = self.c3(x) + self.c1(x) + self.idn(x)
        return x + self.mix(x)


class RepNet(nn.Module):
    def __init__(self, c=32, blocks=2, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, c, 3, 2, 1, bias=False), nn.BatchNorm2d(c), nn.GELU())
        self.blocks = nn.Sequential(*[RepBlock(c) for _ in range(blocks)])
        self.head = nn.Linear(c, classes)

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)).mean((2, 3)))


class RelAttention(nn.Module):
    """DeBERTa's disentangled attention, written out: content-to-position and position-to-content
    scores gathered from the relative-position embedding (a parameter read through LayerNorm and
    Dropout), added to the content scores, softmax, dropout, bmm with v."""

    def __init__(self, d, heads, span=8):
        super().__init__()
        self.h, self.span = heads, span
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.o = nn.Linear(d, d)
        self.drop = nn.Dropout(0.1)

    def heads(self, t, b):  # (b, m, d) -> (b h, m, hd)
        hd = t.shape[-1] // self.h
        return t.view(b, -1, self.h, hd).transpose(1, 2).reshape(b * self.h, -1, hd)

    def positions(self, proj, rel, b):
        """The relative table projected by `proj`, per head over the batch: (b h, 2 span, hd)."""
        return self.heads(proj(rel).unsqueeze(0).expand(b, -1, -1), b)

    def forward(self, x, rel):
        b, s, d = x.shape
        h, hd = self.h, d // self.h
        q, k, v = self.heads(self.q(x), b), self.heads(self.k(x), b), self.heads(self.v(x), b)
        scale = math.sqrt(hd * 3)
        a = torch.bmm(q, k.transpose(-1, -2) / scale)
        pos_k, pos_q = self.positions(self.k, rel, b), self.positions(self.q, rel, b)
        rel_pos = torch.arange(s)[:, None] - torch.arange(s)[None, :]
        idx = torch.clamp(rel_pos + self.span, 0, 2 * self.span - 1).expand(b * h, s, s)
        c2p = torch.gather(torch.bmm(q, pos_k.transpose(-1, -2)), -1, idx)
        p2c = torch.gather(torch.bmm(k, pos_q.transpose(-1, -2)), -1, idx).transpose(-1, -2)
        a = a + c2p / scale + p2c / scale
        p = self.drop(a.softmax(-1))
        y = torch.bmm(p, v).view(b, h, s, hd).transpose(1, 2).reshape(b, s, d)
        return self.o(y)


class RelLM(nn.Module):
    def __init__(self, d=64, heads=4, layers=2, span=8, classes=50):
        super().__init__()
        self.rel = nn.Embedding(2 * span, d)
        self.rel_ln = nn.LayerNorm(d)
        self.rel_drop = nn.Dropout(0.1)
        self.att = nn.ModuleList(RelAttention(d, heads, span) for _ in range(layers))
        self.ln = nn.ModuleList(nn.LayerNorm(d) for _ in range(layers))
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        rel = self.rel_drop(self.rel_ln(self.rel.weight))
        for a, ln in zip(self.att, self.ln):
            x = ln(x + a(x, rel))
        return self.head(x)


class RelDropLM(nn.Module):
    """Dropout straight on a parameter (no norm before it): the relative embedding table."""

    def __init__(self, d=64, heads=4, span=8, classes=50):
        super().__init__()
        self.rel = nn.Parameter(torch.randn(2 * span, d) * 0.02)
        self.drop = nn.Dropout(0.1)
        self.att = RelAttention(d, heads, span)
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        return self.head(x + self.att(x, self.drop(self.rel)))


class RelRepeatAttention(RelAttention):
    """DeBERTa-v2's disentangled attention with shared keys (`share_att_key`): the relative table is
    projected by the layer's own key and query linears, split into heads (view, permute, contiguous)
    and repeated over the batch (`repeat`); the relative indices are expanded over batch x heads."""

    def heads(self, t, b):  # (n, m, d) -> (n h, m, hd)
        hd = t.shape[-1] // self.h
        return t.view(t.shape[0], -1, self.h, hd).permute(0, 2, 1, 3).contiguous().view(-1, t.shape[1], hd)

    def positions(self, proj, rel, b):
        return self.heads(proj(rel).unsqueeze(0), b).repeat(b, 1, 1)


class RelRepeatLM(nn.Module):
    """Two layers sharing one relative table read through one Dropout (DeBERTa's encoder-level table)."""

    def __init__(self, d=64, heads=4, layers=2, span=8, classes=50):
        super().__init__()
        self.rel = nn.Parameter(torch.randn(2 * span, d) * 0.02)
        self.drop = nn.Dropout(0.1)
        self.att = nn.ModuleList(RelRepeatAttention(d, heads, span) for _ in range(layers))
        self.ln = nn.ModuleList(nn.LayerNorm(d) for _ in range(layers))
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        rel = self.drop(self.rel)
        for a, ln in zip(self.att, self.ln):
            x = ln(x + a(x, rel))
        return self.head(x)


class TypeEmbLM(nn.Module):
    """BERT's embeddings, written out: token, position (a buffer of position ids, sliced) and token-type
    (constant zero ids, expanded over the batch) embeddings summed, LayerNorm, one attention layer of
    plain bmm, a head."""

    def __init__(self, v=1000, d=64, heads=4, s_max=64, types=2, classes=50):
        super().__init__()
        self.tok, self.pos, self.typ = nn.Embedding(v, d), nn.Embedding(s_max, d), nn.Embedding(types, d)
        self.register_buffer("position_ids", torch.arange(s_max)[None], persistent=False)
        self.ln = nn.LayerNorm(d)
        self.att = BmmAttention(d, heads)
        self.head = nn.Linear(d, classes)

    def forward(self, ids):
        b, s = ids.shape
        types = torch.zeros(1, s, dtype=torch.long).expand(b, s)
        x = self.ln(self.tok(ids) + self.pos(self.position_ids[:, :s]) + self.typ(types))
        return self.head(x + self.att(x))


class SRAttention(nn.Module):
    """Segformer's efficient self-attention: k and v from the tokens reduced by a strided conv and a
    LayerNorm; q from all tokens; softmax, dropout, matmul with v."""

    def __init__(self, d, heads, sr=2, hw=8):
        super().__init__()
        self.h, self.hw = heads, hw
        self.q, self.k, self.v, self.o = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.sr = nn.Conv2d(d, d, sr, stride=sr)
        self.ln = nn.LayerNorm(d)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        b, n, d = x.shape
        h, hd = self.h, d // self.h
        q = self.q(x).view(b, n, h, hd).permute(0, 2, 1, 3)
        r = x.permute(0, 2, 1).reshape(b, d, self.hw, self.hw)
        r = self.ln(self.sr(r).reshape(b, d, -1).permute(0, 2, 1))
        k = self.k(r).view(b, -1, h, hd).permute(0, 2, 1, 3)
        v = self.v(r).view(b, -1, h, hd).permute(0, 2, 1, 3)
        a = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(hd)
        p = self.drop(F.softmax(a, dim=-1))
        y = torch.matmul(p, v).permute(0, 2, 1, 3).reshape(b, n, d)
        return self.o(y)


class SRNet(nn.Module):
    def __init__(self, d=32, heads=2, classes=10):
        super().__init__()
        self.patch = nn.Conv2d(3, d, 4, stride=4)
        self.ln0 = nn.LayerNorm(d)
        self.att = SRAttention(d, heads)
        self.ln1 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        t = self.ln0(self.patch(x).flatten(2).transpose(1, 2))
        t = t + self.att(t)
        t = t + self.mlp(self.ln1(t))
        return self.head(t.mean(1))


class FactorAtt(nn.Module):
    """CoaT's factorised attention with a convolutional relative position encoding: softmax of k over
    the tokens, k^T v, q (k^T v), plus q times a depthwise conv of v."""

    def __init__(self, d, heads, hw=8):
        super().__init__()
        self.h, self.hw = heads, hw
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.crpe = nn.Conv2d(d, d, 3, padding=1, groups=d)

    def forward(self, x):
        b, n, c = x.shape
        h, hd = self.h, c // self.h
        q, k, v = self.qkv(x).reshape(b, n, 3, h, hd).permute(2, 0, 3, 1, 4)
        ks = k.softmax(dim=2)
        fa = q @ (ks.transpose(-1, -2) @ v)
        vi = v.transpose(-1, -2).reshape(b, c, self.hw, self.hw)
        ev = q * self.crpe(vi).reshape(b, h, hd, n).transpose(-1, -2)
        y = (hd ** -0.5 * fa + ev).transpose(1, 2).reshape(b, n, c)
        return self.proj(y)


class CoaTNet(nn.Module):
    def __init__(self, d=32, heads=4, classes=10):
        super().__init__()
        self.patch = nn.Conv2d(3, d, 4, stride=4)
        self.cpe = nn.Conv2d(d, d, 3, padding=1, groups=d)
        self.ln = nn.LayerNorm(d)
        self.att = FactorAtt(d, heads)
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        f = self.patch(x)
        f = f + self.cpe(f)
        t = f.flatten(2).transpose(1, 2)
        t = t + self.att(self.ln(t))
        return self.head(t.mean(1))



class SharedMLPNet(nn.Module):
    """CoaT's parallel blocks in small: one MLP module (`mlp2 = mlp3 = mlp4`) applied to token
    streams of different lengths, each weight read `uses` times through its own transpose."""

    def __init__(self, d=64, uses=3, classes=10, patch=2):
        super().__init__()
        self.patch_size = patch
        self.patch = nn.ModuleList(nn.Conv2d(3, d, patch << k, stride=patch << k) if patch else nn.Identity()
                                   for k in range(uses))
        self.norm = nn.ModuleList(nn.LayerNorm(d) for _ in range(uses))
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        out = 0
        for k, (patch, norm) in enumerate(zip(self.patch, self.norm)):
            # patch 0: the streams are the input's own rows (no convolution's scratch in backward)
            t = patch(x).flatten(2).transpose(1, 2) if self.patch_size else x.reshape(len(x), -1, x.shape[-1])[:, k:]
            t = t + self.mlp(norm(t))
            out = out + t.mean(1)
        return self.head(out)

def tanh_gelu(x):
    """GELU's tanh approximation written out (GPT-2's and BLOOM's formula)."""
    return x * 0.5 * (1.0 + torch.tanh(0.7978845608 * x * (1.0 + 0.044715 * x * x)))


class TanhGeluFn(torch.autograd.Function):
    """A custom autograd Function written to save memory (Megatron's and BLOOM's pattern): forward
    saves only its input, backward recomputes what it needs from it."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return tanh_gelu(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        t = torch.tanh(0.7978845608 * x * (1.0 + 0.044715 * x * x))
        return g * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * (0.7978845608 + 0.1070322243 * x * x))


class FnGelu(nn.Module):
    def forward(self, x):
        return TanhGeluFn.apply(x)


class FormulaGelu(nn.Module):
    """The same formula run op by op (GPT-2's NewGELUActivation)."""

    def forward(self, x):
        return tanh_gelu(x)


class WideFn(nn.Module):
    """One wide projection through `act` and a head: the Function's backward (its temporaries beside
    the saved input and two gradients) is where the step peaks."""

    def __init__(self, act, d=64, wide=1024, classes=50):
        super().__init__()
        self.up, self.act, self.head = nn.Linear(d, wide), act(), nn.Linear(wide, classes)

    def forward(self, x):
        return self.head(self.act(self.up(x)))


def expectation(q, k, power=8):
    """YOSO's collision expectation of unit-norm queries and keys: (1 - acos(q k^T) / pi) ** power."""
    return (1 - torch.acos(torch.matmul(q, k.transpose(-1, -2))) / math.pi) ** power


class ExpectationFn(torch.autograd.Function):
    """transformers' YosoCumulation (its CPU path, `use_expectation`): forward computes the expectation
    under no_grad and saves it with q, k and v; backward is its own matmuls."""

    @staticmethod
    def forward(ctx, q, k, v):
        e = expectation(q, k)
        ctx.save_for_backward(e, q, k, v)
        return torch.matmul(e, v)

    @staticmethod
    def backward(ctx, g):
        e, q, k, v = ctx.saved_tensors
        w = torch.matmul(g, v.transpose(-1, -2)) * e
        return torch.matmul(w, 4 * k), torch.matmul(w.transpose(-1, -2), 4 * q), torch.matmul(e.transpose(-1, -2), g)


class ExpectationNet(nn.Module):
    """YOSO's attention in two blocks (queries and keys L2-normalised per head, the expectation between
    two products, no softmax), width 64, 4 heads: `function` runs it as YOSO does, inside a custom
    Function; else the same ops op by op. Both exporters' files of the two are alike where TorchScript
    is concerned (no trace of the Function)."""

    def __init__(self, function=True, d=64, heads=4, layers=2, classes=50):
        super().__init__()
        self.h, self.function = heads, function
        self.q = nn.ModuleList(nn.Linear(d, d) for _ in range(layers))
        self.k = nn.ModuleList(nn.Linear(d, d) for _ in range(layers))
        self.v = nn.ModuleList(nn.Linear(d, d) for _ in range(layers))
        self.out = nn.ModuleList(nn.Linear(d, d) for _ in range(layers))
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        b, s, d = x.shape
        heads = lambda t: t.view(b, s, self.h, d // self.h).transpose(1, 2)  # noqa: E731
        for q, k, v, out in zip(self.q, self.k, self.v, self.out):
            qh, kh = F.normalize(heads(q(x)), dim=-1), F.normalize(heads(k(x)), dim=-1)
            vh = heads(v(x))
            a = ExpectationFn.apply(qh, kh, vh) if self.function else torch.matmul(expectation(qh, kh), vh)
            x = x + out(a.transpose(1, 2).reshape(b, s, d))
        return self.head(x)


class StreamHead(nn.Module):
    """ProphetNet's output: two streams through one LM head, `logits = predict_logits[:, 0]` then
    `.contiguous()` (the other stream unused here): eager copies the first stream's logits and frees
    the head's whole output once the forward returns."""

    def __init__(self, d=64, classes=1000):
        super().__init__()
        self.body, self.head = nn.Linear(d, 2 * d), nn.Linear(d, classes)

    def forward(self, x):
        b, s, d = x.shape
        streams = torch.relu(self.body(x)).view(b, s, 2, d).transpose(1, 2)
        return self.head(streams)[:, 0].contiguous()


class CentredNorm(nn.Module):
    """Cohere's LayerNorm: `x - mean` written twice (for the variance and for the result), rsqrt of the
    variance, a scale and no bias."""

    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(d)), eps

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = (x - mean).pow(2).mean(-1, keepdim=True)
        return self.weight * ((x - mean) * torch.rsqrt(var + self.eps))


class DivCentredNorm(nn.Module):
    """DeBERTa's LayerNorm: `x - mean` written twice, divided by the square root of the variance plus
    eps, a scale and a shift (`dim` 1: ViTDet's channels-first form over a feature map)."""

    def __init__(self, d, eps=1e-7, dim=-1):
        super().__init__()
        self.weight, self.bias = nn.Parameter(torch.ones(d)), nn.Parameter(torch.zeros(d))
        self.eps, self.dim = eps, dim

    def forward(self, x):
        mean = x.mean(self.dim, keepdim=True)
        var = (x - mean).pow(2).mean(self.dim, keepdim=True)
        y = (x - mean) / torch.sqrt(var + self.eps)
        if self.dim == 1:
            return self.weight[:, None, None] * y + self.bias[:, None, None]
        return self.weight * y + self.bias


class OnceCentredNorm(nn.Module):
    """A LayerNorm whose `x - mean` is computed once and read twice (moonshine_streaming's form): the
    same ONNX file under TorchScript as the twice-written norms."""

    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(d)), eps

    def forward(self, x):
        centred = x - x.mean(-1, keepdim=True)
        return self.weight * (centred / (centred.pow(2).mean(-1, keepdim=True) + self.eps).sqrt())


class CentredCF(nn.Module):
    """Convolutions with ViTDet's channels-first LayerNorm between them, a pool and a head."""

    def __init__(self, c=32, classes=10):
        super().__init__()
        self.stem = nn.Conv2d(3, c, 3, stride=2, padding=1)
        self.n1, self.n2 = DivCentredNorm(c, 1e-6, dim=1), DivCentredNorm(c, 1e-6, dim=1)
        self.conv = nn.Conv2d(c, c, 3, padding=1)
        self.head = nn.Linear(c, classes)

    def forward(self, x):
        x = self.stem(x)
        x = x + self.conv(F.gelu(self.n1(x)))
        return self.head(self.n2(x).mean((2, 3)))


class SliceCopyNet(nn.Module):
    """MiniCPM3's key states: a `new_empty` tensor whose two slices are filled in place from two
    projections (`k[..., :a].copy_(x)`), then read by a GELU MLP; `expand`: the second source is
    broadcast over a dim first (MiniCPM3's shared rotary key over the heads)."""

    def __init__(self, d=64, a=96, b=32, layers=2, classes=50, expand=False):
        super().__init__()
        self.a, self.expand = a, expand
        self.pa = nn.ModuleList(nn.Linear(d, a) for _ in range(layers))
        self.pb = nn.ModuleList(nn.Linear(d, b if not expand else b // 4) for _ in range(layers))
        self.out = nn.ModuleList(nn.Linear(a + b, d) for _ in range(layers))
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        for pa, pb, out in zip(self.pa, self.pb, self.out):
            ka, kb = pa(x), pb(x)
            if self.expand:
                kb = kb.unsqueeze(2).expand(-1, -1, 4, -1).reshape(*kb.shape[:2], -1)
            k = ka.new_empty(*ka.shape[:-1], ka.shape[-1] + (self.out[0].in_features - self.a))
            k[..., :self.a].copy_(ka)
            k[..., self.a:].copy_(kb)
            x = x + out(F.gelu(k))
        return self.head(x)


class SetItemNet(nn.Module):
    """A slice of an activation that needs its gradient overwritten in place by another projection
    (`h[..., :b] = pb(x)`), then a GELU MLP: the write whose data needs its gradient. `index`: rows
    picked by an index tensor instead (`h[:, rows] = ..`: index_put_)."""

    def __init__(self, d=64, a=128, b=32, layers=2, classes=50, index=False):
        super().__init__()
        self.b, self.index = (a if index else b), index
        self.register_buffer("rows", torch.tensor([0, 3, 5, 9]), persistent=False)
        self.pa = nn.ModuleList(nn.Linear(d, a) for _ in range(layers))
        self.pb = nn.ModuleList(nn.Linear(d, self.b) for _ in range(layers))
        self.out = nn.ModuleList(nn.Linear(a, d) for _ in range(layers))
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        for pa, pb, out in zip(self.pa, self.pb, self.out):
            h = pa(x)
            if self.index:  # advanced indexing: index_put_
                h[:, self.rows] = pb(x)[:, : len(self.rows)]
            else:
                h[..., :self.b] = pb(x)
            x = x + out(F.gelu(h))
        return self.head(x)


class DeltaLoopNet(nn.Module):
    """The intra-chunk loop of chunked delta-rule attention (Kimi / Bailing linear attention): a
    (B, H, C, C) matrix from two projections, whose rows are updated in place from clones of earlier
    rows (`row = attn[..., i, :i].clone()`, `attn[..., i, :i] = row + (row[..., None] * sub).sum(-2)`),
    then applied to a third projection."""

    def __init__(self, d=64, heads=4, chunk=16, classes=50):
        super().__init__()
        self.h, self.c = heads, chunk
        self.qk = nn.Linear(d, 2 * d)
        self.v = nn.Linear(d, d)
        self.out = nn.Linear(d, d)
        self.head = nn.Linear(d, classes)
        self.register_buffer("upper", torch.ones(chunk, chunk, dtype=torch.bool).triu(), persistent=False)

    def forward(self, x):
        b, s, d = x.shape
        q, k = self.qk(x).view(b, s, 2, self.h, d // self.h).permute(2, 0, 3, 1, 4)
        attn = -(q @ k.transpose(-1, -2)).masked_fill(self.upper, 0)
        for i in range(1, self.c):
            row = attn[..., i, :i].clone()
            sub = attn[..., :i, :i].clone()
            attn[..., i, :i] = row + (row.unsqueeze(-1) * sub).sum(-2)
        v = self.v(x).view(b, s, self.h, d // self.h).transpose(1, 2)
        y = (attn @ v).transpose(1, 2).reshape(b, s, d)
        return self.head(x + self.out(y))


class RelPosGatherNet(nn.Module):
    """ProphetNet's relative-position lookup: the network computes position buckets once from
    constants, and each layer repeats them over batch and heads and casts them to int64 for its own
    gather of its projected per-bucket scores (the gather saves its index). Under dynamo the chain is
    folded, and the layers' equal copies merged, into one constant every layer reads."""

    def __init__(self, d=64, heads=4, buckets=32, layers=2, classes=50, max_len=128):
        super().__init__()
        self.h, self.nb, self.max_len = heads, buckets, max_len
        self.rel = nn.ModuleList(nn.Linear(d, heads * buckets) for _ in range(layers))
        self.v = nn.ModuleList(nn.Linear(d, d) for _ in range(layers))
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        b, s, d = x.shape
        # over the longest sequence, then sliced (ProphetNet's buckets span its max positions): a table
        # too large for the exporter's optimizer to fold, so it keeps the ops and merges the layers' copies
        pos = torch.arange(self.max_len)
        half = self.nb // 2
        buckets = ((pos[None, :] - pos[:, None]).clamp(-half, half - 1) + half).to(torch.int32)[:s, :s]
        for rel, v in zip(self.rel, self.v):
            scores = rel(x).view(b, s, self.h, self.nb).transpose(1, 2).reshape(b * self.h * s, self.nb)
            idx = buckets.repeat(b * self.h, 1).to(torch.int64)
            att = torch.gather(scores, 1, idx).view(b, self.h, s, s).softmax(-1)
            vv = v(x).view(b, s, self.h, d // self.h).transpose(1, 2)
            x = x + (att @ vv).transpose(1, 2).reshape(b, s, d)
        return self.head(x)


class RelPosGatherLayer(nn.Module):
    """One layer of RelPosGatherLayersNet: ProphetNet's per-layer `repeat` and cast of the shared
    buckets inside the layer's own forward, then its gather (which saves the index)."""

    def __init__(self, d, heads, buckets):
        super().__init__()
        self.h, self.nb = heads, buckets
        self.rel = nn.Linear(d, heads * buckets)
        self.v = nn.Linear(d, d)

    def forward(self, x, buckets):
        b, s, d = x.shape
        scores = self.rel(x).view(b, s, self.h, self.nb).transpose(1, 2).reshape(b * self.h * s, self.nb)
        # sizes from constants and the shared buckets only, as ProphetNet writes it: equal in every layer
        idx = buckets.repeat(1, self.h, 1).view(-1, buckets.shape[-1]).to(torch.int64)
        att = torch.gather(scores, 1, idx).view(b, self.h, s, s).softmax(-1)
        vv = self.v(x).view(b, s, self.h, d // self.h).transpose(1, 2)
        return x + (att @ vv).transpose(1, 2).reshape(b, s, d)


class RelPosGatherLayersNet(nn.Module):
    """RelPosGatherNet with each layer a module of a ModuleList (ProphetNet's decoder layers), the
    buckets repeated per sample once and per head in each layer from constants alone: the layers'
    equal index computations, which TorchScript's common-subexpression pass merges into the first
    layer's, are each layer's own in eager."""

    def __init__(self, d=64, heads=4, buckets=32, layers=2, classes=50, max_len=128):
        super().__init__()
        self.nb, self.max_len = buckets, max_len
        self.layers = nn.ModuleList(RelPosGatherLayer(d, heads, buckets) for _ in range(layers))
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        s = x.shape[1]
        pos = torch.arange(self.max_len)
        half = self.nb // 2
        buckets = ((pos[None, :] - pos[:, None]).clamp(-half, half - 1) + half).to(torch.int32)[:s, :s]
        buckets = buckets.repeat(x.shape[0], 1, 1)  # per sample, once (ProphetNet's decoder)
        for layer in self.layers:
            x = layer(x, buckets)
        return self.head(x)


class ChunkStateNet(nn.Module):
    """The inter-chunk scan of chunked linear attention (the gated delta rule's second phase): per
    block a state `torch.zeros(B, H, D, D)` made in forward, an output `torch.zeros_like(v)` whose
    chunks are written in place (`out[:, :, i] = ...`: one select_scatter each under dynamo), the
    state read by two matmuls per chunk and updated from k^T v. The blocks make equal fills, which
    the dynamo exporter folds and merges into one constant per kind."""

    def __init__(self, d=64, heads=4, chunk=8, layers=2, classes=50):
        super().__init__()
        self.h, self.c = heads, chunk
        self.qkv = nn.ModuleList(nn.Linear(d, 3 * d) for _ in range(layers))
        self.out = nn.ModuleList(nn.Linear(d, d) for _ in range(layers))
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        b, s, d = x.shape
        hd, n = d // self.h, s // self.c
        for qkv, out in zip(self.qkv, self.out):
            q, k, v = qkv(x).view(b, s, 3, self.h, hd).permute(2, 0, 3, 1, 4).reshape(3, b, self.h, n, self.c, hd)
            state = torch.zeros(b, self.h, hd, hd)
            o = torch.zeros_like(v)
            for i in range(n):
                o[:, :, i] = q[:, :, i] @ state + (k[:, :, i] @ state) * v[:, :, i]
                state = state + k[:, :, i].transpose(-1, -2) @ v[:, :, i]
            x = x + out(o.reshape(b, self.h, s, hd).transpose(1, 2).reshape(b, s, d))
        return self.head(x)


class TriluNet(nn.Module):
    """torch.tril / triu on activations: linear attention's causal mask of (B, H, S, S) scores
    written with tril (`scores.tril(k)`, no softmax), and the strictly upper part of a second
    score map with triu(1) (of the scores themselves for k > 0, else of their sigmoid). `k`: the
    diagonal offset of the scores' mask."""

    def __init__(self, d=64, heads=4, layers=2, classes=50, k=0):
        super().__init__()
        self.h, self.k = heads, k
        self.qkv = nn.ModuleList(nn.Linear(d, 3 * d) for _ in range(layers))
        self.out = nn.ModuleList(nn.Linear(d, d) for _ in range(layers))
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        b, s, d = x.shape
        for qkv, out in zip(self.qkv, self.out):
            q, k, v = qkv(x).view(b, s, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
            scores = (q @ k.transpose(-1, -2)).tril(self.k)
            del q, k  # no local outlives its last use (the profile cannot see Python's locals)
            a = scores + (scores.triu(1) if self.k > 0 else torch.sigmoid(scores).triu(1))
            del scores
            av = [a, v]  # so that v's base (the qkv output) goes with the product, not with the block
            del a, v
            x = x + out((av.pop(0) @ av.pop()).transpose(1, 2).reshape(b, s, d))
        return self.head(x)


class GatedDeltaNet(nn.Module):
    """qwen3_5_text's linear attention, written here from its aten ops: a causal depthwise Conv1d
    (padded by k - 1, then sliced) with SiLU, L2-normalised q and k (`x * rsqrt(sum(x * x) + eps)`), a
    sigmoid beta and a softplus decay, the chunk's cumsum of the decay, pairwise decays exp'd under a
    triu mask (masked_fill), the UT system masked with `tril(-1)` and applied without a solve (`I -
    tril`: the same in eager and in both exports), one chunk's attention, a gated RMSNorm and the
    output projection. Locals are deleted after their last use (the profile cannot see Python's)."""

    def __init__(self, d=64, heads=4, hd=16, chunk=16, kernel=4, layers=2, classes=50):
        super().__init__()
        self.h, self.hd, self.c = heads, hd, chunk
        self.qkv = nn.ModuleList(nn.Linear(d, 3 * heads * hd, bias=False) for _ in range(layers))
        self.conv = nn.ModuleList(nn.Conv1d(3 * heads * hd, 3 * heads * hd, kernel, groups=3 * heads * hd,
                                            padding=kernel - 1, bias=False) for _ in range(layers))
        self.ab = nn.ModuleList(nn.Linear(d, 2 * heads, bias=False) for _ in range(layers))
        self.z = nn.ModuleList(nn.Linear(d, heads * hd, bias=False) for _ in range(layers))
        self.a_log = nn.ParameterList(nn.Parameter(torch.zeros(heads)) for _ in range(layers))
        self.norm = nn.ParameterList(nn.Parameter(torch.ones(hd)) for _ in range(layers))
        self.out = nn.ModuleList(nn.Linear(heads * hd, d, bias=False) for _ in range(layers))
        self.head = nn.Linear(d, classes)
        self.register_buffer("upper", torch.ones(chunk, chunk, dtype=torch.bool).triu(1), persistent=False)

    @staticmethod
    def _l2(x):
        return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + 1e-6)

    def forward(self, x):
        b, s, _ = x.shape
        h, hd = self.h, self.hd
        for i in range(len(self.qkv)):
            m = self.conv[i](self.qkv[i](x).transpose(1, 2))[:, :, :s]
            m = F.silu(m).transpose(1, 2)
            q, k, v = (t.reshape(b, s, h, hd).transpose(1, 2).contiguous() for t in m.split(h * hd, -1))
            del m
            q, k = self._l2(q) * hd ** -0.5, self._l2(k)
            a, bt = self.ab[i](x).transpose(1, 2).chunk(2, 1)
            beta = bt.sigmoid()
            g = (-self.a_log[i].exp()[:, None] * F.softplus(a)).cumsum(-1)
            del a, bt
            decay = (g[..., :, None] - g[..., None, :]).masked_fill(self.upper, float("-inf")).exp()
            kb = k * beta[..., None]
            ut = (kb @ k.transpose(-1, -2)) * decay
            t = torch.eye(s) - ut.tril(-1)
            del ut
            u = t @ (v * beta[..., None])
            del t, kb, beta
            o = ((q @ k.transpose(-1, -2)) * decay) @ u
            del q, k, v, u, decay, g
            o = o.transpose(1, 2).reshape(-1, hd)
            o = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + 1e-6) * self.norm[i]
            o = o * F.silu(self.z[i](x).reshape(-1, hd))
            x = x + self.out[i](o.reshape(b, s, h * hd))
            del o
        return self.head(x)


class SolveNet(nn.Module):
    """The UT system of chunked gated-delta attention (transformers' Qwen3-Next / Qwen3.5 /
    OLMo-hybrid `torch_chunk_gated_delta_rule`), solved for two right-hand sides. `mode` "export":
    as transformers writes it, `torch.linalg.solve_triangular` in eager and, only under export
    (`torch.compiler.is_exporting()`), the forward-substitution loop (`-A.tril(-1)`, rows written in
    place, `+ eye`, two matmuls); "loop": that loop in eager too. Both give the same dynamo export;
    TorchScript traces what eager runs (its exporter has no solve_triangular). Locals are deleted
    after their last use (the profile cannot see Python's)."""

    def __init__(self, d=32, heads=4, hd=16, chunk=16, layers=2, classes=50, mode="export"):
        super().__init__()
        self.h, self.hd, self.c, self.mode = heads, hd, chunk, mode
        self.qkv = nn.ModuleList(nn.Linear(d, 3 * heads * hd, bias=False) for _ in range(layers))
        self.beta = nn.ModuleList(nn.Linear(d, heads, bias=False) for _ in range(layers))
        self.out = nn.ModuleList(nn.Linear(heads * hd, d, bias=False) for _ in range(layers))
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        b, s, _ = x.shape
        h, hd, c = self.h, self.hd, self.c
        for i in range(len(self.qkv)):
            q, k, v = (t.reshape(b, h, s // c, c, hd) for t in
                       self.qkv[i](x).view(b, s, 3, h, hd).permute(2, 0, 3, 1, 4).unbind(0))
            beta = self.beta[i](x).sigmoid().transpose(1, 2).reshape(b, h, s // c, c, 1)
            kb, vb = k * beta, v * beta
            del beta
            ut = (kb @ k.transpose(-1, -2)) * 0.1
            if self.mode == "loop" or torch.compiler.is_exporting():
                ut = -ut.tril(-1)
                for j in range(1, c):
                    row = ut[..., j, :j].clone()
                    sub = ut[..., :j, :j].clone()
                    ut[..., j, :j] = row + (row.unsqueeze(-1) * sub).sum(-2)
                    del row, sub
                ut = ut + torch.eye(c)
                nv, kc = ut @ vb, ut @ kb
            else:
                nv = torch.linalg.solve_triangular(ut, vb, upper=False, unitriangular=True)
                kc = torch.linalg.solve_triangular(ut, kb, upper=False, unitriangular=True)
            del ut, kb, vb, v
            o = (q @ k.transpose(-1, -2)) @ nv + kc
            del q, k, nv, kc
            x = x + self.out[i](o.reshape(b, h, s, hd).transpose(1, 2).reshape(b, s, h * hd))
            del o
        return self.head(x)


class OuterNet(nn.Module):
    """Kimi / Bailing delta attention's per-channel decayed scores, written as outer products: `(q[...,
    :, None, :] * k[..., None, :, :] * decay).sum(-1)` over (B, H, S, S, D), both factors broadcast
    and both needing gradients, then applied to v. Locals are deleted after their last use."""

    def __init__(self, d=64, heads=4, layers=2, classes=50):
        super().__init__()
        self.h = heads
        self.qkv = nn.ModuleList(nn.Linear(d, 3 * d) for _ in range(layers))
        self.g = nn.ModuleList(nn.Linear(d, d) for _ in range(layers))
        self.out = nn.ModuleList(nn.Linear(d, d) for _ in range(layers))
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        b, s, d = x.shape
        hd = d // self.h
        for qkv, gl, out in zip(self.qkv, self.g, self.out):
            q, k, v = qkv(x).view(b, s, 3, self.h, hd).permute(2, 0, 3, 1, 4)
            g = F.logsigmoid(gl(x)).view(b, s, self.h, hd).transpose(1, 2).cumsum(2)
            decay = (g.unsqueeze(-2) - g.unsqueeze(-3)).exp()
            del g
            a = (q.unsqueeze(-2) * k.unsqueeze(-3) * decay).sum(-1)
            del q, k, decay
            av = [a, v]  # so that v's base (the qkv output) goes with the product, not with the block
            del a, v
            x = x + out((av.pop(0) @ av.pop()).transpose(1, 2).reshape(b, s, d))
        return self.head(x)


class MadeLeafNet(nn.Module):
    """transformers MRA's attention without its CUDA kernel: query, key and value are computed and
    left unread, the attention's result is `torch.zeros_like(query).requires_grad_()` (a new leaf per
    layer, padded to 32 wide, then cut back), read by the output projection. Eager holds each leaf
    and its gradient through the step; the file holds a constant. `choices`: the batch's rows viewed
    as rows of that many choices each (a multiple-choice head's `view(-1, length)`), so the leaves
    have batch x choices rows."""

    def __init__(self, d=64, heads=4, layers=2, classes=50, choices=0):
        super().__init__()
        self.h, self.choices = heads, choices
        self.qkv = nn.ModuleList(nn.Linear(d, 3 * d) for _ in range(layers))
        self.out = nn.ModuleList(nn.Linear(d, d) for _ in range(layers))
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        rows = x.shape[0]
        if self.choices:
            x = x.reshape(rows * self.choices, x.shape[1] // self.choices, x.shape[2])
        b, s, d = x.shape
        hd = d // self.h
        for qkv, out in zip(self.qkv, self.out):
            q = qkv(x)[..., :d].view(b, s, self.h, hd).transpose(1, 2)
            q = torch.cat([q, torch.zeros(b, self.h, s, 32 - hd)], dim=-1)
            a = torch.zeros_like(q).requires_grad_()[..., :hd]
            x = x + out(a.transpose(1, 2).reshape(b, s, d))
        y = self.head(x)
        return y.reshape(rows, -1, y.shape[-1]) if self.choices else y


class GroupStdNorm(nn.Module):
    """EvoNorm-S0a's form: x * sigmoid(v * x) over a group standard deviation taken with `Tensor.var`
    (one aten::var.correction in eager; both exporters write it as Mean, Sub, Mul, Mean), a scale and a
    shift per channel. `instance`: over each channel instead of groups (EvoNorm-B0's instance std)."""

    def __init__(self, c, groups=8, instance=False, eps=1e-5):
        super().__init__()
        self.groups, self.instance, self.eps = groups, instance, eps
        self.v = nn.Parameter(torch.full((c,), 0.5))
        self.weight, self.bias = nn.Parameter(torch.ones(c)), nn.Parameter(torch.zeros(c))

    def forward(self, x):
        b, c, h, w = x.shape
        if self.instance:
            std = x.var(dim=(2, 3), unbiased=False, keepdim=True).add(self.eps).sqrt().expand(x.shape)
        else:
            g = x.reshape(b, self.groups, c // self.groups, h, w)
            std = g.var(dim=(2, 3, 4), unbiased=False, keepdim=True).add(self.eps).sqrt()
            std = std.expand(g.shape).reshape(b, c, h, w)
        x = x * (x * self.v.view(1, -1, 1, 1)).sigmoid() / std
        return x * self.weight.view(1, -1, 1, 1) + self.bias.view(1, -1, 1, 1)


class EvoNet(nn.Module):
    """Convolutions each followed by a group-std norm (groups, then per channel), a global pool and a
    Linear head."""

    def __init__(self, c=32, classes=10):
        super().__init__()
        self.stem = nn.Conv2d(3, c, 3, stride=2, padding=1)
        self.n1 = GroupStdNorm(c)
        self.c2 = nn.Conv2d(c, 2 * c, 3, padding=1)
        self.n2 = GroupStdNorm(2 * c, instance=True)
        self.c3 = nn.Conv2d(2 * c, 2 * c, 3, padding=1)
        self.n3 = GroupStdNorm(2 * c, groups=4)
        self.head = nn.Linear(2 * c, classes)

    def forward(self, x):
        x = self.n1(self.stem(x))
        x = self.n2(self.c2(x))
        x = self.n3(self.c3(x))
        return self.head(x.mean((2, 3)))


class ResizeNet(nn.Module):
    """Convolutions around an up- and a down-sampling by `mode` (crossvit's bicubic resize of its input
    for the second branch), a global pool and a Linear head."""

    def __init__(self, mode="bicubic", c=16, classes=10):
        super().__init__()
        self.mode = mode
        self.c1 = nn.Conv2d(3, c, 3, padding=1)
        self.c2 = nn.Conv2d(c, c, 3, padding=1)
        self.head = nn.Linear(c, classes)

    def forward(self, x):
        x = nn.functional.interpolate(x, size=(40, 40), mode=self.mode, align_corners=False)
        x = torch.relu(self.c1(x))
        x = nn.functional.interpolate(x, size=(24, 24), mode=self.mode, align_corners=True)
        x = torch.relu(self.c2(x))
        return self.head(x.mean((2, 3)))


class TrigNet(nn.Module):
    """One wide projection through an inverse trigonometric or hyperbolic function (`fn`, taken into its
    domain first: 0.5 tanh for (-1, 1), 1.5 + exp above 1), then a head: the function's backward, its
    intermediates beside the saved input and two gradients, is where the step peaks."""

    def __init__(self, fn, domain="", d=64, wide=1024, classes=50):
        super().__init__()
        self.fn, self.domain = fn, domain
        self.up, self.head = nn.Linear(d, wide), nn.Linear(wide, classes)

    def forward(self, x):
        h = self.up(x)
        if self.domain == "unit":
            h = 0.5 * torch.tanh(h)
        elif self.domain == "above_one":
            h = 1.5 + torch.exp(h)
        return self.head(self.fn(h))


class WSNet(nn.Module):
    """Weight-standardised convolutions (timm's StdConv2d / ScaledStdConv2d / StdConv2dSame: the weight
    reshaped to (1, out, -1), `F.batch_norm` in training mode over it, with ScaledStdConv2d's gain
    times a constant as its scale, then `reshape_as(weight)` and conv2d): a strided stem, a 3x3 and a
    1x1, a global pool and a Linear head. `gamma`: NFNet's activation gamma (the activation's output
    times a constant)."""

    def __init__(self, conv="std", c=16, classes=10, gamma=None):
        super().__init__()
        from timm.layers import ScaledStdConv2d, StdConv2d, StdConv2dSame

        if conv == "scaled":
            make = (lambda i, o, k, s=1: ScaledStdConv2d(i, o, k, stride=s, gamma=gamma or 1.0, eps=1e-5))
        elif conv == "same":
            make = (lambda i, o, k, s=1: StdConv2dSame(i, o, k, stride=s, eps=1e-8))
        else:
            make = (lambda i, o, k, s=1: StdConv2d(i, o, k, stride=s, eps=1e-8))
        self.stem = make(3, c, 3, 2)
        self.c1 = make(c, 2 * c, 3)
        self.c2 = make(2 * c, 2 * c, 1)
        self.gamma = gamma
        self.head = nn.Linear(2 * c, classes)

    def _act(self, x):
        y = F.silu(x) if self.gamma else F.relu(x)
        return y * self.gamma if self.gamma else y

    def forward(self, x):
        x = self._act(self.stem(x))
        x = self._act(self.c1(x))
        x = x + self._act(self.c2(x))
        return self.head(x.mean((2, 3)))


class PosNet(nn.Module):
    """Parameters added with a broadcast (a ViT's position embedding over the batch, a per-channel
    shift after an activation): autograd sums the incoming gradient to each parameter's shape."""

    def __init__(self, c=32, classes=10):
        super().__init__()
        self.patch = nn.Conv2d(3, c, 4, stride=4)
        self.pos = nn.Parameter(torch.randn(1, 64, c) * 0.02)
        self.shift = nn.Parameter(torch.zeros(c))
        self.fc = nn.Linear(c, c)
        self.head = nn.Linear(c, classes)

    def forward(self, x):  # one expression: no Python local holds a tensor past its last use
        return self.head((F.gelu(self.fc(self.patch(x).flatten(2).transpose(1, 2) + self.pos)) + self.shift).mean(1))


class ManualWSConv(nn.Conv2d):
    """Weight standardisation written out (the Weight Standardization paper's code: the weight minus
    its mean, divided by its standard deviation per output channel)."""

    def forward(self, x):
        w = self.weight
        w = w - w.mean(dim=(1, 2, 3), keepdim=True)
        std = w.view(w.size(0), -1).std(dim=1).view(-1, 1, 1, 1) + 1e-5
        return F.conv2d(x, w / std.expand_as(w), self.bias, self.stride, self.padding)


class GNWSConv(nn.Conv2d):
    """Weight standardisation through group_norm over the reshaped weight (one group per output
    channel)."""

    def forward(self, x):
        w = F.group_norm(self.weight.reshape(1, self.out_channels, -1), self.out_channels, eps=1e-5)
        return F.conv2d(x, w.reshape_as(self.weight), self.bias, self.stride, self.padding)


class WSVariantNet(nn.Module):
    def __init__(self, conv, c=16, classes=10):
        super().__init__()
        self.stem = conv(3, c, 3, stride=2, padding=1)
        self.c1 = conv(c, 2 * c, 3, padding=1)
        self.head = nn.Linear(2 * c, classes)

    def forward(self, x):
        return self.head(F.relu(self.c1(F.relu(self.stem(x)))).mean((2, 3)))


class GainConv(nn.Conv2d):
    """A convolution whose weight is computed each step by a plain product with a per-output gain (no
    standardisation): `weight * gain`."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.gain = nn.Parameter(torch.ones(self.out_channels, 1, 1, 1))

    def forward(self, x):
        return F.conv2d(x, self.weight * self.gain, self.bias, self.stride, self.padding, groups=self.groups)


class WSStridedNet(nn.Module):
    """A computed weight on a convolution whose input needs its gradient and whose backward is where the
    step peaks: a plain stem, then a 3x3 stride-2 convolution of 32 -> 64 channels at 32 x 32 (its
    first backward phase, the input's gradient, is the largest), then a 1x1; each of the latter two
    computes its weight every step (`conv`: "scaled" timm's ScaledStdConv2d with a bias, "std" StdConv2d
    without one, "gain" GainConv without one)."""

    def __init__(self, conv="scaled", c=32, classes=10):
        super().__init__()
        from timm.layers import ScaledStdConv2d, StdConv2d

        make = {"scaled": lambda i, o, k, s=1: ScaledStdConv2d(i, o, k, stride=s, eps=1e-5),
                "std": lambda i, o, k, s=1: StdConv2d(i, o, k, stride=s, bias=False, eps=1e-8),
                "gain": lambda i, o, k, s=1: GainConv(i, o, k, stride=s, padding=k // 2, bias=False)}[conv]
        self.stem = nn.Conv2d(3, c, 3, padding=1)
        self.c1 = make(c, 2 * c, 3, 2)
        self.c2 = make(2 * c, 2 * c, 1)
        self.head = nn.Linear(2 * c, classes)

    def forward(self, x):
        x = F.silu(self.stem(x))
        x = F.silu(self.c1(x))
        return self.head(F.silu(self.c2(x)).mean((2, 3)))


class StemPatchNet(nn.Module):
    """A hybrid ViT's embedding: a convolutional stem (3 x 3 stride 2, BatchNorm, ReLU), then a strided
    patch convolution of its output (kernel = stride = `k`), whose input's gradient oneDNN's
    brgconv_strided computes; the tokens LayerNorm-ed and mean-pooled into a head."""

    def __init__(self, k=8, c=32, d=64, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, c, 3, 2, 1, bias=False), nn.BatchNorm2d(c), nn.ReLU())
        self.patch = nn.Conv2d(c, d, k, k)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        t = self.patch(self.stem(x)).flatten(2).transpose(1, 2)
        return self.head(self.norm(t).mean(1))


def _bit():
    """A BiT-style pre-activation ResNetV2 (StdConv2d, GroupNorm), small: one bottleneck per stage."""
    from functools import partial

    from timm.layers import GroupNormAct
    from timm.models.resnetv2 import ResNetV2

    return ResNetV2(layers=[1, 1, 1, 1], channels=(32, 64, 128, 256), num_classes=10, stem_chs=16,
                    norm_layer=partial(GroupNormAct, num_groups=8))


def _nf(**kw):
    """A small normaliser-free network (timm's NormFreeNet: ScaledStdConv2d with gamma, activation
    gamma, skipinit gains)."""
    from timm.models.nfnet import NfCfg, NormFreeNet

    return NormFreeNet(NfCfg(depths=(1, 1, 1, 1), channels=(32, 64, 96, 128), stem_chs=16, group_size=8,
                             bottle_ratio=0.25, **kw), num_classes=10)


TRIG = {"asin": (torch.asin, "unit"), "acos": (torch.acos, "unit"), "atan": (torch.atan, ""),
        "sinh": (torch.sinh, ""), "cosh": (torch.cosh, ""), "tan": (torch.tan, "unit"),
        "asinh": (torch.asinh, ""), "acosh": (torch.acosh, "above_one"), "atanh": (torch.atanh, "unit")}


class CLGroupedBlock(nn.Module):
    """A ConvNeXt-style block whose input is channels-last (LayerNorm over channels written as a permute
    to NHWC and back, as EdgeNeXt and ConvNeXt do), opened by a grouped convolution other than depthwise
    with one output per channel: a depth multiplier (`mult`, groups = inputs) or `groups` of several
    channels; then a pointwise MLP over NHWC and a residual."""

    def __init__(self, c, o, k, stride, mult=0, groups=0):
        super().__init__()
        self.norm = nn.LayerNorm(c)
        g = c if mult else groups
        self.conv = nn.Conv2d(c, o, k, stride, k // 2, groups=g)
        self.mlp = nn.Sequential(nn.Linear(o, 2 * o), nn.GELU(), nn.Linear(2 * o, o))

    def forward(self, x):
        x = self.norm(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        x = self.conv(x)
        return x + self.mlp(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class CLGroupedNet(nn.Module):
    """Stem, then channels-last blocks opened by a 5x5 multiplier-2 stride-2 convolution (EdgeNeXt's
    downsampling), a 3x3 of groups of 4, a 7x7 multiplier-2 stride-2, a 3x3 of groups of 8 and a 9x9
    multiplier-2 stride-2 at 2 output columns (the forward kernel's width limit); a pooled head."""

    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Conv2d(3, 24, 4, 4)
        self.blocks = nn.Sequential(CLGroupedBlock(24, 48, 5, 2, mult=2), CLGroupedBlock(48, 48, 3, 1, groups=12),
                                    CLGroupedBlock(48, 96, 7, 2, mult=2), CLGroupedBlock(96, 96, 3, 1, groups=12),
                                    CLGroupedBlock(96, 192, 9, 2, mult=2))
        self.head = nn.Linear(192, classes)

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)).mean((2, 3)))


class GemmGroupedNet(nn.Module):
    """Channels-first grouped convolutions no oneDNN jit kernel blocks (gemm in every phase): a 5x5
    stride-2 depthwise convolution with 2 outputs per channel, 2 channels per group, a 3x3 with 3 outputs
    per channel, 6 channels per group, 2 outputs per channel last (with a bias, no BatchNorm: its backward
    first, where the step peaks), the others with BatchNorm, each with ReLU; a pooled head."""

    def __init__(self, classes=10):
        super().__init__()

        def unit(c, o, k, s, g, bn=True):
            return nn.Sequential(nn.Conv2d(c, o, k, s, k // 2, groups=g, bias=not bn),
                                 nn.BatchNorm2d(o) if bn else nn.Identity(), nn.ReLU())
        self.body = nn.Sequential(unit(3, 24, 3, 2, 1), unit(24, 48, 5, 2, 24), unit(48, 48, 3, 1, 24),
                                  unit(48, 144, 3, 1, 48), unit(144, 144, 3, 1, 24), unit(144, 288, 3, 1, 144, bn=False))
        self.head = nn.Linear(288, classes)

    def forward(self, x):
        return self.head(self.body(x).mean((2, 3)))


class SegmentReduceNet(nn.Module):
    """Tokens pooled into segments by `scatter_reduce` (amax / amin), as TAPAS reduces its table cells:
    a projection, each feature's max (or min) over the tokens of a segment (fixed segment ids, a buffer),
    read back at each token (gather) and multiplied in, then a head. The reduction's backward shares dY
    among the values equal to the result (derivatives.yaml's scatter_reduce_backward)."""

    def __init__(self, reduce="amax", include_self=True, d=64, wide=512, segs=4, tokens=16, classes=50):
        super().__init__()
        self.reduce, self.include_self, self.segs = reduce, include_self, segs
        self.up, self.head = nn.Linear(d, wide), nn.Linear(wide, classes)
        # each feature's segment ids, stored whole: a view of a smaller buffer would reach the export
        # as a folded expand whose broadcast dims are not recorded
        self.register_buffer("seg", (torch.arange(tokens) % segs).view(1, -1, 1).repeat(1, 1, wide))

    def forward(self, x):
        h = self.up(x)
        idx = self.seg.expand(h.shape[0], -1, -1)
        base = h.new_zeros(h.shape[0], self.segs, h.shape[2])
        pooled = base.scatter_reduce(1, idx, h, self.reduce, include_self=self.include_self)
        return self.head(h * pooled.gather(1, idx))


class TopKIndexAttention(nn.Module):
    """Attention over the keys a separate score branch picks per query (DeepSeek-V3.2's sparse
    attention indexer): relu'd dot products of two small projections, top-k, and only the indices
    read (scattered into an additive mask), so the branch gets no gradient; `no_grad`: the branch
    under torch.no_grad(), as transformers writes it; `gather`: the picked keys' scores gathered
    instead (a router that keeps indices only)."""

    def __init__(self, d, heads, k=4, no_grad=False, gather=False):
        super().__init__()
        self.h, self.k, self.no_grad, self.gather = heads, k, no_grad, gather
        self.qkv = nn.Linear(d, 3 * d)
        self.o = nn.Linear(d, d)
        self.iq = nn.Linear(d, 32)
        self.ik = nn.Linear(d, 32)

    def index(self, x):
        return F.relu(self.iq(x) @ self.ik(x).transpose(1, 2)).topk(self.k, -1).indices

    def forward(self, x):
        b, s, d = x.shape
        h, hd = self.h, d // self.h
        if self.no_grad:
            with torch.no_grad():
                idx = self.index(x)
        else:
            idx = self.index(x)
        q, k, v = self.qkv(x).view(b, s, 3, h, hd).permute(2, 0, 3, 1, 4).unbind(0)
        a = q @ k.transpose(-1, -2) * hd ** -0.5
        if self.gather:  # attention over the k picked keys only
            i = idx[:, None].expand(b, h, s, self.k)
            p = a.gather(-1, i).softmax(-1)
            y = (p.unsqueeze(-1) * v[:, :, None].expand(b, h, s, s, hd).gather(
                3, i[..., None].expand(b, h, s, self.k, hd))).sum(3)
        else:
            mask = x.new_full((b, s, s), -1e4).scatter(-1, idx, 0.0)
            y = (a + mask[:, None]).softmax(-1) @ v
        return self.o(y.transpose(1, 2).reshape(b, s, d))


class GlobalTokenLM(nn.Module):
    """Longformer's global attention in small: a mask made from the input's shape each step marks
    token 0 of each row global (`mask = ones * (glob + 1)`, `mask > 1`); the global tokens' indices
    (`nonzero(as_tuple=True)`), their largest count per row (an `arange`'s length) and the slots with
    no global token (an empty index: every row has one) decide what the attention gathers and
    writes. Every size follows from the input's shape; one tensor per layer is empty."""

    def __init__(self, d=64, layers=2, classes=10, chunk=True):
        super().__init__()
        self.chunk = chunk  # q, k, v as chunks of one projection, or three projections
        self.qkv = nn.ModuleList(nn.Linear(d, 3 * d) if chunk else nn.ModuleList(nn.Linear(d, d) for _ in range(3))
                                 for _ in range(layers))
        self.out = nn.ModuleList(nn.Linear(d, d) for _ in range(layers))
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        b, s, d = x.shape
        glob = torch.zeros(b, s, dtype=torch.long)
        glob[:, 0] = 1
        is_glob = torch.ones(b, s) * (glob + 1) > 1
        n = is_glob.long().sum(1)
        bi, ti = is_glob.nonzero(as_tuple=True)
        slot = torch.arange(n.max()) < n.unsqueeze(-1)
        sb, st = slot.nonzero(as_tuple=True)
        nb, nt = (slot == 0).nonzero(as_tuple=True)
        for qkv, out in zip(self.qkv, self.out):
            q, k, v = qkv(x).chunk(3, -1) if self.chunk else (f(x) for f in qkv)
            kg = k.new_zeros(b, slot.shape[1], d)
            kg[sb, st] = k[bi, ti]
            vg = v.new_zeros(b, slot.shape[1], d)
            vg[sb, st] = v[bi, ti]
            sc = (kg @ q.transpose(1, 2) / d ** 0.5)  # (b, slot, token), as Longformer transposes it
            sc[nb, nt] = -10000.0
            x = x + out(sc.transpose(1, 2).softmax(-1) @ vg)
        return self.head(x.mean(1))


class MoESplit(nn.Module):
    """A mixture of experts with top-k routing, the tokens sorted by expert and split by each
    expert's count (JetMoE's and MegaBlocks' `split_with_sizes`: sizes computed from the data)."""

    def __init__(self, d, experts=4, k=2, hidden=128, index_add=False, router_bias=None):
        super().__init__()
        self.e, self.k, self.index_add = experts, k, index_add
        self.router = nn.Linear(d, experts, bias=router_bias is not None)
        if router_bias is not None:  # a skewed routing: most tokens go to the experts it favours
            with torch.no_grad():
                self.router.bias.copy_(torch.tensor(router_bias))
        self.w1 = nn.Parameter(torch.randn(experts, hidden, d) * 0.05)
        self.w2 = nn.Parameter(torch.randn(experts, d, hidden) * 0.05)

    def forward(self, x):
        b, s, d = x.shape
        t = x.reshape(b * s, d)
        gates, idx = self.router(t).softmax(-1).topk(self.k, -1)
        order = idx.reshape(-1).sort()[1]
        token = order // self.k
        counts = F.one_hot(idx, self.e).sum((0, 1)).tolist()
        pieces = t[token].split(counts, 0)
        ys = [F.linear(F.gelu(F.linear(p, self.w1[n])), self.w2[n]) for n, p in enumerate(pieces)]
        y = torch.cat(ys) * gates.reshape(-1)[order, None]
        if self.index_add:  # JetMoE's combine (the dynamo exporter writes an index_put that accumulates)
            return torch.zeros_like(t).index_add(0, token, y).view(b, s, d)
        # back to (token, choice) order and summed over the choices (TorchScript cannot export an
        # index_add with repeated indices)
        inv = torch.empty_like(order).scatter(0, order, torch.arange(order.numel()))
        return y[inv].view(b, s, self.k, d).sum(2)


class MoEWhere(MoESplit):
    """The same routing written as Mixtral's loop: each expert takes the tokens `torch.where` finds
    in its slice of the one-hot mask (NonZero: a count computed from the data)."""

    def forward(self, x):
        b, s, d = x.shape
        t = x.reshape(b * s, d)
        gates, idx = self.router(t).softmax(-1).topk(self.k, -1)
        mask = F.one_hot(idx, self.e).permute(2, 1, 0)
        out = torch.zeros_like(t)
        for n in range(self.e):
            pos, tok = torch.where(mask[n])
            y = F.linear(F.gelu(F.linear(t[tok], self.w1[n])), self.w2[n]) * gates[tok, pos, None]
            out = out.index_add(0, tok, y)
        return out.view(b, s, d)


class MoEHit(MoESplit):
    """The same routing written as transformers' expert loop: only the experts some token chose are
    visited (`expert_hit = (mask.sum((-1, -2)) > 0).nonzero()`, `for e in expert_hit`), each taking
    the tokens `torch.where` finds in its slice of the one-hot mask at that computed index. The
    TorchScript exporter traces the loop as a Split of the hit experts' indices, one piece each."""

    def forward(self, x):
        b, s, d = x.shape
        t = x.reshape(b * s, d)
        gates, idx = self.router(t).softmax(-1).topk(self.k, -1)
        mask = F.one_hot(idx, self.e).permute(2, 1, 0)
        out = torch.zeros_like(t)
        for n in (mask.sum((-1, -2)) > 0).nonzero():
            n = n[0]
            pos, tok = torch.where(mask[n])
            y = F.linear(F.gelu(F.linear(t[tok], self.w1[n])), self.w2[n]) * gates[tok, pos, None]
            out = out.index_add(0, tok, y)
        return out.view(b, s, d)


class MoELM(AttnLM):
    """AttnLM whose MLPs are mixtures of experts (`moe`: MoESplit or MoEWhere)."""

    def __init__(self, moe, d=64, layers=2, **kw):
        super().__init__(BmmAttention, d=d, layers=layers)
        self.mlp = nn.ModuleList(moe(d, **kw) for _ in range(layers))


class TallKernelNet(nn.Module):
    """Convolutions whose kernel is taller than their input and whose weight's gradient AVX2's oneDNN
    kernel would take (8 channels per group; 8 input channels, ungrouped): a 5x5 over 4 x 4 with 32
    groups, a 3x3 over 2 x 2 with 64 groups, an ungrouped 3x3 over 2 x 2 from 8 channels, each with
    BatchNorm and ReLU; a pooled head."""

    def __init__(self, classes=10):
        super().__init__()

        def unit(c, o, k, s, g):
            return nn.Sequential(nn.Conv2d(c, o, k, s, k // 2, groups=g, bias=False), nn.BatchNorm2d(o), nn.ReLU())
        self.body = nn.Sequential(unit(3, 32, 3, 2, 1), unit(32, 256, 3, 4, 1), unit(256, 256, 5, 1, 32),
                                  unit(256, 512, 1, 2, 1), unit(512, 512, 3, 1, 64), unit(512, 8, 1, 1, 1),
                                  unit(8, 64, 3, 1, 1))
        self.head = nn.Linear(64, classes)

    def forward(self, x):
        return self.head(self.body(x).mean((2, 3)))


class DepthwiseConv1dNet(nn.Module):
    """1-D depthwise convolutions as Mamba's causal kernel and ConvNeXt-1D blocks use them (a depthwise
    2-D kernel to oneDNN): a Conv1d stem, a causal depthwise kernel 4 (pad 3, cropped), SiLU, a
    depthwise kernel 7 with BatchNorm and GELU, a grouped pointwise one, a strided depthwise kernel 3
    and a depth multiplier of 2; a pooled head."""

    def __init__(self, c=8, d=64, classes=10):
        super().__init__()
        self.stem = nn.Conv1d(c, d, 3, padding=1)
        self.causal = nn.Conv1d(d, d, 4, padding=3, groups=d)
        self.dw7 = nn.Sequential(nn.Conv1d(d, d, 7, padding=3, groups=d), nn.BatchNorm1d(d), nn.GELU())
        self.pw = nn.Conv1d(d, 2 * d, 1, groups=4)
        self.down = nn.Conv1d(2 * d, 2 * d, 3, stride=2, padding=1, groups=2 * d)
        self.mult = nn.Conv1d(2 * d, 4 * d, 3, padding=1, groups=2 * d, bias=False)
        self.head = nn.Linear(4 * d, classes)

    def forward(self, x):
        h = self.stem(x)
        h = F.silu(self.causal(h)[..., :x.shape[-1]])
        h = self.down(F.relu(self.pw(self.dw7(h))))
        return self.head(self.mult(h).mean(-1))


class SlowGroupedNet(nn.Module):
    """Grouped 1x1 convolutions with a bias on a batch under 16 (ATen's slow path, one group at a time)
    (an expansion to 256 channels in 4 groups on a 32 x 32 map) beside depthwise kernels at jit_dw's
    weight-gradient limits: 2 x 2 stride 2, 3 x 3 stride 2 down to 2 x 2, then a 3 x 3 over those
    2 x 2 rows (gemm's weight gradient). BatchNorm and ReLU; a
    pooled head."""

    def __init__(self, classes=10):
        super().__init__()

        def unit(c, o, k, s, g, bias=False):
            return nn.Sequential(nn.Conv2d(c, o, k, s, k // 2 if k % 2 else 0, groups=g, bias=bias),
                                 nn.BatchNorm2d(o), nn.ReLU())
        self.body = nn.Sequential(unit(3, 32, 3, 2, 1), nn.Conv2d(32, 256, 1, groups=4), nn.ReLU(),
                                  unit(256, 256, 3, 2, 256), nn.Conv2d(256, 128, 1, groups=2), nn.ReLU(),
                                  unit(128, 128, 2, 2, 128), unit(128, 128, 3, 2, 128), unit(128, 128, 3, 2, 128),
                                  unit(128, 128, 3, 1, 128, bias=True), nn.Conv2d(128, 256, 1, groups=8))
        self.head = nn.Linear(256, classes)

    def forward(self, x):
        return self.head(self.body(x).mean((2, 3)))


class GroupedTConvNet(nn.Module):
    """Unstrided grouped transposed convolutions (8 to 32 channels per group, with and without a bias)
    after a strided stem with BatchNorm; a pooled head."""

    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU())
        self.up = nn.Sequential(nn.ConvTranspose2d(32, 64, 3, padding=1, groups=4), nn.ReLU(),
                                nn.ConvTranspose2d(64, 96, 4, padding=2, groups=2, bias=False), nn.BatchNorm2d(96),
                                nn.ReLU(), nn.ConvTranspose2d(96, 48, 2, groups=3))
        self.head = nn.Linear(48, classes)

    def forward(self, x):
        return self.head(self.up(self.stem(x)).mean((2, 3)))


class SlowTConvNet(nn.Module):
    """Transposed convolutions eager runs on its slow kernel (slow_conv_transpose2d): unstrided 1x1 ones on a
    batch under 16 (with a bias, 4 groups without one, padded by 1), then a 3 x 3 stride-2 one with
    output_padding and a 2 x 2 unstrided one, which take the slow kernel on one sample (batch 1) and oneDNN
    on more; a strided stem with BatchNorm before, a pooled head after."""

    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU())
        self.up = nn.Sequential(nn.ConvTranspose2d(32, 64, 1), nn.ReLU(),
                                nn.ConvTranspose2d(64, 64, 1, groups=4, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                                nn.ConvTranspose2d(64, 48, 1, padding=1), nn.ReLU(),
                                nn.ConvTranspose2d(48, 16, 3, 2, 1, output_padding=1), nn.ReLU(),
                                nn.ConvTranspose2d(16, 16, 2))
        self.head = nn.Linear(16, classes)

    def forward(self, x):
        return self.head(self.up(self.stem(x)).mean((2, 3)))


class SlowDilatedNet(nn.Module):
    """Dilated 3 x 3 convolutions (dilation 2 and 4, an ASPP-like pair summed, one with a bias, one without)
    after a strided stem with BatchNorm, which eager runs on its slow dilated kernel on one small sample
    (batch 1) and on oneDNN on more; a pooled head."""

    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.d2 = nn.Conv2d(16, 32, 3, padding=2, dilation=2)
        self.d4 = nn.Conv2d(16, 32, 3, padding=4, dilation=4, bias=False)
        self.out = nn.Conv2d(32, 24, 3, padding=2, dilation=2)
        self.head = nn.Linear(24, classes)

    def forward(self, x):
        x = self.stem(x)
        x = F.relu(self.d2(x) + self.d4(x))
        return self.head(F.relu(self.out(x)).mean((2, 3)))


class SlowConv3dNet(nn.Module):
    """A small video network on eager's slow_conv3d: a padded 3 x 3 x 3 stem with BatchNorm3d (slow at batch
    1, oneDNN on more), a temporal 3 x 1 x 1 kernel padded in depth (1 x 1 in height and width: slow on any
    batch under 16), a grouped 1 x 1 x 1 (slow, columns made), a strided 1 x 1 x 1 without a bias (slow at
    batch 1); with `dilated` a 3 x 3 x 3 at dilation 2 after the stem (slow_conv_dilated3d at batch 1); a
    pooled head."""

    def __init__(self, dilated=False, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv3d(3, 8, 3, padding=1, bias=False), nn.BatchNorm3d(8), nn.ReLU())
        self.dil = nn.Conv3d(8, 8, 3, padding=2, dilation=2) if dilated else None
        self.temporal = nn.Conv3d(8, 16, (3, 1, 1), padding=(1, 0, 0))
        self.grouped = nn.Conv3d(16, 16, 1, groups=4)
        self.down = nn.Conv3d(16, 24, 1, stride=2, bias=False)
        self.head = nn.Linear(24, classes)

    def forward(self, x):
        x = self.stem(x)
        if self.dil is not None:
            x = F.relu(self.dil(x))
        x = F.relu(self.grouped(F.relu(self.temporal(x))))
        return self.head(F.relu(self.down(x)).mean((2, 3, 4)))


class GroupedConv3dNet(nn.Module):
    """X3D-like grouped 3-D kernels on oneDNN (the profile names them as estimated): a 3 x 3 x 3 stem with
    BatchNorm3d, a depthwise 3 x 3 x 3, a 3 x 3 x 3 of 4 groups; a pooled head."""

    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv3d(3, 24, 3, padding=1, bias=False), nn.BatchNorm3d(24), nn.ReLU())
        self.dw = nn.Conv3d(24, 24, 3, padding=1, groups=24)
        self.grouped = nn.Conv3d(24, 32, 3, padding=1, groups=4)
        self.head = nn.Linear(32, classes)

    def forward(self, x):
        x = F.relu(self.dw(self.stem(x)))
        return self.head(F.relu(self.grouped(x)).mean((2, 3, 4)))


class TConv1dNet(nn.Module):
    """A 1-D decoder of transposed convolutions, as vocoders and audio autoencoders upsample (ATen runs each
    as the 2-D transposed convolution of its unsqueezed view): a strided Conv1d stem with BatchNorm, then
    ConvTranspose1d kernel 4 stride 2 (pad 1) with a bias, 4 groups at kernel 3 stride 2 with
    output_padding, depthwise kernel 3 unstrided, and an unstrided 1x1 (eager's slow transposed kernel
    at a batch under 16); GELU between; a pooled head."""

    def __init__(self, c=8, d=32, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv1d(c, d, 3, 2, 1, bias=False), nn.BatchNorm1d(d), nn.GELU())
        self.up = nn.Sequential(nn.ConvTranspose1d(d, 64, 4, 2, 1), nn.GELU(),
                                nn.ConvTranspose1d(64, 64, 3, 2, 1, output_padding=1, groups=4, bias=False),
                                nn.BatchNorm1d(64), nn.GELU(),
                                nn.ConvTranspose1d(64, 64, 3, padding=1, groups=64), nn.GELU(),
                                nn.ConvTranspose1d(64, 16, 1))
        self.head = nn.Linear(16, classes)

    def forward(self, x):
        return self.head(self.up(self.stem(x)).mean(2))


class Upsample1dNet(nn.Module):
    """1-D upsampling as audio decoders use it: a Conv1d stem, nearest x 2, a Conv1d, linear x 2 (and one to a
    size, align_corners), Conv1d between; a pooled head."""

    def __init__(self, c=8, d=16, classes=10):
        super().__init__()
        self.stem = nn.Conv1d(c, d, 3, padding=1)
        self.mid = nn.Conv1d(d, d, 3, padding=1)
        self.last = nn.Conv1d(d, d, 3, padding=1)
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        x = F.interpolate(F.relu(self.stem(x)), scale_factor=2, mode="nearest")
        x = F.interpolate(F.relu(self.mid(x)), scale_factor=2, mode="linear")
        x = F.interpolate(F.relu(self.last(x)), size=300, mode="linear", align_corners=True)
        return self.head(x.mean(2))


class Linear1dNet(nn.Module):
    """Linear 1-D upsampling alone (`F.interpolate(mode="linear")`), twice, by a scale factor or to a size,
    with or without align_corners, a Conv1d before each; a pooled head."""

    def __init__(self, first, second, align=False, c=8, d=16, classes=10):
        super().__init__()
        self.resizes = (first, second)
        self.align = align
        self.stem = nn.Conv1d(c, d, 3, padding=1)
        self.mid = nn.Conv1d(d, d, 3, padding=1)
        self.head = nn.Linear(d, classes)

    def _up(self, x, r):
        kw = dict(size=r) if isinstance(r, int) else dict(scale_factor=r)
        return F.interpolate(x, mode="linear", align_corners=self.align, **kw)

    def forward(self, x):
        x = self._up(F.relu(self.stem(x)), self.resizes[0])
        x = self._up(F.relu(self.mid(x)), self.resizes[1])
        return self.head(x.mean(2))


class TableResizeNet(nn.Module):
    """A learned (L, C) position table resized linearly to (M, C) each forward, as SAM / ViTDet's
    `get_rel_pos` does (`interpolate(t.reshape(1, L, -1).permute(0, 2, 1), size=M, mode="linear")`), added to
    a Linear's output over M tokens; a pooled head."""

    def __init__(self, rows=15, to=27, d=16, classes=10):
        super().__init__()
        self.to = to
        self.table = nn.Parameter(torch.randn(rows, d) * 0.02)
        self.fc = nn.Linear(d, d)
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        t = F.interpolate(self.table.reshape(1, self.table.shape[0], -1).permute(0, 2, 1), size=self.to,
                          mode="linear")
        x = F.gelu(self.fc(x) + t.reshape(-1, self.to).permute(1, 0))
        return self.head(x.mean(1))


class TokenResizeNet(nn.Module):
    """Tokens (B, L, C) upsampled along the sequence, as sequence models write it: a Linear, `transpose(1, 2)`,
    linear x `scale`, `transpose(1, 2)`, a Linear; a pooled head."""

    def __init__(self, scale=2.0, d=32, classes=10):
        super().__init__()
        self.scale = scale
        self.fc = nn.Linear(d, d)
        self.out = nn.Linear(d, d)
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        x = F.interpolate(F.gelu(self.fc(x)).transpose(1, 2), scale_factor=self.scale, mode="linear")
        return self.head(F.gelu(self.out(x.transpose(1, 2))).mean(1))


class ActTransposeNet(nn.Module):
    """An elementwise activation whose incoming gradient arrives transposed against its saved input:
    tokens (B, L, C), a Linear, the activation `act`, `transpose(1, 2)`, a mean over the tokens (its
    backward makes a contiguous (B, C, L) gradient, transposed against the activation's (B, L, C)) and
    a Linear head. `transposed=False` takes the mean of (B, L, C) over dim 1 instead: contiguous
    gradients throughout."""

    ACTS = {"gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "silu": F.silu,
            "tanh": torch.tanh, "sigmoid": torch.sigmoid, "relu": F.relu, "leaky_relu": F.leaky_relu,
            "hardswish": F.hardswish}

    def __init__(self, act="gelu", transposed=True, d=32, classes=10):
        super().__init__()
        self.act, self.transposed = self.ACTS[act], transposed
        self.fc = nn.Linear(d, d)
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        y = self.act(self.fc(x))
        return self.head(y.transpose(1, 2).mean(2) if self.transposed else y.mean(1))


class NearestExactNet(nn.Module):
    """`F.interpolate(mode="nearest-exact")` (torch's pixel-centred nearest) over a sequence (`dims` 1), an
    image (2) or a volume (3), x `scale`, a convolution before it; a pooled head."""

    def __init__(self, dims=1, scale=2.0, c=8, d=16, classes=10):
        super().__init__()
        self.scale = scale
        # a volume's stem is a 1x1x1 convolution (at batch 1 a 3x3x3 one runs slow_conv3d, whose columns
        # are another matter)
        self.stem = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}[dims](c, d, 3 if dims < 3 else 1,
                                                                    padding=1 if dims < 3 else 0)
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        x = F.interpolate(F.relu(self.stem(x)), scale_factor=self.scale, mode="nearest-exact")
        return self.head(x.flatten(2).mean(2))


LINEAR_1D = {"x2": ((2.0, 3.0), False, 64), "x2_ac": ((2.0, 3.0), True, 64), "down": ((0.5, 40), False, 96),
             "down_ac": ((0.5, 40), True, 96), "size_ac": ((97, 1.5), True, 50), "size": ((97, 1.5), False, 50)}


class Upsample3dNet(nn.Module):
    """3-D upsampling as volumetric U-Nets use it, without 3-D convolutions: a learned per-channel scale and
    shift, trilinear x 2, GELU, nearest x 2 (and trilinear to a size, align_corners); a pooled head."""

    def __init__(self, c=3, classes=10):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(1, c, 1, 1, 1))
        self.shift = nn.Parameter(torch.zeros(1, c, 1, 1, 1))
        self.head = nn.Linear(c, classes)

    def forward(self, x):
        x = F.interpolate(x * self.scale + self.shift, scale_factor=2, mode="trilinear")
        x = F.interpolate(F.gelu(x), scale_factor=2, mode="nearest")
        x = F.interpolate(x, size=(10, 20, 20), mode="trilinear", align_corners=True)
        return self.head(x.mean((2, 3, 4)))


class LargeTConvNet(nn.Module):
    """Transposed convolutions past kernel 4 and stride 2 (refused before): a strided stem with BatchNorm,
    a depthwise 6 x 6 at stride 3 (a learned x 3 upsampling), a 5 x 5 at stride 2 with a bias, and 8 x 8 at
    stride 4 over 2 groups; ReLU between; a pooled head."""

    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.up = nn.Sequential(nn.ConvTranspose2d(16, 16, 6, 3, 0, groups=16, bias=False), nn.ReLU(),
                                nn.ConvTranspose2d(16, 16, 5, 2, 2), nn.ReLU(),
                                nn.ConvTranspose2d(16, 8, 8, 4, 2, groups=2))
        self.head = nn.Linear(8, classes)

    def forward(self, x):
        return self.head(self.up(self.stem(x)).mean((2, 3)))


class PaddedStrided1x1Net(nn.Module):
    """Padded, strided 1x1 convolutions (refused before): a 3 x 3 stem with BatchNorm, a 1x1 stride-2 pad-1
    projection with a bias, BatchNorm, ReLU, a 1x1 stride-3 pad-2 one without; a pooled head."""

    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 24, 3, padding=1, bias=False), nn.BatchNorm2d(24), nn.ReLU())
        self.proj = nn.Sequential(nn.Conv2d(24, 48, 1, stride=2, padding=1), nn.BatchNorm2d(48), nn.ReLU(),
                                  nn.Conv2d(48, 32, 1, stride=3, padding=2, bias=False))
        self.head = nn.Linear(32, classes)

    def forward(self, x):
        return self.head(self.proj(self.stem(x)).mean((2, 3)))


class VocoderTConvNet(nn.Module):
    """A HiFi-GAN-style upsampler: a Conv1d over 80 mel channels, two ConvTranspose1d of kernel 16 at stride
    8 (pad 4) with LeakyReLU, a Conv1d to one channel; a pooled head."""

    def __init__(self, classes=10):
        super().__init__()
        self.pre = nn.Conv1d(80, 64, 7, padding=3)
        self.up = nn.Sequential(nn.LeakyReLU(0.1), nn.ConvTranspose1d(64, 32, 16, 8, 4), nn.LeakyReLU(0.1),
                                nn.ConvTranspose1d(32, 16, 16, 8, 4), nn.LeakyReLU(0.1), nn.Conv1d(16, 4, 7, padding=3))
        self.head = nn.Linear(4, classes)

    def forward(self, x):
        return self.head(self.up(self.pre(x)).mean(2))


class _DilatedRes1d(nn.Module):
    """HiFi-GAN's residual block: three Conv1d of kernel 3 at dilation 1, 3 and 5, each after LeakyReLU,
    added back."""

    def __init__(self, c):
        super().__init__()
        self.convs = nn.ModuleList(nn.Conv1d(c, c, 3, dilation=d, padding=d) for d in (1, 3, 5))

    def forward(self, x):
        for cv in self.convs:
            x = x + cv(F.leaky_relu(x, 0.1))
        return x


class HifiTConvNet(nn.Module):
    """A HiFi-GAN-style generator in small: a Conv1d over 80 mel channels, ConvTranspose1d of kernel 16 at
    stride 8 and of kernel 8 at stride 4, each followed by a dilated residual block, a Conv1d; a pooled
    head (at batch 1 the dilated kernels take eager's slow dilated kernel)."""

    def __init__(self, classes=10):
        super().__init__()
        self.pre = nn.Conv1d(80, 64, 7, padding=3)
        self.up1, self.r1 = nn.ConvTranspose1d(64, 32, 16, 8, 4), _DilatedRes1d(32)
        self.up2, self.r2 = nn.ConvTranspose1d(32, 16, 8, 4, 2), _DilatedRes1d(16)
        self.post = nn.Conv1d(16, 4, 7, padding=3)
        self.head = nn.Linear(4, classes)

    def forward(self, x):
        x = self.r1(self.up1(F.leaky_relu(self.pre(x), 0.1)))
        x = self.r2(self.up2(F.leaky_relu(x, 0.1)))
        return self.head(self.post(F.leaky_relu(x, 0.1)).mean(2))


class UpsamplingTConvNet(nn.Module):
    """A decoder of grouped transposed convolutions, those the torch profile refused before: a strided stem
    with BatchNorm down to 8 x 8, then up by strided groups (32 input channels per group: AVX-512's
    brg_deconv; 16 per group with a bias: AVX2's), a depthwise 4 x 4 stride-2 kernel (a learned bilinear
    upsampling, as CenterNet-style heads use), a depthwise 3 x 3 unstrided one, 4 channels per group
    (16 groups), 8 inputs over 4 outputs per group and 4 over 6 (gemm); BatchNorm and ReLU between; a
    pooled head."""

    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
                                  nn.Conv2d(32, 64, 3, 2, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU())
        self.up = nn.Sequential(nn.ConvTranspose2d(64, 64, 4, 2, 1, groups=2, bias=False), nn.BatchNorm2d(64),
                                nn.ReLU(), nn.ConvTranspose2d(64, 64, 3, padding=1, groups=16), nn.ReLU(),
                                nn.ConvTranspose2d(64, 64, 4, 2, 1, groups=64, bias=False), nn.BatchNorm2d(64),
                                nn.ReLU(), nn.ConvTranspose2d(64, 64, 3, padding=1, groups=64), nn.ReLU(),
                                nn.ConvTranspose2d(64, 32, 3, padding=1, groups=8), nn.ReLU(),
                                nn.ConvTranspose2d(32, 32, 2, 2, groups=2), nn.ReLU(),
                                nn.ConvTranspose2d(32, 48, 3, padding=1, groups=8), nn.ReLU())
        self.head = nn.Linear(48, classes)

    def forward(self, x):
        return self.head(self.up(self.stem(x)).mean((2, 3)))


class DilatedNet(nn.Module):
    """Dilated 3x3 convolutions as DeepLab's ASPP and dilated backbones use them. "aspp": on an 8 x 8
    map, branches of dilation 6 and 12 (extents 13 and 25, taller than the map) beside a 1x1 and a
    dilation-2 one (extent 5, within it), concatenated and projected; "strided": a dilation-2 kernel
    with stride 2, then a dilation-3 5x5 within its 16 x 16 input. BatchNorm and ReLU after each."""

    def __init__(self, kind="aspp", classes=10):
        super().__init__()

        def unit(c, o, k, s=1, d=1):
            return nn.Sequential(nn.Conv2d(c, o, k, s, d * (k // 2), dilation=d, bias=False), nn.BatchNorm2d(o),
                                 nn.ReLU())
        self.kind = kind
        if kind == "aspp":
            self.stem = nn.Sequential(unit(3, 32, 3, 2), unit(32, 64, 3, 4))
            self.branches = nn.ModuleList([unit(64, 48, 1), unit(64, 48, 3, d=6), unit(64, 48, 3, d=12),
                                           unit(64, 48, 3, d=2)])
            self.proj = unit(4 * 48, 64, 1)
        else:
            self.stem = nn.Sequential(unit(3, 32, 3, 2), unit(32, 64, 3, 2, d=2), unit(64, 64, 5, d=3))
        self.head = nn.Linear(64, classes)

    def forward(self, x):
        x = self.stem(x)
        if self.kind == "aspp":
            x = self.proj(torch.cat([b(x) for b in self.branches], 1))
        return self.head(x.mean((2, 3)))


class GridSampleNet(nn.Module):
    """Bilinear grid sampling (F.grid_sample, zeros padding) of conv features at a base grid moved by a
    learned flow, as RAFT's lookups and spatial transformers do: `detach` samples at a grid that needs
    no gradient (RAFT detaches its coordinates), else the flow trains through the grid too."""

    def __init__(self, detach=False, align=True, classes=10, size=32):
        super().__init__()
        self.detach, self.align = detach, align
        self.feat = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU())
        self.flow = nn.Conv2d(16, 2, 3, padding=1)
        ys, xs = torch.meshgrid(torch.linspace(-1, 1, size), torch.linspace(-1, 1, size), indexing="ij")
        self.register_buffer("base", torch.stack([xs, ys], -1)[None], persistent=False)
        self.head = nn.Linear(16, classes)

    def forward(self, x):
        f = self.feat(x)
        grid = self.base + torch.tanh(self.flow(f)).permute(0, 2, 3, 1) * 0.2
        if self.detach:
            grid = grid.detach()
        s = F.grid_sample(f, grid, mode="bilinear", padding_mode="zeros", align_corners=self.align)
        return self.head(F.relu(s).mean((2, 3)))



class TensorSplitNet(nn.Module):
    """`torch.tensor_split` at a list of indices, as torchvision's MViT pools its queries, keys and
    values: a conv stem's tokens with a class token in front, cut into the class token and the rest
    (`indices=(1,)`), the rest pooled by a strided depthwise conv on its map and put back behind the
    class token; then the channels cut at two indices into three pieces (`indices=(8, 24)`), each
    scaled by its own activation and concatenated. LayerNorm, a mean over tokens and a Linear head.
    `sliced`: the same cuts written as indexing (`t[:, :1]`, ...), which both exporters write as
    Slices: the figure to compare with."""

    def __init__(self, c=32, classes=10, sliced=False):
        super().__init__()
        self.sliced = sliced
        self.patch = nn.Sequential(nn.Conv2d(3, c, 3, 2, 1), nn.ReLU(), nn.Conv2d(c, c, 3, 2, 1))
        self.cls = nn.Parameter(torch.zeros(1, 1, c))
        self.pool = nn.Conv2d(c, c, 3, 2, 1, groups=c, bias=False)
        self.norm = nn.LayerNorm(c)
        self.head = nn.Linear(c, classes)

    def forward(self, x):
        f = self.patch(x)
        b, c, h, w = f.shape
        t = torch.cat([self.cls.expand(b, -1, -1), f.flatten(2).transpose(1, 2)], 1)
        cls, rest = (t[:, :1], t[:, 1:]) if self.sliced else torch.tensor_split(t, (1,), dim=1)
        rest = self.pool(rest.transpose(1, 2).reshape(b, c, h, w)).flatten(2).transpose(1, 2)
        t = self.norm(torch.cat([cls, rest], 1))
        a, m, z = (t[..., :8], t[..., 8:24], t[..., 24:]) if self.sliced else torch.tensor_split(t, (8, 24), dim=2)
        t = torch.cat([F.gelu(a), torch.sigmoid(m) * m, torch.tanh(z)], 2)
        return self.head(t.mean(1))


class BroadcastMatmulNet(nn.Module):
    """Batched matmuls whose operands broadcast over batch dims, as a lambda layer writes them
    (LambdaNetworks, timm's LambdaLayer). `which`: "lambda": queries (B, heads, M, K) times a
    content lambda (B, 1, K, V) the heads share, and per-position lambdas (B, 1, M, K, V) from a
    Conv3d times queries (B, heads, M, 1, K); "left": a learned (1, M, K) table times keys
    (B, K, M), then (B, 1, M, M) times the queries; "both": (B, heads, 1, M, K) times
    (B, 1, 2, K, V), each operand broadcast over a dim of the other; "ones": a learned (1, 1, M, K)
    table times the queries (B, heads, K, M), a stride-0 view for bmm."""

    def __init__(self, which="lambda", c=64, heads=4, k=16, r=9, classes=10):
        super().__init__()
        self.which, self.h, self.k = which, heads, k
        self.stem = nn.Conv2d(3, c, 3, stride=2, padding=1)
        self.v_dim = c // heads
        self.qkv = nn.Conv2d(c, heads * k + k + self.v_dim, 1, bias=False)
        if which == "lambda":
            self.conv_lambda = nn.Conv3d(1, k, (r, r, 1), padding=(r // 2, r // 2, 0))
        if which == "left":
            self.table = nn.Parameter(torch.randn(1, 256, k) * 0.02)
        if which == "ones":
            self.table = nn.Parameter(torch.randn(1, 1, 256, k) * 0.02)
        self.head = nn.Linear(self.v_dim, classes)

    def forward(self, x):
        x = self.stem(x)
        b, c, hh, ww = x.shape
        m = hh * ww
        q, k, v = torch.split(self.qkv(x), [self.h * self.k, self.k, self.v_dim], dim=1)
        q = q.reshape(b, self.h, self.k, m).transpose(-1, -2)  # B, heads, M, K
        v = v.reshape(b, self.v_dim, m).transpose(-1, -2)  # B, M, V
        k = F.softmax(k.reshape(b, self.k, m), dim=-1)  # B, K, M
        if self.which == "lambda":
            content = q @ (k @ v).unsqueeze(1)  # (B, heads, M, K) @ (B, 1, K, V)
            pos = self.conv_lambda(v.reshape(b, 1, hh, ww, self.v_dim))
            pos = pos.reshape(b, 1, self.k, m, self.v_dim).transpose(2, 3)  # B, 1, M, K, V
            out = content + (q.unsqueeze(-2) @ pos).squeeze(-2)
        elif self.which == "left":
            t = self.table[:, :m] @ k  # (1, M, K) @ (B, K, M): the table broadcast over the batch
            out = t.unsqueeze(1) @ q  # (B, 1, M, M) @ (B, heads, M, K)
        elif self.which == "ones":
            out = (self.table[:, :, :m] @ q.transpose(-1, -2)) @ q  # (1, 1, M, K) @ (B, heads, K, M)
        else:
            lam = k @ v  # B, K, V
            out = q.unsqueeze(2) @ torch.stack([lam, lam.flip(-1)], 1).unsqueeze(1)  # B, heads, 2, M, V
        return self.head(out.flatten(1, -2).mean(1))

class UnreadNet(nn.Module):
    """A conv net that holds a module its forward never calls (Fuyu's vision embedding under a
    text-only forward): a 1024 -> 64 Linear, 262,400 B eager holds with no gradient and no Adam state."""

    def __init__(self, classes=10):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 32, 3, 2, 1), nn.ReLU(), nn.Conv2d(32, 64, 3, 2, 1), nn.ReLU())
        self.unused = nn.Linear(1024, 64)
        self.head = nn.Linear(64, classes)

    def forward(self, x):
        return self.head(self.body(x).mean((2, 3)))


class UnreadBranchNet(nn.Module):
    """A branch the forward runs and no output reads (Canine's projection and final character encoder
    under a multiple-choice head, which reads the pooled molecules): token embeddings, a LayerNorm,
    the mean over tokens into the head; beside it the tokens go through an attention block (scores
    heads x L x L, softmax, dropout) and a feed-forward whose result is dropped. Eager runs the
    branch in the forward, so its activations sit on top of what the forward saves; both exporters
    drop it."""

    def __init__(self, vocab=1000, d=64, heads=4, classes=10):
        super().__init__()
        self.h = heads
        self.emb = nn.Embedding(vocab, d)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, classes)
        self.side = nn.ModuleDict(dict(qkv=nn.Linear(d, 3 * d), out=nn.Linear(d, d), drop=nn.Dropout(0.1),
                                       ff=nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))))

    def forward(self, ids):
        t = self.norm(self.emb(ids))
        b, n, d = t.shape
        q, k, v = self.side["qkv"](t).view(b, n, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
        a = self.side["drop"](torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d // self.h), -1))
        s = self.side["out"]((a @ v).transpose(1, 2).reshape(b, n, d))
        self.side["ff"](s + t)  # no output reads it
        return self.head(t.mean(1))


class FourierMixNet(nn.Module):
    """FNet's token mixing: the real part of a Fourier transform of the tokens added back, LayerNorm,
    a feed-forward block, LayerNorm; `dims` (1, 2): `torch.fft.fftn` over tokens and features (FNet's),
    (1,): `torch.fft.fft` over the tokens alone; `mix_last`: the feed-forward block before the mixing."""

    def __init__(self, d=64, layers=2, classes=10, dims=(1, 2), mix_last=False):
        super().__init__()
        self.dims, self.mix_last = dims, mix_last
        self.n1 = nn.ModuleList(nn.LayerNorm(d) for _ in range(layers))
        self.n2 = nn.ModuleList(nn.LayerNorm(d) for _ in range(layers))
        self.ff = nn.ModuleList(nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
                                for _ in range(layers))
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        for n1, n2, ff in zip(self.n1, self.n2, self.ff):
            if self.mix_last:  # the feed-forward first: the mixing's backward runs first
                x = n2(x + ff(x))
            mixed = torch.fft.fftn(x, dim=self.dims) if len(self.dims) > 1 else torch.fft.fft(x, dim=self.dims[0])
            x = n1(x + mixed.real)
            del mixed
            if not self.mix_last:
                x = n2(x + ff(x))
        return self.head(x.mean(1))


class GlobalFilterNet(nn.Module):
    """GFNet's global filter over the tokens: `irfft(rfft(x, dim=1) * w, n=S, dim=1)` with a learned
    complex weight per bin and channel, added back, LayerNorm, a feed-forward block."""

    def __init__(self, d=64, s=16, layers=2, classes=10):
        super().__init__()
        self.s = s
        self.w = nn.ParameterList(nn.Parameter(torch.randn(s // 2 + 1, d, 2) * 0.02) for _ in range(layers))
        self.n1 = nn.ModuleList(nn.LayerNorm(d) for _ in range(layers))
        self.ff = nn.ModuleList(nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
                                for _ in range(layers))
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        for w, n1, ff in zip(self.w, self.n1, self.ff):
            spec = torch.fft.rfft(x, dim=1) * torch.view_as_complex(w)
            x = n1(x + torch.fft.irfft(spec, n=self.s, dim=1))
            del spec
            x = x + ff(x)
        return self.head(x.mean(1))


class WeightNormNet(nn.Module):
    """Weight norm (`torch.nn.utils.parametrizations.weight_norm`) on a strided Conv1d stem, a grouped
    positional Conv1d along the kernel's axis (`dim=2`, as Wav2Vec2's positional convolution) or along
    its outputs (`dim=0`, the default), and on the Linear layers of a feed-forward block."""

    def __init__(self, dim=2, c=64, k=16, groups=4, classes=10):
        super().__init__()
        wn = torch.nn.utils.parametrizations.weight_norm
        self.stem = wn(nn.Conv1d(1, c, 10, stride=5), dim=0)
        self.pos = wn(nn.Conv1d(c, c, k, padding=k // 2, groups=groups), dim=dim)
        self.ff = nn.Sequential(wn(nn.Linear(c, 2 * c)), nn.GELU(), wn(nn.Linear(2 * c, c)))
        self.head = nn.Linear(c, classes)

    def forward(self, x):
        x = F.gelu(self.stem(x))
        x = x + F.gelu(self.pos(x)[..., :-1])
        x = x.transpose(1, 2)
        x = x + self.ff(x)
        return self.head(x.mean(1))


class SplitPermutedNet(nn.Module):
    """FocalNet's modulation: a Linear over channels-last tokens, permuted to (N, C, H, W) (and made
    `.contiguous()` with `contig`, as FocalNet does), split into q, a context and gates; the context
    through depthwise 3 x 3 and 5 x 5 convolutions, gated, a 1 x 1 projection, times q."""

    def __init__(self, contig=False, c=64, classes=10):
        super().__init__()
        self.contig, self.c = contig, c
        self.stem = nn.Conv2d(3, c, 4, stride=4)
        self.proj_in = nn.Linear(c, 2 * c + 3)
        self.focal = nn.ModuleList(nn.Conv2d(c, c, k, padding=k // 2, groups=c, bias=False) for k in (3, 5))
        self.ctx = nn.Conv2d(c, c, 1)
        self.head = nn.Linear(c, classes)

    def forward(self, x):
        x = self.stem(x).permute(0, 2, 3, 1)
        y = self.proj_in(x).permute(0, 3, 1, 2)
        if self.contig:
            y = y.contiguous()
        q, ctx, gates = torch.split(y, (self.c, self.c, 3), 1)
        acc = 0
        for k, conv in enumerate(self.focal):
            ctx = F.gelu(conv(ctx))
            acc = acc + ctx * gates[:, k:k + 1]
        acc = acc + F.gelu(ctx.mean((2, 3), keepdim=True)) * gates[:, 2:]
        out = (q * self.ctx(acc)).permute(0, 2, 3, 1)
        return self.head((x + out).mean((1, 2)))


class FoldNet(nn.Module):
    """MobileViTV2's patch round trip: F.unfold of the map into 2 x 2 patches, a Linear over each
    patch's channels and a softmax over the patches, F.fold back (aten.col2im), a 1 x 1 convolution."""

    def __init__(self, c=32, classes=10):
        super().__init__()
        self.stem = nn.Conv2d(3, c, 3, stride=2, padding=1)
        self.mix = nn.Linear(c, c)
        self.proj = nn.Conv2d(c, c, 1)
        self.head = nn.Linear(c, classes)

    def forward(self, x):
        x = F.relu(self.stem(x))
        n, c, h, w = x.shape
        p = F.unfold(x, 2, stride=2).reshape(n, c, 4, -1)
        p = self.mix(p.transpose(1, 3)).transpose(1, 3).softmax(-1)
        x = x + self.proj(F.fold(p.reshape(n, c * 4, -1), (h, w), 2, stride=2))
        return self.head(x.mean((2, 3)))


class ContinuousBiasNet(nn.Module):
    """Swin V2's continuous position bias: a module buffer of relative coordinates (1, 2s-1, 2s-1, 2)
    through Linear -> ReLU -> Linear (no bias), gathered by a relative-position index buffer, 16 x its
    sigmoid added to the attention scores. Two stages, on 8 x 8 tokens and, pooled, on 2 x 2: the
    dynamo exporter's optimizer folds the buffer's product with the first weight into a constant (the
    first stage), or the whole Linear and ReLU (the second)."""

    def __init__(self, d=32, heads=4, hidden=(256, 512), sizes=(8, 2), classes=10):
        super().__init__()
        self.stem = nn.Conv2d(3, d, 4, 4)
        self.heads = heads
        self.stages = nn.ModuleList()
        for k, s in enumerate(sizes):
            st = nn.Module()
            st.s = s
            st.qkv = nn.Linear(d, 3 * d)
            st.proj = nn.Linear(d, d)
            st.cpb = nn.Sequential(nn.Linear(2, hidden[k]), nn.ReLU(), nn.Linear(hidden[k], heads, bias=False))
            r = torch.arange(-(s - 1), s, dtype=torch.float32) / max(s - 1, 1)
            st.register_buffer("coords", torch.stack(torch.meshgrid(r, r, indexing="ij"), -1)[None], persistent=False)
            pos = torch.stack(torch.meshgrid(torch.arange(s), torch.arange(s), indexing="ij")).flatten(1)
            rel = (pos[:, :, None] - pos[:, None, :]).permute(1, 2, 0) + s - 1
            st.register_buffer("index", rel[..., 0] * (2 * s - 1) + rel[..., 1], persistent=False)
            self.stages.append(st)
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        x = self.stem(x)
        for st in self.stages:
            x = F.adaptive_avg_pool2d(x, st.s)
            n, c, h, w = x.shape
            t = x.flatten(2).transpose(1, 2)
            q, k, v = st.qkv(t).reshape(n, h * w, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
            table = st.cpb(st.coords).view(-1, self.heads)
            bias = table[st.index.view(-1)].view(h * w, h * w, -1).permute(2, 0, 1).contiguous()
            a = (q @ k.transpose(-2, -1)) * (q.shape[-1] ** -0.5) + 16 * torch.sigmoid(bias)
            t = t + st.proj((a.softmax(-1) @ v).transpose(1, 2).reshape(n, h * w, c))
            x = t.transpose(1, 2).reshape(n, c, h, w)
        return self.head(x.mean((2, 3)))


class HandedBiasAttention(nn.Module):
    """Attention adding a score bias it is handed (MPNet's `attention_scores += position_bias`, here
    out of place in one expression, so that no local of its own outlives the softmax), dropout on the
    probabilities as MPNet's."""

    def __init__(self, d, heads):
        super().__init__()
        self.h = heads
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)

    def forward(self, x, bias):
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.h, -1).permute(2, 0, 3, 1, 4)
        # one expression: no local keeps the scores past the softmax
        return self.out((F.dropout((q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + bias).softmax(-1), 0.1)
                         @ v).transpose(1, 2).reshape(b, s, d))


class HandedBiasLayer(nn.Module):
    """A post-norm layer around HandedBiasAttention (its locals die when the attention returns)."""

    def __init__(self, d, heads):
        super().__init__()
        self.attn, self.norm = HandedBiasAttention(d, heads), nn.LayerNorm(d)

    def forward(self, x, bias):
        return self.norm(x + self.attn(x, bias))


class HandedBiasNet(nn.Module):
    """A relative-position bias computed once by the parent module and handed to every layer (MPNet's
    encoder: `compute_position_bias` looks up a bucket table and returns `expand(b, ...).contiguous()`,
    a (batch, heads, s, s) copy the encoder keeps in a local until it returns); `scores=True` hands
    a bias computed from the input instead (a low-rank product per head, which no exporter folds)."""

    def __init__(self, d=32, heads=8, buckets=32, layers=2, classes=50, scores=False):
        super().__init__()
        self.nb, self.h, self.scores = buckets, heads, scores
        if scores:
            self.pq, self.pk = nn.Linear(d, heads * 4), nn.Linear(d, heads * 4)
        else:
            self.table = nn.Embedding(buckets, heads)
        self.layers = nn.ModuleList(HandedBiasLayer(d, heads) for _ in range(layers))
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        b, s, _ = x.shape
        if self.scores:
            q, k = (p(x).view(b, s, self.h, -1).transpose(1, 2) for p in (self.pq, self.pk))
            bias = q @ k.transpose(-1, -2)
        else:
            pos = torch.arange(s)
            half = self.nb // 2
            buckets = (pos[None, :] - pos[:, None]).clamp(-half, half - 1) + half
            bias = self.table(buckets).permute(2, 0, 1).unsqueeze(0).expand(b, -1, s, s).contiguous()
        for layer in self.layers:
            x = layer(x, bias)
        return self.head(x)


SEQ = (16, 64)
IMG = (3, 32, 32)
FAM = {
    "fam_fold": ("fold", lambda: FoldNet(), IMG),
    "fam_layerdrop": ("layerdrop", lambda: LayerDropLM(), SEQ),
    "fam_sin_positions": ("positions", lambda: PositionTableLM(), SEQ),
    "fam_learned_positions": ("positions", lambda: PositionTableLM(learned=True), SEQ),
    "fam_layerdrop_np": ("layerdrop", lambda: LayerDropLM(numpy=True), SEQ),
    "fam_split_permuted": ("chlast", lambda: SplitPermutedNet(), (3, 16, 16)),
    "fam_split_permuted_contig": ("chlast", lambda: SplitPermutedNet(contig=True), (3, 16, 16)),
    "fam_weight_norm": ("weightnorm", lambda: WeightNormNet(dim=2), (1, 800)),
    "fam_weight_norm_dim0": ("weightnorm", lambda: WeightNormNet(dim=0), (1, 800)),
    "fam_groupnorm": ("groupnorm", lambda: GNNet(), IMG),
    "fam_segmax": ("scatter", lambda: SegmentReduceNet("amax"), SEQ),
    "fam_segmin": ("scatter", lambda: SegmentReduceNet("amin"), SEQ),
    "fam_segmax_excl": ("scatter", lambda: SegmentReduceNet("amax", include_self=False), SEQ),
    "fam_groupnorm_1d": ("groupnorm", lambda: GN1d(), (1, 400)),
    "fam_alibi": ("attention", lambda: AttnLM(AlibiAttention), SEQ),
    "fam_bmm_attn": ("attention", lambda: AttnLM(BmmAttention), SEQ),
    "fam_xca": ("xca", lambda: XCANet(), IMG),
    "fam_rep_bn": ("repbn", lambda: RepNet(), IMG),
    "fam_rel_attn": ("relattn", lambda: RelLM(), SEQ),
    "fam_rel_drop": ("relattn", lambda: RelDropLM(), SEQ),
    "fam_rel_repeat": ("relattn", lambda: RelRepeatLM(), SEQ),
    "fam_type_emb": ("embedding", lambda: TypeEmbLM(), ("ids", 32, 1000)),
    "fam_sr_attn": ("srattn", lambda: SRNet(), IMG),
    "fam_coat": ("coat", lambda: CoaTNet(), IMG),
    "fam_shared_mlp": ("shared", lambda: SharedMLPNet(), IMG),
    "fam_shared_mlp2": ("shared", lambda: SharedMLPNet(uses=2), IMG),
    "fam_shared_mlp_wide": ("shared", lambda: SharedMLPNet(d=512, patch=4), IMG),  # the step holds the peak
    "fam_shared_mlp_rows": ("shared", lambda: SharedMLPNet(d=256, patch=0), (6, 256)),  # the step holds the peak
    "fam_sdpa_p0": ("sdpa", lambda: AttnLM(lambda d, h: SdpaAttention(d, h, attn_drop=0.0)), SEQ),
    "fam_sdpa_drop": ("sdpa", lambda: AttnLM(lambda d, h: SdpaAttention(d, h, attn_drop=0.1)), SEQ),
    "fam_sdpa_drop_causal": ("sdpa", lambda: AttnLM(lambda d, h: SdpaAttention(d, h, attn_drop=0.1, causal=True)),
                             SEQ),
    "fam_fn_gelu": ("function", lambda: AttnLM(BmmAttention, act=FnGelu), SEQ),
    "fam_formula_gelu": ("function", lambda: AttnLM(BmmAttention, act=FormulaGelu), SEQ),
    "fam_fn_wide": ("function", lambda: WideFn(FnGelu), SEQ),
    "fam_formula_wide": ("function", lambda: WideFn(FormulaGelu), SEQ),
    "fam_centred_norm": ("cse", lambda: AttnLM(BmmAttention, norm=CentredNorm), SEQ),
    "fam_centred_div": ("cse", lambda: AttnLM(BmmAttention, norm=DivCentredNorm), SEQ),
    "fam_centred_cf": ("cse", lambda: CentredCF(), IMG),
    "fam_centred_once": ("cse", lambda: AttnLM(BmmAttention, norm=OnceCentredNorm), SEQ),
    "fam_slice_copy": ("inplace", lambda: SliceCopyNet(), SEQ),
    "fam_slice_copy_expand": ("inplace", lambda: SliceCopyNet(expand=True), SEQ),
    "fam_setitem": ("inplace", lambda: SetItemNet(), SEQ),
    "fam_index_put": ("inplace", lambda: SetItemNet(index=True), SEQ),
    "fam_delta_loop": ("inplace", lambda: DeltaLoopNet(), SEQ),
    "fam_chunk_state": ("inplace", lambda: ChunkStateNet(), SEQ),
    "fam_relpos_gather": ("gather", lambda: RelPosGatherNet(), SEQ),
    "fam_relpos_gather_layers": ("gather", lambda: RelPosGatherLayersNet(), SEQ),
    "fam_handed_bias": ("locals", lambda: HandedBiasNet(), (64, 32)),
    "fam_handed_scores": ("locals", lambda: HandedBiasNet(scores=True), (64, 32)),
    "fam_streams_contig": ("contiguous", lambda: AttnLM(StreamsAttention), SEQ),
    "fam_streams": ("contiguous", lambda: AttnLM(lambda d, h: StreamsAttention(d, h, contig=False)), SEQ),
    "fam_trilu": ("trilu", lambda: TriluNet(), SEQ),
    "fam_fnet": ("dft", lambda: FourierMixNet(), SEQ),
    "fam_fft_tokens": ("dft", lambda: FourierMixNet(dims=(1,)), SEQ),
    "fam_global_filter": ("dft", lambda: GlobalFilterNet(), SEQ),
    "fam_fnet_long": ("dft", lambda: FourierMixNet(d=32, layers=1), (64, 32)),
    "fam_fnet_mix_last": ("dft", lambda: FourierMixNet(d=16, layers=1, mix_last=True), (128, 16)),
    "fam_trilu_k1": ("trilu", lambda: TriluNet(k=1), SEQ),
    "fam_gated_delta": ("trilu", lambda: GatedDeltaNet(), SEQ),
    "fam_solve_export": ("trilu", lambda: SolveNet(), (64, 32)),
    "fam_solve_loop": ("trilu", lambda: SolveNet(mode="loop"), (64, 32)),
    "fam_outer": ("broadcast", lambda: OuterNet(), SEQ),
    "fam_evonorm": ("var", lambda: EvoNet(), IMG),
    "fam_buffer_mask": ("buffer", lambda: AttnLM(BufferMaskAttention), SEQ),
    "fam_moe_split": ("moe", lambda: MoELM(MoESplit), SEQ),
    "fam_moe_where": ("moe", lambda: MoELM(MoEWhere), SEQ),
    "fam_moe_hit": ("moe", lambda: MoELM(MoEHit), SEQ),
    "fam_moe_hit_wide": ("moe", lambda: MoELM(MoEHit, experts=16, hidden=256), SEQ),
    "fam_topk_index": ("topk", lambda: AttnLM(TopKIndexAttention), SEQ),
    "fam_topk_index_ng": ("topk", lambda: AttnLM(lambda d, h: TopKIndexAttention(d, h, no_grad=True)), SEQ),
    "fam_topk_gather": ("topk", lambda: AttnLM(lambda d, h: TopKIndexAttention(d, h, gather=True)), SEQ),
    "fam_moe_split_add": ("moe", lambda: MoELM(MoESplit, index_add=True), SEQ),
    "fam_moe_split_skew": ("moe", lambda: MoELM(MoESplit, router_bias=(2.0, 1.0, 0.0, 0.0)), SEQ),
    "fam_moe_split_wide_skew": ("moe", lambda: MoELM(MoESplit, experts=8, hidden=512,
                                                     router_bias=(2.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)), SEQ),
    "fam_moe_split_wide": ("moe", lambda: MoELM(MoESplit, experts=8, hidden=512), SEQ),
    "fam_buffer_mask_long": ("buffer", lambda: AttnLM(lambda d, h: BufferMaskAttention(d, h, 1024)), SEQ),
    "fam_bicubic": ("resize", lambda: ResizeNet("bicubic"), IMG),
    "fam_cl_grouped": ("clgrouped", lambda: CLGroupedNet(), (3, 64, 64)),
    "fam_aa_bicubic": ("aaresize", lambda: AAResizeNet("bicubic", grid=16, d=128), (3, 32, 32)),
    "fam_aa_bilinear": ("aaresize", lambda: AAResizeNet("bilinear", grid=16, d=128), (3, 32, 32)),
    "fam_aa_bicubic_up": ("aaresize", lambda: AAResizeNet("bicubic", grid=2, d=128), (3, 32, 32)),
    **{f"fam_sdpa_{m}": ("sdpamask", (lambda m=m: AttnLM(lambda d, h: SdpaMaskAttention(d, h, m))), SEQ)
       for m in ("bias", "bias4d", "fixed3d", "fixed4d")},
    "fam_gemm_grouped": ("gemmgrouped", lambda: GemmGroupedNet(), (3, 64, 64)),
    "fam_tall_kernel": ("gemmgrouped", lambda: TallKernelNet(), IMG),
    "fam_dw_conv1d": ("dwconv", lambda: DepthwiseConv1dNet(), (8, 64)),
    "fam_slow_grouped": ("dwconv", lambda: SlowGroupedNet(), (3, 64, 64)),
    "fam_tconv_grouped": ("dwconv", lambda: GroupedTConvNet(), IMG),
    "fam_tconv_upsample": ("dwconv", lambda: UpsamplingTConvNet(), IMG),
    "fam_tconv_slow": ("dwconv", lambda: SlowTConvNet(), IMG),
    "fam_dilated_slow": ("dwconv", lambda: SlowDilatedNet(), IMG),
    "fam_conv3d_slow": ("dwconv", lambda: SlowConv3dNet(), (3, 4, 6, 6)),
    "fam_conv3d_dilated": ("dwconv", lambda: SlowConv3dNet(dilated=True), (3, 4, 6, 6)),
    "fam_conv3d_grouped": ("dwconv", lambda: GroupedConv3dNet(), (3, 4, 8, 8)),
    "fam_tconv1d": ("dwconv", lambda: TConv1dNet(), (8, 64)),
    "fam_tconv_large": ("dwconv", lambda: LargeTConvNet(), (3, 16, 16)),
    "fam_tconv_vocoder": ("dwconv", lambda: VocoderTConvNet(), (80, 16)),
    "fam_tconv_hifi": ("dwconv", lambda: HifiTConvNet(), (80, 16)),
    "fam_padded_1x1": ("dwconv", lambda: PaddedStrided1x1Net(), IMG),
    "fam_upsample_1d": ("resize", lambda: Upsample1dNet(), (8, 64)),
    "fam_upsample_3d": ("resize", lambda: Upsample3dNet(), (3, 4, 8, 8)),
    **{f"fam_linear1d_{k}": ("resize", (lambda r=r, ac=ac: Linear1dNet(*r, align=ac)), (8, n))
       for k, (r, ac, n) in LINEAR_1D.items()},
    "fam_linear1d_table": ("resize", lambda: TableResizeNet(), (27, 16)),
    "fam_linear1d_tokens": ("resize", lambda: TokenResizeNet(), (48, 32)),
    "fam_nearest_exact_1d": ("resize", lambda: NearestExactNet(1, 1.5), (8, 64)),
    "fam_nearest_exact_2d": ("resize", lambda: NearestExactNet(2, 2.0), (8, 16, 16)),
    "fam_nearest_exact_2d_down": ("resize", lambda: NearestExactNet(2, 0.75), (8, 16, 16)),
    "fam_nearest_exact_3d": ("resize", lambda: NearestExactNet(3, 2.0, c=3, d=4), (3, 4, 6, 6)),
    "fam_linear1d_tokens_down": ("resize", lambda: TokenResizeNet(0.75), (48, 32)),
    "fam_unread": ("unread", lambda: UnreadNet(), IMG),
    "fam_unread_branch": ("unread", lambda: UnreadBranchNet(), ("ids", 128, 1000)),
    "fam_made_leaf": ("unread", lambda: MadeLeafNet(), (64, 64)),
    "fam_expectation_fn": ("function", lambda: ExpectationNet(), (64, 64)),
    "fam_expectation_ops": ("function", lambda: ExpectationNet(function=False), (64, 64)),
    "fam_stream_head": ("heads", lambda: StreamHead(), (32, 64)),
    "fam_made_leaf_choices": ("unread", lambda: MadeLeafNet(choices=2), (64, 64)),
    "fam_global_tokens": ("moe", lambda: GlobalTokenLM(), (64, 64)),
    "fam_global_tokens_qkv": ("moe", lambda: GlobalTokenLM(chunk=False), (64, 64)),
    "fam_pos_embed": ("broadcast", lambda: PosNet(), IMG),
    "fam_stdconv": ("wstd", lambda: WSNet("std"), IMG),
    "fam_ws_manual": ("wstd", lambda: WSVariantNet(ManualWSConv), IMG),
    "fam_ws_groupnorm": ("wstd", lambda: WSVariantNet(GNWSConv), IMG),
    "fam_scaled_stdconv": ("wstd", lambda: WSNet("scaled"), IMG),
    "fam_stdconv_same": ("wstd", lambda: WSNet("same"), IMG),
    "fam_nf_gamma": ("wstd", lambda: WSNet("scaled", gamma=1.7), IMG),
    **{f"fam_ws_strided_{k}": ("wstd", (lambda k=k: WSStridedNet(k)), IMG) for k in ("scaled", "std", "gain")},
    **{f"fam_stem_patch{k}": ("widedx", (lambda k=k: StemPatchNet(k)), (3, 64, 64)) for k in (8, 11, 16)},
    "fam_bit": ("wstd", _bit, IMG),
    "fam_nf_net": ("wstd", lambda: _nf(attn_layer="se", attn_kwargs=dict(rd_ratio=0.5), act_layer="gelu"), IMG),
    "fam_nf_skipinit": ("wstd", lambda: _nf(attn_layer="se", attn_kwargs=dict(rd_ratio=0.5), act_layer="gelu",
                                            skipinit=True), IMG),
    "fam_nf_reg": ("wstd", lambda: _nf(attn_layer="se", attn_kwargs=dict(rd_ratio=0.25), reg=True, act_layer="silu"), IMG),
    "fam_perm_from_end": ("transpose", lambda: FromEndPermNet(), IMG),
    "fam_einsum_scan": ("einsum", lambda: EinsumScan(chunk=16), (64, 64)),
    "fam_no_grad_cycles": ("nograd", lambda: RecurrentLM(), (64, 64)),
    "fam_lambda_scale": ("folded", lambda: LambdaScaleLM(), (64, 64)),
    "fam_query_pool": ("folded", lambda: QueryPoolLM(), (32, 64)),
    "fam_shared_cycles": ("nograd", lambda: RecurrentLM(quiet=0), (64, 64)),
    "fam_gated_state": ("clone", lambda: GatedStateLM(), (16, 32)),
    "fam_einsum_summed": ("einsum", lambda: EinsumScan(chunk=16, summed=True), (64, 64)),
    **{f"fam_{k}": ("trig", (lambda fn=fn, dom=dom: TrigNet(fn, dom)), SEQ) for k, (fn, dom) in TRIG.items()},
    "fam_dilated_aspp": ("dilated", lambda: DilatedNet("aspp"), (3, 64, 64)),
    "fam_dilated_strided": ("dilated", lambda: DilatedNet("strided"), (3, 64, 64)),
    "fam_grid_sample": ("gridsample", lambda: GridSampleNet(), (3, 32, 32)),
    "fam_tensor_split": ("slice", TensorSplitNet, (3, 32, 32)),
    "fam_tensor_split_sliced": ("slice", lambda: TensorSplitNet(sliced=True), (3, 32, 32)),
    "fam_continuous_bias": ("folded", lambda: ContinuousBiasNet(), IMG),
    "fam_continuous_bias_one": ("folded", lambda: ContinuousBiasNet(sizes=(8,)), IMG),
    # --dynamo: the TorchScript exporter drops `.detach()`, so its file trains the flow through the grid
    "fam_grid_sample_detached": ("gridsample", lambda: GridSampleNet(detach=True, align=False), (3, 32, 32)),
    **{f"fam_bcast_mm_{w}": ("bcastmm", (lambda w=w: BroadcastMatmulNet(w)), (3, 32, 32))
       for w in ("lambda", "left", "both", "ones")},
}


class PositionTableLM(nn.Module):
    """RoFormer's rotary position table in small: an (S_max, d) table read at `arange(S)` (an
    `nn.Embedding`, frozen with sinusoidal rows as transformers 5 builds RoFormer's, or `learned`),
    its rows split in sin and cos halves that rotate q and k of a bmm attention, then an MLP."""

    def __init__(self, d=64, rows=128, learned=False, classes=50):
        super().__init__()
        self.table = nn.Embedding(rows, d, _freeze=not learned)
        if not learned:
            pos = torch.arange(rows, dtype=torch.float32)[:, None]
            inv = 10000 ** (-torch.arange(0, d // 2, dtype=torch.float32) / (d // 2))
            with torch.no_grad():
                self.table.weight.copy_(torch.cat([torch.sin(pos * inv), torch.cos(pos * inv)], 1))
        self.qkv = nn.Linear(d, 3 * d)
        self.o = nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        b, s, d = x.shape
        sin, cos = self.table(torch.arange(s))[None].chunk(2, -1)
        q, k, v = self.qkv(x).chunk(3, -1)

        def rot(t):
            t1, t2 = t.chunk(2, -1)
            return torch.cat([t1 * cos - t2 * sin, t1 * sin + t2 * cos], -1)

        a = torch.softmax(torch.bmm(rot(q), rot(k).transpose(1, 2)) / math.sqrt(d), -1)
        x = x + self.o(torch.bmm(a, v))
        return self.head(x + self.mlp(x))


class LayerDropLM(nn.Module):
    """Pre-norm MLP blocks that a training step skips, each with probability `layerdrop`
    (transformers' LayerDrop): drawn with `torch.rand([])` as BART-like encoders draw it, or with
    `np.random.random()` as wav2vec2-like encoders do (`numpy`; the dynamo exporter cannot trace a
    branch on a drawn tensor, and takes this one)."""

    def __init__(self, d=64, layers=4, layerdrop=0.3, numpy=False, classes=50):
        super().__init__()
        self.layerdrop, self.numpy = layerdrop, numpy
        self.ln = nn.ModuleList(nn.LayerNorm(d) for _ in range(layers))
        self.mlp = nn.ModuleList(nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
                                 for _ in range(layers))
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        for ln, mlp in zip(self.ln, self.mlp):
            if self.training and self.layerdrop > 0.0:
                if self.numpy:
                    import numpy as np

                    skip = np.random.random() < self.layerdrop
                else:
                    skip = torch.rand([]) < self.layerdrop
                if skip:
                    continue
            x = x + mlp(ln(x))
        return self.head(x)


class FromEndPermNet(nn.Module):
    """Channels-last LayerNorm blocks whose permutes count axes from the end (`permute(0, -2, -1, 1)`,
    as Mamba2's chunked scan writes them): TorchScript writes such a perm as given."""

    def __init__(self, d=32, classes=10):
        super().__init__()
        self.stem = nn.Conv2d(3, d, 4, 4)
        self.norm = nn.LayerNorm(d)
        self.fc = nn.Linear(d, d)
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        x = self.stem(x).permute(0, -2, -1, 1)
        x = x + self.fc(F.gelu(self.norm(x)))
        return self.head(x.permute(0, -1, 1, 2).mean((-2, -1)))


class EinsumScan(nn.Module):
    """Mamba2's chunked-scan contractions written with torch.einsum over projected tokens: scores of C
    and B over the state (`bclhn,bcshn->bclsh`), their product with the values (`bclsh,bcshp->bclhp`,
    the scores read in their permuted layout), per-chunk states (`bclhn,bclhp->bchpn`); `summed`: a
    contraction whose letter only one operand has, summed out of it first (`bclhn,bcshp->bclhp`)."""

    def __init__(self, d=64, heads=4, state=16, p=16, chunk=8, classes=10, summed=False):
        super().__init__()
        self.h, self.n, self.p, self.chunk, self.summed = heads, state, p, chunk, summed
        self.inp = nn.Linear(d, heads * (2 * state + p))
        self.out = nn.Linear(heads * p, d)
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        b, s, _ = x.shape
        # each local is dropped after its last use, as eager's tensors are in the profile
        c, bm, v = self.inp(x).view(b, s // self.chunk, self.chunk, self.h, 2 * self.n + self.p).split(
            [self.n, self.n, self.p], -1)
        if self.summed:
            y = torch.einsum("bclhn,bcshp->bclhp", c, v)
            del c, bm, v
        else:
            g = torch.einsum("bclhn,bcshn->bclsh", c, bm)
            del c
            y = torch.einsum("bclsh,bcshp->bclhp", torch.sigmoid(g), v)
            del g
            st = torch.einsum("bclhn,bclhp->bchpn", bm, v)
            del bm, v
            y = y + st.mean((-1, -2))[:, :, None, :, None]
            del st
        x = x + self.out(y.reshape(b, s, -1))
        return self.head(x.mean(1))


class RecurrentLM(nn.Module):
    """HRM's recurrence in small: one block (pre-norm MLP) run `cycles` times over a token sequence, the
    first `quiet` runs under torch.no_grad() (the k-step gradient trick); `quiet` 0: every run records
    (the block is still called several times: one weight read at each call)."""

    def __init__(self, d=64, cycles=3, quiet=2, classes=10):
        super().__init__()
        self.cycles, self.quiet = cycles, quiet
        self.norm = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.head = nn.Linear(d, classes)

    def step(self, z, x):
        return z + self.mlp(self.norm(z + x))

    def forward(self, x):
        z = torch.zeros_like(x)
        for i in range(self.cycles):
            if i < self.quiet:
                with torch.no_grad():
                    z = self.step(z, x)
            else:
                z = self.step(z, x)
        return self.head(z.mean(1))


class LambdaScaleLM(nn.Module):
    """DiffLlama's λ in small: a scalar computed each step from two parameter vectors,
    `exp(sum(λq·λk)) + 0.8`, scaling the output of a GELU MLP block over the tokens."""

    def __init__(self, d=64, layers=2, classes=10):
        super().__init__()
        self.mlp = nn.ModuleList(nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
                                 for _ in range(layers))
        self.lq = nn.ParameterList(nn.Parameter(0.1 * torch.randn(16)) for _ in range(layers))
        self.lk = nn.ParameterList(nn.Parameter(0.1 * torch.randn(16)) for _ in range(layers))
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        for mlp, lq, lk in zip(self.mlp, self.lq, self.lk):
            x = x + torch.exp(torch.sum(lq * lk)) * mlp(x) + 0.8 * x
        return self.head(x.mean(1))


class GatedStateLM(nn.Module):
    """A gated matrix memory run step by step over the tokens (mLSTM-like, in small): per head
    C = f * C.clone() + k v^T, read with q; the `.clone()` is a copy eager makes and `mul` saves,
    which neither exporter writes as a node."""

    def __init__(self, d=32, heads=4, classes=10):
        super().__init__()
        self.h, self.hd = heads, d // heads
        self.qkv = nn.Linear(d, 3 * d)
        self.gate = nn.Linear(d, heads)
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.h, self.hd).unbind(2)
        f = torch.sigmoid(self.gate(x))
        c = torch.zeros(b, self.h, self.hd, self.hd)
        out = []
        for t in range(s):
            c = f[:, t, :, None, None] * c.clone() + k[:, t, :, :, None] @ v[:, t, :, None, :]
            out.append((q[:, t, :, None, :] @ c).squeeze(2))
        return self.head(torch.tanh(torch.stack(out, 1).flatten(2)).mean(1))


class QueryPoolLM(nn.Module):
    """Inkling's block attention residual in small: a learned query (one `(d,)` vector, or `(n, d)`)
    viewed and expanded over every position, `q.view(-1, d).expand(*states.shape[:-2], -1, -1)`,
    attends over the stack of each position's states (the layer's input and its MLP's output)."""

    def __init__(self, d=64, queries=(1, 3), classes=10):
        super().__init__()
        self.fc = nn.ModuleList(nn.Linear(d, d) for _ in queries)
        self.query = nn.ParameterList(nn.Parameter(0.02 * torch.randn(*((d,) if n == 1 else (n, d))))
                                      for n in queries)
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        for fc, q in zip(self.fc, self.query):
            x = self._pool(q, torch.stack([x, F.gelu(fc(x))], -2))
        return self.head(x.mean(1))

    @staticmethod
    def _pool(q, states):  # one expression: no Python local holds a tensor past its last use
        d = states.shape[-1]
        return torch.matmul(torch.softmax(torch.matmul(q.view(-1, d).expand(*states.shape[:-2], -1, -1),
                                                       states.transpose(-1, -2)) * d ** -0.5, -1),
                            states).mean(-2)


def _timm(name, **kw):
    def make():
        import timm

        return timm.create_model(name, pretrained=False, **kw)
    return make


def _tv_video(name, **kw):
    def make():
        import torchvision

        return getattr(torchvision.models.video, name)(**kw)
    return make


def _hf(cfg_name, model_name, **kw):
    def make():
        import transformers as tr

        cfg = getattr(tr, cfg_name)(**kw)
        cfg._attn_implementation = "eager"
        m = getattr(tr, model_name)(cfg)

        class W(nn.Module):
            def __init__(self):
                super().__init__()
                self.m = m

            def forward(self, *args):
                return self.m(*args, return_dict=True)["logits"]
        return W()
    return make


# the networks the families were missed on (issue 39), at small inputs / configs
NAMED = {
    "fam_timm_poolformer_s12": ("groupnorm", _timm("poolformer_s12", num_classes=10), (3, 64, 64)),
    # temporal 3 x 1 x 1 kernels at stride 1 run slow_conv3d on a batch under 16
    "fam_tv_r2plus1d_18": ("dwconv", _tv_video("r2plus1d_18", num_classes=10), (3, 8, 32, 32)),
    "fam_timm_edgenext_x_small": ("xca", _timm("edgenext_x_small", num_classes=10), (3, 64, 64)),
    "fam_timm_repvit_m1": ("repbn", _timm("repvit_m1", num_classes=10), (3, 64, 64)),
    "fam_timm_nf_regnet_b0": ("wstd", _timm("nf_regnet_b0", num_classes=10), (3, 64, 64)),
    "fam_hf_bit": ("wstd", _hf("BitConfig", "BitForImageClassification", embedding_size=32, num_groups=8,
                               hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 1, 1], num_labels=10), (3, 64, 64)),
    "fam_timm_coat_lite_tiny": ("coat", _timm("coat_lite_tiny", num_classes=10, img_size=64), (3, 64, 64)),
    "fam_timm_swinv2": ("folded", _timm("swinv2_tiny_window8_256", num_classes=10, img_size=64, window_size=4,
                                        embed_dim=32, depths=(1, 1, 1, 1), num_heads=(1, 2, 4, 8)), (3, 64, 64)),
    "fam_timm_swinv2_cr": ("folded", _timm("swinv2_cr_tiny_224", num_classes=10, img_size=64, window_size=4,
                                           embed_dim=32, depths=(1, 1, 1, 1), num_heads=(1, 2, 4, 8)), (3, 64, 64)),
    "fam_hf_bloom": ("attention", _hf("BloomConfig", "BloomForCausalLM", vocab_size=1000, hidden_size=64, n_layer=2,
                                      n_head=4, use_cache=False), ("ids", 32, 1000)),
    "fam_hf_deberta_v2": ("relattn", _hf("DebertaV2Config", "DebertaV2ForSequenceClassification", vocab_size=1000,
                                         hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                         intermediate_size=128, max_position_embeddings=64,
                                         relative_attention=True, pos_att_type=["p2c", "c2p"],
                                         position_buckets=16, max_relative_positions=64), ("ids", 32, 1000)),
    "fam_hf_segformer": ("srattn", _hf("SegformerConfig", "SegformerForImageClassification", num_labels=10,
                                       hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1],
                                       decoder_hidden_size=64), (3, 64, 64)),
    "fam_hf_wav2vec2": ("groupnorm", _hf("Wav2Vec2Config", "Wav2Vec2ForCTC", vocab_size=32, hidden_size=64,
                                         num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                                         conv_dim=(32, 32, 32), conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3),
                                         num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4,
                                         feat_extract_norm="group", mask_time_prob=0.0), (2000,)),
}



# ---- heads with several outputs and tied weights (transformers' question-answering, masked-LM and
# seq2seq heads): the oracle trains a tuple of outputs as the sum of one cross-entropy each
class TwoSpanHeads(nn.Module):
    """A question-answering head: one Linear to 2 logits per token, split into start and end logits
    (transformers' `logits.split(1, dim=-1)`, squeezed): two outputs of (batch, tokens)."""

    def __init__(self, d=64):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d), nn.LayerNorm(d))
        self.qa = nn.Linear(d, 2)

    def forward(self, x):
        start, end = self.qa(self.body(x)).split(1, dim=-1)
        return start.squeeze(-1).contiguous(), end.squeeze(-1).contiguous()


class TwoHeadsApart(nn.Module):
    """Two heads of their own on one body: per-token classes (7) and a pooled class (10), outputs of
    different shapes, the per-token one first."""

    def __init__(self, d=64):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
        self.tok, self.cls = nn.Linear(d, 7), nn.Linear(d, 10)

    def forward(self, x):
        h = self.body(x)
        return self.tok(h), self.cls(torch.tanh(h.mean(1)))


class TwoWideHeads(nn.Module):
    """Two per-token heads of 512 classes each (two vocabulary-sized outputs): each output's loss keeps
    its own log_softmax and makes its own gradients."""

    def __init__(self, d=64, classes=512):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(d, d), nn.GELU())
        self.a, self.b = nn.Linear(d, classes), nn.Linear(d, classes)

    def forward(self, x):
        h = self.body(x)
        return self.a(h), self.b(h)


class TiedLM(nn.Module):
    """A masked-LM head tied to the input embedding: the embedding's weight read by the lookup and
    again by the logits' Linear (`F.linear(h, emb.weight)`), its gradient the sum of both.
    `wide`: the table `wide` wide, projected to d after the lookup and back before the head (ELECTRA's
    and ConvBERT's generator: embedding_size over hidden_size), so the lookup's incoming gradient
    (batch x tokens x wide) is large beside the table."""

    def __init__(self, vocab=1000, d=64, wide=None):
        super().__init__()
        e = wide or d
        self.emb = nn.Embedding(vocab, e)
        body = [nn.LayerNorm(e)] + ([nn.Linear(e, d)] if wide else []) + [
            nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d)] + ([nn.Linear(d, e)] if wide else []) + [
            nn.LayerNorm(e)]
        self.body = nn.Sequential(*body)
        self.bias = nn.Parameter(torch.zeros(vocab))

    def forward(self, ids):
        return F.linear(self.body(self.emb(ids)), self.emb.weight, self.bias)


class _TextPart(nn.Module):
    """A token embedding and two pre-norm feed-forward blocks of width d: the language part the towers
    below sit beside."""

    def __init__(self, vocab=1000, d=64):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList(nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 2 * d), nn.GELU(),
                                                  nn.Linear(2 * d, d)) for _ in range(2))
        self.norm = nn.LayerNorm(d)

    def forward(self, ids):
        h = self.embed_tokens(ids)
        for layer in self.layers:
            h = h + layer(h)
        return self.norm(h)


class _Tower(nn.Module):
    """An image tower a text-only step never enters: a 16 x 16 patch convolution of 3 channels to 128
    and two 128-wide Linears (the projector to the text width d)."""

    def __init__(self, d=64, w=128):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, w, 16, 16)
        self.proj = nn.Sequential(nn.Linear(w, w), nn.GELU(), nn.Linear(w, d))


class CompositeLM(nn.Module):
    """A composite (multimodal) model's text-only masked LM: `model.language_model` read, the
    `model.vision_tower` beside it never entered (transformers' naming: LLaVA, Gemma 3, GOT-OCR2);
    `beside`: the tower's parameters held by `model` itself beside `embed_tokens` and `layers`
    (NeoMME's `model.patch_embeddings`: no `language_model` part to read the composite from)."""

    def __init__(self, vocab=1000, d=64, beside=False):
        super().__init__()
        self.model = nn.Module()
        if beside:
            text = _TextPart(vocab, d)
            for k, v in text.named_children():
                setattr(self.model, k, v)
            self.model.patch_embeddings = _Tower(d)
            self._text = lambda ids: _TextPart.forward(self.model, ids)
        else:
            self.model.language_model = _TextPart(vocab, d)
            self.model.vision_tower = _Tower(d)
            self._text = lambda ids: self.model.language_model(ids)
        self.lm_head = nn.Linear(d, vocab)

    def forward(self, ids):
        return self.lm_head(self._text(ids))


class SharedEmbeddingLM(nn.Module):
    """An encoder-decoder's tied embedding (BART's, Blenderbot's): one table held as `model.shared`,
    `model.encoder.embed_tokens`, `model.decoder.embed_tokens` and `lm_head.weight`; the forward
    enters the encoder's and decoder's lookups and the head, never `model.shared` itself. The
    decoder reads the ids shifted by one (a start token 0 first), so the two lookups differ."""

    def __init__(self, vocab=1000, d=64):
        super().__init__()
        self.model = nn.Module()
        self.model.shared = nn.Embedding(vocab, d)
        self.model.encoder = nn.Module()
        self.model.decoder = nn.Module()
        self.model.encoder.embed_tokens = self.model.shared
        self.model.decoder.embed_tokens = self.model.shared
        self.model.encoder.body = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, d), nn.GELU())
        self.model.decoder.body = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, d), nn.GELU())
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.model.shared.weight

    def forward(self, ids):
        enc = self.model.encoder.body(self.model.encoder.embed_tokens(ids))
        dec_ids = torch.cat([torch.zeros_like(ids[:, :1]), ids[:, :-1]], 1)
        dec = self.model.decoder.body(self.model.decoder.embed_tokens(dec_ids))
        return self.lm_head(dec + enc.mean(1, keepdim=True))


class MaskedWrite(nn.Module):
    """T5Gemma2's end-of-image embedding: `emb[ids == k] = eoi`, a boolean-mask index_put of a learned
    row into the scaled token embeddings (how many rows the data decides), then a feed-forward body
    and a 100-class per-token head."""

    def __init__(self, vocab=1000, d=64, k=998):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.eoi = nn.Parameter(torch.randn(d))
        self.k = k
        self.body = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
        self.head = nn.Linear(d, 100)

    def forward(self, ids):
        e = self.emb(ids) * 8.0
        e[ids == self.k] = self.eoi.to(e.dtype)
        return self.head(self.body(e))


class CausalTableLM(nn.Module):
    """GPT-2-style attention in small: learned token and position tables (P = 512 rows), two layers each
    holding a (1, 1, P, P) causal table as a non-persistent buffer and reading `bias[:, :, :T, :T]`
    (`table="bool"`: ImageGPT's; `"float"`: OpenAI GPT's, `w * b + -1e4 * (1 - b)`), or making the
    mask from the shapes in every forward (`table=None`), which a TorchScript file writes alike."""

    def __init__(self, d=64, heads=4, positions=512, table="bool", vocab=1000):
        super().__init__()
        self.h, self.table = heads, table
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(positions, d)
        self.qkv = nn.ModuleList(nn.Linear(d, 3 * d) for _ in range(2))
        self.out = nn.ModuleList(nn.Linear(d, d) for _ in range(2))
        self.attn = nn.ModuleList(_CausalAttn(positions, table) for _ in range(2))
        self.head = nn.Linear(d, vocab)

    def forward(self, ids):
        b, s = ids.shape
        x = self.tok(ids) + self.pos(torch.arange(s))
        for qkv, attn, out in zip(self.qkv, self.attn, self.out):
            q, k, v = qkv(x).view(b, s, 3, self.h, -1).permute(2, 0, 3, 1, 4)
            x = x + out(attn(q, k, v).transpose(1, 2).reshape(b, s, -1))
        return self.head(x)


class _CausalAttn(nn.Module):
    def __init__(self, positions, table):
        super().__init__()
        self.table = table
        if table:
            t = torch.tril(torch.ones(positions, positions, dtype=torch.bool)).view(1, 1, positions, positions)
            self.register_buffer("bias", t if table == "bool" else t.float(), persistent=False)

    def forward(self, q, k, v):
        s = q.shape[-2]
        w = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        if self.table == "float":
            b = self.bias[:, :, :s, :s]
            w = w * b + -1e4 * (1 - b)
        else:
            m = self.bias[:, :, :s, :s] if self.table else torch.tril(torch.ones(s, s, dtype=torch.bool))
            w = torch.where(m, w, torch.finfo(w.dtype).min)
        return F.dropout(w.softmax(-1), 0.1, self.training) @ v


class _Norm2d(nn.LayerNorm):
    """A LayerNorm over channels written as timm's LayerNorm2d: its result is a channels-last view."""

    def forward(self, x):
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class _DenseBlock(nn.Module):
    def __init__(self, cin, growth, norm):
        super().__init__()
        self.layers = nn.Sequential(nn.Conv2d(cin, cin, 7, padding=3, groups=cin), norm(cin),
                                    nn.Conv2d(cin, 2 * cin, 1), nn.GELU(), nn.Conv2d(2 * cin, growth, 1))

    def forward(self, features):
        return self.layers(torch.cat(features, 1))


class DenseCat(nn.Module):
    """Dense stages (every block reads the cat of the stage's input and every earlier block's output,
    as timm's RDNet and DenseNet write them) of depthwise 7x7 blocks ending in a LayerNorm over
    channels: every input of each cat is channels-last, so the cat is too (ATen's
    cat_compute_output_memory_format) and its depthwise convolution runs oneDNN's channels-last
    kernels. `mixed`: the stage's input comes from a BatchNorm (channels first), so every cat is
    contiguous."""

    def __init__(self, mixed=False, width=32, growth=24, blocks=3, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 4, stride=4), nn.BatchNorm2d(width) if mixed else _Norm2d(width))
        stages, c = [], width
        for k in range(2):
            if k:
                stages.append(nn.Sequential(_Norm2d(c), nn.Conv2d(c, c // 2, 2, stride=2)) if not mixed else
                              nn.Sequential(nn.Conv2d(c, c // 2, 2, stride=2), nn.BatchNorm2d(c // 2)))
                c //= 2
            stages.append(nn.ModuleList(_DenseBlock(c + i * growth, growth, _Norm2d) for i in range(blocks)))
            c += blocks * growth
        self.stages = nn.ModuleList(stages)
        self.head = nn.Linear(c, classes)

    def forward(self, x):
        x = self.stem(x)
        for st in self.stages:
            if isinstance(st, nn.ModuleList):
                features = [x]
                for blk in st:
                    features.append(blk(features))
                x = torch.cat(features, 1)
            else:
                x = st(x)
        return self.head(x.mean((2, 3)))


HEADS = {
    "fam_heads_span": ("heads", TwoSpanHeads, (32, 64)),
    "fam_heads_apart": ("heads", TwoHeadsApart, (32, 64)),
    "fam_heads_wide": ("heads", TwoWideHeads, (32, 64)),
    "fam_heads_tied_lm": ("heads", TiedLM, ("ids", 32, 1000)),
    "fam_heads_tied_wide": ("heads", lambda: TiedLM(wide=768), ("ids", 32, 1000)),
    "fam_heads_tied_wide256": ("heads", lambda: TiedLM(wide=256), ("ids", 32, 1000)),
    "fam_masked_write": ("datasized", MaskedWrite, ("ids", 32, 1000)),
    "fam_composite_tower": ("unread", lambda: CompositeLM(), ("ids", 32, 1000)),
    "fam_beside_tower": ("unread", lambda: CompositeLM(beside=True), ("ids", 32, 1000)),
    "fam_shared_embedding": ("unread", SharedEmbeddingLM, ("ids", 32, 1000)),
    "fam_causal_table": ("causal", lambda: CausalTableLM(), ("ids", 32, 1000)),
    "fam_causal_table_float": ("causal", lambda: CausalTableLM(table="float"), ("ids", 32, 1000)),
    "fam_causal_computed": ("causal", lambda: CausalTableLM(table=None), ("ids", 32, 1000)),
    "fam_dense_cat": ("densecat", lambda: DenseCat(), (3, 64, 64)),
    "fam_dense_cat_mixed": ("densecat", lambda: DenseCat(mixed=True), (3, 64, 64)),
    **{f"fam_act_{a}_{k}": ("actlayout", (lambda a=a, t=t: ActTransposeNet(a, t)), (48, 32))
       for a in ActTransposeNet.ACTS for k, t in (("tokens", True), ("channels", False))},
}

sys.path.insert(0, os.path.join(ROOT, "devtools"))
sys.path.insert(0, ROOT)
import torch_oracle as T  # noqa: E402

T.ZOO.update(FAM)
T.ZOO.update(NAMED)
T.ZOO.update(HEADS)

if __name__ == "__main__":
    T.main()
