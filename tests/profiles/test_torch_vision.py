"""The torch profile's facts for vision networks, on tiny hand-built ONNX graphs (torch-free): which
CPU convolution kernel eager picks, upsampling, pixel shuffle, a channels-last convolution, LayerNorm of a
permuted view, TF Lite files. Each expected figure follows
from the facts (measured with torch 2.14's allocator events, docs/torchprof.md); the oracle
(devtools/torch_oracle.py --vision) checks whole networks against torch itself."""
import pathlib

import numpy as np
import pytest
from click.testing import CliRunner

from memplan_cli.analysis import analyze
from memplan_cli.cli import main
from memplan_cli.config import TrainConfig
from memplan_cli.errors import UnsupportedOpError
from memplan_cli.ir.graph import Operand, Operation
from memplan_cli.ops.conv import torch_backend

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _save(tmp_path, nodes, x_shape, y_shape, inits=(), name="m.onnx"):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(y_shape))],
                              [numpy_helper.from_array(np.zeros(s, np.float32), n) for n, s in inits])
    path = tmp_path / name
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return str(path)


def _cols(path, **cfg):
    a = analyze(path, TrainConfig(**{"loss": "cce", **cfg}), profile="torch")
    return a, a.extras["per_layer_extra"]


def _col(cols, op_type):
    return next(v for k, v in cols.items() if k.split()[1] == op_type)


def _conv_op(n, c, h, k, o, stride=1, group=1, dilation=1):
    opd = [Operand(0, "x", (n, c, h, h)), Operand(1, "w", (o, c // group, k, k), is_const=True),
           Operand(2, "y", (n, o, h, h))]
    op = Operation(0, "Conv2D", [0, 1], [2], {"kernel": (k, k), "stride": (stride, stride),
                                              "dilation": (dilation, dilation), "group": group, "layout": "NCHW"})
    return op, opd


@pytest.mark.parametrize("shape,backend", [
    # (N, C, H, K, O[, stride, group]) -> what torch 2.14's `torch._C._select_conv_backend` picked on one thread
    ((2, 192, 2, 1, 1024), "slow"), ((16, 192, 2, 1, 1024), "mkldnn"), ((2, 16, 8, 1, 16, 2), "mkldnn"),
    ((1, 3, 8, 3, 8), "slow"), ((1, 16, 8, 3, 16), "slow"), ((2, 3, 64, 3, 16), "mkldnn"),
    ((1, 24, 8, 3, 24, 1, 24), "mkldnn"), ((2, 24, 8, 3, 24, 1, 24), "mkldnn")])
def test_conv_kernel_choice_matches_torch(shape, backend):
    op, opd = _conv_op(*shape)
    assert torch_backend(op, opd) == backend


def test_1x1_conv_on_a_small_batch_has_no_scratch(tmp_path):
    # the slow path of a 1x1 kernel is one GEMM: no scratch in forward nor backward; on 16 samples
    # oneDNN's jit_1x1 copies the input blocked to 16 channels (16,384 B) and the weight as 16 x 16
    # floats beside the output (measured: `python devtools/torch_conv_sweep.py --one
    # "n=16,c=8,h=4,o=16,k=1,bias=0" --events`: forward [16384, 1024, 16384, ...])
    def cols(n):
        path = _save(tmp_path, [helper.make_node("Conv", ["x", "w"], ["y"])], (n, 8, 4, 4), (n, 16, 4, 4),
                     [("w", (16, 8, 1, 1))], f"c{n}.onnx")
        return _col(_cols(path)[1], "Conv2D")
    small, big = cols(2), cols(16)
    assert small["fwd_mem_tmp"] == 0 and small["bwd_mem_tmp"] == 0
    assert big["fwd_mem_tmp"] == 16 * 16 * 4 * 4 * 4 + 16 * 16 * 4


def _resize_net(tmp_path, mode, name="r.onnx", scale=2, **extra):
    scales = numpy_helper.from_array(np.array([1, 1, scale, scale], np.float32), "scales")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]),
             helper.make_node("Constant", [], ["s"], value=scales),
             helper.make_node("Resize", ["c", "", "s"], ["y"], mode=mode, **extra)]
    return _save(tmp_path, nodes, (2, 4, 4, 4), (2, 4, int(4 * scale), int(4 * scale)), [("w", (4, 4, 1, 1))], name)


