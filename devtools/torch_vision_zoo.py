"""Vision networks for devtools/torch_oracle.py (dev-only, needs torch / torchvision / timm): real
architectures as users build them, random init, no downloads, on small inputs so each measurement
takes seconds. Names start with `vis_`; `python devtools/torch_oracle.py --vision` runs VISION (LARGE
only when named).
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


def _tv(name, **kw):
    def build():
        import torchvision

        return getattr(torchvision.models, name)(weights=None, **kw)
    return build


def _timm(name, **kw):
    def build():
        import timm

        return timm.create_model(name, pretrained=False, **kw)
    return build


class SegNet(nn.Module):
    """A tiny UNet-like segmentation net: MaxPool with ceil_mode, AvgPool, Dropout2d, nearest and
    bilinear upsampling (or ConvTranspose2d), PixelShuffle, skip concatenations, per-pixel classes."""

    def __init__(self, classes=5, bn=True, dropout2d=False, convt=False):
        super().__init__()
        # the TorchScript exporter cannot export Dropout2d in training mode, the dynamo exporter folds
        # BatchNorm: one variant for each
        self.e1 = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16) if bn else nn.Identity(), nn.ReLU())
        self.p1 = nn.MaxPool2d(3, 2, ceil_mode=True)  # 32 -> 16 (15 without ceil_mode)
        self.e2 = nn.Sequential(nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
                                nn.Dropout2d(0.1) if dropout2d else nn.Identity())
        self.p2 = nn.AvgPool2d(2)
        self.mid = nn.Sequential(nn.Conv2d(32, 32, 3, padding=1), nn.ReLU())
        # with `convt`, a ConvTranspose2d (oneDNN's deconvolution, docs/torchprof.md "Convolution
        # kernels"); without, bilinear upsampling takes its place
        self.up_t = nn.ConvTranspose2d(32, 32, 2, stride=2) if convt else nn.Upsample(scale_factor=2, mode="bilinear")
        self.d2 = nn.Sequential(nn.Conv2d(64, 16, 3, padding=1), nn.ReLU())
        self.d1 = nn.Sequential(nn.Conv2d(32, 16, 3, padding=1), nn.ReLU())
        self.ps = nn.Sequential(nn.Conv2d(16, 4 * 8, 1), nn.PixelShuffle(2))
        self.head = nn.Conv2d(8, classes, 1)

    def forward(self, x):
        a = self.e1(x)                                    # 16 x H
        b = self.e2(self.p1(a))                           # 32 x H/2
        m = self.mid(self.p2(b))                          # 32 x H/4
        u = self.d2(torch.cat([self.up_t(m), b], 1))      # 16 x H/2
        u = F.interpolate(u, scale_factor=2, mode="nearest")
        u = self.d1(torch.cat([u, a], 1))                 # 16 x H
        u = F.interpolate(u, scale_factor=0.5, mode="bilinear", align_corners=False)
        y = self.head(self.ps(u))                         # classes x H
        return y.permute(0, 2, 3, 1)                      # per-pixel logits last, as the loss reads them


IMG = (3, 64, 64)
# the classifiers of these two need 224 x 224 (their adaptive pooling to 7x7 / 6x6 must divide the
# features for the TorchScript exporter): run only when named, at batch 2 (0.5 to 2.9 GB)
LARGE = {
    "vis_vgg11_bn": ("cnn", _tv("vgg11_bn", num_classes=10), (3, 224, 224)),
    "vis_alexnet": ("cnn", _tv("alexnet", num_classes=10), (3, 224, 224)),
}
# name -> (family, builder, input shape without batch)
VISION = {
    "vis_squeezenet1_1": ("cnn", _tv("squeezenet1_1", num_classes=10), IMG),
    "vis_shufflenet_v2_x0_5": ("depthwise", _tv("shufflenet_v2_x0_5", num_classes=10), IMG),
    "vis_densenet121": ("concat", _tv("densenet121", num_classes=10), (3, 32, 32)),
    "vis_googlenet": ("concat", _tv("googlenet", num_classes=10, aux_logits=False, init_weights=True), IMG),
    "vis_mnasnet0_5": ("depthwise", _tv("mnasnet0_5", num_classes=10), IMG),
    "vis_mobilenet_v3_small": ("depthwise", _tv("mobilenet_v3_small", num_classes=10), IMG),
    "vis_efficientnet_b0": ("depthwise", _tv("efficientnet_b0", num_classes=10), IMG),
    "vis_regnet_x_400mf": ("residual", _tv("regnet_x_400mf", num_classes=10), IMG),
    "vis_resnet50": ("residual", _tv("resnet50", num_classes=10), IMG),
    "vis_resnext50_32x4d": ("residual", _tv("resnext50_32x4d", num_classes=10), IMG),
    # more of torchvision's families, not tuned on (added after the facts above were settled)
    "vis_resnet18": ("residual", _tv("resnet18", num_classes=10), IMG),
    "vis_mobilenet_v2": ("depthwise", _tv("mobilenet_v2", num_classes=10), IMG),
    "vis_mobilenet_v3_large": ("depthwise", _tv("mobilenet_v3_large", num_classes=10), IMG),
    "vis_regnet_y_400mf": ("residual", _tv("regnet_y_400mf", num_classes=10), IMG),
    "vis_inception_v3": ("concat", _tv("inception_v3", num_classes=10, aux_logits=False, init_weights=True),
                         (3, 80, 80)),
    "vis_convnext_atto": ("convnext", _timm("convnext_atto", num_classes=10), IMG),
    "vis_segnet": ("segmentation", SegNet, (3, 32, 32)),
    "vis_segnet_convt": ("segmentation", lambda: SegNet(convt=True), (3, 32, 32)),
    "vis_segnet_drop2d": ("segmentation", lambda: SegNet(bn=False, dropout2d=True), (3, 32, 32)),  # --dynamo
}

class LayerNorm2d(nn.LayerNorm):
    """LayerNorm over channels as ConvNeXt writes it: permute to NHWC, normalise, permute back (the
    result is a channels-last view)."""

    def forward(self, x):
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class MiniConvNeXt(nn.Module):
    """A two-stage ConvNeXt (hand-written, torch only): a 4x4 stem, LayerNorm over channels, a block
    with a Linear MLP on the NHWC view (torchvision's), a 2x2 strided downsampling and a block whose MLP
    is two 1x1 convolutions (timm's conv_mlp), each with a layer scale and the residual add."""

    def __init__(self, dims=(16, 32), classes=10):
        super().__init__()
        a, b = dims
        self.stem = nn.Sequential(nn.Conv2d(3, a, 4, 4), LayerNorm2d(a))
        self.dw1, self.ln1 = nn.Conv2d(a, a, 7, padding=3, groups=a), nn.LayerNorm(a)
        self.mlp1 = nn.Sequential(nn.Linear(a, 4 * a), nn.GELU(), nn.Linear(4 * a, a))
        self.g1 = nn.Parameter(torch.full((a, 1, 1), 1e-6))
        self.down = nn.Sequential(LayerNorm2d(a), nn.Conv2d(a, b, 2, 2))
        self.dw2, self.ln2 = nn.Conv2d(b, b, 7, padding=3, groups=b), LayerNorm2d(b)
        self.mlp2 = nn.Sequential(nn.Conv2d(b, 4 * b, 1), nn.GELU(), nn.Conv2d(4 * b, b, 1))
        self.g2 = nn.Parameter(torch.full((1, b, 1, 1), 1e-6))
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.LayerNorm(b), nn.Linear(b, classes))

    def forward(self, x):
        x = self.stem(x)
        y = self.mlp1(self.ln1(self.dw1(x).permute(0, 2, 3, 1))).permute(0, 3, 1, 2)
        x = x + self.g1 * y
        x = self.down(x)
        x = x + self.mlp2(self.ln2(self.dw2(x))) * self.g2
        return self.head(x)


# ConvNeXt and its channels-last convolutions (LayerNorm over channels leaves a channels-last tensor):
# timm's small ones (1x1 convolutions as the MLP: conv_mlp) and the larger design (a Linear MLP on the
# permuted NHWC view, as torchvision writes it); `python devtools/torch_oracle.py --set convnext`
CONVNEXT = {
    "cl_mini": ("convnext", MiniConvNeXt, (3, 32, 32)),
    "cl_convnext_femto": ("convnext", _timm("convnext_femto", num_classes=10), IMG),
    "cl_convnext_pico": ("convnext", _timm("convnext_pico", num_classes=10), (3, 48, 48)),
    "cl_tv_convnext_tiny": ("convnext", _tv("convnext_tiny", num_classes=10), IMG),
    "cl_timm_convnext_tiny": ("convnext", _timm("convnext_tiny", num_classes=10), (3, 32, 32)),
    # friends: ConvNeXt V2 (global response norm: an L2 norm over the pixels), EdgeNeXt (channels-last
    # depthwise convolutions beside cross-covariance attention)
    "cl_convnextv2_atto": ("convnext", _timm("convnextv2_atto", num_classes=10), IMG),
    "cl_edgenext_xx_small": ("convnext", _timm("edgenext_xx_small", num_classes=10), IMG),
    # MetaFormer's ConvFormer: a depthwise 7x7 convolution of a permuted NHWC view between Linear layers
    "cl_convformer_s18": ("convnext", _timm("convformer_s18", num_classes=10), IMG),
}
# at the resolution they were designed for (0.3 to 1.5 GB, minutes a step): run only when named
CONVNEXT_LARGE = {
    "cl_convnext_atto_224": ("convnext", _timm("convnext_atto", num_classes=10), (3, 224, 224)),
    "cl_tv_convnext_tiny_224": ("convnext", _tv("convnext_tiny", num_classes=10), (3, 224, 224)),
}

# ---- convolution scratch (devtools/torch_oracle.py --set convscratch): patchify stems at real sizes,
# transposed convolutions in a U-Net and a DCGAN-style generator with its classifier

class Patchify(nn.Module):
    """A ViT / Swin / DINOv2 patch embedding at 224 x 224 with a mean-pooled linear head."""

    def __init__(self, dim, patch, classes=10):
        super().__init__()
        self.proj = nn.Conv2d(3, dim, patch, patch)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        return self.head(self.proj(x).flatten(2).mean(2))


class UNet(nn.Module):
    """Two levels down (conv, BN, ReLU, max pool), up with ConvTranspose2d(2, stride 2), skips."""

    def __init__(self, classes=4, w=16):
        super().__init__()
        def block(cin, cout):
            return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
                                 nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())
        self.d1, self.d2, self.mid = block(3, w), block(w, 2 * w), block(2 * w, 4 * w)
        self.u2, self.c2 = nn.ConvTranspose2d(4 * w, 2 * w, 2, 2), block(4 * w, 2 * w)
        self.u1, self.c1 = nn.ConvTranspose2d(2 * w, w, 2, 2), block(2 * w, w)
        self.head = nn.Conv2d(w, classes, 1)

    def forward(self, x):
        a = self.d1(x)
        b = self.d2(F.max_pool2d(a, 2))
        m = self.mid(F.max_pool2d(b, 2))
        u = self.c2(torch.cat([self.u2(m), b], 1))
        u = self.c1(torch.cat([self.u1(u), a], 1))
        return self.head(u).permute(0, 2, 3, 1)


