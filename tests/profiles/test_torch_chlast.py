"""The torch profile's channels-last convolutions (ConvNeXt), torch-free: the kernel facts of
memplan_cli/ops/conv.py against torch 2.14's allocator events, and how the profile finds a
channels-last input and lays out what follows. The expected figures were read off torch's allocator
events per op (torch.profiler, one thread: the input's and output's own bytes left out, see
docs/torchprof.md "Channels-last convolutions"); devtools/torch_oracle.py --set convnext checks whole
networks."""
import numpy as np
import pytest

from memplan_cli.analysis import analyze
from memplan_cli.config import TrainConfig
from memplan_cli.ir.graph import Operand, Operation
from memplan_cli.ops.conv import _torch_bwd_dw, _torch_bwd_dx, _torch_fwd

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from tests.profiles.test_torch_vision import _save  # noqa: E402


def _cl_conv(n, c, h, k, o, s=1, group=1, bias=True):
    """A channels-last 2-D convolution as the profile sees it (padding k // 2 unstrided, none strided)."""
    oh = h if s == 1 else (h - k) // s + 1
    opd = [Operand(0, "x", (n, c, h, h)), Operand(1, "w", (o, c // group, k, k), is_const=True),
           Operand(2, "y", (n, o, oh, oh)), Operand(3, "b", (o,), is_const=True)]
    dw = group > 1 and group == c and o % c == 0  # as the ONNX loader reads it
    attrs = {"kernel": (k, k), "stride": (s, s), "dilation": (1, 1), "group": group, "layout": "NCHW",
             "memory_format": "channels_last", "pads": (k // 2 if s == 1 else 0,) * 4}
    if dw:
        attrs["depth_multiplier"] = o // c
    op = Operation(0, "DepthwiseConv2D" if dw else "Conv2D", [0, 1, 3] if bias else [0, 1, -1], [2], attrs)
    return op, opd


def _most(alts):
    return max((sum(a) for a in alts), default=0)


# (N, C, H, K, O, stride, group, bias) -> bytes measured with torch 2.14 beyond the op's own results:
# forward (beside the output), the input's gradient (beside it), the weight's gradient (beside the input's,
# the weight's and the bias's gradients)
MEASURED = [
    ((2, 32, 16, 7, 32, 1, 32, True), 6272, 6272, 1612032),        # ConvNeXt's depthwise 7x7
    ((4, 40, 16, 7, 40, 1, 40, True), 9408, 9408, 2015040),        # 40 channels: the reorders round to 48
    ((2, 32, 16, 7, 32, 1, 32, False), 6272, 6272, 1611904),
    ((2, 32, 16, 4, 32, 1, 32, True), 2048, 2048, 526464),
    ((2, 32, 16, 2, 32, 1, 32, True), 512, 512, 1152),            # 2x2: no large scratch
    ((2, 32, 16, 3, 32, 1, 32, True), 1152, 1152, 2432),           # 3x3: no large scratch
    ((2, 32, 16, 3, 32, 1, 1, True), 81944, 82072, 110720),
    ((2, 40, 16, 3, 40, 1, 1, True), 134936, 135064, 198304),
    ((2, 32, 16, 3, 64, 1, 1, False), 155672, 155800, 221184),
    ((2, 40, 16, 2, 80, 2, 1, True), 120856, 186392, 164160),      # ConvNeXt's downsampling
    ((2, 40, 16, 2, 40, 2, 1, True), 74776, 103448, 88224),
    ((2, 24, 16, 3, 48, 2, 1, True), 104984, 133656, 138432),
    ((16, 32, 8, 1, 64, 1, 1, True), 16408, 16536, 16640),         # 1x1 on oneDNN (batch 16)
    ((2, 32, 16, 1, 64, 1, 1, True), 0, 0, 0),                     # 1x1 on the slow path
    ((1, 40, 16, 2, 80, 2, 1, True), 92160, 51200, 92160),         # one sample: the slow path's columns
    ((1, 32, 8, 3, 32, 1, 1, True), 110592, 36864, 110592),
]


@pytest.mark.parametrize("cfg,fwd,dx,dw", MEASURED)
def test_channels_last_conv_scratch_matches_torch(cfg, fwd, dx, dw):
    op, opd = _cl_conv(*cfg)
    assert (_most(_torch_fwd(op, opd)), _most(_torch_bwd_dx(op, opd)), _most(_torch_bwd_dw(op, opd))) == (fwd, dx, dw)


def _ln2d(src, dst, c):
    """LayerNorm over channels as ConvNeXt writes it: permute to NHWC, normalise, permute back."""
    return [helper.make_node("Transpose", [src], [f"{dst}_t"], perm=[0, 2, 3, 1]),
            helper.make_node("LayerNormalization", [f"{dst}_t", f"g{c}", f"b{c}"], [f"{dst}_n"], axis=-1),
            helper.make_node("Transpose", [f"{dst}_n"], [dst], perm=[0, 3, 1, 2])]


def _block(tmp_path, group=32, name="b.onnx"):
    """stem conv -> LayerNorm2d (a channels-last view) -> 7x7 conv (depthwise unless `group`) -> permute to
    NHWC -> LayerNorm -> permute back -> + the channels-last input: torchvision's CNBlock, its MLP left out."""
    nodes = [helper.make_node("Conv", ["x", "w0"], ["s"], strides=[4, 4])] + _ln2d("s", "p", 32)
    nodes += [helper.make_node("Conv", ["p", "w1", "b1"], ["d"], pads=[3, 3, 3, 3], group=group),
              helper.make_node("Transpose", ["d"], ["dt"], perm=[0, 2, 3, 1]),
              helper.make_node("LayerNormalization", ["dt", "g32", "b32"], ["dn"], axis=-1),
              helper.make_node("Transpose", ["dn"], ["db"], perm=[0, 3, 1, 2]),
              helper.make_node("Add", ["db", "p"], ["y"])]
    return _save(tmp_path, nodes, (2, 3, 64, 64), (2, 32, 16, 16),
                 [("w0", (32, 3, 4, 4)), ("g32", (32,)), ("b32", (32,)), ("w1", (32, 32 // group, 7, 7)),
                  ("b1", (32,))], name)


def _cols(path, **cfg):
    a = analyze(path, TrainConfig(**{"loss": "mse", **cfg}), profile="torch")
    return a, a.extras["per_layer_extra"]


def _col(cols, op_type, k=0):
    return [v for key, v in cols.items() if key.split()[1] == op_type][k]


def test_depthwise_conv_of_a_channels_last_view_has_the_channels_last_facts(tmp_path):
    _, cols = _cols(_block(tmp_path), batch_size=2)
    dw = _col(cols, "DepthwiseConv2D")
    assert dw["fwd_mem_tmp"] == 6272  # the weight reordered: no input copy, no blocked output
    assert dw["bwd_mem_tmp"] == 1612032
    # its output is channels-last: permuted to NHWC it is contiguous, so this LayerNorm copies
    # nothing, while the first one (of the NCHW stem's output) copies its input in forward
    x = 2 * 32 * 16 * 16 * 4
    stats = 2 * 2 * 16 * 16 * 4
    assert _col(cols, "LayerNormalization", 0)["fwd_mem_tmp"] == x + stats
    assert _col(cols, "LayerNormalization", 1)["fwd_mem_tmp"] == stats


# Grouped channels-last convolutions other than depthwise with one output per channel (EdgeNeXt's depth
# multiplier 2, small groups), (N, C, H, K, O, stride, group, bias) -> torch 2.14's scratch beside the
# output in forward, and backward's peak (devtools/torch_conv_sweep.py --one "n=4,c=48,h=16,o=96,k=5,s=2,
# p=0,g=48,cl=1": the input's, weight's and bias's gradients included), the kernel oneDNN ran
GROUPED = [
    ((4, 48, 16, 5, 96, 2, 48, True), 1228800, 1445376),   # jit: gOIhw16i16o, 128 x the weight
    ((2, 24, 16, 3, 48, 1, 24, False), 221184, 273792),    # jit, no bias: no padded bias
    ((4, 64, 8, 3, 64, 1, 16, True), 18432, 241152),       # jit, 4 per group: gOIhw4i4o forward
    ((2, 48, 8, 3, 48, 1, 6, True), 27648, 121728),        # jit, 8 per group: gOIhw8i8o forward
    ((2, 64, 8, 3, 128, 1, 2, True), 303128, 623616),      # brgemm: 32 inputs per group
    ((4, 64, 2, 7, 128, 1, 64, True), 108568, 3266560),    # 2 output columns, padding 3: brgemm AVX2
    ((2, 48, 8, 7, 24, 2, 2, True), 271640, 564160),       # brgemm, 12 outputs per group: blocks of 16
]


@pytest.mark.parametrize("cfg,fwd,bwd", GROUPED)
def test_grouped_channels_last_conv_scratch_matches_torch(cfg, fwd, bwd):
    op, opd = _cl_conv(*cfg)
    dx, w = opd[0].nbytes, opd[1].nbytes + (opd[3].nbytes if cfg[-1] else 0)
    got_bwd = max(dx + _most(_torch_bwd_dx(op, opd)), dx + w + _most(_torch_bwd_dw(op, opd)))
    assert (_most(_torch_fwd(op, opd)), got_bwd) == (fwd, bwd)


def test_brgemm_forward_blocks_are_estimated_above_16_outputs_per_group():
    from memplan_cli.ops.conv import _torch_estimated

    # 2 output columns under a 7-wide kernel: brgemm AVX2, blocks of 8 (2 outputs) or its pick (24)
    assert [_torch_estimated(*_cl_conv(4, 64, 2, 7, 64 * m, 1, 64, True)) for m in (2, 24)] == [False, True]
    # 32 inputs per group: brgemm AVX-512, 16 outputs per group or fewer take one block of 16
    assert [_torch_estimated(*_cl_conv(2, 64, 8, 3, o, 1, 2, True)) for o in (32, 128)] == [False, True]
    assert not _torch_estimated(*_cl_conv(4, 48, 16, 5, 96, 2, 48, True))  # jit: exact


@pytest.mark.parametrize("group", [4, 1])
def test_grouped_channels_last_conv_has_facts_as_the_ungrouped_one(tmp_path, group):
    _, cols = _cols(_block(tmp_path, group, f"g{group}.onnx"), batch_size=2)
    if group == 1:
        assert _col(cols, "Conv2D", 1)["fwd_mem_tmp"] == 2 * 32 * 32 * 49 * 4 + 8216  # the weight twice
    else:  # 8 per group: the channels-last weight copy, then gOIhw8i8o (the same bytes)
        assert _col(cols, "Conv2D", 1)["fwd_mem_tmp"] == 2 * 32 * 8 * 49 * 4


@pytest.mark.parametrize("add_between", [False, True])
def test_one_pixel_output_of_a_channels_last_conv_stays_channels_last(tmp_path, add_between):
    # torch 2.14: a channels-last convolution's (N, C, 1, 1) output has strides (C, 1, C, C), which a
    # depthwise convolution reads channels-last (measured: 256 x its weight as scratch, ConvNeXt's last
    # stage at a small input); an elementwise op's result has (C, 1, 1, 1): contiguous, NCHW kernels
    nodes = [helper.make_node("Conv", ["x", "w0"], ["s"], strides=[4, 4])] + _ln2d("s", "p", 32)
    nodes.append(helper.make_node("Conv", ["p", "w1", "b64"], ["d"], strides=[2, 2]))
    if add_between:
        nodes.append(helper.make_node("Add", ["d", "b64r"], ["d2"]))
    nodes.append(helper.make_node("Conv", ["d2" if add_between else "d", "w2", "b64"], ["y"], pads=[3, 3, 3, 3],
                                  group=64))
    path = _save(tmp_path, nodes, (2, 3, 8, 8), (2, 64, 1, 1),
                 [("w0", (32, 3, 4, 4)), ("g32", (32,)), ("b32", (32,)), ("w1", (64, 32, 2, 2)), ("b64", (64,)),
                  ("b64r", (1, 64, 1, 1)), ("w2", (64, 1, 7, 7))], f"px{int(add_between)}.onnx")
    _assert_dw_7x7_64_reads_channels_last(path, not add_between)


def _assert_dw_7x7_64_reads_channels_last(path, channels_last: bool):
    """The file's one depthwise 7x7 over 64 channels (batch 2): read channels-last, its weight's gradient
    books 256 x the weight as scratch (plus 256 B and a copy of the weight); read NCHW, less."""
    _, cols = _cols(path, batch_size=2)
    tmp = _col(cols, "DepthwiseConv2D")["bwd_mem_tmp"]
    if channels_last:
        assert tmp == 64 * 49 * 4 * 256 + 256 + 64 * 49 * 4
    else:
        assert tmp < 64 * 49 * 4 * 256


@pytest.mark.parametrize("mixed", [False, True])
def test_a_cat_of_channels_last_maps_is_channels_last(tmp_path, mixed):
    # ATen's cat_compute_output_memory_format: the format every input suggests, contiguous as soon as
    # one input is (torch 2.14: a depthwise 7x7 of a cat of two channels-last maps books 256 x its
    # weight as scratch for the weight's gradient, as of one channels-last map; timm's RDNet, DenseNet-
    # style stages of LayerNorm2d blocks); with the stem's NCHW output among the inputs, NCHW kernels
    nodes = [helper.make_node("Conv", ["x", "w0"], ["s"], strides=[4, 4])] + _ln2d("s", "p", 32)
    nodes.append(helper.make_node("Conv", ["p", "w1", "b32"], ["q"]))
    nodes.append(helper.make_node("Concat", ["s" if mixed else "p", "q"], ["c"], axis=1))
    nodes.append(helper.make_node("Conv", ["c", "w2", "b64"], ["y"], pads=[3, 3, 3, 3], group=64))
    path = _save(tmp_path, nodes, (2, 3, 32, 32), (2, 64, 8, 8),
                 [("w0", (32, 3, 4, 4)), ("g32", (32,)), ("b32", (32,)), ("w1", (32, 32, 1, 1)), ("b64", (64,)),
                  ("w2", (64, 1, 7, 7))], f"cat{int(mixed)}.onnx")
    _assert_dw_7x7_64_reads_channels_last(path, not mixed)


def test_l2_norm_keeps_input_and_result_and_makes_a_quotient_and_a_mask(tmp_path):
    # ConvNeXt V2's global response norm: x.norm(p=2, dim=(1, 2), keepdim=True) of an NHWC tensor;
    # measured (torch 2.14) for (2, 8, 8, 32): backward makes self / norm (16,384 B) and norm == 0
    # (64 bools) beside the input's gradient (16,384 B); forward the norm only (256 B)
    nodes = [helper.make_node("Mul", ["x", "two"], ["m"]),
             helper.make_node("ReduceL2", ["m"], ["n"], axes=[1, 2], keepdims=1),
             helper.make_node("Mul", ["n", "two"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8, 8, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 1, 1, 32])],
                              [numpy_helper.from_array(np.full((2, 8, 8, 32), 2, np.float32), "two")])
    path = tmp_path / "l2.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    a = analyze(str(path), TrainConfig(loss="mse", batch_size=2), profile="torch")
    n = _col(a.extras["per_layer_extra"], "ReduceL2")
    assert (n["fwd_mem_out"], n["bwd_mem_tmp"], n["bwd_mem_out"]) == (256, 16384 + 64, 16384)


def test_an_input_gradient_added_into_an_earlier_one_lives_until_the_op_returns(tmp_path):
    # the residual's gradient reaches p first; the depthwise convolution's own gradient of p is made
    # before its weight's gradient and added into p's when convolution_backward returns (measured,
    # torch 2.14: it is live during the weight-gradient scratch, ConvNeXt's peak)
    a, _ = _cols(_block(tmp_path), batch_size=2)
    steps = a.buffers.steps
    dw = [s.index for s in steps if "DepthwiseConv2D" in s.label and s.kind in ("calcDerivative", "calcGradient")]
    assert [steps[i].kind for i in dw] == ["calcDerivative", "calcGradient"]
    gx = [b for b in a.buffers.buffers if b.name == "p:grad" and b.first == dw[0]]
    assert len(gx) == 1 and gx[0].last == dw[1]


@pytest.mark.parametrize("h,dw", [(2, 592384), (3, None)])
def test_a_3x3_depthwise_weight_gradient_on_an_input_less_high_than_the_kernel_takes_the_large_scratch(h, dw):
    # measured (torch 2.14, one thread): a channels-last depthwise 3x3 of (4, 64, 2, 2), Segformer's
    # Mix-FFN at its last stage, backward events [4096 dx, 2304, -2304, 589824, 4224, 256, -4224, 256,
    # 2304, 2304, ...]: 256 x the weight beside the results; at 3 pixels high, no such scratch
    op, opd = _cl_conv(4, 64, h, 3, 64, 1, 64, True)
    got = _most(_torch_bwd_dw(op, opd))
    if dw is None:
        assert got < 256 * 64 * 9 * 4
    else:
        assert got == dw


def _tokens_as_image(tmp_path):
    """PiT's embedding and pooling at 64 x 64: a 16 x 16 stride-8 patch convolution, its tokens
    (flatten, transpose) normed, read back as an image (transpose, reshape: a channels-last view),
    then a depthwise 3 x 3 stride-2 convolution with two outputs per channel."""
    def shape(name, vals):
        return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.array(vals, np.int64), name))
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], strides=[8, 8]),
             shape("s1", [2, 16, 49]), helper.make_node("Reshape", ["c", "s1"], ["r"]),
             helper.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 1]),
             helper.make_node("LayerNormalization", ["t", "g", "be"], ["n"], axis=-1),
             helper.make_node("Transpose", ["n"], ["t2"], perm=[0, 2, 1]),
             shape("s2", [2, 16, 7, 7]), helper.make_node("Reshape", ["t2", "s2"], ["img"]),
             helper.make_node("Conv", ["img", "w2", "b2"], ["d"], group=16, strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Transpose", ["d"], ["y"], perm=[0, 2, 3, 1])]
    inits = [("w", (16, 3, 16, 16)), ("b", (16,)), ("g", (16,)), ("be", (16,)), ("w2", (32, 1, 3, 3)), ("b2", (32,))]
    return _save(tmp_path, nodes, (2, 3, 64, 64), (2, 4, 4, 32), inits, "pit.onnx")


def test_tokens_read_back_as_an_image_hand_the_patch_convolution_a_channels_last_gradient(tmp_path):
    # the flatten's backward is a reshape of the transposed (channels-last) gradient: a view (ATen's
    # computeStride), which the convolution's backward copies contiguous (one dY beside its phases);
    # measured on a PiT-style network (devtools/torch_oracle.py wc_overlap16_pool_224, both exporters):
    # -8.02 % when the reshape was counted as a copy, -0.00 % now
    a, cols = _cols(_tokens_as_image(tmp_path), batch_size=2)
    assert _col(cols, "Reshape", 0)["bwd_mem_out"] == 0
    copies = [b for b in a.buffers.buffers if b.name.endswith("Conv2D:grad_contiguous")]
    assert [b.size for b in copies] == [2 * 16 * 7 * 7 * 4]
    # the depthwise convolution with two outputs per channel on the channels-last view: its weight
    # blocked 16 x 16 per group (16 groups x 256 x 9 floats)
    assert _col(cols, "DepthwiseConv2D")["fwd_mem_tmp"] == 16 * 256 * 9 * 4


def _split_permuted(tmp_path, c=16):
    """FocalNet's modulation as both exporters write it: a Linear over channels-last tokens,
    Transpose (0, 3, 1, 2), Split along the channels into q and a context; the context through a
    depthwise 5 x 5 convolution and ReLU (then a 1 x 1 one), times q."""
    nodes = [helper.make_node("Conv", ["x", "w0"], ["s"], kernel_shape=[1, 1]),
             helper.make_node("Transpose", ["s"], ["t"], perm=[0, 2, 3, 1]),
             helper.make_node("MatMul", ["t", "wl"], ["l"]),
             helper.make_node("Transpose", ["l"], ["p"], perm=[0, 3, 1, 2]),
             helper.make_node("Split", ["p", "sizes"], ["q", "ctx"], axis=1),
             helper.make_node("Conv", ["ctx", "wd"], ["d"], kernel_shape=[5, 5], pads=[2, 2, 2, 2], group=c),
             helper.make_node("Relu", ["d"], ["e"]),
             helper.make_node("Conv", ["e", "wp"], ["f"], kernel_shape=[1, 1]),
             helper.make_node("Mul", ["q", "f"], ["m"]),
             helper.make_node("ReduceMean", ["m"], ["r"], axes=[2, 3], keepdims=0),
             helper.make_node("Gemm", ["r", "wh"], ["y"], transB=1)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 10])],
                              [numpy_helper.from_array(np.zeros(s, np.float32), n) for n, s in
                               (("w0", (c, 3, 1, 1)), ("wl", (c, 2 * c)), ("wd", (c, 1, 5, 5)), ("wp", (c, c, 1, 1)),
                                ("wh", (10, c)))] + [numpy_helper.from_array(np.array([c, c], np.int64), "sizes")])
    path = tmp_path / "split.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return str(path)