def test_upsampling_copies_its_input_beside_a_second_output(tmp_path):
    # upsample_nearest2d / bilinear: +Y (the output), +X (a copy of the input), +Y, then both freed
    for mode in ("nearest", "linear"):
        _, cols = _cols(_resize_net(tmp_path, mode))
        r = _col(cols, "Resize")
        assert r["fwd_mem_out"] == 2 * 4 * 8 * 8 * 4
        assert r["fwd_mem_tmp"] == 2 * 4 * 4 * 4 * 4 + 2 * 4 * 8 * 8 * 4
        assert r["bwd_mem_out"] == 2 * 4 * 4 * 4 * 4 and r["bwd_mem_tmp"] == 0


def test_bicubic_computes_into_its_output_alone(tmp_path):
    # upsample_bicubic2d (torch 2.14.1's allocator events): +Y and per-axis tap tables (48 B per output
    # row or column, freed inside the forward, not counted); backward the input's gradient only
    _, cols = _cols(_resize_net(tmp_path, "cubic"))
    r = _col(cols, "Resize")
    assert r["fwd_mem_out"] == 2 * 4 * 8 * 8 * 4 and r["fwd_mem_tmp"] == 0
    assert r["bwd_mem_out"] == 2 * 4 * 4 * 4 * 4 and r["bwd_mem_tmp"] == 0


@pytest.mark.parametrize("mode,scale", [("cubic", 0.5), ("cubic", 2), ("linear", 0.5)])
def test_antialiased_resize_makes_its_width_pass_beside_the_output(tmp_path, mode, scale):
    # _upsample_bicubic2d_aa / _upsample_bilinear2d_aa (torch 2.14.1's allocator events, e.g. (1, 96, 10,
    # 10) -> (4, 4): +Y 6,144, +15,360 = N x C x IH x OW floats, tap tables, all freed in the op; backward
    # +X only): the width pass first, into an N x C x IH x OW buffer
    _, cols = _cols(_resize_net(tmp_path, mode, f"aa{mode}{scale}.onnx", scale, antialias=1))
    r = _col(cols, "Resize")
    ow = int(4 * scale)
    assert r["fwd_mem_out"] == 2 * 4 * ow * ow * 4 and r["fwd_mem_tmp"] == 2 * 4 * 4 * ow * 4
    assert r["bwd_mem_out"] == 2 * 4 * 4 * 4 * 4 and r["bwd_mem_tmp"] == 0


@pytest.mark.parametrize("mode,taps", [("linear", 2), ("nearest", 1)])
def test_resizing_a_volume_makes_its_index_tables_beside_the_output(tmp_path, mode, taps):
    # upsample_trilinear3d / upsample_nearest3d (torch 2.14.1's allocator events, e.g. (2, 4, 6, 8, 8) x 2
    # trilinear: +Y, then per axis and tap an int64 index and a float weight per output position (96 + 48,
    # 128 + 64, 128 + 64 per tap), all freed in the op; backward +X only)
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2, 2], np.float32), "scales")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]),
             helper.make_node("Constant", [], ["s"], value=scales),
             helper.make_node("Resize", ["c", "", "s"], ["y"], mode=mode)]
    path = _save(tmp_path, nodes, (2, 4, 4, 4, 4), (2, 4, 8, 8, 8), [("w", (4, 4, 1, 1, 1))], f"v{mode}.onnx")
    r = _col(_cols(path)[1], "Resize")
    assert r["fwd_mem_out"] == 2 * 4 * 8 * 8 * 8 * 4 and r["fwd_mem_tmp"] == 12 * taps * (8 + 8 + 8)
    assert r["bwd_mem_out"] == 2 * 4 * 4 * 4 * 4 * 4 and r["bwd_mem_tmp"] == 0


