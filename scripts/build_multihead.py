#!/usr/bin/env python3
"""Build the multi-head test exports in tests/multihead (dev-only: needs torch, onnxscript, tensorflow-cpu).

    python scripts/build_multihead.py tests/multihead     # a dev environment: requirements-dev.txt

Each model has several outputs, as detectors, landmark and multi-task models do; weights are random
(nothing downloaded). `exports.json` records each file's source, exporter and version, the
framework's trainable parameter count and the output names.
- keras_two_head.tflite: Keras functional model, a Conv2D+BatchNorm trunk and two heads (a softmax
  class head and a box regression head), through `tf.lite.TFLiteConverter.from_keras_model`
  (float32). The converter folds BatchNormalization into the convolution.
- keras_three_head.tflite: Keras, three heads of which one (a landmark head) reads the output of
  another head's hidden layer (heads that share layers), plus a head only reading the input.
- torch_two_head_dynamo.onnx: a PyTorch module with a conv trunk (Conv2d+BatchNorm2d+ReLU), a
  feature output that a classifier head also reads, a classifier and a keypoint head; torch.onnx
  dynamo in eval mode (BatchNorm folded into the convolution).
- torch_two_head_ts.onnx: the same module through the TorchScript exporter.
- torchvision_fpn_dynamo.onnx: torchvision's FeaturePyramidNetwork (the detectors' neck, with its
  LastLevelMaxPool extra block) over a two-stage conv trunk: three feature-map outputs, as a
  detector's heads read them; torch.onnx dynamo.
"""
from __future__ import annotations

import json
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from devtools.exports import strip_file  # noqa: E402

warnings.filterwarnings("ignore")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def keras_models():
    import tensorflow as tf

    L = tf.keras.layers

    def two_head():
        i = tf.keras.Input((16, 16, 3), name="image")
        x = L.Conv2D(8, 3, padding="same", use_bias=False)(i)
        x = L.BatchNormalization()(x)
        x = L.ReLU()(x)
        x = L.Conv2D(8, 3, strides=2, padding="same", activation="relu")(x)
        c = L.GlobalAveragePooling2D()(x)
        cls = L.Dense(5, activation="softmax", name="cls")(c)
        b = L.Conv2D(4, 1, activation="relu")(x)
        b = L.Flatten()(b)
        box = L.Dense(4, name="box")(b)
        return tf.keras.Model(i, [cls, box])

    def three_head():
        i = tf.keras.Input((24,), name="x")
        h = L.Dense(16, activation="relu")(i)
        h2 = L.Dense(12, activation="tanh", name="hidden")(h)
        a = L.Dense(3, name="head_a")(h2)
        lm = L.Dense(6, name="landmarks")(L.Concatenate()([h2, a]))
        side = L.Dense(2, name="side")(i)
        return tf.keras.Model(i, [a, lm, side])

    yield ("keras_two_head.tflite", "Keras functional: Conv2D+BatchNorm+ReLU trunk, a softmax class head "
           "(GlobalAveragePooling2D, Dense 5) and a box head (Conv2D 1x1, Flatten, Dense 4)", two_head)
    yield ("keras_three_head.tflite", "Keras functional MLP, three heads: head_a (Dense 3), landmarks "
           "(Dense 6 over Concatenate(hidden, head_a)), side (Dense 2 straight from the input)", three_head)


