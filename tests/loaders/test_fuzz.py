"""A short seeded fuzz of the loaders (a longer run: scripts/fuzz_loaders.py): every mutated model
either loads as a verified graph that analyses (memplan profile, onert comparison, JSON document)
or fails with a one-line error naming the file."""
import os
import random

import pytest

from scripts.fuzz_loaders import fuzz_one
from tests.loaders import fbmodels as fb
from tests.loaders import onnxmodels as om
from devtools.traininfo_write import add_training_metadata

SAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "sample_models")


def _models():
    yield "tiny.circle", add_training_metadata(fb.tiny_cnn("circle"), optimizer="adam", batch_size=4,
                                               trainable=[2, 3])
    yield "tiny.tflite", fb.tiny_cnn("tflite", dynamic=True)
    yield "tiny.onnx", om.tiny_cnn().SerializeToString()
    for name in ("mnist.tflite", "mnist.onnx"):
        p = os.path.join(SAMPLES, name)
        if os.path.exists(p):
            yield name, open(p, "rb").read()


@pytest.mark.parametrize("name,data", list(_models()), ids=lambda x: x if isinstance(x, str) else "")
def test_mutated_models_load_or_fail_cleanly(tmp_path, name, data):
    rng = random.Random(f"suite:{name}")
    runs = 150 if name.startswith("tiny") else 40
    failures = []
    for _ in range(runs):
        # a hang is a load that never ends: the alarm is far above any load's time (milliseconds for
        # these models), so a busy machine does not make a slow load look like one
        kind, outcome, _secs = fuzz_one(data, os.path.splitext(name)[1], rng, str(tmp_path), analyze=True,
                                        hang_after=120)
        if outcome not in ("ok", "error"):
            failures.append(f"{kind}: {outcome}")
    assert not failures, failures[:5]