def test_resizing_a_volume_with_cubic_taps_is_refused(tmp_path):
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2, 2], np.float32), "scales")
    nodes = [helper.make_node("Constant", [], ["s"], value=scales),
             helper.make_node("Resize", ["x", "", "s"], ["y"], mode="cubic")]
    path = _save(tmp_path, nodes, (2, 4, 4, 4, 4), (2, 4, 8, 8, 8), [], "v.onnx")
    with pytest.raises(UnsupportedOpError, match="cubic resizing of a rank-5 tensor"):
        _cols(path)


def test_resize_scales_computed_from_constants_are_folded(tmp_path):
    # TorchScript without constant folding concatenates interpolate's scales from two Constants
    mk = lambda n, v: helper.make_node("Constant", [], [n], value=numpy_helper.from_array(np.array(v, np.float32)))
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), mk("a", [1, 1]), mk("b", [2, 2]),
             helper.make_node("Concat", ["a", "b"], ["s"], axis=0),
             helper.make_node("Resize", ["c", "", "s"], ["y"], mode="nearest")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.zeros((4, 4, 1, 1), np.float32), "w")])
    path = tmp_path / "s.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    a, _ = _cols(str(path))
    y = next(o for o in a.graph.operands if o.name == "y")
    assert tuple(y.shape) == (2, 4, 8, 8)


def _d2s(tmp_path, mode):
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]),
             helper.make_node("DepthToSpace", ["c"], ["y"], blocksize=2, mode=mode)]
    return _save(tmp_path, nodes, (2, 8, 4, 4), (2, 2, 8, 8), [("w", (8, 8, 1, 1))], f"d2s_{mode}.onnx")


def test_pixel_shuffle_allocates_its_output_only(tmp_path):
    _, cols = _cols(_d2s(tmp_path, "CRD"))
    d = _col(cols, "DepthToSpace")
    assert d["fwd_mem_out"] == 2 * 8 * 4 * 4 * 4 and d["fwd_mem_tmp"] == 0
    assert d["bwd_mem_out"] == 2 * 8 * 4 * 4 * 4  # pixel_unshuffle of the incoming gradient


def test_depth_to_space_dcr_is_refused(tmp_path):
    with pytest.raises(UnsupportedOpError, match="DCR mode"):
        _cols(_d2s(tmp_path, "DCR"))


def test_transposed_conv_outside_the_measured_shapes_is_refused(tmp_path):
    # a kernel 14 wide, where the weight gradient's jit / gemm boundary lies, was not worked out
    # (tests/profiles/test_torch_convscratch.py)
    path = _save(tmp_path, [helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[7, 7])],
                 (2, 4, 4, 4), (2, 4, 35, 35), [("w", (4, 4, 14, 14))])
    with pytest.raises(UnsupportedOpError, match="transposed convolution"):
        _cols(path)