class GanPair(nn.Module):
    """A DCGAN generator (latent 1x1 -> 4x4 -> 8x8 -> 16x16 image, ConvTranspose2d 4x4) and a classifier
    of its images, trained together (the input is the latent)."""

    def __init__(self, nz=32, classes=10):
        super().__init__()
        self.g = nn.Sequential(nn.ConvTranspose2d(nz, 64, 4, 1, 0, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                               nn.ConvTranspose2d(64, 32, 4, 2, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
                               nn.ConvTranspose2d(32, 3, 4, 2, 1, bias=False), nn.Tanh())
        self.d = nn.Sequential(nn.Conv2d(3, 32, 4, 2, 1), nn.LeakyReLU(0.2), nn.Conv2d(32, 64, 4, 2, 1),
                               nn.BatchNorm2d(64), nn.LeakyReLU(0.2), nn.Flatten(), nn.Linear(64 * 4 * 4, classes))

    def forward(self, z):
        return self.d(self.g(z))


CONVSCRATCH = {
    "cs_patch16_224": ("vision-transformer", lambda: Patchify(768, 16), (3, 224, 224)),
    "cs_patch14_224": ("vision-transformer", lambda: Patchify(384, 14), (3, 224, 224)),
    "cs_patch4_224": ("vision-transformer", lambda: Patchify(96, 4), (3, 224, 224)),
    "cs_patch32_224": ("vision-transformer", lambda: Patchify(768, 32), (3, 224, 224)),
    "cs_unet": ("segmentation", UNet, (3, 32, 32)),
    "cs_dcgan": ("generative", GanPair, (32, 1, 1)),
}

# ---- wide kernels (devtools/torch_oracle.py --set wideconv): oneDNN's gemm convolution and the jit
# kernels' width limits, in networks built for it


class OverlapPatch(nn.Module):
    """PiT's embedding: an overlapping 16 x 16 patch convolution of stride 8 at 224 x 224; with `pool`,
    tokens normed in (B, N, C) and read back as an image (a channels-last view), then PiT's pooling: a
    depthwise 3 x 3 stride-2 convolution with two outputs per channel."""

    def __init__(self, dim=64, pool=False, classes=10):
        super().__init__()
        self.proj = nn.Conv2d(3, dim, 16, 8)
        self.pool = pool
        if pool:
            self.norm = nn.LayerNorm(dim)
            self.down = nn.Conv2d(dim, 2 * dim, 3, 2, 1, groups=dim)
        self.head = nn.Linear(2 * dim if pool else dim, classes)

    def forward(self, x):
        x = self.proj(x)
        if self.pool:
            b, c, h, w = x.shape
            t = self.norm(x.flatten(2).transpose(1, 2))
            x = self.down(t.transpose(1, 2).reshape(b, c, h, w))
        return self.head(x.flatten(2).mean(2))


class WideStem(nn.Module):
    """A padded wide stem on the image (`k` x `k`, stride `s`, pad `p`), then unstrided wide
    convolutions whose input needs its gradient (`mid`: kernel sizes, pad k // 2), a 3 x 3 one, a head."""

    def __init__(self, k, s, p, mid=(), width=16, classes=10):
        super().__init__()
        layers = [nn.Conv2d(3, width, k, s, p), nn.ReLU()]
        for km in mid:
            layers += [nn.Conv2d(width, width, km, 1, km // 2), nn.ReLU()]
        layers += [nn.Conv2d(width, 2 * width, 3, 2, 1), nn.ReLU()]
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(2 * width, classes)

    def forward(self, x):
        return self.head(self.body(x).flatten(2).mean(2))


class LargeKernelBlock(nn.Module):
    """RepLKNet's block: 1 x 1, a large depthwise kernel beside a small one (re-parameterisable), BN,
    ReLU, 1 x 1, residual."""

    def __init__(self, c, k, small=5):
        super().__init__()
        self.pw1 = nn.Sequential(nn.Conv2d(c, c, 1, bias=False), nn.BatchNorm2d(c), nn.ReLU())
        self.large = nn.Conv2d(c, c, k, 1, k // 2, groups=c, bias=False)
        self.small = nn.Conv2d(c, c, small, 1, small // 2, groups=c, bias=False)
        self.bn = nn.BatchNorm2d(c)
        self.pw2 = nn.Conv2d(c, c, 1)

    def forward(self, x):
        h = self.pw1(x)
        return x + self.pw2(F.relu(self.bn(self.large(h) + self.small(h))))


class LargeKernelNet(nn.Module):
    """A RepLKNet-style network at 64 x 64: a strided stem, a stage of 31 x 31 depthwise blocks, a
    transition, a stage of 13 x 13 ones, a head."""

    def __init__(self, c=32, classes=10, kernels=(31, 13)):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, c, 3, 2, 1, bias=False), nn.BatchNorm2d(c), nn.ReLU())
        self.s1 = LargeKernelBlock(c, kernels[0])
        self.down = nn.Sequential(nn.Conv2d(c, 2 * c, 1, bias=False), nn.BatchNorm2d(2 * c), nn.ReLU(),
                                  nn.Conv2d(2 * c, 2 * c, 3, 2, 1, groups=2 * c, bias=False), nn.BatchNorm2d(2 * c))
        self.s2 = LargeKernelBlock(2 * c, kernels[1])
        self.head = nn.Linear(2 * c, classes)

    def forward(self, x):
        return self.head(self.s2(self.down(self.s1(self.stem(x)))).flatten(2).mean(2))


WIDECONV = {
    "wc_overlap16_224": ("vision-transformer", lambda: OverlapPatch(64), (3, 224, 224)),
    "wc_overlap16_pool_224": ("vision-transformer", lambda: OverlapPatch(48, pool=True), (3, 224, 224)),
    "wc_stem7": ("cnn", lambda: WideStem(7, 2, 3), (3, 64, 64)),
    "wc_stem14": ("cnn", lambda: WideStem(14, 4, 7), (3, 64, 64)),
    "wc_stem16": ("cnn", lambda: WideStem(16, 8, 8), (3, 96, 96)),
    "wc_stem15_mid": ("cnn", lambda: WideStem(15, 2, 7, mid=(15, 19)), (3, 64, 64)),
    "wc_stem31_mid": ("cnn", lambda: WideStem(31, 1, 15, mid=(31,), width=8), (3, 32, 32)),
    "wc_replk": ("cnn", LargeKernelNet, (3, 64, 64)),
    "wc_replk_wide": ("cnn", lambda: LargeKernelNet(24, kernels=(27, 17)), (3, 96, 96)),
}
