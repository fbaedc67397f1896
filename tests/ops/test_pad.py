"""Pad in constant, reflect and edge modes from ONNX (attribute form, opsets 2-10; input form with a
constant value, opset 11+; axes, opset 18) and TF Lite PADV2 (a constant fill: the converters'
padded max-pool): gradients by finite differences, verify, refusals."""
import numpy as np
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

from devtools.modelgen import ModelBuilder
from memplan_cli.cli import main
from memplan_cli.loaders import load_model
from tests.ops.gradcheck import check_gradients, check_verify, onnx_model, save


def _model(mode, pads, y_shape, opset=17, axes=None, value=None):
    x_shape = (2, 3, 4, 3)
    inits = {"p": np.random.default_rng(0).uniform(-1, 1, x_shape[1:]).astype(np.float32)}
    if opset < 11:
        pad = helper.make_node("Pad", ["a"], ["y"], mode=mode, pads=list(pads),
                               **({} if value is None else {"value": value}))
    else:
        ins = ["a", "pads"]
        inits["pads"] = np.array(pads, np.int64)
        if value is not None or axes is not None:
            ins.append("v" if value is not None else "")
            if value is not None:
                inits["v"] = np.array(value, np.float32)
        if axes is not None:
            ins.append("axes")
            inits["axes"] = np.array(axes, np.int64)
        pad = helper.make_node("Pad", ins, ["y"], mode=mode)
    nodes = [helper.make_node("Add", ["x", "p"], ["a"]), pad]
    return onnx_model(nodes, [("x", x_shape)], [("y", y_shape)], inits, opset=opset)