def _ln_over_channels(tmp_path, then_conv):
    """Conv -> permute to NHWC -> LayerNorm over channels -> permute back [-> Conv 3x3]."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]),
             helper.make_node("Transpose", ["c"], ["t"], perm=[0, 2, 3, 1]),
             helper.make_node("LayerNormalization", ["t", "g", "b"], ["n"], axis=-1),
             helper.make_node("Transpose", ["n"], ["y" if not then_conv else "p"], perm=[0, 3, 1, 2])]
    if then_conv:
        nodes.append(helper.make_node("Conv", ["p", "w2"], ["y"], pads=[1, 1, 1, 1]))
    return _save(tmp_path, nodes, (2, 8, 4, 4), (2, 8, 4, 4),
                 [("w", (8, 8, 1, 1)), ("g", (8,)), ("b", (8,)), ("w2", (8, 8, 3, 3))], f"ln{int(then_conv)}.onnx")


def test_layer_norm_of_a_permuted_view_copies_it(tmp_path):
    # native_layer_norm makes the permuted input contiguous (+X, freed in the op) beside its output,
    # mean and rstd; its backward copies the saved view again
    _, cols = _cols(_ln_over_channels(tmp_path, False))
    ln = _col(cols, "LayerNormalization")
    x = 2 * 8 * 4 * 4 * 4
    assert ln["fwd_mem_out"] == x and ln["fwd_mem_tmp"] == x + 2 * (2 * 4 * 4 * 4)
    assert ln["bwd_mem_tmp"] >= x


def test_conv_of_a_channels_last_tensor_is_analysed(tmp_path):
    # measured (torch 2.14): the weight copied channels-last, a scratchpad, the weight reordered with 16
    # input channels; the facts are tests/profiles/test_torch_chlast.py's
    _, cols = _cols(_ln_over_channels(tmp_path, True))
    w = 8 * 8 * 3 * 3 * 4
    assert [v["fwd_mem_tmp"] for k, v in cols.items() if k.split()[1] == "Conv2D"][1] == w + 8216 + 2 * w


def test_tflite_op_without_a_pytorch_counterpart_is_refused_as_such():
    r = CliRunner().invoke(main, ["analyze", str(ROOT / "tests" / "multihead" / "keras_two_head.tflite"), "-p", "torch",
                                  "-l", "cce"])
    assert r.exit_code == 2
    assert "no PyTorch counterpart" in r.output and len(r.output.strip().splitlines()) == 1


def test_random_mask_allocates_its_output_and_carries_no_gradient(tmp_path):
    # stochastic depth as the dynamo exporter writes it: rand_like(...) < p -> float -> / p -> x * mask
    p = numpy_helper.from_array(np.array(0.8, np.float32), "p")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]),
             helper.make_node("RandomUniformLike", ["c"], ["r"]),  # reads a tensor that requires grad
             helper.make_node("Less", ["r", "p"], ["keep"]),
             helper.make_node("Cast", ["keep"], ["m"], to=TensorProto.FLOAT),
             helper.make_node("Div", ["m", "p"], ["mask"]),
             helper.make_node("Mul", ["c", "mask"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 4, 4])],
                              [numpy_helper.from_array(np.zeros((4, 4, 1, 1), np.float32), "w"), p])
    path = tmp_path / "sd.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    _, cols = _cols(str(path))
    r = _col(cols, "RandomUniformLike")
    assert r["fwd_mem_out"] == 2 * 4 * 4 * 4 * 4 and r["bwd_mem_out"] == 0 and r["bwd_mem_tmp"] == 0
    # the product's backward makes the gradient of c only (512 B), none for the mask
    assert _col(cols, "Mul")["bwd_mem_out"] == 2 * 4 * 4 * 4 * 4


def _record(node, target):
    """What torch.onnx's dynamo exporter records beside a node (`pkg.torch.onnx.fx_node`)."""
    node.metadata_props.add(key="pkg.torch.onnx.fx_node",
                            value=f"%{node.name} : [num_users=1] = call_function[target=torch.ops.{target}](args = ())")
    return node


def _linear_1d_decomposed(tmp_path, n, lo, name, recorded=True, shared=True):
    """The dynamo exporter's upsample_linear1d of a (n, 4, 6) Conv1d output to lo positions (torch.export's
    decomposition: two `_unsafe_index` taps, then lo + (hi - lo) * w); `shared`: one Transpose for both
    taps (the exporter's optimizer on), else one each (off)."""
    def rec(node, target):
        return _record(node, target) if recorded else node
    c = np.arange(lo) * (6 - 1) / (lo - 1)
    i0 = np.floor(c).astype(np.int64)
    i1 = np.minimum(i0 + 1, 5)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
             rec(helper.make_node("Transpose", ["c"], ["t"], perm=[2, 0, 1], name="t_in"), "aten._unsafe_index.Tensor"),
             rec(helper.make_node("GatherND", ["t", "i0"], ["g0"], name="g0"), "aten._unsafe_index.Tensor"),
             rec(helper.make_node("Transpose", ["g0"], ["a"], perm=[1, 2, 0], name="t0"), "aten._unsafe_index.Tensor"),
             rec(helper.make_node("GatherND", ["t" if shared else "u", "i1"], ["g1"], name="g1"),
                 "aten._unsafe_index.Tensor"),
             rec(helper.make_node("Transpose", ["g1"], ["b"], perm=[1, 2, 0], name="t1"), "aten._unsafe_index.Tensor"),
             rec(helper.make_node("Sub", ["b", "a"], ["d"], name="sub"), "aten.sub.Tensor"),
             rec(helper.make_node("Mul", ["d", "wt"], ["m"], name="mul"), "aten.mul.Tensor"),
             rec(helper.make_node("Add", ["a", "m"], ["y"], name="add"), "aten.add.Tensor")]
    if not shared:
        nodes.insert(4, rec(helper.make_node("Transpose", ["c"], ["u"], perm=[2, 0, 1], name="t_in1"),
                            "aten._unsafe_index.Tensor"))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, 4, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, 4, lo])],
                              [numpy_helper.from_array(np.zeros((4, 4, 1), np.float32), "w"),
                               numpy_helper.from_array(i0[:, None], "i0"), numpy_helper.from_array(i1[:, None], "i1"),
                               numpy_helper.from_array((c - i0).astype(np.float32), "wt")])
    path = tmp_path / name
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    return str(path)


