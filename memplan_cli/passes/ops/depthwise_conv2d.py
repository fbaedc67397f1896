"""DepthwiseConv2D: each channel convolved with its own filter.

Rules: as Conv2D (dW reads X and dY; dX reads W and dY; Y kept only for a fused activation), and
no extras in memplan or with `policy.transpose_extras`: onert's depthwise buffers depend on the host
(thread count, SIMD width) and are the onert profile's business, not a rule here.
"""
from __future__ import annotations

from memplan_cli.passes.ops.conv2d import conv_like


def depthwise_conv2d(op, ctx):
    return conv_like(op, ctx, transposes=False)


RULES = {"DepthwiseConv2D": depthwise_conv2d}