def torch_model():
    import torch
    from torch import nn

    class TwoHead(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
            self.down = nn.Conv2d(8, 8, 3, stride=2, padding=1)
            self.cls = nn.Linear(8, 5)
            self.kp = nn.Conv2d(8, 3, 1)

        def forward(self, x):
            f = torch.relu(self.down(self.stem(x)))
            feat = f.mean(dim=(2, 3))
            return feat, self.cls(feat), self.kp(f)

    torch.manual_seed(0)
    m = TwoHead().eval()
    m.__source__ = ("PyTorch module: Conv2d+BatchNorm2d+ReLU stem, strided Conv2d, outputs feat (spatial mean), "
                    "logits (Linear over feat) and keypoints (Conv2d 1x1)")
    with torch.no_grad():  # non-trivial BatchNorm statistics, as a trained net has
        m.stem[1].running_mean.uniform_(-0.5, 0.5)
        m.stem[1].running_var.uniform_(0.5, 1.5)
    return m, (torch.randn(1, 3, 16, 16),)


def torchvision_fpn():
    import torch
    from torch import nn
    from torchvision.ops import FeaturePyramidNetwork
    from torchvision.ops.feature_pyramid_network import LastLevelMaxPool

    class TrunkFPN(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU())
            self.c2 = nn.Sequential(nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU())
            self.fpn = FeaturePyramidNetwork([8, 16], 8, extra_blocks=LastLevelMaxPool())

        def forward(self, x):
            a = self.c1(x)
            b = self.c2(a)
            out = self.fpn({"p1": a, "p2": b})
            return tuple(out.values())

    torch.manual_seed(0)
    m = TrunkFPN().eval()
    m.__source__ = ("torchvision FeaturePyramidNetwork([8, 16], 8, LastLevelMaxPool) over a two-stage Conv2d+ReLU "
                    "trunk: outputs p1, p2 and pool (three feature maps)")
    return m, (torch.randn(1, 3, 32, 32),)


def build_keras(out: str) -> list:
    import numpy as np
    import tensorflow as tf

    doc = []

    for fn, source, make in keras_models():
        tf.keras.utils.set_random_seed(0)
        model = make()
        data = tf.lite.TFLiteConverter.from_keras_model(model).convert()
        with open(os.path.join(out, fn), "wb") as f:
            f.write(data)
        doc.append({"file": fn, "source": source,
                    "params": int(sum(np.prod(w.shape) for w in model.trainable_weights)),
                    "outputs": list(model.output_names),
                    "exporter": f"tf.lite.TFLiteConverter.from_keras_model (tensorflow {tf.__version__}), float32"})
    return doc


def build_torch(out: str) -> list:
    import onnx
    import torch

    doc = []

    dynamo, ts = dict(dynamo=True, external_data=False), dict(dynamo=False)
    for stem, make, names, variants in (("torch_two_head", torch_model, ["feat", "logits", "keypoints"], (dynamo, ts)),
                                        ("torchvision_fpn", torchvision_fpn, ["p1", "p2", "pool"], (dynamo,))):
        model, args = make()
        params = sum(p.numel() for p in model.parameters())
        for kw in variants:
            fn = f"{stem}_{'dynamo' if kw['dynamo'] else 'ts'}.onnx"
            path = os.path.join(out, fn)
            with torch.no_grad():
                torch.onnx.export(model, args, path, input_names=["image"], output_names=names, opset_version=20, **kw)
            strip_file(path)
            m = onnx.load(path)
            name = "dynamo" if kw["dynamo"] else "TorchScript"
            doc.append({"file": fn, "source": model.__source__, "params": params,
                        "outputs": [o.name for o in m.graph.output],
                        "exporter": f"torch.onnx {name} (torch {torch.__version__}), opset 20"})
    return doc


def main(out: str) -> None:
    import subprocess

    os.makedirs(out, exist_ok=True)
    doc = []
    # torch and tensorflow in one process crash (both load their own oneDNN): one child each
    for family in ("keras", "torch"):
        r = subprocess.run([sys.executable, __file__, "--family", family, out], capture_output=True, text=True)
        if r.returncode:
            sys.exit(f"{family} exports failed:\n{r.stderr[-3000:]}")
        doc += json.loads(r.stdout.strip().splitlines()[-1])  # the converters print to stdout too
    for d in doc:
        d["bytes"] = os.path.getsize(os.path.join(out, d["file"]))
        print(f"{d['file']}: {d['params']} params, outputs {d['outputs']}, {d['bytes']} B", file=sys.stderr)
    with open(os.path.join(out, "exports.json"), "w") as f:
        json.dump(sorted(doc, key=lambda d: d["file"]), f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--family"]:
        print(json.dumps((build_keras if sys.argv[2] == "keras" else build_torch)(sys.argv[3])))
    else:
        main(sys.argv[1] if len(sys.argv) > 1 else "tests/multihead")