def test_a_convolution_of_a_channel_slice_of_a_permuted_tensor_is_named(tmp_path):
    # ATen's stride rule reads the slice channels-last (eager's kernels when the code split the permuted
    # tensor itself: `fam_split_permuted`, -0.78 %); code that made it `.contiguous()` first convolves
    # channels-first pieces (`fam_split_permuted_contig`: 4.4 x less), and no export writes that copy:
    # both convolutions (the second reads the first's channels-last result) are named, with the reason
    a, _ = _cols(_split_permuted(tmp_path), batch_size=2)
    est = a.extras["torch"]["coverage"]["estimated"]
    convs = [e for e in est if "Conv" in e["type"]]
    assert len(convs) == 2 and all("contiguous" in e["why"] for e in convs)


def test_a_convolution_of_a_whole_permuted_tensor_is_not_named(tmp_path):
    # ConvNeXt's depthwise convolution of the permuted LayerNorm output: a dense channels-last view
    a, _ = _cols(_block(tmp_path), batch_size=2)
    assert not [e for e in a.extras["torch"]["coverage"]["estimated"] if "Conv" in e["type"]]


def test_a_split_before_the_permute_is_read_as_written(tmp_path):
    # MambaOut's gated convolution splits the channels-last tokens, then permutes the piece: the same
    # strides, but not the place where code writes `.contiguous()`: not named
    c = 16
    nodes = [helper.make_node("Conv", ["x", "w0"], ["s"], kernel_shape=[1, 1]),
             helper.make_node("Transpose", ["s"], ["t"], perm=[0, 2, 3, 1]),
             helper.make_node("MatMul", ["t", "wl"], ["l"]),
             helper.make_node("Split", ["l", "sizes"], ["g", "ctx"], axis=3),
             helper.make_node("Transpose", ["ctx"], ["p"], perm=[0, 3, 1, 2]),
             helper.make_node("Conv", ["p", "wd"], ["d"], kernel_shape=[5, 5], pads=[2, 2, 2, 2], group=c),
             helper.make_node("Transpose", ["d"], ["q"], perm=[0, 2, 3, 1]),
             helper.make_node("Mul", ["g", "q"], ["m"]),
             helper.make_node("ReduceMean", ["m"], ["r"], axes=[1, 2], keepdims=0),
             helper.make_node("Gemm", ["r", "wh"], ["y"], transB=1)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 10])],
                              [numpy_helper.from_array(np.zeros(s, np.float32), n) for n, s in
                               (("w0", (c, 3, 1, 1)), ("wl", (c, 2 * c)), ("wd", (c, 1, 5, 5)), ("wh", (10, c)))]
                              + [numpy_helper.from_array(np.array([c, c], np.int64), "sizes")])
    path = tmp_path / "split_first.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    a, cols = _cols(str(path), batch_size=2)
    assert not [e for e in a.extras["torch"]["coverage"]["estimated"] if "Conv" in e["type"]]
    # still channels-last (ATen's stride rule): the 256 x weight scratch of a 5 x 5 depthwise kernel
    assert _col(cols, "DepthwiseConv2D")["bwd_mem_tmp"] >= 256 * 16 * 25 * 4