@pytest.mark.parametrize("n,lo,shared", [(1, 12, True), (4, 12, True), (4, 4, True), (4, 12, False)])
def test_dynamo_linear_1d_decomposition_is_eagers_one_upsample(tmp_path, n, lo, shared):
    # torch.export decomposes upsample_linear1d into gathers and arithmetic; eager ran one kernel
    # (UpSampleKernel.cpp: +Y and 12 B x 2 taps per output position of tables, freed in the op; backward
    # +X only): the same columns as the Resize the TorchScript exporter writes, and none per gather
    scales = numpy_helper.from_array(np.array([1, 1, lo / 6], np.float32), "scales")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Constant", [], ["s"], value=scales),
             helper.make_node("Resize", ["c", "", "s"], ["y"], mode="linear", coordinate_transformation_mode="align_corners")]
    a_ts, ts = _cols(_save(tmp_path, nodes, (n, 4, 6), (n, 4, lo), [("w", (4, 4, 1))], f"ts{n}_{lo}.onnx"))
    a_dyn, dyn = _cols(_linear_1d_decomposed(tmp_path, n, lo, f"dyn{n}_{lo}.onnx", shared=shared))
    r = dyn[f"#{8 if shared else 9} Add (add)"]  # reported under the decomposition's last op
    assert r["fwd_mem_out"] == n * 4 * lo * 4 and r["fwd_mem_tmp"] == 12 * 2 * lo
    assert r["bwd_mem_out"] == n * 4 * 6 * 4 and r["bwd_mem_tmp"] == 0
    assert r == _col(ts, "Resize")
    assert not any(k.split()[1] in ("GatherND", "Sub", "Mul") for k in dyn)
    assert a_dyn.planned_total == a_ts.planned_total


def test_unrecorded_gathers_and_lerp_stay_op_by_op(tmp_path):
    # without the exporter's `_unsafe_index` record the same ops may be a user's indexing: replayed as written
    _, cols = _cols(_linear_1d_decomposed(tmp_path, 4, 12, "plain.onnx", recorded=False))
    assert any(k.split()[1] == "GatherND" for k in cols)


@pytest.mark.parametrize("transposed", [False, True])
def test_upsampling_copies_a_transposed_gradient_contiguous(tmp_path, transposed):
    # tokens resized along the sequence between two transposes: the gradient reaching the resize is a
    # transposed view, which upsample_linear1d_backward copies contiguous first (grad_output.contiguous();
    # torch 2.14.1's allocator events: +Y before the input's gradient, for 1-D, 2-D and 3-D kernels)
    scales = numpy_helper.from_array(np.array([1, 1, 0.75], np.float32), "scales")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("Transpose", ["h"], ["t"], perm=[0, 2, 1]),
             helper.make_node("Constant", [], ["s"], value=scales),
             helper.make_node("Resize", ["t", "", "s"], ["r"], mode="linear"),
             helper.make_node("Transpose", ["r"], ["u"], perm=[0, 2, 1]) if transposed else
             helper.make_node("Reshape", ["r", "shape"], ["u"]),
             helper.make_node("MatMul", ["u", "w2"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 12, 8])],
                              [numpy_helper.from_array(np.zeros((8, 8), np.float32), "w"),
                               numpy_helper.from_array(np.zeros((8, 8), np.float32), "w2"),
                               numpy_helper.from_array(np.array([2, 12, 8], np.int64), "shape")])
    path = tmp_path / f"t{int(transposed)}.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    r = _col(_cols(str(path))[1], "Resize")
    assert r["bwd_mem_out"] == 2 * 8 * 16 * 4
    assert r["bwd_mem_tmp"] == (2 * 8 * 12 * 4 if transposed else 0)


