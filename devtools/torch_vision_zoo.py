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
