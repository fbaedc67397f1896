"""ONE's published ALLOC tables (Samsung/ONE issue #13282, quoted in
shared/research/onert-training-memory.md section 8), reproduced from the sample models.

These figures are facts published by the ONE project, asserted as such; memplan computes every
one of them from the model's shapes.
"""
import os

import pytest

from memplan_cli.config import TrainConfig
from memplan_cli.loaders import load_model
from memplan_cli.profiles.onert import predict_alloc_lines

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "sample_models")
# alloc line positions: non-const, trainable, opt variable, back-prop, gradient, disposable
NC, TR, OV, BP, GR, DI = range(6)


def lines(name, batch, planner):
    path = os.path.join(ROOT, name)
    if not os.path.exists(path):
        pytest.skip(f"{name} is not in sample_models/")
    return predict_alloc_lines(load_model(path, batch_size=batch),
                               TrainConfig(batch_size=batch, optimizer="adam", loss="cce"), planner=planner)


def test_mnist_batch32_adam_bump():
    a = lines("mnist.circle", 32, "bump")
    assert (a[NC], a[TR], a[BP], a[OV]) == (11360128, 1938880, 11360000, 3877760)


def test_mnist_batch32_adam_wic():
    a = lines("mnist.circle", 32, "wic")
    assert (a[NC], a[BP], a[GR]) == (11341056, 6423808, 1606144)


def test_mobilenetv2_batch10_adam_wic():
    a = lines("mobilenetv2.circle", 10, "wic")
    assert (a[NC], a[BP], a[GR], a[DI], a[TR]) == (361362240, 97241920, 5124000, 3010560, 13951408)
