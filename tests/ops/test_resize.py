"""ops/resize.py: ONNX Resize / Upsample and TFLite RESIZE_BILINEAR / RESIZE_NEAREST_NEIGHBOR: forward
against onnx.reference and TF's reference formulas, gradients by finite differences, nothing kept for
backward, verify, refusals."""
import math

import numpy as np
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from devtools.modelgen import ModelBuilder
from memplan_cli.cli import main
from memplan_cli.loaders import load_model
from tests.ops.gradcheck import check_gradients, check_verify, onnx_model, run_forward, save, training_graph


def _resize_model(mode, coord, nearest, scales=None, sizes=None, x_shape=(1, 2, 4, 5), opset=19, train=True,
                  **extra):
    """x (-> Add(p)) -> Resize -> (Mul(q)) -> y; p's gradient flows through Resize's calcDerivative."""
    inits = {"roi": np.zeros(0, np.float32)}
    ins = ["a" if train else "x", "roi"]
    if scales is not None:
        inits["scales"] = np.array(scales, np.float32)
        ins.append("scales")
        out = tuple(int(math.floor(d * s)) for d, s in zip(x_shape, scales))
    else:
        inits["scales"] = np.zeros(0, np.float32)
        inits["sizes"] = np.array(sizes, np.int64)
        ins += ["scales", "sizes"]
        out = tuple(sizes)
    attrs = {"mode": mode, "coordinate_transformation_mode": coord, "nearest_mode": nearest, **extra}
    nodes = [helper.make_node("Resize", ins, ["r" if train else "y"], **attrs)]
    if train:
        inits["p"] = np.linspace(-1, 1, math.prod(x_shape[1:])).reshape((1,) + x_shape[1:]).astype(np.float32)
        inits["q"] = np.linspace(0.5, 2, out[1]).reshape((1, out[1]) + (1,) * (len(out) - 2)).astype(np.float32)
        nodes = [helper.make_node("Add", ["x", "p"], ["a"])] + nodes + [helper.make_node("Mul", ["r", "q"], ["y"])]
    return onnx_model(nodes, [("x", x_shape)], [("y", out)], inits, opset=opset), out


# tf_half_pixel_for_nn is not in onnx.reference: the TFLite test checks it (TF's half-pixel nearest)
COORDS = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "half_pixel_symmetric"]


@pytest.mark.parametrize("coord", COORDS)
@pytest.mark.parametrize("mode,nearest", [("nearest", "round_prefer_floor"), ("nearest", "round_prefer_ceil"),
                                          ("nearest", "floor"), ("nearest", "ceil"), ("linear", "floor")])
@pytest.mark.parametrize("scales", [(1, 1, 2, 2), (1, 1, 1.5, 0.6), (1, 1, 0.5, 3)])
def test_forward_matches_onnx_reference(tmp_path, coord, mode, nearest, scales):
    if coord == "align_corners" and scales[3] == 0.6:
        # 5 x float32(0.6) is 3.0000001: onnx.reference divides by that unrounded width, memplan (like
        # onnxruntime, PyTorch and TF) by the output's length
        pytest.skip("onnx.reference's unrounded align_corners width")
    m, out = _resize_model(mode, coord, nearest, scales=scales, train=False)
    xv = np.random.default_rng(3).normal(size=(1, 2, 4, 5)).astype(np.float32)
    want = ReferenceEvaluator(m).run(None, {"x": xv})[0]
    op = next(o for o in load_model(save(tmp_path, m)).operations if o.type == "Resize")
    got = run_forward(op, [xv], [out], xv.dtype)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("coord", COORDS)
