"""Dev-only: what eager PyTorch's CPU convolution allocates, one op at a time, next to what
`--profile torch` counts for it (memplan_cli/ops/conv.py). Needs torch; never a memplan dependency.

    python devtools/torch_conv_sweep.py                    # the default sweep, a table on stdout
    python devtools/torch_conv_sweep.py --set patchify     # one set (see SETS)
    python devtools/torch_conv_sweep.py --one "n=2,c=3,h=64,o=192,k=16,s=16,xgrad=0" --events

For each convolution (batch n, channels c -> o, square input h, square kernel k, stride s, padding p,
groups g, dilation d; `t=1` a transposed convolution with output_padding `op`; `xgrad=0` an input
that needs no gradient, as an image; `d1=1` a 1-D convolution over h positions) it runs forward and backward twice on one thread, then measures
the third time with `torch.profiler`'s CPU memory events, phase by phase:
- forward: the peak of the running sum of allocations during the op, less the output (the scratch
  beside it);
- backward: the peak of the running sum during `y.backward(gy)` (gy made before), which the profile
  counts as max(dx + scratch_dx, dx + dW + db + scratch_dW).
With `--verbose` it also prints oneDNN's implementation of each primitive (ONEDNN_VERBOSE).
"""
from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import sys
import tempfile
from types import SimpleNamespace

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("KINETO_LOG_LEVEL", "5")  # the profiler's start / stop lines on stderr


# ---- torch's side ------------------------------------------------------------------------------

def _events(fn):
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    ev = [(e.start_ns(), i, e.nbytes()) for i, e in enumerate(prof.profiler.kineto_results.events())
          if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU]
    ev.sort()
    return [n for _, _, n in ev]


def _peak(ev) -> int:
    run = peak = 0
    for n in ev:
        run += n
        peak = max(peak, run)
    return peak


class _Stdout:
    """oneDNN's verbose lines (C stdout) of a block, captured through the file descriptor."""

    def __enter__(self):
        sys.stdout.flush()
        self.f = tempfile.TemporaryFile(mode="w+")
        self.saved = os.dup(1)
        os.dup2(self.f.fileno(), 1)
        return self

    def __exit__(self, *exc):
        sys.stdout.flush()
        os.dup2(self.saved, 1)
        os.close(self.saved)
        self.f.seek(0)
        self.lines = [ln.strip() for ln in self.f if ",exec," in ln]
        self.f.close()


def _impls(lines) -> list[str]:
    """`kind:impl` of each convolution primitive run (reorders left out)."""
    out = []
    for ln in lines:
        f = ln.split(",")
        if len(f) > 7 and f[5] in ("convolution", "deconvolution"):
            out.append(f"{f[7]}:{f[6]}")
    return out