CASES = {
    "constant_opset10": ("constant", (0, 1, 0, 2, 0, 0, 1, 1), (2, 4, 5, 6), 10, None, 0.5),
    "reflect": ("reflect", (0, 0, 2, 1, 0, 0, 1, 2), (2, 3, 7, 6), 13, None, None),
    "edge": ("edge", (0, 1, 3, 0, 0, 2, 0, 1), (2, 6, 7, 4), 13, None, None),
    "constant_value_axes": ("constant", (1, 2, 0, 1), (2, 3, 5, 6), 18, (2, 3), 1.5),
    # negative pads crop (the spec: "add or remove (if negative)"), mixed with padding on one axis
    "crop": ("constant", (0, -1, 1, -1, 0, 0, -2, 2), (2, 2, 3, 4), 13, None, None),
    "crop_opset10": ("constant", (0, 0, -1, 0, 0, -1, 0, 0), (2, 2, 3, 3), 10, None, None),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradients_and_verify(tmp_path, name):
    mode, pads, ys, opset, axes, value = CASES[name]
    p = save(tmp_path, _model(mode, pads, ys, opset, axes, value))
    g = load_model(p)
    op = g.operations[-1]
    assert op.type == "Pad" and op.attrs["mode"] == mode and g.operands[op.outputs[0]].shape == ys
    assert check_gradients(p) >= 12
    check_verify(p, "-b", "2")


def test_axes_expand_to_every_axis(tmp_path):
    op = load_model(save(tmp_path, _model(*CASES["constant_value_axes"][:3], 18, (2, 3), 1.5))).operations[-1]
    assert op.attrs["pads"] == (0, 0, 1, 2, 0, 0, 0, 1) and op.attrs["value"] == 1.5


def test_wrap_mode_is_refused_at_load(tmp_path):
    p = save(tmp_path, _model("wrap", (0, 0, 1, 1, 0, 0, 1, 1), (2, 3, 6, 5), opset=19))
    r = CliRunner().invoke(main, ["analyze", p], env={"NO_COLOR": "1"})
    assert r.exit_code == 2 and "wrap" in r.output and "Traceback" not in r.output


def test_crop_forward_matches_numpy_slicing(tmp_path):
    from tests.ops.gradcheck import run_forward

    g = load_model(save(tmp_path, _model(*CASES["crop"][:3], 13)))
    op = g.operations[-1]
    x = np.arange(72, dtype=np.float64).reshape(2, 3, 4, 3)
    (y,) = run_forward(op, [x, None], [(2, 2, 3, 4)])
    want = np.pad(x[:, 1:3, 0:2, 1:3], [(0, 0), (0, 0), (1, 0), (0, 2)])
    assert np.array_equal(y, want)


def test_negative_reflect_pads_are_refused(tmp_path):
    p = save(tmp_path, _model("reflect", (0, 0, -1, 0, 0, 0, 0, 1), (2, 3, 3, 4), opset=13))
    r = CliRunner().invoke(main, ["analyze", p], env={"NO_COLOR": "1"})
    assert r.exit_code == 2 and "negative pads" in r.output and "Traceback" not in r.output


# ---- TF Lite PADV2: PAD with its fill as input 2 --------------------------------------------------
LOWEST = float(np.finfo(np.float32).min)
PADS_V2 = [[0, 0], [1, 1], [1, 2], [0, 0]]


def _padv2_pool(tmp_path, value, fill=None):
    """Conv -> PADV2 -> MAX_POOL 3/2 VALID -> FC: how litert-torch and onnx2tf write torch's
    MaxPool2d(3, 2, padding=1) (the fill: the lowest float32, or -inf). `fill` (a tensor) replaces
    the constant fill."""
    m = ModelBuilder(seed=3)
    x = m.input([1, 6, 6, 2])
    h = m.conv2d(x, 3, 3)
    if fill is None:
        y = m.pad(h, PADS_V2, value=value)
    else:
        p = m.const([4, 2], "int32", np.array(PADS_V2, np.int32))
        y = m._op(60, [h, p, fill(m)], [1, 8, 9, 3])
    y = m.max_pool(y, 3, 2, padding="VALID")
    y = m.reshape(y, [1, -1])
    m.output(m.fully_connected(y, 4))
    return m.save(str(tmp_path / "padv2.tflite"))


@pytest.mark.parametrize("value", [LOWEST, float("-inf"), 0.5])
def test_padv2_max_pool_gradients_and_verify(tmp_path, value):
    p = _padv2_pool(tmp_path, value)
    op = next(o for o in load_model(p).operations if o.type == "Pad")
    assert op.source_type == "PADV2" and op.attrs["mode"] == "constant"
    assert op.attrs["pads"] == (0, 1, 1, 0, 0, 1, 2, 0) and op.attrs["value"] == value
    assert check_gradients(p) >= 12
    check_verify(p, "-b", "2", "-O", "adam", "-l", "cce")


def test_padv2_fills_with_its_value(tmp_path):
    from tests.ops.gradcheck import run_forward

    op = next(o for o in load_model(_padv2_pool(tmp_path, LOWEST)).operations if o.type == "Pad")
    x = np.arange(36, dtype=np.float64).reshape(1, 3, 4, 3)
    (y,) = run_forward(op, [x, None, None], [(1, 5, 7, 3)])
    assert np.array_equal(y, np.pad(x, PADS_V2, constant_values=LOWEST))


def test_padv2_fill_is_not_trained(tmp_path):
    """The fill is no parameter: the gradients are the conv's and the FC's, nothing of the scalar."""
    from tests.ops.gradcheck import analyze_json

    doc = analyze_json(_padv2_pool(tmp_path, LOWEST), "-b", "2")
    params = [3 * 3 * 2 * 3, 3, 4 * 3 * 4 * 3, 4]  # conv, its bias, FC, its bias
    assert doc["categories"]["gradient"]["naive"] == sum((4 * n + 15) // 16 * 16 for n in params)


@pytest.mark.parametrize("value", [float(np.finfo(np.float16).min), float("-inf")])
def test_padv2_fill_dequantized_from_float16_is_read(tmp_path, value):
    # onnx2tf's float16 files store every constant in float16 behind a DEQUANTIZE (builtin 6), the
    # fill included; it was refused as "invalid tflite graph: ... a pad value that is not a constant"
    p = _padv2_pool(tmp_path, None, fill=lambda m: m._op(6, [m.const([], "float16", np.array(value, np.float16))], []))
    op = next(o for o in load_model(p).operations if o.type == "Pad")
    assert op.source_type == "PADV2" and op.attrs["value"] == value
    check_verify(p, "-b", "2", "-O", "adam", "-l", "cce")


def test_padv2_fill_computed_at_run_time_is_refused(tmp_path):
    p = _padv2_pool(tmp_path, None, fill=lambda m: m.input([1]))
    r = CliRunner().invoke(main, ["analyze", p], env={"NO_COLOR": "1"})
    assert r.exit_code == 2 and "pad value" in r.output and "Traceback" not in r.output
    # a valid file memplan's rules refuse is not called invalid (docs/safety.md's exit-status table)
    assert "memplan cannot plan this tflite graph: op #1 Pad" in r.output and "invalid" not in r.output, r.output
