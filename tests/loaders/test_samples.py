"""The six sample models: every file loads, and the three formats of one network agree.

ONNX has no fused activations: each fused RELU/RELU6 of tflite is a separate Relu/Clip node in ONNX with
its own output tensor. So ONNX has more ops and more activation bytes, by exactly those tensors
(README "## Formats").
"""
import os

import pytest

from memplan_cli.loaders import load_model

SAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "sample_models")
NETS = {"mnist": 484_714, "mobilenetv2": 3_487_816}


def _load(name, fmt, batch=None):
    p = os.path.join(SAMPLES, f"{name}.{fmt}")
    if not os.path.exists(p):
        pytest.skip(f"{p} not generated")
    return load_model(p, batch_size=batch)


def _unfused(g):
    """Output tensors of the standalone activation ops (ONNX's counterpart of tflite's fused activations)."""
    return [g.operands[op.outputs[0]] for op in g.operations if op.type in ("Relu", "Relu6")]


@pytest.mark.parametrize("name", NETS)
@pytest.mark.parametrize("batch", [None, 32])
def test_three_formats_agree(name, batch):
    c, t, o = (_load(name, f, batch) for f in ("circle", "tflite", "onnx"))
    assert c.source_format == "circle" and t.source_format == "tflite" and o.source_format == "onnx"
    assert c.parameter_count() == t.parameter_count() == o.parameter_count() == NETS[name]
    assert c.activation_bytes() == t.activation_bytes()
    assert [op.type for op in c.operations] == [op.type for op in t.operations]
    assert not _unfused(t)  # tflite fuses every activation of these two networks
    extra = _unfused(o)
    assert len(o.operations) == len(t.operations) + len(extra)
    assert o.activation_bytes() == t.activation_bytes() + sum(x.nbytes for x in extra)
    b = batch or 1
    for g in (c, t, o):
        assert all(g.operands[i].shape[0] == b for i in g.inputs + g.outputs)
        assert not g.warnings


@pytest.mark.parametrize("fmt", ["circle", "tflite", "onnx"])
def test_batch_32_is_32_times_batch_1(fmt):
    for name in NETS:
        assert _load(name, fmt, 32).activation_bytes() == 32 * _load(name, fmt).activation_bytes()


def test_mobilenetv2_op_census_and_int_constants():
    t = _load("mobilenetv2", "tflite")
    counts = {}
    for op in t.operations:
        counts[op.type] = counts.get(op.type, 0) + 1
    assert counts == {"Conv2D": 35, "DepthwiseConv2D": 17, "Add": 10, "Pad": 4, "Mean": 1,
                      "FullyConnected": 1, "Softmax": 1}
    ints = [o for o in t.operands if o.is_const and o.dtype == "int32"]
    assert sorted(o.shape for o in ints) == [(2,)] + [(4, 2)] * 4  # Mean axes and four paddings, all kept
    assert all(o.value is not None for o in ints)
    o = _load("mobilenetv2", "onnx")
    assert sum(op.type == "DepthwiseConv2D" for op in o.operations) == 17
    assert sum(op.type == "Relu6" for op in o.operations) == 35


def test_mnist_constant_bytes_match_onert_trainable_count():
    # onert's trainable figure 1,938,880 = these 1,938,864 bytes plus 16-byte alignment (research doc 4.1)
    assert _load("mnist", "circle").constant_bytes() == 484_714 * 4 + 8