@pytest.mark.parametrize("a,exclude", [(-0.75, 0), (-0.5, 1)])
@pytest.mark.parametrize("scales", [(1, 1, 2, 2), (1, 1, 1.5, 0.6)])
def test_cubic_matches_onnx_reference(tmp_path, coord, a, exclude, scales):
    if coord == "align_corners" and scales[3] == 0.6:
        pytest.skip("onnx.reference's unrounded align_corners width")
    m, out = _resize_model("cubic", coord, "floor", scales=scales, train=False, cubic_coeff_a=a,
                           exclude_outside=exclude)
    xv = np.random.default_rng(5).normal(size=(1, 2, 4, 5)).astype(np.float32)
    want = ReferenceEvaluator(m).run(None, {"x": xv})[0]
    op = next(o for o in load_model(save(tmp_path, m)).operations if o.type == "Resize")
    np.testing.assert_allclose(run_forward(op, [xv], [out], xv.dtype)[0], want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("coord", ["half_pixel", "pytorch_half_pixel", "asymmetric"])
@pytest.mark.parametrize("mode,a,exclude", [("cubic", -0.5, 0), ("cubic", -0.75, 1), ("linear", -0.75, 0)])
@pytest.mark.parametrize("x_shape,sizes", [((1, 2, 10, 10), (1, 2, 4, 4)), ((1, 2, 7, 9), (1, 2, 3, 5)),
                                           ((1, 2, 4, 5), (1, 2, 6, 8))])
def test_antialias_matches_onnx_reference(tmp_path, coord, mode, a, exclude, x_shape, sizes):
    # Resize-18's antialias (torch.onnx writes it for F.interpolate(..., antialias=True), timm's resampling
    # of a ViT's position table to another grid): the filter widened to 1 / scale (linear) or 2 / scale
    # (cubic) input pixels when downsampling, weights normalised; plain when upsampling
    extra = {"antialias": 1, "exclude_outside": exclude, **({"cubic_coeff_a": a} if mode == "cubic" else {})}
    m, out = _resize_model(mode, coord, "floor", sizes=sizes, x_shape=x_shape, train=False, **extra)
    xv = np.random.default_rng(7).normal(size=x_shape).astype(np.float32)
    want = ReferenceEvaluator(m).run(None, {"x": xv})[0]
    op = next(o for o in load_model(save(tmp_path, m)).operations if o.type == "Resize")
    np.testing.assert_allclose(run_forward(op, [xv], [out], xv.dtype)[0], want, rtol=1e-5, atol=1e-5)


def test_antialias_gradients_and_verify(tmp_path):
    m, _ = _resize_model("cubic", "pytorch_half_pixel", "floor", sizes=(1, 2, 4, 4), x_shape=(1, 2, 10, 10),
                         antialias=1, cubic_coeff_a=-0.5)
    p = save(tmp_path, m)
    assert check_gradients(p) >= 20
    check_verify(p, "-b", "2", "-O", "adam")


@pytest.mark.parametrize("mode,coord", [("nearest", "asymmetric"), ("linear", "half_pixel"),
                                        ("linear", "align_corners"), ("cubic", "half_pixel")])
def test_gradients_keep_nothing_and_verify(tmp_path, mode, coord):
    m, _ = _resize_model(mode, coord, "round_prefer_floor", scales=(1, 1, 2, 1.5))
    p = save(tmp_path, m)
    tg = training_graph(p)
    k = next(o.index for o in tg.graph.operations if o.type == "Resize")
    assert tg.rules[k].kept_forward() == []
    assert tg.rules[k].calc_derivative is not None
    assert check_gradients(p) >= 20
    check_verify(p, "-b", "2")
    check_verify(p, "-b", "2", "-O", "adam")


def test_sizes_input_and_trilinear_3d(tmp_path):
    # sizes instead of scales: the coordinate map uses output / input per axis (ONNX)
    m, out = _resize_model("linear", "pytorch_half_pixel", "floor", sizes=(1, 2, 3, 8, 4), x_shape=(1, 2, 2, 4, 3))
    xv = np.random.default_rng(0).normal(size=(1, 2, 2, 4, 3)).astype(np.float32)
    p = save(tmp_path, m)
    plain, _ = _resize_model("linear", "pytorch_half_pixel", "floor", sizes=(1, 2, 3, 8, 4), x_shape=(1, 2, 2, 4, 3),
                             train=False)
    want = ReferenceEvaluator(plain).run(None, {"x": xv})[0]
    op = next(o for o in load_model(p).operations if o.type == "Resize")
    np.testing.assert_allclose(run_forward(op, [xv], [out], xv.dtype)[0], want, rtol=1e-5, atol=1e-6)
    assert check_gradients(p) >= 20
    check_verify(p, "-b", "2")


def test_upsample_opset9_is_read_as_resize(tmp_path):
    # the zoo's opset-9 Upsample (scales as an input), converted at load
    nodes = [helper.make_node("Add", ["x", "p"], ["a"]),
             helper.make_node("Upsample", ["a", "s"], ["y"], mode="nearest")]
    inits = {"p": np.ones((1, 2, 3, 3), np.float32), "s": np.array([1, 1, 2, 2], np.float32)}
    m = onnx_model(nodes, [("x", (1, 2, 3, 3))], [("y", (1, 2, 6, 6))], inits, opset=9)
    p = save(tmp_path, m)
    op = next(o for o in load_model(p).operations if o.type == "Resize")
    assert op.attrs["mode"] == "nearest" and op.attrs["scales"] == (1.0, 1.0, 2.0, 2.0)
    xv = np.arange(18, dtype=np.float32).reshape(1, 2, 3, 3)
    np.testing.assert_array_equal(run_forward(op, [xv], [(1, 2, 6, 6)], xv.dtype)[0], xv.repeat(2, axis=2).repeat(2, axis=3))
    check_verify(p, "-b", "2")


@pytest.mark.parametrize("attrs,what", [({"mode": "nearest", "antialias": 1}, "antialias"),
                                        ({"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize"},
                                         "tf_crop_and_resize")])
def test_unsupported_resize_is_one_line(tmp_path, attrs, what):
    nodes = [helper.make_node("Resize", ["x", "", "s"], ["y"], **attrs)]
    m = onnx_model(nodes, [("x", (1, 2, 4, 4))], [("y", (1, 2, 2, 2))],
                   {"s": np.array([1, 1, 0.5, 0.5], np.float32)}, opset=19)
    r = CliRunner().invoke(main, ["analyze", save(tmp_path, m)])
    assert r.exit_code == 2 and what in r.stderr and "Traceback" not in r.output + r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_runtime_scales_are_refused(tmp_path):
    # scales computed from the input (not a constant): no output shape, one line naming the tensor
    nodes = [helper.make_node("ReduceMax", ["x"], ["m"], keepdims=0),
             helper.make_node("Expand", ["m", "four"], ["s"]),
             helper.make_node("Resize", ["x", "", "s"], ["y"], mode="nearest")]
    m = onnx_model(nodes, [("x", (1, 2, 4, 4))], [("y", (1, 2, 8, 8))], {"four": np.array([4], np.int64)}, opset=19)
    r = CliRunner().invoke(main, ["analyze", save(tmp_path, m)])
    assert r.exit_code == 2 and "tensor 'y'" in r.stderr and "Traceback" not in r.output + r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_onert_refuses_it(tmp_path):
    m, _ = _resize_model("nearest", "asymmetric", "floor", scales=(1, 1, 2, 2))
    r = CliRunner().invoke(main, ["analyze", save(tmp_path, m), "-p", "onert"])
    assert r.exit_code == 2 and "Resize" in r.stderr


# ---- TFLite --------------------------------------------------------------------------------------
def _tf_resize(xv, out_hw, bilinear, align_corners, half_pixel):
    """TF Lite's reference ResizeBilinear / ResizeNearestNeighbor, element by element (NHWC)."""
    n, h, w, c = xv.shape
    oh, ow = out_hw
    y = np.zeros((n, oh, ow, c), np.float64)

    def scale(i, o):
        return (i - 1) / (o - 1) if align_corners and o > 1 else i / o

    sh, sw = scale(h, oh), scale(w, ow)
    for r in range(oh):
        for q in range(ow):
            if bilinear:
                off = 0.5 if half_pixel else 0.0
                iy, ix = (r + off) * sh - off, (q + off) * sw - off
                y0, x0 = max(math.floor(iy), 0), max(math.floor(ix), 0)
                y1, x1 = min(math.ceil(iy), h - 1), min(math.ceil(ix), w - 1)
                ly, lx = iy - math.floor(iy), ix - math.floor(ix)
                y[:, r, q] = (xv[:, y0, x0] * (1 - ly) * (1 - lx) + xv[:, y1, x0] * ly * (1 - lx)
                              + xv[:, y0, x1] * (1 - ly) * lx + xv[:, y1, x1] * ly * lx)
            else:
                off = 0.5 if half_pixel else 0.0
                rnd = (lambda v: math.floor(v + 0.5)) if align_corners else math.floor
                iy = max(min(rnd((r + off) * sh), h - 1), 0)
                ix = max(min(rnd((q + off) * sw), w - 1), 0)
                y[:, r, q] = xv[:, iy, ix]
    return y


def _tflite_model(tmp_path, bilinear, align_corners, half_pixel, out_hw=(7, 4)):
    from circle_schema.v0_10.circle.BuiltinOptions import BuiltinOptions
    from circle_schema.v0_10.circle.ResizeBilinearOptions import ResizeBilinearOptionsT
    from circle_schema.v0_10.circle.ResizeNearestNeighborOptions import ResizeNearestNeighborOptionsT

    m = ModelBuilder(seed=4)
    x = m.input([2, 4, 5, 3])
    h = m.conv2d(x, 3, 3)
    size = m.const([2], "int32", np.array(out_hw, np.int32))
    o = (ResizeBilinearOptionsT if bilinear else ResizeNearestNeighborOptionsT)()
    o.alignCorners, o.halfPixelCenters = align_corners, half_pixel
    code, kind = (23, BuiltinOptions.ResizeBilinearOptions) if bilinear else \
        (97, BuiltinOptions.ResizeNearestNeighborOptions)
    y = m._op(code, [h, size], [2, *out_hw, 3], kind, o)
    m.output(m.fully_connected(m.reshape(y, [2, out_hw[0] * out_hw[1] * 3]), 3))
    return m.save(str(tmp_path / "r.tflite"))


@pytest.mark.parametrize("bilinear", [True, False])
@pytest.mark.parametrize("align_corners,half_pixel", [(False, False), (True, False), (False, True)])
def test_tflite_resize_matches_tf_reference_and_verifies(tmp_path, bilinear, align_corners, half_pixel):
    p = _tflite_model(tmp_path, bilinear, align_corners, half_pixel)
    op = next(o for o in load_model(p).operations if o.type == "Resize")
    xv = np.random.default_rng(1).normal(size=(2, 4, 5, 3))
    want = _tf_resize(xv, (7, 4), bilinear, align_corners, half_pixel)
    np.testing.assert_allclose(run_forward(op, [xv], [(2, 7, 4, 3)], xv.dtype)[0], want, rtol=1e-12, atol=1e-12)
    assert check_gradients(p) >= 20
    check_verify(p, "-b", "2")


def test_scales_from_a_constant_node_as_torchscript_writes_them(tmp_path):
    # TorchScript: roi and scales are Constant nodes (float data the loader strips unless it needs it)
    scales = helper.make_tensor("sv", TensorProto.FLOAT, [4], [1, 1, 2, 3])
    roi = helper.make_tensor("rv", TensorProto.FLOAT, [0], [])
    nodes = [helper.make_node("Constant", [], ["roi"], value=roi),
             helper.make_node("Constant", [], ["s"], value=scales),
             helper.make_node("Add", ["x", "p"], ["a"]),
             helper.make_node("Resize", ["a", "roi", "s"], ["y"], mode="linear",
                              coordinate_transformation_mode="pytorch_half_pixel")]
    m = onnx_model(nodes, [("x", (1, 2, 3, 3))], [("y", (1, 2, 6, 9))],
                   {"p": np.linspace(0, 1, 18).reshape(1, 2, 3, 3).astype(np.float32)}, opset=13)
    p = save(tmp_path, m)
    g = load_model(p)
    op = next(o for o in g.operations if o.type == "Resize")
    assert op.attrs["scales"] == (1.0, 1.0, 2.0, 3.0) and g.operands[op.outputs[0]].shape == (1, 2, 6, 9)
    assert check_gradients(p) >= 12