def _nearest_exact_decomposed(tmp_path, dims, recorded=True):
    """The dynamo exporter's `_upsample_nearest_exact{1,2}d` of a (2, 4, 6[, 6]) convolution output x 2: one
    `_unsafe_index` read (Transpose of the spatial axes first, GatherND of a constant index grid, Transpose
    back)."""
    r = dims + 2
    perm, back = list(range(2, r)) + [0, 1], list(range(dims, r)) + list(range(dims))
    grid = np.stack(np.meshgrid(*[np.arange(12) // 2] * dims, indexing="ij"), -1).astype(np.int64)

    def rec(node):
        return _record(node, "aten._unsafe_index.Tensor") if recorded else node
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
             rec(helper.make_node("Transpose", ["c"], ["t"], perm=perm, name="t_in")),
             rec(helper.make_node("GatherND", ["t", "i"], ["gd"], name="gather")),
             rec(helper.make_node("Transpose", ["gd"], ["y"], perm=back, name="t_out"))]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4] + [6] * dims)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4] + [12] * dims)],
                              [numpy_helper.from_array(np.zeros((4, 4) + (1,) * dims, np.float32), "w"),
                               numpy_helper.from_array(grid, "i")])
    path = tmp_path / f"ne{dims}{int(recorded)}.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    return str(path)


@pytest.mark.parametrize("dims", [1, 2])
def test_dynamo_nearest_exact_decomposition_is_eagers_one_upsample(tmp_path, dims):
    # eager's _upsample_nearest_exact{1,2}d allocate as upsample_nearest's kernels (torch 2.14.1's events):
    # 1-D +Y and an int64 index and a float weight per output position; 2-D +Y, +X (the input copied), +Y
    _, cols = _cols(_nearest_exact_decomposed(tmp_path, dims))
    r = cols["#3 Transpose (t_out)"]  # reported under the decomposition's last op
    y, x = 2 * 4 * 12 ** dims * 4, 2 * 4 * 6 ** dims * 4
    assert r["fwd_mem_out"] == y
    assert r["fwd_mem_tmp"] == (12 * 12 if dims == 1 else x + y)
    assert r["bwd_mem_out"] == x and r["bwd_mem_tmp"] == 0
    assert not any(k.split()[1] == "GatherND" for k in cols)
    _, plain = _cols(_nearest_exact_decomposed(tmp_path, dims, recorded=False))
    assert any(k.split()[1] == "GatherND" for k in plain)  # without the exporter's record: as written


@pytest.mark.parametrize("approximate,transposed,reorders", [("none", True, 2), ("tanh", True, 0),
                                                            ("none", False, 0)])
def test_exact_gelu_reorders_a_transposed_gradient(tmp_path, approximate, transposed, reorders):
    # tokens, a linear, GELU, then a mean over the tokens of the transposed result: the gradient reaching
    # GELU is transposed against its saved input. Exact GELU's backward runs oneDNN's eltwise backward
    # (a contiguous float32 input), which makes two more input-sized buffers for it (torch 2.14.1's
    # allocator events); tanh GELU runs ATen's own kernel: none
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("Gelu", ["h"], ["g"], approximate=approximate)]
    if transposed:
        nodes += [helper.make_node("Transpose", ["g"], ["t"], perm=[0, 2, 1]),
                  helper.make_node("ReduceMean", ["t", "axes"], ["y"], keepdims=0)]
    else:
        nodes.append(helper.make_node("ReduceMean", ["g", "axes"], ["y"], keepdims=0))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
                              [numpy_helper.from_array(np.zeros((8, 8), np.float32), "w"),
                               numpy_helper.from_array(np.array([2 if transposed else 1], np.int64), "axes")])
    path = tmp_path / f"gelu_{approximate}_{int(transposed)}.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]), str(path))
    g = _col(_cols(str(path))[1], "Gelu")
    assert g["bwd_mem_out"] == 2 * 16 * 8 * 4
    assert g["bwd_mem_tmp"] == reorders * 2 * 16 * 8 * 4
