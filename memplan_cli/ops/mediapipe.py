"""mediapipe's documented TF Lite custom ops (mediapipe/util/tflite/operations/).

- `Convolution2DTransposeBias` (selfie segmentation, hair segmentation): a transposed convolution
  plus a bias. Inputs (data NHWC, weights OHWI [C_out, KH, KW, C_in], bias [C_out]); its
  custom_options are a `TfLiteTransposeConvParams` C struct: int32 padding (TfLitePadding: 1 SAME,
  2 VALID), int32 stride_width, int32 stride_height. Output size stride x (in - 1) + K - pad with
  pad = max(0, K - (in - 1) % stride - 1) under SAME (0 under VALID), pad // 2 of it before. That
  is the canonical `ConvTranspose2D` (ops/conv.py: its rule, kernels and FLOPs) with pads (pad // 2,
  pad - pad // 2), so the converter below is all this module adds.
- `MaxPoolingWithArgmax2D`, `MaxUnpooling2D`, `Landmarks2TransformMatrix`, `TransformTensorBilinear`,
  `TransformLandmarks`: no rule here. Outside the backward region (face_landmark_with_attention's
  attention refinement runs on the landmarks, after the trained layers) `memplan verify` runs them
  as seeded sources of their outputs' shapes (execute/ops.py `seeded_source`); inside it, training
  through them is refused with the op named.
"""
from __future__ import annotations

import struct

from memplan_cli.ops.base import Canon

PADDING = {1: "SAME", 2: "VALID"}


def _transpose_conv_bias(node) -> Canon | None:
    raw = node.options.get("custom_options") or b""
    x, w, b, y = node.shape(0), node.shape(1), node.shape(2), node.out_shape()
    if len(raw) < 12 or x is None or w is None or b is None or len(x) != 4 or len(w) != 4 or len(b) != 1:
        return None  # not the documented layout: stays a custom op (refused if training needs it)
    padding, sw, sh = struct.unpack_from("<3i", raw)
    if padding not in PADDING or sw < 1 or sh < 1 or w[3] != x[3] or b[0] != w[0]:
        return None
    stride, kernel = (sh, sw), (w[1], w[2])
    pad = [max(0, k - (n - 1) % s - 1) if PADDING[padding] == "SAME" else 0
           for n, k, s in zip(x[1:3], kernel, stride)]
    want = tuple(s * (n - 1) + k - p for n, k, s, p in zip(x[1:3], kernel, stride, pad))
    if len(y) != 4 or tuple(y[1:3]) != want or y[3] != w[0]:
        return None  # the file's output shape disagrees with the op's own arithmetic
    attrs = {"layout": "NHWC", "kernel": kernel, "stride": stride, "dilation": (1, 1),
             "pads": (pad[0] // 2, pad[1] // 2, pad[0] - pad[0] // 2, pad[1] - pad[1] // 2),
             "padding": PADDING[padding], "output_padding": (0, 0), "group": 1, "activation": "NONE"}
    return Canon("ConvTranspose2D", attrs, inputs=list(node.inputs[:3]))


TFLITE = {"Convolution2DTransposeBias": _transpose_conv_bias}