def measure(c: dict, verbose: bool = False, dtype: str = "float32") -> dict:
    """`dtype` "bfloat16": input, weight and bias in bfloat16, as the convolution sees them under
    autocast (its casts happen before the op) and after `model.to(torch.bfloat16)`."""
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(1)
    torch.manual_seed(0)
    dt = getattr(torch, dtype)
    n, ci, h, o, k = c["n"], c["c"], c["h"], c["o"], c["k"]
    s, p, g, d = c.get("s", 1), c.get("p", 0), c.get("g", 1), c.get("d", 1)
    d1, d3 = bool(c.get("d1")), bool(c.get("d3"))
    sp = (h,) if d1 else (c.get("hd", h), h, h) if d3 else (h, h)  # d3: a volume, `hd` deep, kernel `kd` deep
    ks = (k,) if d1 else (c.get("kd", k), k, k) if d3 else (k, k)
    x = torch.randn(n, ci, *sp, dtype=dt)
    if c.get("cl"):  # a channels-last input (as a LayerNorm over channels leaves it), its gradient too
        x = x.contiguous(memory_format=torch.channels_last)
    x.requires_grad_(bool(c.get("xgrad", 1)))
    if c.get("t"):
        w = torch.randn(ci, o // g, *ks, dtype=dt, requires_grad=True)
    else:
        w = torch.randn(o, ci // g, *ks, dtype=dt, requires_grad=True)
    b = torch.randn(o, dtype=dt, requires_grad=True) if c.get("bias", 1) else None
    if not c.get("wgrad", 1):  # a frozen weight and bias: the backward makes the input's gradient only
        w.requires_grad_(False)
        if b is not None:
            b.requires_grad_(False)

    def f():
        if c.get("t"):
            return (F.conv_transpose1d if d1 else F.conv_transpose3d if d3 else F.conv_transpose2d)(
                x, w, b, s, p, c.get("op", 0), g, d)
        return (F.conv1d if d1 else F.conv3d if d3 else F.conv2d)(x, w, b, s, p, d, g)

    for _ in range(2):
        y = f()
        y.backward(torch.ones_like(y))
    x.grad = w.grad = None
    if b is not None and b.requires_grad:
        b.grad = None
    held = {}
    if verbose:
        torch._C._verbose.mkldnn_set_verbose(1)
    with _Stdout() as out_f:
        fwd = _events(lambda: held.setdefault("y", f()))
    y = held["y"]
    gy = torch.randn_like(y)
    if c.get("cl"):
        gy = gy.contiguous(memory_format=torch.channels_last)
    with _Stdout() as out_b:
        bwd = _events(lambda: y.backward(gy))
    if verbose:
        torch._C._verbose.mkldnn_set_verbose(0)
    return {"fwd": fwd, "bwd": bwd, "y_shape": list(y.shape), "fwd_scratch": _peak(fwd) - y.element_size() * y.numel(),
            "bwd_peak": _peak(bwd), "impl_fwd": _impls(out_f.lines), "impl_bwd": _impls(out_b.lines)}


# ---- the profile's side --------------------------------------------------------------------------

@dataclasses.dataclass
class _Operand:
    """An operand as the facts read it (a dataclass: a 1-D convolution's facts view it unsqueezed)."""
    shape: tuple
    dtype: str = "float32"

    @property
    def num_elements(self):
        out = 1
        for v in self.shape:
            out *= int(v)
        return out

    @property
    def nbytes(self):
        return (2 if self.dtype == "bfloat16" else 4) * self.num_elements


def predict(c: dict, y_shape, dtype: str = "float32") -> dict:
    """The profile's scratch for this convolution (memplan_cli/ops/conv.py's torch facts), phase by
    phase as profiles/torch/replay.py counts them; or its refusal."""
    sys.path.insert(0, ROOT)
    from memplan_cli.ops import conv

    n, ci, h, o, k = c["n"], c["c"], c["h"], c["o"], c["k"]
    s, p, g, d = c.get("s", 1), c.get("p", 0), c.get("g", 1), c.get("d", 1)
    t = bool(c.get("t"))
    nd = 1 if c.get("d1") else 3 if c.get("d3") else 2
    ks = (c.get("kd", k), k, k) if nd == 3 else (k,) * nd
    sp = (c.get("hd", h), h, h) if nd == 3 else (h,) * nd
    wshape = (ci, o // g) + ks if t else (o, ci // g) + ks
    opd = [_Operand(shape=(n, ci) + sp, dtype=dtype), _Operand(shape=wshape, dtype=dtype),
           _Operand(shape=(o,), dtype=dtype), _Operand(shape=tuple(y_shape), dtype=dtype)]
    if nd in (1, 3):  # the loader's 1-D and 3-D types: no depthwise one
        typ = f"ConvTranspose{nd}D" if t else f"Conv{nd}D"
    else:
        typ = "ConvTranspose2D" if t else ("DepthwiseConv2D" if g == ci and g > 1 and wshape[1] == 1 else "Conv2D")
    attrs = {"kernel": ks, "stride": (s,) * nd, "dilation": (d,) * nd, "group": g, "layout": "NCHW",
             "pads": (p,) * 2 * nd, "output_padding": (c.get("op", 0),) * nd}
    if typ == "DepthwiseConv2D":
        attrs["depth_multiplier"] = o // g
    if c.get("cl"):
        attrs["memory_format"] = "channels_last"
    op = SimpleNamespace(type=typ, inputs=[0, 1, 2] if c.get("bias", 1) else [0, 1], outputs=[3], attrs=attrs)
    f = conv.TORCH
    why = f["refuse"](op, opd)
    if why:
        return {"refused": why}
    xgrad = bool(c.get("xgrad", 1))
    needs = [xgrad, True, True]

    def size(spec):
        if isinstance(spec, int):
            return spec
        spec, _, cond = spec.partition("?")
        if cond and not needs[int(cond[1:])]:
            return 0
        v = op.inputs[int(spec[2:])] if spec.startswith("in") else op.outputs[int(spec[3:])]
        return opd[v].nbytes

    def best(alts):
        return max((sum(size(x) for x in alt) for alt in alts), default=0)

    fwd = best(f["fwd_scratch"](op, opd))
    dx = opd[0].nbytes if xgrad else 0
    try:
        sdx = best(f["bwd_scratch_dx"](op, opd)) if xgrad else 0
    except Exception as e:  # the profile refuses this input gradient (UnsupportedOpError)
        return {"refused": str(e)}
    if not c.get("wgrad", 1):  # a frozen weight: no weight-gradient phase
        return {"fwd_scratch": fwd, "bwd_peak": dx + sdx, "type": typ}
    dw = opd[1].nbytes + (opd[2].nbytes if c.get("bias", 1) else 0)
    sdw = best(f["bwd_scratch_dw"](op, opd))
    return {"fwd_scratch": fwd, "bwd_peak": max(dx + sdx, dx + dw + sdw), "type": typ}


# ---- sweeps --------------------------------------------------------------------------------------

def _grid(**axes):
    keys = list(axes)
    return [dict(zip(keys, vals)) for vals in itertools.product(*(axes[k] for k in keys))]


SETS = {
    # patchify stems (ViT / DeiT / Swin / ConvNeXt): the image needs no gradient
    "patchify": [dict(cfg, s=cfg["k"]) for cfg in
                 _grid(n=[1, 2, 4], c=[3], h=[64], o=[96, 192], k=[4, 8, 14, 16, 32], xgrad=[0])
                 + _grid(n=[2], c=[3], h=[224], o=[768], k=[14, 16, 32], xgrad=[0])
                 + _grid(n=[2], c=[3], h=[224], o=[96], k=[4], xgrad=[0])
                 + _grid(n=[2], c=[3, 8, 16, 64], h=[32], o=[64], k=[2, 4, 8, 16], xgrad=[0, 1])],
    # kernel sizes around oneDNN's limits, stride = kernel or 1
    "kernel": [dict(n=2, c=c, h=32, o=32, k=k, s=s, xgrad=xg) for c in (3, 16) for k in (7, 11, 13, 14, 15, 17)
               for s in (1, k) for xg in (0, 1)],
    # small strided stems (LeViT, MobileNet, ResNet): 3x3 stride 2 pad 1, input gradient or not
    "stem": _grid(n=[2, 4], c=[3, 8, 16, 32], h=[16, 32, 64], o=[16, 32], k=[3], s=[2], p=[1], xgrad=[0, 1]),
    "strided": _grid(n=[2], c=[16, 24, 32, 64], h=[8, 16, 32], o=[16, 32, 64], k=[1, 3], s=[2], p=[0, 1],
                     xgrad=[1]),
    "depthwise": [dict(n=2, c=c, h=h, o=c, k=k, s=s, p=k // 2, g=c) for c in (16, 24, 96) for h in (8, 32)
                  for k in (3, 5, 7) for s in (1, 2)],
    "transposed": _grid(n=[2, 4], c=[8, 16, 32], h=[8, 16], o=[8, 16, 32], k=[2, 3, 4], s=[1, 2], p=[0, 1], op=[0],
                        t=[1]) + _grid(n=[2], c=[16, 32], h=[8], o=[16, 32], k=[3, 4], s=[2], p=[1], op=[1], t=[1]),
}
# channel counts around oneDNN's blocking (16 on AVX-512, 8 on AVX2) and its first-convolution kernels
SETS["channels"] = _grid(n=[2], c=[1, 2, 4, 6, 8, 12, 20, 24, 40], h=[16], o=[16, 24], k=[3], s=[1, 2], p=[1], xgrad=[0, 1])
# grouped (ResNeXt / RegNet): channels per group 4 to 32, dilation
# channels-last grouped convolutions (EdgeNeXt's depth multiplier 2 after a LayerNorm over channels,
# ResNeXt-like groups): oneDNN's jit_avx512_common below 16 channels per group, brgemm above
SETS["cl_grouped"] = [dict(n=n, c=c, h=h, o=c * m, k=k, s=s, p=k // 2, g=c, cl=1, bias=b)
                      for n, c, h, m, k, s, b in ((4, 48, 16, 2, 5, 2, 1), (4, 96, 8, 2, 7, 2, 1),
                                                  (2, 24, 16, 2, 3, 1, 0), (4, 32, 8, 4, 3, 1, 1),
                                                  (2, 40, 14, 3, 5, 1, 1), (4, 192, 4, 2, 9, 2, 1))] + \
    [dict(n=n, c=c, h=h, o=o, k=3, s=s, p=1, g=c // cpg, cl=1, bias=b)
     for n, c, h, o, cpg, s, b in ((4, 64, 8, 64, 4, 1, 1), (4, 64, 8, 64, 16, 2, 1), (2, 64, 8, 128, 32, 1, 1),
                                   (2, 48, 8, 48, 8, 1, 1), (2, 48, 8, 96, 12, 1, 0), (2, 96, 8, 96, 24, 2, 1),
                                   (2, 128, 8, 80, 64, 1, 1), (4, 64, 8, 160, 32, 2, 1), (2, 36, 8, 72, 6, 1, 1))]

# channels-first grouped convolutions no jit kernel blocks (a depth multiplier, 2 or 6 channels per group):
# gemm in all three phases
SETS["gemm_grouped"] = [dict(n=n, c=c, h=h, o=o, k=k, s=s, p=k // 2, g=g, bias=b)
                        for n, c, h, o, k, s, g, b in ((4, 48, 16, 96, 5, 2, 48, 1), (2, 24, 8, 72, 3, 1, 24, 0),
                                                       (2, 32, 8, 64, 3, 1, 16, 1), (2, 36, 8, 36, 3, 2, 6, 1),
                                                       (2, 16, 8, 64, 7, 1, 16, 1), (4, 96, 14, 192, 3, 2, 96, 1),
                                                       (1, 32, 28, 128, 3, 1, 32, 1), (4, 48, 8, 48, 5, 1, 24, 0),
                                                       (2, 64, 16, 128, 7, 2, 64, 1), (4, 20, 12, 60, 3, 1, 10, 1))]


def _random_cl_grouped(count, seed):
    """Channels-last grouped convolutions drawn at random (fixed seed): depth multipliers and groups of 2
    to 32 channels, kernels 3 to 9, small images (the jit kernel's width limits)."""
    import random

    rnd = random.Random(seed)
    out = []
    while len(out) < count:
        c = rnd.choice([16, 24, 32, 48, 64, 96])
        k = rnd.choice([3, 5, 7, 9])
        if rnd.random() < 0.5:
            g, o = c, c * rnd.choice([2, 3, 4])
        else:
            cpg = rnd.choice([2, 4, 8, 12, 16, 24, 32])
            if c % cpg:
                continue
            g, o = c // cpg, c // cpg * rnd.choice([cpg, 2 * cpg, cpg // 2 or 1])
        out.append(dict(n=rnd.choice([1, 2, 4]), c=c, h=rnd.choice([2, 3, 4, 7, 8, 14]), o=o, k=k,
                        s=rnd.choice([1, 2]), p=k // 2, g=g, cl=1, bias=int(rnd.random() < 0.7)))
    return out


SETS["cl_grouped_random"] = _random_cl_grouped(40, 39)
SETS["grouped"] = [dict(n=2, c=c, h=8, o=c, k=3, s=s, p=1, g=c // cpg) for c in (64, 96, 128) for cpg in (4, 8, 16, 24, 32)
                   if c % cpg == 0 for s in (1, 2)] + \
    [dict(n=2, c=c, h=16, o=32, k=3, p=2, d=2, xgrad=xg) for c in (16, 32) for xg in (0, 1)]


def _random(count, seed=0):
    """Shapes drawn at random (fixed seed): checks the rules on shapes they were not derived from."""
    import random

    rnd = random.Random(seed)
    out = []
    while len(out) < count:
        c = rnd.choice([3, 8, 16, 24, 32, 40, 48, 64, 96, 112, 128])
        k = rnd.choice([1, 1, 3, 3, 3, 5, 7])
        s = rnd.choice([1, 1, 2])
        h = rnd.choice([7, 8, 13, 14, 16, 28, 32])
        dw = k > 1 and c > 3 and rnd.random() < 0.3
        o = c if dw else rnd.choice([8, 16, 24, 32, 48, 64, 96, 128])
        cfg = dict(n=rnd.choice([1, 2, 4, 8, 16]), c=c, h=h, o=o, k=k, s=s, p=k // 2,
                   xgrad=int(rnd.random() < 0.8))
        out.append(_grouped_and_padded(cfg, dw))
    return out


def _grouped_and_padded(cfg, dw):
    """A random shape's depthwise groups, and no padding for a strided 1x1."""
    if dw:
        cfg["g"] = cfg["c"]
    if cfg["k"] == 1 and cfg["s"] > 1:
        cfg["p"] = 0
    return cfg


def _random_large(count, seed=2):
    """Shapes of networks fed 96 to 224 pixels a side (the draws before measured 64 x 64 images): the early
    stages' large maps, where oneDNN's blocking and ATen's slow-path thresholds may choose otherwise;
    batch 1 to 4, at most 64 x 112 x 112 input elements per sample (memory kept modest)."""
    import random

    rnd = random.Random(seed)
    out = []
    while len(out) < count:
        c = rnd.choice([3, 8, 16, 24, 32, 48, 64, 96])
        h = rnd.choice([28, 48, 56, 80, 96, 112, 160, 224])
        if c * h * h > 64 * 112 * 112:
            continue
        k = rnd.choice([1, 1, 3, 3, 3, 5, 7])
        s = rnd.choice([1, 1, 2])
        dw = k > 1 and c > 3 and rnd.random() < 0.3
        o = c if dw else rnd.choice([16, 24, 32, 48, 64, 96])
        cfg = dict(n=rnd.choice([1, 2, 2, 4]), c=c, h=h, o=o, k=k, s=s, p=k // 2, xgrad=int(c > 3))
        out.append(_grouped_and_padded(cfg, dw))
    return out


SETS["random"] = _random(150)
SETS["large"] = _random_large(40)
SETS["random_b"] = _random(150, seed=1)  # drawn after the rules were fixed on "random"
SETS["random_c"] = _random(150, seed=90417)  # drawn after the bias's gradient copies were counted
# DCGAN / U-Net decoders: a latent 1x1 input, 3 or 1 output channels, channel counts off 16
SETS["transposed_nets"] = [dict(c, t=1) for c in (
    dict(n=2, c=100, h=1, o=64, k=4, s=1, p=0), dict(n=4, c=64, h=1, o=128, k=4, s=1, p=0),
    dict(n=2, c=64, h=8, o=3, k=4, s=2, p=1), dict(n=2, c=32, h=16, o=1, k=4, s=2, p=1),
    dict(n=2, c=128, h=4, o=64, k=4, s=2, p=1), dict(n=2, c=48, h=8, o=24, k=2, s=2, p=0),
    dict(n=2, c=24, h=8, o=12, k=2, s=2, p=0), dict(n=2, c=64, h=8, o=3, k=3, s=1, p=1),
    dict(n=2, c=40, h=7, o=20, k=3, s=2, p=1, op=1), dict(n=3, c=16, h=5, o=8, k=2, s=2, p=0))]
# the torch zoos' CNNs (devtools/torch_oracle.py cnn_bn, resnet_bn, mobilenet, efficientnet) at 32 x 32
_ZOO = [dict(c=3, h=32, o=16, k=3, p=1, xgrad=0), dict(c=16, h=16, o=32, k=3, p=1), dict(c=32, h=8, o=32, k=3, p=1),
        dict(c=3, h=32, o=16, k=3, p=1, xgrad=0, bias=0), dict(c=16, h=16, o=16, k=3, p=1, bias=0),
        dict(c=16, h=16, o=32, k=3, s=2, p=1, bias=0), dict(c=32, h=8, o=32, k=3, p=1, bias=0),
        dict(c=16, h=16, o=32, k=1, s=2, bias=0), dict(c=32, h=8, o=64, k=3, s=2, p=1, bias=0),
        dict(c=64, h=4, o=64, k=3, p=1, bias=0), dict(c=32, h=8, o=64, k=1, s=2, bias=0),
        dict(c=3, h=32, o=16, k=3, s=2, p=1, xgrad=0, bias=0), dict(c=16, h=16, o=16, k=1, bias=0),
        dict(c=16, h=16, o=16, k=3, p=1, g=16, bias=0), dict(c=16, h=16, o=64, k=1, bias=0),
        dict(c=64, h=16, o=64, k=3, s=2, p=1, g=64, bias=0), dict(c=64, h=8, o=24, k=1, bias=0),
        dict(c=24, h=8, o=96, k=1, bias=0), dict(c=96, h=8, o=96, k=3, p=1, g=96, bias=0),
        dict(c=96, h=8, o=24, k=1, bias=0), dict(c=96, h=8, o=96, k=3, s=2, p=1, g=96, bias=0),
        dict(c=96, h=4, o=32, k=1, bias=0), dict(c=16, h=1, o=4, k=1), dict(c=4, h=1, o=16, k=1),
        dict(c=64, h=1, o=4, k=1), dict(c=4, h=1, o=64, k=1), dict(c=96, h=1, o=6, k=1), dict(c=6, h=1, o=96, k=1)]
SETS["zoo"] = [dict(n=n, **c) for n in (4, 16) for c in _ZOO]
# brgemm's small shapes (at most 4 output pixels): its forward goes to the jit kernels (DenseNet's and
# ShuffleNet's last stages at 32-64 pixels); and one-pixel inputs
SETS["small"] = [dict(n=2, c=128, h=2, o=32, k=3, p=1), dict(n=2, c=128, h=2, o=32, k=3, p=1, bias=0),
                 dict(n=4, c=32, h=4, o=64, k=3, s=2, p=1, bias=0), dict(n=2, c=96, h=2, o=96, k=1, bias=0),
                 dict(n=2, c=48, h=4, o=96, k=3, s=2, p=1, bias=0), dict(n=2, c=24, h=2, o=24, k=1, bias=0),
                 dict(n=2, c=24, h=2, o=24, k=1), dict(n=2, c=64, h=2, o=40, k=1),
                 dict(n=4, c=64, h=4, o=24, k=3, s=2, p=1), dict(n=2, c=3, h=4, o=16, k=3, s=2, p=1, xgrad=0),
                 dict(n=2, c=512, h=1, o=128, k=1, bias=0), dict(n=2, c=128, h=1, o=32, k=3, p=1)]
# kernels 14 wide and more (oneDNN's gemm kernels and the jit kernels' width limits): stride 1 to the
# kernel, padded and not; depthwise large kernels (RepLKNet's 13 x 13 and 31 x 31)
SETS["wide"] = [dict(n=2, c=c, h=h, o=o, k=k, s=s, p=p, xgrad=int(c > 3)) for c, o in ((3, 32), (16, 32), (24, 40), (64, 64))
                for k, h in ((14, 32), (15, 32), (16, 32), (19, 40), (31, 40)) for s in sorted({1, 2, k // 2, k})
                for p in (0, k // 2) if (h + 2 * p - k) // s + 1 >= 1]
# the input's gradient alone (a frozen weight): the kernels oneDNN picks for it, strided from 8 wide
SETS["wide_dx"] = [dict(n=2, c=c, h=h, o=o, k=k, s=s, p=p, wgrad=0) for c, o in ((16, 32), (24, 40), (64, 64))
                   for k, h in ((8, 32), (11, 32), (14, 32), (15, 32), (16, 32), (19, 40), (31, 40))
                   for s in sorted({1, 2, k // 2, k}) for p in (0, k // 2)]
# dilated wide kernels (ungrouped): the jit kernels' limits count the dilated extent
SETS["wide_dil"] = [dict(n=2, c=c, h=48, o=32, k=k, s=s, p=p, d=2, xgrad=int(c > 3)) for c in (3, 16) for k in (14, 15)
                    for s in (1, 2) for p in (0, k - 1)]
# grouped wide kernels (not depthwise): 4 to 32 channels per group, unstrided; strided on an input that
# needs no gradient
SETS["wide_grouped"] = [dict(n=2, c=c, h=32, o=c, k=k, s=1, p=p, g=c // cpg) for c in (32, 64) for cpg in (4, 8, 16, 32)
                        if c // cpg > 1 for k in (15, 17) for p in (0, k // 2)] + \
    [dict(n=2, c=32, h=32, o=64, k=16, s=s, p=p, g=g, xgrad=0) for g in (2, 8) for s in (2, 8) for p in (0, 8)]
SETS["wide_dw"] = [dict(n=2, c=c, h=h, o=c, k=k, s=s, p=k // 2, g=c) for c in (16, 24, 64) for h in (14, 32)
                   for k in (13, 14, 15, 17, 31) for s in (1, 2)]
# 1-D convolutions (eager runs them as the 2-D convolution of their unsqueezed view): ungrouped, strided,
# grouped (strided: oneDNN's brgconv_strided above 16 outputs per group), depthwise (Mamba's causal
# kernel 4, ConvNeXt-1D's 7), grouped 1x1 on the slow path
SETS["conv1d"] = [dict(cfg, d1=1) for cfg in
                  _grid(n=[2, 4], c=[16, 48], h=[32, 100], o=[32], k=[1, 3, 5], s=[1, 2], p=[0, 1])
                  + [dict(n=n, c=c, h=h, o=c * m, k=k, s=s, p=p, g=c) for n, c, h, m, k, s, p in (
                      (4, 64, 32, 1, 4, 1, 3), (2, 48, 50, 1, 3, 1, 1), (2, 96, 32, 1, 7, 1, 3), (4, 16, 64, 1, 5, 2, 2),
                      (2, 40, 33, 1, 3, 2, 1), (2, 24, 32, 2, 3, 1, 1), (4, 128, 16, 1, 4, 1, 3), (1, 64, 40, 1, 4, 1, 3))]
                  + [dict(n=n, c=c, h=h, o=o, k=k, s=s, p=k // 2, g=g) for n, c, h, o, k, s, g in (
                      (2, 64, 32, 64, 3, 2, 2), (2, 64, 32, 64, 3, 2, 4), (4, 96, 32, 96, 5, 2, 3), (2, 64, 32, 128, 3, 1, 4),
                      (2, 48, 40, 48, 3, 2, 6), (2, 64, 32, 64, 1, 1, 4), (4, 48, 20, 96, 1, 1, 3), (2, 64, 31, 64, 3, 3, 2),
                      (1, 64, 32, 64, 1, 1, 8), (8, 32, 16, 64, 1, 1, 2))]]
# grouped transposed convolutions (oneDNN's deconvolution of a grouped convolution's backward data):
# 2 to 32 channels per group, depthwise, kernels 2 to 4, strides 1 and 2, with and without a bias
SETS["transposed_grouped"] = [dict(n=n, c=c, h=h, o=o, k=k, s=s, p=p, g=g, t=1, bias=b) for n, c, h, o, k, s, p, g, b in (
    (2, 32, 8, 32, 4, 2, 1, 2, 1), (2, 32, 8, 32, 3, 1, 1, 2, 1), (2, 64, 8, 64, 4, 2, 1, 64, 1), (2, 64, 8, 64, 4, 2, 1, 64, 0),
    (2, 64, 8, 64, 2, 2, 0, 64, 1), (2, 64, 8, 64, 3, 1, 1, 64, 1), (2, 32, 8, 32, 3, 1, 1, 2, 0), (2, 64, 8, 64, 4, 2, 1, 2, 1),
    (2, 64, 8, 64, 4, 2, 1, 4, 0), (2, 96, 8, 96, 2, 2, 0, 3, 1), (2, 64, 8, 32, 4, 2, 1, 2, 1), (2, 32, 8, 64, 4, 2, 1, 2, 1),
    (4, 48, 8, 48, 3, 2, 1, 6, 1), (2, 128, 4, 128, 4, 2, 1, 4, 1), (2, 16, 16, 16, 4, 2, 1, 2, 1), (2, 64, 8, 64, 3, 1, 1, 8, 1),
    (2, 64, 8, 64, 3, 1, 1, 16, 1), (2, 48, 7, 48, 4, 2, 1, 48, 1), (2, 24, 8, 24, 4, 2, 1, 24, 1), (2, 64, 8, 64, 2, 2, 0, 2, 0))]
def _random_dw_and_slow_grouped(count, seed):
    """Shapes drawn at random (fixed seed) after the rules for the grouped slow path, depthwise Conv1d and
    jit_dw's weight-gradient limits were written: depthwise and grouped Conv1d, grouped 1x1 kernels on a
    batch under 16, depthwise 2-D kernels 1 to 3 on maps of 1 to 8 pixels."""
    import random

    rnd = random.Random(seed)
    out = []
    while len(out) < count:
        kind = rnd.choice(["dw1d", "grp1d", "slow", "dw2d"])
        c = rnd.choice([16, 24, 32, 40, 48, 64, 96, 128])
        n = rnd.choice([1, 2, 4, 8])
        if kind == "dw1d":
            k = rnd.choice([2, 3, 4, 5, 7])
            p = rnd.choice([0, k // 2, k - 1])
            cfg = dict(n=n, c=c, h=rnd.choice([16, 31, 50, 64]), o=c * rnd.choice([1, 1, 1, 2]), k=k,
                       s=rnd.choice([1, 1, 2]), p=p, g=c, d1=1)
        elif kind == "grp1d":
            g = rnd.choice([2, 4, 8])
            k = rnd.choice([1, 3, 5])
            cfg = dict(n=n, c=c, h=rnd.choice([16, 32, 49]), o=c // g * g * rnd.choice([1, 2]), k=k,
                       s=rnd.choice([1, 2]) if k > 1 else 1, p=k // 2, g=g, d1=1)
        elif kind == "slow":
            g = rnd.choice([2, 3, 4, 8])
            if c % g:
                continue
            cfg = dict(n=n, c=c, h=rnd.choice([1, 4, 7, 8, 14]), o=g * rnd.choice([4, 8, 16, 24, 32]), k=1, g=g)
        else:
            k = rnd.choice([1, 2, 3, 3])
            s = rnd.choice([1, 1, 2])
            cfg = dict(n=rnd.choice([2, 4, 16]), c=c, h=rnd.choice([1, 2, 3, 4, 8]), o=c, k=k, s=s,
                       p=rnd.choice([0, k // 2]), g=c)
            if cfg["h"] + 2 * cfg["p"] < k:
                continue
        cfg["bias"] = int(rnd.random() < 0.7)
        cfg["xgrad"] = int(rnd.random() < 0.85)
        out.append(cfg)
    return out


SETS["dw_slow_random"] = _random_dw_and_slow_grouped(48, 3952)
def _random_tconv_grouped(count, seed):
    """Unstrided grouped transposed convolutions drawn at random (fixed seed) after their rule was written:
    8 to 48 channels per group each way, 2 to 4 groups, kernels 1 to 4, pads up to half the kernel."""
    import random

    rnd = random.Random(seed)
    out = []
    while len(out) < count:
        g = rnd.choice([2, 3, 4])
        k = rnd.choice([1, 2, 3, 3, 4])
        out.append(dict(n=rnd.choice([1, 2, 4]), c=g * rnd.choice([8, 16, 24, 32, 48]), h=rnd.choice([4, 7, 8, 12, 16]),
                        o=g * rnd.choice([8, 16, 24, 32]), k=k, s=1, p=rnd.choice([0, k // 2]), g=g, t=1,
                        bias=int(rnd.random() < 0.6), xgrad=int(rnd.random() < 0.85)))
    return out


SETS["transposed_grouped_random"] = _random_tconv_grouped(16, 5239)
SETS["transposed_grouped_random_b"] = _random_tconv_grouped(16, 7411)  # drawn after the output's copy was added
def _random_tconv_strided_dw(count, seed):
    """Grouped transposed convolutions drawn at random (fixed seed) after the rules for strided groups,
    depthwise ones and groups of 4 channels were written: strided groups of 8 to 48 input channels each,
    depthwise (16 to 96 channels), and groups whose channel counts are multiples of 4 (4, 12 or 20 per
    group), kernels 1 to 4, strides 1 and 2, output_padding where the stride allows."""
    import random

    rnd = random.Random(seed)
    out = []
    while len(out) < count:
        kind = rnd.choice(["strided", "dw", "four"])
        k = rnd.choice([1, 2, 3, 4])
        s = rnd.choice([1, 2]) if kind != "strided" else 2
        if kind == "strided":
            g = rnd.choice([2, 3, 4])
            c, o = g * rnd.choice([8, 16, 24, 32, 48]), g * rnd.choice([8, 16, 24, 32])
        elif kind == "dw":
            g = c = o = rnd.choice([16, 24, 32, 40, 48, 64, 96])
        else:
            g = rnd.choice([2, 4, 8, 16])
            c, o = g * rnd.choice([4, 12, 20]), g * rnd.choice([4, 8, 12])
        cfg = dict(n=rnd.choice([1, 2, 4]), c=c, h=rnd.choice([4, 7, 8, 12, 16]), o=o, k=k, s=s,
                   p=rnd.choice([0, k // 2]), g=g, t=1, bias=int(rnd.random() < 0.6), xgrad=int(rnd.random() < 0.85))
        if s > 1 and rnd.random() < 0.3:
            cfg["op"] = 1
        out.append(cfg)
    return out


SETS["transposed_strided_dw_random"] = _random_tconv_strided_dw(40, 60629)
SETS["transposed_strided_dw_random_b"] = _random_tconv_strided_dw(40, 71903)  # drawn after the odd-width rule
SETS["transposed_strided_dw_random_c"] = _random_tconv_strided_dw(40, 5521)  # drawn after AVX2's 8-wide weight
SETS["transposed_strided_dw_random_d"] = _random_tconv_strided_dw(40, 33301)  # after the bias's copies
def _random_tconv_gemm(count, seed):
    """Grouped transposed convolutions no jit kernel blocks (channels per group not in multiples of 4 both
    ways: gemm in every phase), drawn at random (fixed seed) after their rule was written: 1 to 12 channels
    per group each way, 2 to 32 groups, kernels 2 to 4, strides 1 and 2, with and without a bias."""
    import random

    rnd = random.Random(seed)
    out = []
    while len(out) < count:
        ci, co = rnd.choice([(6, 6), (2, 1), (1, 2), (3, 3), (6, 2), (12, 6), (10, 5), (2, 6), (5, 10), (1, 3)])
        g = rnd.choice([2, 4, 8, 16, 32])
        k = rnd.choice([2, 3, 4])
        s = rnd.choice([1, 2])
        cfg = dict(n=rnd.choice([1, 2, 4]), c=g * ci, h=rnd.choice([4, 7, 8, 12, 16]), o=g * co, k=k, s=s,
                   p=rnd.choice([0, k // 2]), g=g, t=1, bias=int(rnd.random() < 0.6), xgrad=int(rnd.random() < 0.85))
        if s > 1 and rnd.random() < 0.3:
            cfg["op"] = 1
        out.append(cfg)
    return out


SETS["transposed_gemm_random"] = _random_tconv_gemm(40, 48611)  # drawn after the gemm deconvolution rule
SETS["transposed_gemm_random_b"] = _random_tconv_gemm(40, 27077)  # after gemm backward beside a brg forward
# eager's slow transposed kernel (slow_conv_transpose2d): unstrided 1x1 kernels on a batch under 16 (padded,
# grouped, frozen input or weight), and ungrouped kernels up to 3 on one small sample (strided, output_padding)
SETS["transposed_slow"] = [dict(t=1, **c) for c in (
    dict(n=2, c=16, h=8, o=32, k=1), dict(n=2, c=16, h=8, o=32, k=1, bias=0),
    dict(n=2, c=16, h=8, o=32, k=1, xgrad=0), dict(n=2, c=16, h=8, o=32, k=1, p=1),
    dict(n=4, c=16, h=8, o=32, k=1, g=2), dict(n=4, c=16, h=8, o=32, k=1, g=2, bias=0),
    dict(n=1, c=16, h=8, o=32, k=1, g=4), dict(n=4, c=16, h=8, o=32, k=1, g=16),
    dict(n=1, c=8, h=8, o=16, k=3, s=2, p=1),
    dict(n=1, c=8, h=8, o=16, k=3, s=2, p=1, op=1), dict(n=1, c=8, h=8, o=16, k=3, s=1, p=1, xgrad=0),
    dict(n=1, c=8, h=8, o=16, k=2, s=1))]


def _random_tconv_slow(count, seed):
    """Transposed convolutions eager runs on its slow kernel, drawn at random (fixed seed) after its rule was
    written: unstrided 1x1 kernels on a batch of 1 to 15 (groups 1 to 8, pad 0 or 1), and ungrouped kernels 1 to
    3 on one sample of at most 20,480 elements (strides 1 to 3, dilation 1 or 2, output_padding), with and
    without a bias, a frozen input or weight."""
    import random

    rnd = random.Random(seed)
    out = []
    while len(out) < count:
        if rnd.random() < 0.5:
            g = rnd.choice([1, 1, 2, 4, 8])
            cfg = dict(n=rnd.randint(1, 15), c=g * rnd.choice([1, 3, 4, 8, 16]), h=rnd.choice([1, 4, 7, 8, 14]),
                       o=g * rnd.choice([1, 2, 3, 8, 16, 24]), k=1, s=1, p=rnd.choice([0, 0, 1]), g=g)
            if cfg["p"] and cfg["h"] < 3:
                cfg["p"] = 0
        else:
            k, s, d = rnd.choice([1, 2, 3]), rnd.choice([1, 2, 3]), rnd.choice([1, 1, 2])
            c = rnd.choice([3, 8, 16, 32, 64])
            h = rnd.choice([1, 2, 4, 7, 8, 16])
            if c * h * h > 20480 or (k, s, d) == (1, 1, 1):
                continue
            cfg = dict(n=1, c=c, h=h, o=rnd.choice([1, 3, 16, 24, 48]), k=k, s=s, p=rnd.choice([0, k // 2]), d=d)
            if s > 1 and rnd.random() < 0.3:
                cfg["op"] = 1
        cfg.update(t=1, bias=int(rnd.random() < 0.6), xgrad=int(rnd.random() < 0.85))
        if rnd.random() < 0.15:
            cfg["wgrad"] = 0
        out.append(cfg)
    return out


SETS["transposed_slow_random"] = _random_tconv_slow(40, 54301)  # drawn after the slow transposed rule
def _random_brg_block(count, seed):
    """Strided convolutions whose input's gradient brgconv_strided runs over channels in an odd number of
    16-blocks (its cost model picks the weight copy's block: `_brg_ic_block_open`), drawn at random (fixed
    seed) after that rule was written: 2-D and 1-D, ungrouped, 2 groups, transposed (its output channels);
    kernels 1 to 5, strides 2 and 3, 4 to 56 pixels, batch 1 to 8."""
    import random

    rnd = random.Random(seed)
    out = []
    while len(out) < count:
        kind = rnd.choice(["2d", "2d", "1d", "g2", "t"])
        odd = rnd.choice([40, 48, 80, 112, 144, 176])
        k = rnd.choice([1, 2, 3, 3, 5]) if kind != "t" else rnd.choice([2, 3, 4])
        s = rnd.choice([2, 2, 3]) if kind != "t" else 2
        h = rnd.choice([4, 7, 8, 13, 14, 28, 56]) if kind != "1d" else rnd.choice([16, 50, 100, 200])
        cfg = dict(n=rnd.choice([1, 2, 4, 8]), c=odd, h=h, o=rnd.choice([16, 32, 64, 96]), k=k, s=s,
                   p=0 if k == 1 else rnd.choice([0, k // 2]), xgrad=1, bias=int(rnd.random() < 0.5))
        if kind == "1d":
            cfg["d1"] = 1
        elif kind == "g2":
            cfg.update(c=2 * odd, o=2 * cfg["o"], g=2)
        elif kind == "t":
            cfg.update(c=cfg["o"], o=odd, t=1)
        if (cfg["h"] + 2 * cfg["p"] - k) < 0:
            continue
        out.append(cfg)
    return out


SETS["brg_block_random"] = _random_brg_block(40, 54302)  # drawn after the brgconv_strided block rule
# eager's slow dilated kernel (slow_conv_dilated2d): dilated kernels up to 3 on one small sample
SETS["dilated_slow"] = [dict(n=1, c=8, h=8, o=16, k=3, p=2, d=2), dict(n=1, c=8, h=8, o=16, k=3, p=2, d=2, bias=0),
                        dict(n=1, c=8, h=8, o=16, k=3, p=2, d=2, xgrad=0), dict(n=1, c=16, h=16, o=16, k=3, s=2, p=2, d=2),
                        dict(n=1, c=8, h=8, o=16, k=2, p=1, d=3)]


def _random_dilated_slow(count, seed):
    """Dilated convolutions eager runs on its slow dilated kernel, drawn at random (fixed seed) after its rule
    was written: one sample of at most 20,480 elements, ungrouped, kernels 1 to 3, dilation 2 to 4, strides 1
    and 2, pads 0 to the dilated extent's half, biases, frozen inputs and weights at random; 2-D and 1-D."""
    import random

    rnd = random.Random(seed)
    out = []
    while len(out) < count:
        k, d, c = rnd.choice([1, 2, 3]), rnd.choice([2, 3, 4]), rnd.choice([1, 3, 8, 16, 32, 64])
        h = rnd.choice([4, 7, 8, 16, 17])
        d1 = rnd.random() < 0.25
        if d1:
            h = rnd.choice([16, 50, 100])
        if c * (h if d1 else h * h) > 20480:
            continue
        p = rnd.choice([0, d * (k - 1) // 2])
        if h + 2 * p - d * (k - 1) < 1:
            continue
        cfg = dict(n=1, c=c, h=h, o=rnd.choice([1, 8, 16, 24, 48]), k=k, s=rnd.choice([1, 1, 2]), p=p, d=d,
                   bias=int(rnd.random() < 0.6), xgrad=int(rnd.random() < 0.85))
        if d1:
            cfg["d1"] = 1
        if rnd.random() < 0.15 and cfg["xgrad"]:  # a frozen weight where the input needs its gradient
            cfg["wgrad"] = 0
        out.append(cfg)
    return out


SETS["dilated_slow_random"] = _random_dilated_slow(40, 54303)  # drawn after the slow dilated rule
SETS["conv3d_slow"] = [dict(d3=1, **c) for c in (  # the shapes slow_conv3d's rule was measured on
    dict(n=1, c=3, hd=4, h=6, o=4, k=3, p=1), dict(n=1, c=3, hd=4, h=6, o=4, k=3, p=1, bias=0),
    dict(n=1, c=3, hd=4, h=6, o=4, k=1), dict(n=4, c=3, hd=4, h=6, o=4, k=1),
    dict(n=1, c=8, hd=4, h=6, o=8, k=1, p=1), dict(n=1, c=8, hd=4, h=6, o=8, k=1, s=2),
    dict(n=1, c=8, hd=4, h=6, o=8, k=3, s=2, p=1), dict(n=1, c=8, hd=4, h=6, o=8, k=1, g=2),
    dict(n=4, c=8, hd=4, h=6, o=8, k=1, g=2), dict(n=1, c=8, hd=4, h=6, o=8, k=1, kd=3),
    dict(n=4, c=8, hd=4, h=6, o=8, k=1, kd=3), dict(n=4, c=8, hd=4, h=6, o=8, k=1, kd=3, p=1),
    dict(n=1, c=8, hd=4, h=6, o=8, k=3, d=2, p=2))]


def _random_conv3d_slow(count, seed):
    """Conv3d shapes eager runs on slow_conv3d / slow_conv_dilated3d (`torch_backend` says so): one sample of
    a small volume with a kernel up to 3, or a kernel 1 x 1 in height and width on a batch under 16; depth
    kernels 1 to 3, strides 1 and 2, pads 0 and 1, groups, dilation 2, biases and frozen inputs at random."""
    import random

    rnd = random.Random(seed)
    out = []
    while len(out) < count:
        hw1 = rnd.random() < 0.5
        g = rnd.choice([1, 1, 2, 4]) if hw1 else 1
        c = dict(d3=1, n=rnd.randint(1, 15) if hw1 else 1, c=g * rnd.randint(1, 8), hd=rnd.randint(3, 8),
                 h=rnd.randint(3, 12), o=g * rnd.randint(1, 8), k=1 if hw1 else rnd.randint(1, 3),
                 kd=rnd.randint(1, 3), s=1 if hw1 else rnd.choice([1, 2]), p=rnd.choice([0, 1]), g=g,
                 bias=rnd.randint(0, 1), xgrad=int(rnd.random() < 0.8))
        if not hw1 and rnd.random() < 0.25:
            c.update(d=2, s=1)
        d = c.get("d", 1)
        if c["hd"] + 2 * c["p"] < d * (c["kd"] - 1) + 1 or c["h"] + 2 * c["p"] < d * (c["k"] - 1) + 1:
            continue
        if c["n"] * c["c"] * c["hd"] * c["h"] > 20480:
            continue
        out.append(c)
    return out


SETS["conv3d_slow_random"] = _random_conv3d_slow(40, 54311)  # drawn after slow_conv3d's rule
def _random_channels(rnd):
    """(input channels, output channels, groups) of the random transposed sets: ungrouped, 2 or 4 groups,
    or depthwise (groups = channels = outputs), drawn in this order so a seed keeps its set."""
    g = rnd.choice([1, 1, 1, 2, 4, 0])
    c = rnd.choice([8, 16, 24, 32, 64])
    o = c if g == 0 else rnd.choice([8, 16, 32, 48])
    return c, o, c if g == 0 else g


def _random_tconv1d(count, seed):
    """ConvTranspose1d drawn at random (fixed seed) after it was read as its 2-D view: kernels 1 to 4, strides
    1 and 2, output_padding, groups 1 to 4 and depthwise, batch 1 to 8, 8 to 64 positions, biases, frozen
    inputs at random (larger kernels and strides stay refused, as in 2-D)."""
    import random

    rnd = random.Random(seed)
    out = []
    while len(out) < count:
        k, s = rnd.choice([1, 2, 3, 4]), rnd.choice([1, 2, 2])
        c, o, g = _random_channels(rnd)
        if c % g or o % g:
            continue
        cfg = dict(n=rnd.choice([1, 2, 4, 8]), c=c, h=rnd.choice([8, 16, 25, 64]), o=o, k=k, s=s,
                   p=rnd.choice([0, k // 2]), g=g, t=1, d1=1, bias=int(rnd.random() < 0.6),
                   xgrad=int(rnd.random() < 0.85))
        if s > 1 and rnd.random() < 0.3:
            cfg["op"] = 1
        out.append(cfg)
    return out


SETS["transposed_1d_random"] = _random_tconv1d(40, 54304)  # drawn after ConvTranspose1d's 2-D view
def _random_tconv_large(count, seed):
    """Transposed convolutions with kernels 5 to 13 or strides 3 to 8, refused before (measured up to 4 and 2),
    drawn at random (fixed seed) after the limit was raised to the 2-D rules' own (kernels up to 13): 2-D and
    1-D, ungrouped, 2 and 4 groups, depthwise; output_padding; biases, frozen inputs at random."""
    import random

    rnd = random.Random(seed)
    out = []
    while len(out) < count:
        k, s = rnd.choice([2, 3, 4, 5, 6, 7, 8, 9, 11, 13]), rnd.choice([1, 2, 3, 4, 5, 8])
        if k <= 4 and s <= 2:
            continue
        d1 = rnd.random() < 0.35
        c, o, g = _random_channels(rnd)
        if c % g or o % g:
            continue
        cfg = dict(n=rnd.choice([1, 2, 4, 8]), c=c, h=rnd.choice([16, 25, 64]) if d1 else rnd.choice([4, 7, 8, 13]),
                   o=o, k=k, s=s, p=rnd.choice([0, k // 2, (k - s) // 2 if k > s else 0]), g=g, t=1,
                   bias=int(rnd.random() < 0.6), xgrad=int(rnd.random() < 0.85))
        if d1:
            cfg["d1"] = 1
        if s > 1 and rnd.random() < 0.3:
            cfg["op"] = 1
        out.append(cfg)
    return out


SETS["transposed_large_random"] = _random_tconv_large(40, 54307)  # drawn after the kernel and stride limit rose
SETS["transposed_large_random_b"] = _random_tconv_large(40, 54308)  # after the refusal and naming it led to
def _random_padded_strided_1x1(count, seed):
    """Padded, strided 1x1 convolutions (refused before), drawn at random (fixed seed) after their rule was
    written: 2-D and 1-D, 3 to 128 channels, strides 2 to 4, pads 1 and 2, batch 1 to 16, biases, frozen
    inputs at random."""
    import random

    rnd = random.Random(seed)
    out = []
    while len(out) < count:
        cfg = dict(n=rnd.choice([1, 2, 4, 8, 16]), c=rnd.choice([3, 8, 16, 24, 48, 64, 128]),
                   h=rnd.choice([4, 7, 8, 14, 16, 28]), o=rnd.choice([8, 16, 32, 64, 96]), k=1,
                   s=rnd.choice([2, 2, 3, 4]), p=rnd.choice([1, 1, 2]), bias=int(rnd.random() < 0.6),
                   xgrad=int(rnd.random() < 0.85))
        if rnd.random() < 0.25:
            cfg.update(d1=1, h=rnd.choice([16, 50, 100]))
        out.append(cfg)
    return out


SETS["padded_strided_1x1_random"] = _random_padded_strided_1x1(40, 54309)  # drawn after their rule
def _random_tconv_wide(count, seed):
    """Transposed convolutions 14 to 24 wide (refused before), drawn at random (fixed seed) after they were
    counted: strided 2-D and 1-D (vocoders' kernel = 2 x stride among them), 2 groups, depthwise, batch 1
    to 8, biases and frozen inputs at random."""
    import random

    rnd = random.Random(seed)
    out = []
    while len(out) < count:
        s = rnd.choice([2, 3, 4, 5, 8, 10])
        k = rnd.choice([14, 15, 16, 20, 2 * s if 2 * s >= 14 else 16, 24])
        d1 = rnd.random() < 0.6
        g = rnd.choice([1, 1, 1, 2, 0])
        c = rnd.choice([8, 16, 32, 64])
        o = c if g == 0 else rnd.choice([8, 16, 32])
        g = c if g == 0 else g
        if c % g or o % g:
            continue
        cfg = dict(n=rnd.choice([1, 2, 4, 8]), c=c, h=rnd.choice([8, 16, 25]) if d1 else rnd.choice([4, 6, 8]), o=o,
                   k=k, s=s, p=rnd.choice([0, (k - s) // 2]), g=g, t=1, bias=int(rnd.random() < 0.6),
                   xgrad=int(rnd.random() < 0.85))
        if d1:
            cfg["d1"] = 1
        out.append(cfg)
    return out


SETS["transposed_wide_random"] = _random_tconv_wide(30, 54311)  # drawn after transposed kernels 14+ were counted
SETS["transposed_wide_random_b"] = _random_tconv_wide(30, 54312)  # after grouped ones 14+ went back to refused
SETS["transposed_wide_random_c"] = _random_tconv_wide(30, 54313)  # after 14 wide went back to refused
SETS["all"] = [cfg for name in ("patchify", "kernel", "stem", "strided", "depthwise") for cfg in SETS[name]]


def _key(c) -> str:
    return ",".join(f"{k}={v}" for k, v in c.items())


def row(c, verbose, dtype="float32") -> dict:
    if c.get("t") and c.get("op", 0) and c.get("s", 1) <= c.get("op", 0):
        return {"cfg": c, "skip": "output_padding must be smaller than the stride"}
    m = measure(c, verbose, dtype)
    p = predict(c, m["y_shape"], dtype)
    r = {"cfg": c, "measured": {k: m[k] for k in ("fwd_scratch", "bwd_peak", "impl_fwd", "impl_bwd")},
         "profile": p}
    if c.get("t"):
        r["events"] = {"fwd": m["fwd"], "bwd": m["bwd"]}
    if "refused" not in p:
        r["fwd_gap"] = p["fwd_scratch"] - m["fwd_scratch"]
        r["bwd_gap"] = p["bwd_peak"] - m["bwd_peak"]
    return r


def _print(r):
    m, p = r["measured"], r["profile"]
    gaps = "refused" if "refused" in p else f"fwd {r['fwd_gap']:+,d}  bwd {r['bwd_gap']:+,d}"
    impls = " ".join(m["impl_fwd"] + m["impl_bwd"])
    print(f"{_key(r['cfg']):48s} fwd {m['fwd_scratch']:>10,d}  bwd {m['bwd_peak']:>11,d}  {gaps:28s} {impls}",
          flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", default="all", choices=sorted(SETS))
    ap.add_argument("--one", help="one convolution, e.g. \"n=2,c=3,h=64,o=192,k=16,s=16,xgrad=0\"")
    ap.add_argument("--events", action="store_true", help="print the allocator events of --one")
    ap.add_argument("--verbose", action="store_true", help="name oneDNN's implementation of each primitive")
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--only-gaps", action="store_true", help="print only rows where the profile differs")
    ap.add_argument("--precision", choices=("32-true", "bf16-true"), default="32-true",
                    help="bf16-true: input, weight and bias in bfloat16, as the convolution runs under "
                         "bf16-mixed (autocast casts before the op) and bf16-true")
    a = ap.parse_args(argv)
    dtype = "bfloat16" if a.precision == "bf16-true" else "float32"
    if a.one:
        c = {k: int(v) for k, v in (kv.split("=") for kv in a.one.split(","))}
        r = row(c, a.verbose, dtype)
        _print(r)
        if a.events:
            m = measure(c, dtype=dtype)
            print("fwd", m["fwd"])
            print("bwd", m["bwd"])
        return
    rows = []
    for c in SETS[a.set]:
        r = row(c, a.verbose, dtype)
        if "skip" in r:
            continue
        rows.append(r)
        if not a.only_gaps or r.get("fwd_gap") or r.get("bwd_gap") or "refused" in r["profile"]:
            _print(r)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    exact = [r for r in rows if r.get("fwd_gap") == 0 and r.get("bwd_gap") == 0]
    print(f"{len(exact)}/{len(rows)} exact")


if __name__ == "__main__":
    main()
