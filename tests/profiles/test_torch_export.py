"""`--profile torch` on what the dynamo exporter's optimizer rewrote (profiles/torch/export.py), on tiny
hand-built ONNX graphs that carry the metadata torch.onnx writes (no torch needed): a file whose
optimizer folded a BatchNorm, a zero pad or a zero bias away gives the figure of the same module
exported with them in place (the TorchScript training export, which devtools/torch_oracle.py matched
to torch 2.14's allocator); the other profiles analyse the file as it is."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper, save

from memplan_cli.analysis import analyze_graph
from memplan_cli.config import TrainConfig
from memplan_cli.errors import UnsupportedOpError
from memplan_cli.loaders import load_model

F = TensorProto.FLOAT
RULE = "pkg.onnxscript.rewriter.rule_name"
FX = "pkg.torch.onnx.fx_node"
SIG = "pkg.torch.export.ExportedProgram.graph_signature"


def _w(*shape):
    return np.full(shape, 0.1, np.float32)


def _fx(target, args):
    return f"%out : [num_users=1] = call_function[target=torch.ops.aten.{target}](args = ({args}), kwargs = {{}})"


def _signature(params=(), buffers=()):
    lines = ["", "# inputs"]
    lines += [f"p_{t.replace('.', '_')}: PARAMETER target='{t}'" for t in params]
    lines += [f"b_{t.replace('.', '_')}: BUFFER target='{t}' persistent=True" for t in buffers]
    return "\n".join(lines + ["x: USER_INPUT", ""])


def _save(tmp_path, name, nodes, inits, x_shape, y_shape, sig=None, meta=None, producer=None):
    """meta: node name -> (rule names, fx node text); producer: the model's producer_name (torch.onnx's
    TorchScript exporter writes "pytorch"), none by default."""
    for n in nodes:
        if meta and n.name in meta:
            for key, value in zip((RULE, FX), meta[n.name]):
                p = n.metadata_props.add()
                p.key, p.value = key, value
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, x_shape)],
                              [helper.make_tensor_value_info("y", F, y_shape)],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits])
    if sig is not None:
        p = graph.metadata_props.add()
        p.key, p.value = SIG, sig
    path = tmp_path / f"{name}.onnx"
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)],
                           **({"producer_name": producer} if producer else {})), str(path))
    return str(path)


def _peak(path, profile="torch", **cfg):
    a = analyze_graph(load_model(path), TrainConfig(**{"loss": "cce", **cfg}), profile=profile)
    if profile == "torch":
        t = a.extras["torch"]
        return t["peak"], t["split"], t["tensors"]["peak"]
    return a.buffers.info, sorted((b.name, b.size, b.first, b.last) for b in a.buffers.buffers)


HEAD = [helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Flatten", ["r"], ["f"], name="flat"),
        helper.make_node("Gemm", ["f", "fc.weight", "fc.bias"], ["y"], transB=1, name="fc")]
HEAD_INITS = [("fc.weight", _w(10, 288)), ("fc.bias", _w(10))]
BN_ARGS = "%conv2d, %p_1_weight, %p_1_bias, %b_1_running_mean, %b_1_running_var, True, 0.1, 1e-05"


def _with_bn(tmp_path, conv_bias: bool):
    """Conv (3 -> 8, 3x3) -> BatchNorm -> ReLU -> Linear, as the TorchScript training export writes it."""
    conv_in = ["x", "0.weight"] + (["0.bias"] if conv_bias else [])
    nodes = [helper.make_node("Conv", conv_in, ["c0"], kernel_shape=[3, 3], name="conv"),
             helper.make_node("BatchNormalization", ["c0", "1.weight", "1.bias", "1.running_mean", "1.running_var"],
                              ["c", "rm", "rv"], training_mode=1, name="bn")] + HEAD
    inits = [("0.weight", _w(8, 3, 3, 3))] + ([("0.bias", _w(8))] if conv_bias else []) + \
        [(f"1.{k}", _w(8)) for k in ("weight", "bias", "running_mean", "running_var")] + HEAD_INITS
    return _save(tmp_path, f"bn{int(conv_bias)}", nodes, inits, [2, 3, 8, 8], [2, 10])


def _folded(tmp_path, conv_bias: bool, file_bias: bool, rules="FuseBatchNormIntoConv, RemoveOptionalBiasFromConv",
            bn_args=BN_ARGS, name="folded"):
    """The dynamo export of the same module: the BatchNorm folded into the Conv (`file_bias`: the
    optimizer left a folded bias on it)."""
    conv_in = ["x", "0.weight"] + (["0.weight_bias"] if file_bias else [])
    nodes = [helper.make_node("Conv", conv_in, ["c"], kernel_shape=[3, 3], name="node_Conv_1")] + HEAD
    inits = [("0.weight", _w(8, 3, 3, 3))] + ([("0.weight_bias", _w(8))] if file_bias else []) + HEAD_INITS
    params = ["0.weight"] + (["0.bias"] if conv_bias else []) + ["1.weight", "1.bias", "fc.weight", "fc.bias"]
    sig = _signature(params, ["1.running_mean", "1.running_var", "1.num_batches_tracked"])
    meta = {"node_Conv_1": (rules, _fx("_native_batch_norm_legit_functional.default", bn_args))}
    return _save(tmp_path, name, nodes, inits, [2, 3, 8, 8], [2, 10], sig, meta)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.parametrize("file_bias", [False, True])
def test_batchnorm_folded_into_a_bias_free_conv_is_put_back(tmp_path, optimizer, file_bias):
    # the folded bias (present or removed) is no parameter of eager's bias-free conv
    want = _peak(_with_bn(tmp_path, conv_bias=False), optimizer=optimizer)
    got = _peak(_folded(tmp_path, conv_bias=False, file_bias=file_bias), optimizer=optimizer)
    assert got == want


@pytest.mark.parametrize("file_bias", [False, True])
def test_a_conv_bias_the_signature_lists_stays_or_comes_back(tmp_path, file_bias):
    want = _peak(_with_bn(tmp_path, conv_bias=True), optimizer="adam")
    got = _peak(_folded(tmp_path, conv_bias=True, file_bias=file_bias, rules="FuseBatchNormIntoConv"),
                optimizer="adam")
    assert got == want


def test_the_folded_file_is_analysed_as_it_is_by_the_other_profiles(tmp_path):
    folded = _folded(tmp_path, conv_bias=False, file_bias=True)
    plain = _save(tmp_path, "plain", [helper.make_node("Conv", ["x", "0.weight", "0.weight_bias"], ["c"],
                                                       kernel_shape=[3, 3], name="node_Conv_1")] + HEAD,
                  [("0.weight", _w(8, 3, 3, 3)), ("0.weight_bias", _w(8))] + HEAD_INITS, [2, 3, 8, 8], [2, 10],
                  sig=_signature(["0.weight", "0.weight_bias", "1.weight", "1.bias", "fc.weight", "fc.bias"]))
    assert _peak(folded, "memplan") == _peak(plain, "memplan")
    # and -p torch does see the difference: eager runs the batch_norm the file lost
    assert _peak(folded)[0] > _peak(plain)[0]


def test_batchnorm_without_affine_weights_is_refused(tmp_path):
    args = "%conv2d, None, None, %b_1_running_mean, %b_1_running_var, True, 0.1, 1e-05"
    path = _folded(tmp_path, conv_bias=False, file_bias=False, bn_args=args)
    with pytest.raises(UnsupportedOpError, match=r"node_Conv_1.*FuseBatchNormIntoConv.*optimize=False"):
        _peak(path)


def test_a_rewrite_not_read_back_is_refused_naming_the_rule(tmp_path):
    path = _folded(tmp_path, conv_bias=False, file_bias=False, rules="FuseSuccessiveRelu")
    with pytest.raises(UnsupportedOpError, match=r"op #0 Conv2D \(node_Conv_1\).*FuseSuccessiveRelu.*optimize=False"):
        _peak(path)


def test_view_and_shape_rewrites_change_nothing(tmp_path):
    plain = _save(tmp_path, "plain", [helper.make_node("Conv", ["x", "0.weight"], ["c"], kernel_shape=[3, 3],
                                                       name="node_Conv_1")] + HEAD,
                  [("0.weight", _w(8, 3, 3, 3))] + HEAD_INITS, [2, 3, 8, 8], [2, 10],
                  sig=_signature(["0.weight", "fc.weight", "fc.bias"]))
    tagged = _save(tmp_path, "tagged", [helper.make_node("Conv", ["x", "0.weight"], ["c"], kernel_shape=[3, 3],
                                                         name="node_Conv_1")] + HEAD,
                   [("0.weight", _w(8, 3, 3, 3))] + HEAD_INITS, [2, 3, 8, 8], [2, 10],
                   sig=_signature(["0.weight", "fc.weight", "fc.bias"]),
                   meta={"node_Conv_1": ("NormalizePadFormatConv", _fx("conv2d.default", "%x, %p_0_weight"))})
    assert _peak(tagged) == _peak(plain)


def _pad_nodes(fused: bool):
    if fused:  # the optimizer moved the ZeroPad2d(1) into the conv's pads (its own padding is 1 too)
        return [helper.make_node("Conv", ["x", "0.weight", "0.bias"], ["c"], kernel_shape=[3, 3], pads=[2, 2, 2, 2],
                                 name="node_Conv_2")]
    return [helper.make_node("Pad", ["x", "pads"], ["xp"], mode="constant", name="pad"),
            helper.make_node("Conv", ["xp", "0.weight", "0.bias"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                             name="conv")]


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_a_zero_pad_folded_into_a_conv_is_put_back(tmp_path, optimizer):
    # eager allocates the padded tensor and the convolution saves it (measured: `misc` with dynamo)
    head = [helper.make_node("Relu", ["c"], ["r"], name="relu"),
            helper.make_node("Flatten", ["r"], ["f"], name="flat"),
            helper.make_node("Gemm", ["f", "fc.weight", "fc.bias"], ["y"], transB=1, name="fc")]
    inits = [("0.weight", _w(8, 8, 3, 3)), ("0.bias", _w(8)), ("fc.weight", _w(10, 8 * 12 * 12)), ("fc.bias", _w(10))]
    pads = ("pads", np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64))
    want = _peak(_save(tmp_path, "pad", _pad_nodes(False) + head, inits + [pads], [2, 8, 10, 10], [2, 10]),
                 optimizer=optimizer)
    sig = _signature(["0.weight", "0.bias", "fc.weight", "fc.bias"])
    meta = {"node_Conv_2": ("FuseConvPad", _fx("conv2d.default", "%pad, %p_0_weight, %p_0_bias, [1, 1], [1, 1]"))}
    got = _peak(_save(tmp_path, "fused", _pad_nodes(True) + head, inits, [2, 8, 10, 10], [2, 10], sig, meta),
                optimizer=optimizer)
    assert got == want
    # a conv without its own padding in the call (the default, 0) takes the whole pad back
    meta = {"node_Conv_2": ("FuseConvPad", _fx("conv2d.default", "%pad, %p_0_weight, %p_0_bias"))}
    got = _peak(_save(tmp_path, "fused0", _pad_nodes(True) + head, inits, [2, 8, 10, 10], [2, 10], sig, meta),
                optimizer=optimizer)
    nodes = [helper.make_node("Pad", ["x", "pads"], ["xp"], mode="constant", name="pad"),
             helper.make_node("Conv", ["xp", "0.weight", "0.bias"], ["c"], kernel_shape=[3, 3], name="conv")] + head
    pads = ("pads", np.array([0, 0, 2, 2, 0, 0, 2, 2], np.int64))
    assert got == _peak(_save(tmp_path, "pad2", nodes, inits + [pads], [2, 8, 10, 10], [2, 10]), optimizer=optimizer)


def test_a_zero_bias_the_optimizer_removed_still_trains(tmp_path):
    # torchvision initialises Linear biases to zero; eager holds, differentiates and updates them
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Gemm", ["r", "fc.weight", "fc.bias"], ["y"], transB=1, name="fc")]
    want = _peak(_save(tmp_path, "bias", nodes, [("fc.weight", _w(10, 32)), ("fc.bias", _w(10))], [2, 32], [2, 10]),
                 optimizer="adam")
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Gemm", ["r", "fc.weight"], ["y"], transB=1, name="node_Gemm_1")]
    meta = {"node_Gemm_1": ("RemoveOptionalBiasFromGemm", _fx("linear.default", "%relu, %p_fc_weight, %p_fc_bias"))}
    got = _peak(_save(tmp_path, "nobias", nodes, [("fc.weight", _w(10, 32))], [2, 32], [2, 10],
                      _signature(["fc.weight", "fc.bias"]), meta), optimizer="adam")
    assert got == want


def test_a_random_draw_from_a_constant_shape_is_no_constant(tmp_path):
    # the dynamo exporter writes dropout as RandomUniformLike(empty_like(x)) < p, and constant folding
    # makes empty_like(x) a constant: the draw is still made each step (not folded), and -p torch holds
    # no tensor for the constant (eager's empty_like is the mask itself)
    nodes = [helper.make_node("RandomUniformLike", ["shape_of_h"], ["u"], name="rand"),
             helper.make_node("Less", ["u", "p"], ["keep"], name="lt"),
             helper.make_node("Cast", ["keep"], ["m"], to=F, name="cast"),
             helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
             helper.make_node("Mul", ["h", "m"], ["y"], name="drop")]
    inits = [("shape_of_h", np.zeros((2, 16), np.float32)), ("p", np.float32(0.9)), ("w", _w(16, 16))]
    g = load_model(_save(tmp_path, "drop", nodes, inits, [2, 16], [2, 16]))
    assert [op.type for op in g.operations][:1] == ["RandomUniformLike"]
    a = analyze_graph(g, TrainConfig(loss="cce"), profile="torch")
    assert not any(b.name == "shape_of_h" for b in a.buffers.buffers)



def _two_linears(tmp_path, name, merged: bool, second="%p_l2_bias"):
    """Two 16 -> 16 Linears; `merged`: the optimizer kept one of the two equal (zero) biases."""
    b2 = "l1.bias" if merged else "l2.bias"
    nodes = [helper.make_node("Gemm", ["x", "l1.weight", "l1.bias"], ["h"], transB=1, name="node_linear"),
             helper.make_node("Relu", ["h"], ["r"], name="node_relu"),
             helper.make_node("Gemm", ["r", "l2.weight", b2], ["y"], transB=1, name="node_linear_1")]
    for n, args in ((nodes[0], "%x, %p_l1_weight, %p_l1_bias"), (nodes[2], f"%relu, %p_l2_weight, {second}")):
        p = n.metadata_props.add()
        p.key, p.value = FX, _fx("linear.default", args)
    inits = [("l1.weight", _w(16, 16)), ("l1.bias", _w(16)), ("l2.weight", _w(16, 16))] + \
        ([] if merged else [("l2.bias", _w(16))])
    params = ["l1.weight", "l1.bias", "l2.weight"] + (["l2.bias"] if second == "%p_l2_bias" else [])
    return _save(tmp_path, name, nodes, inits, [2, 16], [2, 16], _signature(params))


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_a_parameter_merged_into_an_equal_one_is_its_own_tensor(tmp_path, optimizer):
    # random init: both biases are zeros, the optimizer keeps one; eager holds, differentiates and
    # updates each
    want = _peak(_two_linears(tmp_path, "apart", merged=False), optimizer=optimizer)
    assert _peak(_two_linears(tmp_path, "merged", merged=True), optimizer=optimizer) == want


def test_a_tied_parameter_stays_one(tmp_path):
    # the second layer's aten call takes the first one's bias itself (tied): one tensor, as in eager
    tied = _peak(_two_linears(tmp_path, "tied", merged=True, second="%p_l1_bias"), optimizer="adam")
    apart = _peak(_two_linears(tmp_path, "apart", merged=False), optimizer="adam")
    assert tied[1]["parameters"] == apart[1]["parameters"] - 16 * 4


def _tied(tmp_path, name, folded: bool):
    """Token embedding tied to the LM head: the head reads the table transposed, through a Transpose,
    or (`folded`) through the constant the optimizer folded it into."""
    head_w = "val_9" if folded else "emb_t"
    nodes = [helper.make_node("Gather", ["emb.weight", "x"], ["e"], name="node_embedding"),
             helper.make_node("Relu", ["e"], ["r"], name="node_relu")]
    if not folded:
        nodes.append(helper.make_node("Transpose", ["emb.weight"], ["emb_t"], perm=[1, 0], name="node_t"))
    nodes.append(helper.make_node("MatMul", ["r", head_w], ["y"], name="node_linear"))
    inits = [("emb.weight", _w(50, 16))] + ([("val_9", _w(16, 50))] if folded else [])
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.INT64, [2, 8])],
                              [helper.make_tensor_value_info("y", F, [2, 8, 50])],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits])
    p = graph.metadata_props.add()
    p.key, p.value = SIG, _signature(["emb.weight"])
    if folded:
        vi = helper.make_tensor_value_info("val_9", F, [16, 50])
        m = vi.metadata_props.add()
        m.key, m.value = "pkg.onnxscript.optimizer.folded_from", "['emb.weight']"
        graph.value_info.append(vi)
    path = tmp_path / f"{name}.onnx"
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    return str(path)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_a_tied_weight_folded_into_its_transpose_is_a_view(tmp_path, optimizer):
    # Falcon's export: the LM head's transposed table became a second constant; eager has one table
    want = _peak(_tied(tmp_path, "view", folded=False), optimizer=optimizer)
    assert _peak(_tied(tmp_path, "folded", folded=True), optimizer=optimizer) == want


def _same_padded(tmp_path, pads, folded):
    """timm's Conv2dSame: F.pad(x, asymmetric) -> Conv 3x3 stride 2 without padding -> BatchNorm -> ReLU
    -> Linear; `folded`: the dynamo export, whose optimizer fused both the pad and the BatchNorm into
    the Conv (the node's fx node is then the batch_norm)."""
    side = (8 + pads[0] + pads[2] - 3) // 2 + 1
    head = [helper.make_node("Relu", ["c"], ["r"], name="relu"),
            helper.make_node("Flatten", ["r"], ["f"], name="flat"),
            helper.make_node("Gemm", ["f", "fc.weight", "fc.bias"], ["y"], transB=1, name="fc")]
    inits = [("0.weight", _w(8, 3, 3, 3)), ("fc.weight", _w(10, 8 * side * side)), ("fc.bias", _w(10))]
    if folded:
        nodes = [helper.make_node("Conv", ["x", "0.weight"], ["c"], kernel_shape=[3, 3], strides=[2, 2], pads=pads,
                                  name="node_Conv_1")] + head
        sig = _signature(["0.weight", "1.weight", "1.bias", "fc.weight", "fc.bias"],
                         ["1.running_mean", "1.running_var", "1.num_batches_tracked"])
        meta = {"node_Conv_1": ("FuseBatchNormIntoConv, FuseConvPad, RemoveOptionalBiasFromConv",
                                _fx("_native_batch_norm_legit_functional.default", BN_ARGS))}
        return _save(tmp_path, f"same_f{pads}", nodes, inits, [2, 3, 8, 8], [2, 10], sig, meta)
    nodes = [helper.make_node("Pad", ["x", "pads"], ["xp"], mode="constant", name="pad"),
             helper.make_node("Conv", ["xp", "0.weight"], ["c0"], kernel_shape=[3, 3], strides=[2, 2], name="conv"),
             helper.make_node("BatchNormalization", ["c0", "1.weight", "1.bias", "1.running_mean", "1.running_var"],
                              ["c", "rm", "rv"], training_mode=1, name="bn")] + head
    inits += [("pads", np.array([0, 0, pads[0], pads[1], 0, 0, pads[2], pads[3]], np.int64))]
    inits += [(f"1.{k}", _w(8)) for k in ("weight", "bias", "running_mean", "running_var")]
    return _save(tmp_path, f"same{pads}", nodes, inits, [2, 3, 8, 8], [2, 10])


@pytest.mark.parametrize("pads", [[0, 0, 1, 1], [1, 1, 0, 0]])
def test_a_pad_and_a_batchnorm_fused_into_one_conv_are_put_back(tmp_path, pads):
    # a convolution pads both ends of a dim alike: with one end unpadded, all of it was the pad's
    want = _peak(_same_padded(tmp_path, pads, False), optimizer="adam")
    a = analyze_graph(load_model(_same_padded(tmp_path, pads, True)), TrainConfig(loss="cce", optimizer="adam"),
                      profile="torch")
    t = a.extras["torch"]
    assert (t["peak"], t["split"], t["tensors"]["peak"]) == want
    assert t["coverage"]["estimated"] == []


def test_a_pad_fused_with_a_batchnorm_on_both_ends_is_estimated(tmp_path):
    # (1, 2) on each dim: the convolution's own padding (0 or 1) is not recorded; taken as 0 (timm's
    # pad_same), the convolution and its pad named as estimated
    want = _peak(_same_padded(tmp_path, [1, 1, 2, 2], False), optimizer="adam")
    a = analyze_graph(load_model(_same_padded(tmp_path, [1, 1, 2, 2], True)), TrainConfig(loss="cce", optimizer="adam"),
                      profile="torch")
    t = a.extras["torch"]
    assert (t["peak"], t["split"], t["tensors"]["peak"]) == want
    assert sorted(e["type"] for e in t["coverage"]["estimated"]) == ["Conv2D", "Pad"]


def test_a_constant_folded_from_a_parameters_computation_is_named_as_estimated(tmp_path):
    # the optimizer folded k(dropout(rel)) (a parameter through computations: fx nodes linear_3,
    # getitem) into one constant: eager recomputes it each step; the file keeps only the result, so
    # its reader, the constant and its optimizer state are named as estimated
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="node_relu"),
             helper.make_node("MatMul", ["r", "transpose_6"], ["y"], name="node_bmm")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [2, 16])],
                              [helper.make_tensor_value_info("y", F, [2, 8])],
                              [numpy_helper.from_array(_w(16, 8), "transpose_6")])
    p = graph.metadata_props.add()
    p.key, p.value = SIG, _signature(["rel", "k.weight"])
    vi = helper.make_tensor_value_info("transpose_6", F, [16, 8])
    m = vi.metadata_props.add()
    m.key, m.value = "pkg.onnxscript.optimizer.folded_from", "['getitem', 'k.weight', 'linear_3', 'rel']"
    graph.value_info.append(vi)
    path = tmp_path / "folded_comp.onnx"
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    a = analyze_graph(load_model(str(path)), TrainConfig(loss="cce", optimizer="adam"), profile="torch")
    cov = a.extras["torch"]["coverage"]
    assert [e["type"] for e in cov["estimated"]] == ["MatMul"]
    # the constant (512 B) and its two Adam states and step count with the reader's bytes
    assert cov["estimated"][0]["bytes_at_peak"] >= 3 * 16 * 8 * 4 + 4


FOLDED = "pkg.onnxscript.optimizer.folded_from"


def _dynamo_file(tmp_path, name, nodes, inits, x_shape, y_shape, params, folded=None, calls=None, buffers=()):
    """A dynamo export: the graph signature, what each folded constant was folded from (`folded`:
    name -> sources) and the fx node each node records (`calls`: node name -> text)."""
    for n in nodes:
        if calls and n.name in calls:
            p = n.metadata_props.add()
            p.key, p.value = FX, calls[n.name]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, x_shape)],
                              [helper.make_tensor_value_info("y", F, y_shape)],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits])
    if params is not None:
        p = graph.metadata_props.add()
        p.key, p.value = SIG, _signature(params, buffers)
    for const, srcs in (folded or {}).items():
        _record_folded(graph, const, list(dict(inits)[const].shape), srcs)
    path = tmp_path / f"{name}.onnx"
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    return str(path)


def _record_folded(graph, const, shape, srcs):
    """The dynamo optimizer's record of what constant `const` was folded from (its value_info's
    `folded_from`)."""
    vi = helper.make_tensor_value_info(const, F, shape)
    m = vi.metadata_props.add()
    m.key, m.value = FOLDED, repr(sorted(srcs))
    graph.value_info.append(vi)


def _trained(a) -> dict:
    tg = a.buffers.training_graph
    return {o.name: tuple(o.shape) for o in tg.graph.operands if o.index in tg.grad}


def _torch(path, **cfg):
    a = analyze_graph(load_model(path), TrainConfig(**{"loss": "cce", "optimizer": "adam", **cfg}), profile="torch")
    return a.extras["torch"], a


def _projection(tmp_path, folded: bool, by_name: bool = False):
    """x (2, 4, 8) -> k (8 -> 6) + k(dropout(rel)) broadcast over the batch, then a head. `folded`: the
    dynamo export whose optimizer folded the projection of the parameter `rel` (4, 8) into the
    constant `clone_3` (2, 4, 6), the key layer's weight held as its transposed copy `val_15` (8, 6)
    or (`by_name`) under its own name, read by a Gemm; else the same module with the projection's ops
    in place where eager runs them, before their reader (Dropout, the linear, Unsqueeze, Tile:
    `repeat`'s copy)."""
    w, w_init = ("k.weight", _w(6, 8)) if by_name else ("val_15", _w(8, 6))

    def linear(x, y, name):
        if by_name:
            return [helper.make_node("Gemm", [x, w, "k.bias"], [y], transB=1, name=name)]
        return [helper.make_node("MatMul", [x, w], [y + "_mm"], name=name + "_mm"),
                helper.make_node("Add", [y + "_mm", "k.bias"], [y], name=name)]
    x2 = [helper.make_node("Reshape", ["x", "two_d"], ["x2"], name="node_flat")] if by_name else []
    x_lin = x2 + linear("x2" if by_name else "x", "kx2" if by_name else "kx", "node_linear") + \
        ([helper.make_node("Reshape", ["kx2", "three_d"], ["kx"], name="node_unflat")] if by_name else [])
    head = [helper.make_node("Add", ["kx", "pos"], ["s"], name="node_add"),
            helper.make_node("MatMul", ["s", "val_20"], ["y"], name="node_head")]
    inits = [(w, w_init), ("k.bias", _w(6)), ("val_20", _w(6, 10))]
    if by_name:
        inits += [("two_d", np.array([8, 8], np.int64)), ("three_d", np.array([2, 4, 6], np.int64))]
    if folded:
        nodes = x_lin + head
        nodes[-2].input[1] = "clone_3"
        inits.append(("clone_3", _w(2, 4, 6)))
        chain = ["rel", "k.weight", "k.bias", "getitem", "linear_3", "unsqueeze", "repeat", "clone_3", "val_42"]
        folded_from = {"val_20": ["head.weight"], "clone_3": chain}
        if not by_name:
            folded_from["val_15"] = ["k.weight"]
        return _dynamo_file(tmp_path, f"proj_folded{int(by_name)}", nodes, inits, [2, 4, 8], [2, 4, 10],
                            ["rel", "k.weight", "k.bias", "head.weight"], folded_from,
                            {"node_add": _fx("add.Tensor", "%linear_1, %clone_3")})
    pos = [helper.make_node("Dropout", ["rel", "ratio", "train"], ["rd"], name="node_drop")] + \
        linear("rd", "rk", "node_linear_rel") + \
        [helper.make_node("Unsqueeze", ["rk", "axes"], ["ru"], name="node_unsqueeze"),
         helper.make_node("Tile", ["ru", "reps"], ["pos"], name="node_repeat")]
    inits += [("rel", _w(4, 8)), ("ratio", np.float32(0.5)), ("train", np.bool_(True)),
              ("axes", np.array([0], np.int64)), ("reps", np.array([2, 1, 1], np.int64))]
    return _dynamo_file(tmp_path, f"proj_plain{int(by_name)}", x_lin + pos + head, inits, [2, 4, 8], [2, 4, 10],
                        None)


@pytest.mark.parametrize("by_name", [False, True])
def test_a_folded_projection_of_a_parameter_is_run_as_eager_runs_it(tmp_path, by_name):
    # folded_from names `rel` (no longer in the file), the key layer's weight and bias (held) and the
    # chain's fx nodes (getitem: dropout's output, linear, unsqueeze, repeat, clone): eager runs
    # dropout, the linear and repeat's copy each step, and `rel` trains at (4, 8), not at the folded
    # constant's (2, 4, 8)
    got, a = _torch(_projection(tmp_path, folded=True, by_name=by_name))
    want, _ = _torch(_projection(tmp_path, folded=False, by_name=by_name))
    assert (got["peak"], got["split"]) == (want["peak"], want["split"])
    params = _trained(a)
    assert params["rel"] == (4, 8) and "clone_3" not in params
    # the rows of `rel` are the constant's elements over the linear's outputs and over the batch the
    # repeat broadcast it to (not recorded): its ops are named as estimated
    assert {e["type"] for e in got["coverage"]["estimated"]} == {"Dropout", "FullyConnected", "Tile", "Reshape"}


def test_a_folded_projection_without_its_weight_in_the_file_stays_estimated_at_the_folded_size(tmp_path):
    # the linear's weight is folded away too: its shape is not in the file, so the constant trains at
    # its own size and its reader is named as estimated, as before
    path = _projection(tmp_path, folded=True)
    import onnx

    m = onnx.load(path)
    for vi in m.graph.value_info:
        if vi.name == "val_15":
            vi.metadata_props[0].value = "['q.weight']"
    p = m.graph.metadata_props[0]
    p.value = _signature(["rel", "k.weight", "k.bias", "q.weight", "head.weight"])
    onnx.save(m, path)
    got, a = _torch(path)
    params = _trained(a)
    assert params.get("clone_3") == (2, 4, 6) and "rel" not in params
    assert [e["type"] for e in got["coverage"]["estimated"]] == ["Add"]


def test_tables_folded_together_through_lookups_are_named_as_estimated(tmp_path):
    # two tables looked up at filled ids and concatenated (MarkupLM's xpath tags: `cat` of one lookup
    # per depth), folded by the optimizer into one constant the figure counts at its own size: eager
    # holds each table whole (sizes the file does not give), so both are named; the figure stays
    add = helper.make_node("Add", ["x", "cat"], ["s"], name="node_add")
    head = helper.make_node("MatMul", ["s", "val_20"], ["y"], name="node_head")
    inits = [("val_20", _w(8, 10)), ("cat", _w(2, 4, 8))]
    srcs = ["a.weight", "b.weight", "ones", "mul", "select", "select_1", "embedding", "embedding_1"]
    path = _dynamo_file(tmp_path, "two_tables", [add, head], inits, [2, 4, 8], [2, 4, 10],
                        ["a.weight", "b.weight", "head.weight"], {"val_20": ["head.weight"], "cat": srcs},
                        {"node_add": _fx("add.Tensor", "%x, %cat")})
    got, _ = _torch(path)
    assert got["coverage"]["estimated_parameters"] == ["a.weight", "b.weight"]
    assert [e["type"] for e in got["coverage"]["estimated"]] == ["Add"]
    # one table folded so (no lookup: a computed constant of one parameter) names nothing new
    one = _dynamo_file(tmp_path, "one_table", [add, head], inits, [2, 4, 8], [2, 4, 10],
                       ["a.weight", "head.weight"], {"val_20": ["head.weight"], "cat": ["a.weight", "mul"]},
                       {"node_add": _fx("add.Tensor", "%x, %cat")})
    assert "estimated_parameters" not in _torch(one)[0]["coverage"]
    assert got["peak"] == _torch(one)[0]["peak"]


def _embedding(tmp_path, folded: bool, ids_from=("zeros",), rows=1):
    """x (2, 4, 8) + an embedding of constant ids: `folded`, the constant `embedding_1` (2, 4, 8) the
    optimizer folded from the table `tt.weight` and the fx nodes `ids_from`; else a Gather from a
    (rows, 8) table."""
    add = helper.make_node("Add", ["x", "embedding_1" if folded else "e"], ["s"], name="node_add")
    head = helper.make_node("MatMul", ["s", "val_20"], ["y"], name="node_head")
    inits = [("val_20", _w(8, 10))]
    if folded:
        return _dynamo_file(tmp_path, "emb_folded", [add, head], inits + [("embedding_1", _w(2, 4, 8))], [2, 4, 8],
                            [2, 4, 10], ["tt.weight", "head.weight"],
                            {"val_20": ["head.weight"], "embedding_1": ["tt.weight", *ids_from]},
                            {"node_add": _fx("add.Tensor", "%x, %embedding_1")})
    gather = helper.make_node("Gather", ["tt.weight", "ids"], ["e"], name="node_embedding")
    inits += [("tt.weight", _w(rows, 8)), ("ids", np.zeros((2, 4), np.int64))]
    return _dynamo_file(tmp_path, "emb_plain", [gather, add, head], inits, [2, 4, 8], [2, 4, 10], None)


@pytest.mark.parametrize("ids_from, rows", [(("zeros",), 1), (("position_ids", "slice_1"), 4), (("arange",), 4)])
def test_a_folded_embedding_of_constant_ids_trains_the_table_not_the_rows(tmp_path, ids_from, rows):
    # embedding's backward makes a gradient of the table's shape (derivatives.yaml,
    # embedding_dense_backward): the table trains, the gathered rows are a forward value. Its rows are
    # not in the file: one for `zeros` ids (BERT's token types have two), else one per position (a
    # position table has at least that many), so the gather is named as estimated
    got, a = _torch(_embedding(tmp_path, True, ids_from))
    want, _ = _torch(_embedding(tmp_path, False, rows=rows))
    assert (got["peak"], got["split"]) == (want["peak"], want["split"])
    params = _trained(a)
    assert params["tt.weight"] == (rows, 8) and "embedding_1" not in params
    assert [e["type"] for e in got["coverage"]["estimated"]] == ["Gather"]
    # the table itself is named: counted at the rows the constant keeps, its size not in the file
    assert got["coverage"]["estimated_parameters"] == ["tt.weight"]
    assert "estimated_parameters" not in want["coverage"]
    # the profile writes the sentence once (JSON); the table's header and compare's line print it
    from memplan_cli.profiles.torch import coverage_line
    from memplan_cli.report.table import torch_estimated_parameters_note

    note = got["coverage"]["estimated_parameters_note"]
    assert torch_estimated_parameters_note({"figures": {"torch": got}}) == \
        note + " (JSON figures.torch.coverage.estimated_parameters)"
    assert "; " + note + " (devtools" in coverage_line(got["coverage"])
    assert "estimated_parameters_note" not in want["coverage"]


def test_the_table_report_names_a_parameter_counted_at_the_part_a_folded_constant_keeps(tmp_path):
    # eager holds the whole table (and Adam's two moments of it); the file keeps the rows read only,
    # so the header says the parameter's size is estimated, whatever share of the peak it is
    from click.testing import CliRunner

    from memplan_cli.cli import main

    r = CliRunner().invoke(main, ["analyze", _embedding(tmp_path, True, ("arange",)), "-b", "2", "-O", "adam",
                                  "-p", "torch"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert "estimated: 1 parameter(s) the exporter folded into a constant of the part its ops read (tt.weight)" \
        in text and "the file gives no size" in text


def test_the_other_profiles_still_analyse_the_folded_file_as_it_is(tmp_path):
    path = _projection(tmp_path, folded=True)
    a = analyze_graph(load_model(path), TrainConfig(loss="cce", optimizer="adam"), profile="memplan")
    assert "rel" not in {b.name for b in a.buffers.buffers}


def test_a_folded_expanded_index_holds_only_what_it_broadcast(tmp_path):
    # `expand_2` (4, 6, 6) int64: an index expand broadcast over the batch (DeBERTa's relative
    # positions). expand is a view: eager's gather saves the (6, 6) tensor it broadcast, not 4 copies
    nodes = [helper.make_node("GatherElements", ["x", "expand_2"], ["g"], axis=2, name="node_gather"),
             helper.make_node("MatMul", ["g", "val_20"], ["y"], name="node_head")]
    inits = [("val_20", _w(6, 10)), ("expand_2", np.zeros((4, 6, 6), np.int64))]
    path = _dynamo_file(tmp_path, "expand_index", nodes, inits, [4, 6, 6], [4, 6, 10], ["head.weight"],
                        {"val_20": ["head.weight"]}, {"node_gather": _fx("gather.default", "%x, -1, %expand_2")})
    got, a = _torch(path)
    sizes = {b.name: b.size for b in a.buffers.buffers}
    assert sizes["expand_2"] == 6 * 6 * 8
    assert [e["type"] for e in got["coverage"]["estimated"]] == ["GatherElements"]


def _cls_token(tmp_path, folded: bool):
    """cat(cls.expand(2, -1, -1), x) (timm's class token), then a head: `folded`, the constant
    `expand_2` (2, 1, 8) folded from the parameter `cls` alone; else an Expand of a (1, 1, 8) `cls`."""
    cat = helper.make_node("Concat", ["expand_2" if folded else "e", "x"], ["c"], axis=1, name="node_cat")
    head = helper.make_node("MatMul", ["c", "val_20"], ["y"], name="node_head")
    inits = [("val_20", _w(8, 10))]
    if folded:
        return _dynamo_file(tmp_path, "cls_folded", [cat, head], inits + [("expand_2", _w(2, 1, 8))], [2, 3, 8],
                            [2, 4, 10], ["cls", "head.weight"],
                            {"val_20": ["head.weight"], "expand_2": ["cls", "val_3"]},
                            {"node_cat": _fx("cat.default", "[%expand_2, %x], 1")})
    expand = helper.make_node("Expand", ["cls", "shape"], ["e"], name="node_expand")
    inits += [("cls", _w(1, 1, 8)), ("shape", np.array([2, 1, 8], np.int64))]
    return _dynamo_file(tmp_path, "cls_plain", [expand, cat, head], inits, [2, 3, 8], [2, 4, 10], None)


def test_a_folded_expand_of_a_parameter_trains_the_parameter(tmp_path):
    # expand's backward sums the gradient back to the parameter (derivatives.yaml: sum_to(grad,
    # self.sizes())): `cls` trains at (1, 1, 8), not at the expanded (2, 1, 8); which dims were
    # broadcast is not recorded (the leading one is taken), so the expand is named as estimated
    got, a = _torch(_cls_token(tmp_path, True))
    want, _ = _torch(_cls_token(tmp_path, False))
    assert (got["peak"], got["split"]) == (want["peak"], want["split"])
    params = _trained(a)
    assert params["cls"] == (1, 1, 8) and "expand_2" not in params
    assert [e["type"] for e in got["coverage"]["estimated"]] == ["Expand"]


def _query_pool(tmp_path, folded: bool, views=("view_1",)):
    """matmul(q.view(-1, 8).expand(2, 3, -1, -1), x.transpose(-1, -2)) over states x (2, 3, 2, 8)
    (Inkling's block attention residual), then a head: `folded`, the constant `expand_3` (2, 3, 1, 8)
    folded from the parameter `q` through `views`; else an Expand of a (1, 1, 1, 8) `q`."""
    src = "expand_3" if folded else "e"
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 1, 3, 2], name="node_transpose"),
             helper.make_node("MatMul", [src, "xt"], ["s"], name="node_matmul"),
             helper.make_node("MatMul", ["s", "val_20"], ["y"], name="node_head")]
    inits = [("val_20", _w(2, 10))]
    if folded:
        return _dynamo_file(tmp_path, "query_folded" + "_".join(views), nodes,
                            inits + [("expand_3", _w(2, 3, 1, 8))], [2, 3, 2, 8], [2, 3, 1, 10],
                            ["q", "head.weight"],
                            {"val_20": ["head.weight"], "expand_3": ["q", "val_4", "val_5", *views]},
                            {"node_matmul": _fx("matmul.default", "%expand_3, %transpose")})
    expand = helper.make_node("Expand", ["q", "shape"], ["e"], name="node_expand")
    inits += [("q", _w(1, 1, 1, 8)), ("shape", np.array([2, 3, 1, 8], np.int64))]
    return _dynamo_file(tmp_path, "query_plain", [expand] + nodes, inits, [2, 3, 2, 8], [2, 3, 1, 10], None)


def test_a_folded_expand_of_a_viewed_parameter_trains_the_parameter(tmp_path):
    # views keep the parameter's bytes (`q.view(-1, 8)`), so the rule for an expanded parameter holds
    # through them; the constant's leading dims of the input's leading sizes (2, 3) are taken as the
    # broadcast ones: `q` trains at (1, 1, 1, 8), and the matmul reads a stride-0 view it folds to
    # bmm without a copy, as eager's does (measured: `fam_query_pool`, both exporters, -0.00 %)
    got, a = _torch(_query_pool(tmp_path, True))
    want, _ = _torch(_query_pool(tmp_path, False))
    assert (got["peak"], got["split"]) == (want["peak"], want["split"])
    params = _trained(a)
    assert params["q"] == (1, 1, 1, 8) and "expand_3" not in params
    assert [e["type"] for e in got["coverage"]["estimated"]] == ["Expand"]


def test_a_folded_expand_of_a_sliced_parameter_is_left_as_the_file_has_it(tmp_path):
    # a slice drops elements: the parameter's size is not the expanded one's over the broadcast dims
    _, a = _torch(_query_pool(tmp_path, True, views=("slice_1", "view_1")))
    params = _trained(a)
    assert params["expand_3"] == (2, 3, 1, 8) and "q" not in params


def test_chains_sharing_a_parameter_and_its_dropout_run_them_once(tmp_path):
    # k(dropout(rel)) and q(dropout(rel)), both folded (`fam_rel_drop`): eager draws one dropout of one
    # parameter and runs two linears of it
    from memplan_cli.profiles.torch.export import eager_graph

    nodes = [helper.make_node("MatMul", ["x", "val_15"], ["kx"], name="node_k"),
             helper.make_node("MatMul", ["x", "val_16"], ["qx"], name="node_q"),
             helper.make_node("Add", ["kx", "clone_3"], ["a"], name="node_add"),
             helper.make_node("Add", ["qx", "clone_4"], ["b"], name="node_add_1"),
             helper.make_node("Add", ["a", "b"], ["s"], name="node_add_2"),
             helper.make_node("MatMul", ["s", "val_20"], ["y"], name="node_head")]
    inits = [("val_15", _w(8, 6)), ("val_16", _w(8, 6)), ("val_20", _w(6, 10)),
             ("clone_3", _w(2, 4, 6)), ("clone_4", _w(2, 4, 6))]
    chain = ["rel", "getitem", "unsqueeze", "repeat", "val_42"]
    path = _dynamo_file(tmp_path, "shared", nodes, inits, [2, 4, 8], [2, 4, 10],
                        ["rel", "k.weight", "q.weight", "head.weight"],
                        {"val_15": ["k.weight"], "val_16": ["q.weight"], "val_20": ["head.weight"],
                         "clone_3": chain + ["k.weight", "linear_3", "clone_3"],
                         "clone_4": chain + ["q.weight", "linear_4", "clone_4"]},
                        {"node_add": _fx("add.Tensor", "%linear, %clone_3"),
                         "node_add_1": _fx("add.Tensor", "%linear_1, %clone_4")})
    g = eager_graph(load_model(path))
    types = [op.type for op in g.operations]
    assert types.count("Dropout") == 1 and types.count("Tile") == 2
    assert [tuple(o.shape) for o in g.operands if o.name == "rel"] == [(4, 8)]
    _, a = _torch(path)
    assert _trained(a)["rel"] == (4, 8)


def _viewed_norm(tmp_path, name, merged: bool, twice: bool = False):
    """x * v.view(1, -1) * weight.view(1, -1) in module `n` (EvoNorm's scale), as the dynamo exporter
    writes it: each view folded into a constant (`view_1`, `view_2`); `merged`: v and weight were
    equal (ones at init) and the optimizer kept `view_1` alone, which the second Mul reads while its fx
    node still takes `%view_2`. `twice`: each parameter viewed by two unsqueezes (ViTDet's
    `weight[:, None, None]`), so each folded constant was computed through a first `unsqueeze` too."""
    one, two = ("unsqueeze_1", "unsqueeze_3") if twice else ("view_1", "view_2")
    second = one if merged else two
    nodes = [helper.make_node("Mul", ["x", one], ["h"], name="node_mul"),
             helper.make_node("Mul", ["h", second], ["y"], name="node_mul_1")]
    calls = {"node_mul": _fx("mul.Tensor", f"%x, %{one}"), "node_mul_1": _fx("mul.Tensor", f"%mul, %{two}")}
    for n in nodes:
        p = n.metadata_props.add()
        p.key, p.value = "pkg.torch.onnx.name_scopes", str(["", "n", n.name.removeprefix("node_")])
    inits = [(one, np.ones((1, 16), np.float32))] + ([] if merged else [(two, np.ones((1, 16), np.float32))])
    via = (["unsqueeze"], ["unsqueeze_2"]) if twice else ([], [])
    folded = {one: ["n.v", *via[0], "val_1"], **({} if merged else {two: ["n.weight", *via[1], "val_2"]})}
    return _dynamo_file(tmp_path, name, nodes, inits, [2, 16], [2, 16], ["n.v", "n.weight"], folded, calls)


@pytest.mark.parametrize("twice", [False, True])
def test_parameters_viewed_then_merged_are_each_their_own_tensor(tmp_path, twice):
    # eager holds, differentiates and updates v and weight (16 floats each); the merged file has one
    # constant for both: the second reader's fx node takes `%view_2`, which nothing in the file is
    # named, and n.weight is nowhere in the file: it reads n.weight. Through two views the same
    apart, a = _torch(_viewed_norm(tmp_path, "apart", merged=False, twice=twice))
    merged, b = _torch(_viewed_norm(tmp_path, "merged", merged=True, twice=twice))
    assert len(_trained(a)) == 2 and sorted(_trained(b).values()) == sorted(_trained(a).values())
    assert merged["peak"] == apart["peak"] and merged["split"] == apart["split"]


def test_the_optimizer_steps_weights_in_registration_order(tmp_path):
    # eager's Adam steps `model.parameters()` in the modules' registration order, which the graph
    # signature lists; here the module registered first (`a`) runs second (FasterNet registers a
    # stage's blocks before its downsample, which runs first). Without a signature or torch.onnx's
    # initializer order the forward's first reads stay the order
    nodes = [helper.make_node("MatMul", ["x", "b.weight"], ["h"], name="node_mm"),
             helper.make_node("MatMul", ["h", "a.weight"], ["y"], name="node_mm_1")]
    inits = [("b.weight", _w(16, 8)), ("a.weight", _w(8, 16))]

    def steps(path):
        _, a = _torch(path)
        return [s.label for s in a.buffers.steps if s.kind == "applyGradient"]
    sig = _dynamo_file(tmp_path, "sig", nodes, inits, [2, 16], [2, 16], ["a.weight", "b.weight"])
    assert steps(sig) == ["step a.weight", "step b.weight"]
    nodes = [helper.make_node("MatMul", ["x", "b.weight"], ["h"], name="node_mm"),
             helper.make_node("MatMul", ["h", "a.weight"], ["y"], name="node_mm_1")]
    plain = _dynamo_file(tmp_path, "plain", nodes, inits, [2, 16], [2, 16], None)
    assert steps(plain) == ["step b.weight", "step a.weight"]
    # torch.onnx's TorchScript export writes the initializers in state_dict order: that order
    import onnx

    m = onnx.load(plain)
    m.producer_name = "pytorch"
    ordered = [next(t for t in m.graph.initializer if t.name == n) for n in ("a.weight", "b.weight")]
    del m.graph.initializer[:]
    m.graph.initializer.extend(ordered)
    ts = str(tmp_path / "ts.onnx")
    onnx.save(m, ts)
    assert steps(ts) == ["step a.weight", "step b.weight"]


def _sliced_buffer(tmp_path, name, listed: bool):
    """GPT's causal table: a (1, 1, 64, 64) module buffer sliced to the 16 tokens (the loader folds the
    Slices into a (1, 1, 16, 16) constant) and multiplied into the scores; `listed`: the graph
    signature names it a BUFFER."""
    i64 = lambda *v: np.asarray(v, np.int64)  # noqa: E731
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
             helper.make_node("Slice", ["mask", "zero", "n", "two"], ["rows"], name="slice_rows"),
             helper.make_node("Slice", ["rows", "zero", "n", "three"], ["slice_2"], name="slice_cols"),
             helper.make_node("Mul", ["h", "slice_2"], ["y"], name="mul")]
    inits = [("w", _w(16, 16)), ("mask", np.tril(np.ones((64, 64), np.float32))[None, None]),
             ("zero", i64(0)), ("n", i64(16)), ("two", i64(2)), ("three", i64(3))]
    return _dynamo_file(tmp_path, name, nodes, inits, [4, 1, 16, 16], [4, 1, 16, 16], ["w"],
                        calls={"mul": _fx("mul.Tensor", "%matmul, %slice_2")},
                        buffers=["mask"] if listed else [])


def test_a_module_buffer_read_through_folded_slices_is_held(tmp_path):
    # eager's module holds the whole table the step long; the slice of it is a view
    t, _ = _torch(_sliced_buffer(tmp_path, "listed", listed=True))
    assert t["split"]["parameters"] == 16 * 16 * 4 + 64 * 64 * 4


def test_a_boolean_module_buffer_read_through_folded_slices_is_held(tmp_path):
    # transformers' GPT-2 and ImageGPT register the causal table as bool, read by a Where: held alike
    i64 = lambda *v: np.asarray(v, np.int64)  # noqa: E731
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
             helper.make_node("Slice", ["mask", "zero", "n", "two"], ["rows"], name="slice_rows"),
             helper.make_node("Slice", ["rows", "zero", "n", "three"], ["slice_2"], name="slice_cols"),
             helper.make_node("Where", ["slice_2", "h", "low"], ["y"], name="where")]
    inits = [("w", _w(16, 16)), ("mask", np.tril(np.ones((64, 64), bool))[None, None]), ("low", np.float32(-1e4)),
             ("zero", i64(0)), ("n", i64(16)), ("two", i64(2)), ("three", i64(3))]
    path = _dynamo_file(tmp_path, "bool_table", nodes, inits, [4, 1, 16, 16], [4, 1, 16, 16], ["w"],
                        calls={"where": _fx("where.self", "%slice_2, %matmul, %low")}, buffers=["mask"])
    t, _ = _torch(path)
    assert t["split"]["parameters"] == 16 * 16 * 4 + 64 * 64


def test_eager_ops_on_constants_folded_at_load_are_named_as_not_counted(tmp_path):
    # TAPAS's segment reductions: ops the dynamo exporter recorded (fx calls) on constants, which its
    # optimizer left (over its size limits) and memplan folds at load; eager runs them each step, so
    # their outputs are named as not counted, except a result eager makes at its reader (a recorded
    # call names it): the mean read by the Add
    import json

    import jsonschema
    from click.testing import CliRunner

    from memplan_cli.cli import main
    from memplan_cli.schemas import load_schema

    nodes = [helper.make_node("Mul", ["z", "z"], ["mul_1"], name="node_mul"),
             helper.make_node("ReduceMean", ["mul_1", "axes"], ["mean"], keepdims=1, name="node_mean"),
             helper.make_node("MatMul", ["x", "w"], ["mm"], name="node_mm"),
             helper.make_node("Add", ["mm", "mean"], ["y"], name="node_add")]
    calls = {"node_mul": _fx("mul.Tensor", "%zeros, %zeros"), "node_mean": _fx("mean.dim", "%mul_1, [1], True"),
             "node_mm": _fx("mm.default", "%x, %p_w"), "node_add": _fx("add.Tensor", "%mm, %mean")}
    inits = [("z", np.zeros((2, 4096), np.float32)), ("axes", np.array([1], np.int64)), ("w", _w(16, 8))]
    path = _dynamo_file(tmp_path, "on_constants", nodes, inits, [2, 16], [2, 8], ["w"], calls=calls)
    g = load_model(path)
    assert [(c["type"], c["bytes"]) for c in g.metadata["folded_calls"]] == [("Mul", 2 * 4096 * 4),
                                                                              ("Mean", 8)]
    t, _ = _torch(path)
    nc = t["coverage"]["not_counted"]
    assert [(c["type"], c["bytes"]) for c in nc["ops"]] == [("Mul", 2 * 4096 * 4)] and nc["says_so"]
    r = CliRunner().invoke(main, ["analyze", path, "-p", "torch", "-l", "cce"])
    assert r.exit_code == 0, r.output
    head = " ".join(r.output.split("\n┏")[0].split())
    assert "not counted: 1 op(s) PyTorch runs on constants each step (Mul) were folded into constants here" in head
    # the profile writes the sentence once (JSON); the table's header and compare's line print it
    from memplan_cli.profiles.torch import coverage_line
    from memplan_cli.report.table import torch_folded_note

    assert torch_folded_note({"figures": {"torch": t}}) == nc["note"] + " (JSON figures.torch.coverage.not_counted)"
    assert "; " + nc["note"] + " (devtools" in coverage_line(t["coverage"])
    doc = json.loads(CliRunner().invoke(main, ["analyze", path, "-p", "torch", "-l", "cce", "-f", "json"]).output)
    jsonschema.validate(doc, load_schema("analysis"))
    # a TorchScript file records no calls: nothing is named
    plain = _save(tmp_path, "on_constants_ts", nodes, inits, [2, 16], [2, 8])
    assert not load_model(plain).metadata.get("folded_calls")


def _with_unread(tmp_path, name, listed=(), calls=None, scopes=None):
    """One 16 -> 16 linear `l1` read by a MatMul; `listed`: more parameters the graph signature lists,
    which no initializer holds; `calls` / `scopes`: the MatMul's recorded fx call and name scopes."""
    nodes = [helper.make_node("MatMul", ["x", "l1.weight"], ["y"], name="node_linear")]
    if scopes:
        p = nodes[0].metadata_props.add()
        p.key, p.value = "pkg.torch.onnx.name_scopes", repr(scopes)
    return _dynamo_file(tmp_path, name, nodes, [("l1.weight", _w(16, 16))], [2, 16], [2, 16],
                        ["l1.weight", *listed], calls={"node_linear": calls} if calls else None)


def test_parameters_of_a_module_no_op_reads_are_named_not_counted(tmp_path):
    # Fuyu's vision embedding under a text-only forward: eager holds it, the file has no size for it;
    # the figure is the file's, and the report names what it leaves out
    from memplan_cli.report.table import torch_unread_note

    plain, _ = _torch(_with_unread(tmp_path, "plain"))
    unread, a = _torch(_with_unread(tmp_path, "unread", ["vision.weight", "vision.bias"]))
    assert unread["peak"] == plain["peak"]
    assert unread["coverage"]["unread_parameters"] == ["vision.weight", "vision.bias"]
    assert "unread_parameters" not in plain["coverage"]
    note = torch_unread_note({"figures": {"torch": unread}})
    assert note.startswith("not counted: 2 parameter(s) no op of the file reads (vision)")
    # the profile writes the sentence once (JSON); the table's header and compare's line print it
    assert note == unread["coverage"]["unread_note"] + " (JSON figures.torch.coverage.unread_parameters)"
    from memplan_cli.profiles.torch import coverage_line

    assert "; " + unread["coverage"]["unread_note"] + " (devtools" in coverage_line(unread["coverage"])


def test_an_unread_module_is_named_as_one_the_forward_may_have_run_for_a_result_no_output_reads(tmp_path):
    # Canine's multiple-choice head reads the pooled molecules; its projection and final character
    # encoder run in eager's forward for a sequence output nothing reads, and both exporters drop them:
    # at 128 tokens their activations are the forward's peak (-17.7 %). The file shows only the
    # unread parameters, so the line says their activations are left out too
    t, _ = _torch(_with_unread(tmp_path, "branch", ["side.ff.weight", "side.ff.bias"]))
    note = t["coverage"]["unread_note"]
    assert note.startswith("not counted: 2 parameter(s) no op of the file reads (side); eager holds them")
    assert "one the forward runs for a result no output reads also made activations the file drops" in note
    from memplan_cli.profiles.torch.figures import unread_note

    # a composite's towers (a text-only step never runs them) get no such clause
    towers = unread_note(["m.vision.w"], {"language_part": "m.text", "other_parts": ["m.vision"]})
    assert "activations" not in towers and towers.endswith("; the file gives no size")


def test_unread_parameters_are_named_by_the_outermost_modules_none_of_whose_parameters_is_read(tmp_path):
    # git's image encoder and projection sit beside its read text encoder (`m.git.image_encoder`,
    # `m.git.visual_projection`): the line names those two, not the first of their many submodules;
    # a module beside a read parameter of its parent (`l1.extra` under the read `l1`) stops at itself
    listed = ["vision.tower.blocks.0.attn.weight", "vision.tower.blocks.1.attn.weight", "vision.tower.norm.bias",
              "vision.proj.weight", "l1.extra.a.weight", "l1.extra.b.weight"]
    import json

    import jsonschema
    from click.testing import CliRunner

    from memplan_cli.cli import main
    from memplan_cli.schemas import load_schema

    path = _with_unread(tmp_path, "towers", listed)
    t, _ = _torch(path)
    assert t["coverage"]["unread_modules"] == ["l1.extra", "vision"]
    assert t["coverage"]["unread_note"].startswith("not counted: 6 parameter(s) no op of the file reads "
                                                   "(l1.extra, vision); eager holds them")
    assert sorted(t["coverage"]["unread_parameters"]) == sorted(listed)
    r = CliRunner().invoke(main, ["analyze", path, "-p", "torch", "-l", "cce"])
    assert r.exit_code == 0, r.output
    assert "no op of the file reads (l1.extra, vision)" in " ".join(r.output.split("\n┏")[0].split())
    doc = json.loads(CliRunner().invoke(main, ["analyze", path, "-p", "torch", "-l", "cce", "-f", "json"]).output)
    jsonschema.validate(doc, load_schema("analysis"))
    assert doc["figures"]["torch"]["coverage"]["unread_modules"] == ["l1.extra", "vision"]


def test_a_file_that_does_not_list_the_parameters_says_unread_ones_are_not_modelled(tmp_path):
    # a TorchScript export (no graph signature) holds only what its trace read: the JSON says so
    listed, _ = _torch(_with_unread(tmp_path, "listed"))
    import onnx

    m = onnx.load(_with_unread(tmp_path, "plain"))
    del m.graph.metadata_props[:]
    path = str(tmp_path / "ts.onnx")
    onnx.save(m, path)
    plain, _ = _torch(path)
    assert "parameters no op reads" in plain["not_modelled"]
    assert "parameters no op reads" not in listed["not_modelled"]
    # a `.clone()` in module code is no node in either exporter's file (xLSTM's mLSTM step)
    assert "copies the export leaves out" in plain["not_modelled"]
    assert "copies the export leaves out" in listed["not_modelled"]
    # a branch the forward runs for a result no output reads (Canine's final character encoder under
    # a pooled head) is no node in either exporter's file
    assert "work for results no output reads" in plain["not_modelled"]
    assert "work for results no output reads" in listed["not_modelled"]


@pytest.mark.parametrize("how", ["fx call", "name scope", "folded"])
def test_a_parameter_the_file_reads_under_another_name_is_not_named_unread(tmp_path, how):
    # tied or merged parameters: a node's aten call names the placeholder; an op the exporter rewrote
    # was recorded inside the module; a folded constant's record names the parameter
    calls = _fx("linear.default", "%x, %p_l1_weight, %p_l2_weight") if how == "fx call" else None
    scopes = ["", "l2", "linear"] if how == "name scope" else None
    path = _with_unread(tmp_path, how.replace(" ", "_"), ["l2.weight"], calls, scopes)
    if how == "folded":
        import onnx

        m = onnx.load(path)
        _record_folded(m.graph, "l1.weight", [16, 16], ["l2.weight"])
        onnx.save(m, path)
    t, _ = _torch(path)
    assert "unread_parameters" not in t["coverage"]


def _called_twice(tmp_path, name, folded: bool):
    """A module run twice (HRM's recurrent stack, a shared layer): torch.export traces each call, and
    the optimizer folds the weight's transpose once per call, each constant recording the parameter
    alone; `folded=False`: the two constants are the file's own (no record)."""
    nodes = [helper.make_node("MatMul", ["x", "val_1"], ["h"], name="mm1"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "val_2"], ["y"], name="mm2")]
    inits = [("val_1", _w(16, 16)), ("val_2", _w(16, 16))]
    return _dynamo_file(tmp_path, name, nodes, inits, (4, 16), (4, 16), ["l.weight"],
                        folded={"val_1": ["l.weight"], "val_2": ["l.weight"]} if folded else None)


def test_one_parameter_folded_at_each_call_of_its_module_trains_once(tmp_path):
    t, a = _torch(_called_twice(tmp_path, "twice", True), batch_size=4)
    assert list(_trained(a).values()) == [(16, 16)]
    assert t["split"]["parameters"] == 16 * 16 * 4
    t2, a2 = _torch(_called_twice(tmp_path, "plain", False), batch_size=4)
    assert len(_trained(a2)) == 2 and t2["split"]["parameters"] == 2 * 16 * 16 * 4


STACK = "pkg.torch.onnx.stack_trace"


def _inlined_block(tmp_path, name):
    """x -> linear -> [relu -> linear] -> add -> head: the bracketed ops carry the stack torch.fx
    generates for the body of a `with` block torch.export made a higher-order op of (no_grad,
    enable_grad or autocast), as the dynamo exporter inlines it."""
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "w2"], ["b"], name="mm2"),
             helper.make_node("Add", ["h", "b"], ["s"], name="add"),
             helper.make_node("MatMul", ["s", "w3"], ["y"], name="head")]
    for n in nodes:
        p = n.metadata_props.add()
        p.key = STACK
        p.value = ('File "<eval_with_key>.7", line 5, in forward\n    relu = torch.ops.aten.relu.default(linear)'
                   if n.name in ("relu", "mm2") else 'File "model.py", line 9, in forward\n    return self.l(x)')
    inits = [("w1", _w(64, 64)), ("w2", _w(64, 64)), ("w3", _w(64, 10))]
    return _dynamo_file(tmp_path, name, nodes, inits, (256, 64), (256, 10), ["w1", "w2", "w3"])


def test_ops_inlined_from_a_with_block_are_named_with_the_no_grad_figure_beside(tmp_path):
    t, _ = _torch(_inlined_block(tmp_path, "block"), batch_size=256)
    cov = t["coverage"]
    assert {e["op"].split(" (")[1].rstrip(")") for e in cov["estimated"]} == {"relu", "mm2"}
    ng = cov["as_no_grad"]
    assert ng["blocks"] == 1 and ng["ops"] == 2
    # under no_grad the block saves nothing (relu's output, mm2's input) and w2 gets no gradient
    assert ng["peak"] < t["peak"]
    # the profile writes the sentence once (JSON); the table's header and compare's line print it
    from memplan_cli.profiles.torch import coverage_line
    from memplan_cli.report.table import torch_no_grad_note

    assert ng["note"].startswith("estimated: 2 op(s) of 1 `with` block(s) the exporter inlined ran as recorded")
    assert torch_no_grad_note({"figures": {"torch": t}}) == (ng["note"] if ng["says_so"] else "")
    assert ("; " + ng["note"] + " (devtools" in coverage_line(cov)) == ng["says_so"]


def _norm_scales(tmp_path, name, merged: bool):
    """Two affine norms' scale and shift (x * w + b in modules n1, n2), as the dynamo exporter writes
    GroupNorm: its call (`aten.group_norm(%x, G, %p_n1_weight, %p_n1_bias, ...)`) recorded on every node
    of the decomposition, the weight and bias folded into constants (`val_3`, `val_4`) whose record
    names one parameter each; `merged`: both norms' weights are ones and biases zeros at init, and the
    optimizer kept n1's constants, which n2's nodes read while their call takes n2's parameters."""
    w2, b2 = ("val_3", "val_4") if merged else ("val_7", "val_8")
    nodes = [helper.make_node("Mul", ["x", "val_3"], ["h"], name="node_mul"),
             helper.make_node("Add", ["h", "val_4"], ["h1"], name="node_add"),
             helper.make_node("Relu", ["h1"], ["r"], name="node_relu"),
             helper.make_node("Mul", ["r", w2], ["h2"], name="node_mul_1"),
             helper.make_node("Add", ["h2", b2], ["y"], name="node_add_1")]
    call = {1: _fx("group_norm.default", "%x, 1, %p_n1_weight, %p_n1_bias, 1e-05, False"),
            2: _fx("group_norm.default", "%relu, 1, %p_n2_weight, %p_n2_bias, 1e-05, False")}
    calls = {"node_mul": call[1], "node_add": call[1], "node_relu": _fx("relu.default", "%group_norm"),
             "node_mul_1": call[2], "node_add_1": call[2]}
    for n in nodes:
        p = n.metadata_props.add()
        p.key, p.value = "pkg.torch.onnx.name_scopes", str(["", "n2" if n.name.endswith("_1") else "n1", "x"])
    inits = [("val_3", np.ones(16, np.float32)), ("val_4", np.zeros(16, np.float32))]
    folded = {"val_3": ["n1.weight", "val_1"], "val_4": ["n1.bias", "val_2"]}
    if not merged:
        inits += [("val_7", np.ones(16, np.float32)), ("val_8", np.zeros(16, np.float32))]
        folded.update({"val_7": ["n2.weight", "val_5"], "val_8": ["n2.bias", "val_6"]})
    return _dynamo_file(tmp_path, name, nodes, inits, [2, 16], [2, 16],
                        ["n1.weight", "n1.bias", "n2.weight", "n2.bias"], folded, calls)


def test_a_folded_norm_bias_is_its_own_parameter_not_a_copy_of_the_weight(tmp_path):
    # the call names weight and bias on both the Mul and the Add; the folded record says which one
    # each constant is: the bias trains (it was taken for a second copy of the weight's parameters)
    _, a = _torch(_norm_scales(tmp_path, "apart", merged=False))
    assert sorted(_trained(a)) == ["val_3", "val_4", "val_7", "val_8"]


def test_norm_parameters_folded_then_merged_are_each_their_own_tensor(tmp_path):
    # eager holds, differentiates and updates n2's weight and bias too; the merged file reads n1's
    # constants there, under a call that takes n2's parameters, which the file holds nowhere
    apart, a = _torch(_norm_scales(tmp_path, "apart", merged=False))
    merged, b = _torch(_norm_scales(tmp_path, "merged", merged=True))
    assert sorted(_trained(b).values()) == sorted(_trained(a).values()) and len(_trained(b)) == 4
    assert merged["peak"] == apart["peak"] and merged["split"] == apart["split"]


def _scaled_by_folded_scalar(tmp_path, name, record: bool):
    """x -> MatMul(w) -> Mul by `add_8`, a 0-d constant the optimizer folded from four parameters'
    computation (DiffLlama's λ = exp(sum(λq1·λk1)) - exp(sum(λq2·λk2)) + λinit); `record=False`: a plain
    constant the file records no fold for."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="node_mm"),
             helper.make_node("Mul", ["add_8", "h"], ["m"], name="node_mul"),
             helper.make_node("Relu", ["m"], ["y"], name="node_relu")]
    inits = [("w", _w(64, 64)), ("add_8", np.array(0.5, np.float32))]
    folded = {"add_8": ["exp", "exp_1", "l.lambda_k1", "l.lambda_k2", "l.lambda_q1", "l.lambda_q2", "sub"]}
    return _dynamo_file(tmp_path, name, nodes, inits, (256, 64), (256, 64),
                        ["w", "l.lambda_q1", "l.lambda_k1", "l.lambda_q2", "l.lambda_k2"], folded if record else None)


def test_a_scalar_folded_from_parameters_requires_grad_so_its_reader_keeps_the_other_side(tmp_path):
    # mul's backward for the scalar needs the other operand (derivatives.yaml: other: grad * self):
    # eager keeps the MatMul's output (256 x 64 floats) to the Mul's backward; memplan's rules do not
    # train a 0-d constant, but eager computes it from parameters each step, so it requires grad
    t, _ = _torch(_scaled_by_folded_scalar(tmp_path, "folded", True), batch_size=256)
    plain, _ = _torch(_scaled_by_folded_scalar(tmp_path, "plain", False), batch_size=256)
    assert t["split"]["activations"] - plain["split"]["activations"] == 256 * 64 * 4
    assert "Mul" in {e["type"] for e in t["coverage"]["estimated"]}


def _made_attention(tmp_path, name, from_input: bool, width: int = 16):
    """A layer `y = a @ w.T + x[..., :8]` (as TorchScript writes a Linear) whose `a` is either the
    module's own batch-shaped zeros sliced (transformers MRA's attention without its CUDA kernel:
    `zeros_like(query).requires_grad_()` padded to 32 wide, then cut back; TorchScript writes it as
    a fill of a concatenated size) or the input's slice. `width` 8: the zeros made as wide as the
    layer reads them (the slice then takes them whole, as TorchScript's folded MRA constant)."""
    cut = ["starts", "ends", "axes"]
    nodes = [helper.make_node("Concat", ["rows", "cols"], ["shape"], axis=0, name="size"),
             helper.make_node("ConstantOfShape", ["shape"], ["z"], name="zeros"),
             helper.make_node("Slice", ["x", *cut], ["s"], name="cut_x"),
             helper.make_node("Slice", ["z", *cut], ["sz"], name="cut_z"),
             helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0], name="dense_t"),
             helper.make_node("MatMul", ["s" if from_input else "sz", "wt"], ["mm"], name="dense"),
             helper.make_node("Add", ["mm", "s"], ["y"], name="residual")]
    inits = [("rows", np.array([4], np.int64)), ("cols", np.array([3, width], np.int64)),
             ("starts", np.array([0], np.int64)), ("ends", np.array([8], np.int64)),
             ("axes", np.array([2], np.int64)), ("w", _w(8, 8))]
    return _save(tmp_path, name, nodes, inits, [4, 3, 16], [4, 3, 8])


def test_a_trained_layer_reading_a_batch_shaped_constant_is_named_not_counted(tmp_path):
    import json

    import jsonschema
    from click.testing import CliRunner

    from memplan_cli.cli import main
    from memplan_cli.schemas import load_schema

    path = _made_attention(tmp_path, "made", from_input=False)
    t, _ = _torch(path)
    cl = t["coverage"]["constant_layers"]
    # named at the bytes of the whole zeros the slice was cut from (4 x 3 x 16 floats): the leaf eager
    # holds, of which the layer reads a view (the dynamo exporter stores MRA's padded zeros so)
    assert [(c["op"], c["bytes"]) for c in cl["constants"]] == [("MatMul", 4 * 48 * 4)] and cl["says_so"]
    assert [(c["constant"], c["view_of"]) for c in cl["constants"]] == [("sz", "z")]
    r = CliRunner().invoke(main, ["analyze", path, "-p", "torch", "-l", "cce", "-O", "adam"])
    assert r.exit_code == 0, r.output
    head = " ".join(r.output.split("\n┏")[0].split())
    assert "not counted: 1 trained layer(s) read a batch-shaped constant (768 B), not the model's input" in head
    doc = json.loads(CliRunner().invoke(main, ["analyze", path, "-p", "torch", "-l", "cce", "-f", "json"]).output)
    jsonschema.validate(doc, load_schema("analysis"))
    from memplan_cli.profiles.torch.figures import coverage_line
    from memplan_cli.report.table import torch_constant_layers_note

    # the profile writes the sentence once (JSON); the table's header and compare's line print it
    assert torch_constant_layers_note({"figures": {"torch": t}}) == \
        cl["note"] + " (JSON figures.torch.coverage.constant_layers)"
    assert "; " + cl["note"] + " (devtools" in coverage_line(t["coverage"])
    # the same layer reading the input names nothing
    t, _ = _torch(_made_attention(tmp_path, "read", from_input=True))
    assert "constant_layers" not in t["coverage"]
    # zeros made as wide as the layer reads them: their own bytes, nothing larger to lead back to
    t, _ = _torch(_made_attention(tmp_path, "narrow", from_input=False, width=8))
    assert [(c["op"], c["bytes"]) for c in t["coverage"]["constant_layers"]["constants"]] == [("MatMul", 4 * 24 * 4)]
    assert all("view_of" not in c for c in t["coverage"]["constant_layers"]["constants"])


def _made_attention_choices(tmp_path, name, regrouped: bool, tokens: int = 3):
    """MRA's made leaf under a multiple-choice head: the input (4, 6, 16) is viewed as 8 rows of 3
    tokens (`regrouped`: transformers' `input_ids.view(-1, length)` of 4 x 2 choices) and the layer
    reads the module's own zeros of those 8 rows, cut to 8 wide; else the zeros' 8 rows are viewed
    back to the batch's 4 before the input is added, and nothing computed from the input has 8 rows.
    `tokens`: the zeros' tokens per row (3: the shape of the input's regrouped view; 1 broadcasts)."""
    cut = ["starts", "ends", "axes"]
    nodes = [helper.make_node("Concat", ["rows", "cols"], ["shape"], axis=0, name="size"),
             helper.make_node("ConstantOfShape", ["shape"], ["z"], name="zeros"),
             helper.make_node("Slice", ["z", *cut], ["sz"], name="cut_z"),
             helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0], name="dense_t"),
             helper.make_node("MatMul", ["sz", "wt"], ["mm"], name="dense")]
    if regrouped:
        nodes += [helper.make_node("Reshape", ["x", "rows8"], ["xr"], name="choices"),
                  helper.make_node("Slice", ["xr", *cut], ["s"], name="cut_x"),
                  helper.make_node("Add", ["mm", "s"], ["a"], name="residual"),
                  helper.make_node("Reshape", ["a", "rows4"], ["y"], name="batch")]
    else:
        nodes += [helper.make_node("Reshape", ["mm", "rows4"], ["m4"], name="batch"),
                  helper.make_node("Slice", ["x", *cut], ["s"], name="cut_x"),
                  helper.make_node("Add", ["m4", "s"], ["y"], name="residual")]
    inits = [("rows", np.array([8], np.int64)), ("cols", np.array([tokens, 16], np.int64)),
             ("starts", np.array([0], np.int64)), ("ends", np.array([8], np.int64)),
             ("axes", np.array([2], np.int64)), ("w", _w(8, 8)),
             ("rows8", np.array([8, 3, 16], np.int64)), ("rows4", np.array([4, 6, 8], np.int64))]
    return _save(tmp_path, name, nodes, inits, [4, 6, 16], [4, 6, 8])


def test_a_batch_shaped_constant_of_regrouped_rows_is_named(tmp_path):
    # a multiple-choice head views its 4 x 2 choices as 8 rows: the module's zeros have the 8 rows a
    # tensor computed from the input has (MRA's multiple-choice head), not the input's 4
    t, _ = _torch(_made_attention_choices(tmp_path, "choices", regrouped=True))
    cl = t["coverage"]["constant_layers"]
    assert [(c["op"], c["bytes"]) for c in cl["constants"]] == [("MatMul", 8 * 3 * 16 * 4)]
    # 8 rows no tensor computed from the input has: no batch's rows, nothing named
    t, _ = _torch(_made_attention_choices(tmp_path, "apart", regrouped=False))
    assert "constant_layers" not in t["coverage"]
    # 8 rows, but no tensor computed from the input has the zeros' shape (a folded table that happens
    # to have a multiple of the batch's rows, Funnel's relative positions): nothing named
    t, _ = _torch(_made_attention_choices(tmp_path, "table", regrouped=True, tokens=1))
    assert "constant_layers" not in t["coverage"]


def _buffer_linear(tmp_path, folded: bool, whole: str = ""):
    """x (2, 4, 8) + relu(linear(coords, cpb.weight, cpb.bias)) of a module buffer `coords` (4, 1)
    (Swin V2's continuous position bias), then a head. `folded`: the dynamo export whose optimizer
    folded the buffer's product with the weight into `val_9` (4, 8), read by the linear's bias Add,
    or (`whole`) the whole linear into `linear_1` (4, 8), read by the ReLU, or the linear and the ReLU
    into `relu_1`; else the same module with
    the linear in place (the buffer times the weight, held as (1, 8), plus the bias)."""
    call = _fx("linear.default", "%b_coords, %p_cpb_weight, %p_cpb_bias")
    tail = [helper.make_node("Relu", ["pos"], ["act"], name="node_relu"),
            helper.make_node("Add", ["x", "act"], ["s"], name="node_add"),
            helper.make_node("MatMul", ["s", "val_20"], ["y"], name="node_head")]
    inits = [("val_20", _w(8, 10))]
    params = ["cpb.weight", "cpb.bias", "head.weight"]
    if folded and whole == "relu":  # the ReLU folded too: `relu_1`, from the linear's fx node
        tail[1].input[1] = "relu_1"
        return _dynamo_file(tmp_path, "bl_relu", tail[1:], inits + [("relu_1", _w(4, 8))], [2, 4, 8], [2, 4, 10],
                            params, {"val_20": ["head.weight"],
                                     "relu_1": ["coords", "cpb.bias", "cpb.weight", "linear_1", "val_7"]},
                            {"node_add": _fx("add.Tensor", "%x, %relu_1")}, buffers=["coords"])
    if folded and whole:
        tail[0].input[0] = "linear_1"
        return _dynamo_file(tmp_path, "bl_whole", tail, inits + [("linear_1", _w(4, 8))], [2, 4, 8], [2, 4, 10],
                            params, {"val_20": ["head.weight"], "linear_1": ["coords", "cpb.bias", "cpb.weight"]},
                            {"node_relu": _fx("relu.default", "%linear_1")}, buffers=["coords"])
    inits.append(("cpb.bias", _w(8)))
    if folded:
        nodes = [helper.make_node("Add", ["val_9", "cpb.bias"], ["pos"], name="node_linear_1")] + tail
        return _dynamo_file(tmp_path, "bl_folded", nodes, inits + [("val_9", _w(4, 8))], [2, 4, 8], [2, 4, 10],
                            params, {"val_20": ["head.weight"], "val_9": ["coords", "cpb.weight", "val_8"]},
                            {"node_linear_1": call}, buffers=["coords"])
    nodes = [helper.make_node("MatMul", ["coords", "cpb.weight"], ["mm"], name="node_mm"),
             helper.make_node("Add", ["mm", "cpb.bias"], ["pos"], name="node_linear_1")] + tail
    return _dynamo_file(tmp_path, "bl_plain", nodes, inits + [("coords", _w(4, 1)), ("cpb.weight", _w(1, 8))],
                        [2, 4, 8], [2, 4, 10], params, {"val_20": ["head.weight"]}, buffers=["coords"])


@pytest.mark.parametrize("whole", ["", "linear", "relu"])
def test_a_folded_linear_of_a_buffer_trains_the_weight(tmp_path, whole):
    # derivatives.yaml (mm / addmm): the weight's gradient is grad^T @ buffer, the buffer needs none;
    # eager runs the linear each step and trains the weight (and bias) at its own size, not the
    # product's. `whole`: the ReLU reading the folded linear is not folded at load (eager runs it on a
    # value computed each step). The input features are not in the file (taken as one): named
    path = _buffer_linear(tmp_path, True, whole)
    # opgraph/fold.py: a constant folded from a parameter and a buffer is computed each step, so the
    # ReLU of it stays an op (folded, it would train at the ReLU's size)
    assert [op.type for op in load_model(path).operations][0] == ("Relu" if whole == "linear" else "Add")
    got, a = _torch(path)
    want, b = _torch(_buffer_linear(tmp_path, False))
    params = _trained(a)
    assert params["cpb.weight"] == (1, 8) and params["cpb.bias"] == (8,)
    assert not {"val_9", "linear_1", "coords"} & set(params)
    assert (got["peak"], got["split"]) == (want["peak"], want["split"])
    # with its bias one addmm; a ReLU folded with it is run again, named too
    assert [e["type"] for e in got["coverage"]["estimated"]] == ["Linear"] + ["Relu"] * (whole == "relu")


def _stream_head(tmp_path, out: str):
    """x (4, 32, 64) -> linear to two streams of 500 classes -> (4, 2, 32, 500) -> the first stream,
    a Gather recording `aten.select` (ProphetNet's `predict_logits[:, 0]`), whose result is the
    file's output named `out`: `clone_1` where the exporter's optimizer dropped a `.contiguous()`
    behind it, `select_1` where the module returned the view."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["linear_1"], name="node_linear_1"),
             helper.make_node("Reshape", ["linear_1", "s4"], ["view_1"], name="node_view_1"),
             helper.make_node("Transpose", ["view_1"], ["transpose_1"], perm=[0, 2, 1, 3], name="node_transpose_1"),
             helper.make_node("Gather", ["transpose_1", "zero"], [out], axis=1, name="node_select_1")]
    calls = {"node_linear_1": _fx("mm.default", "%x, %w"), "node_view_1": _fx("view.default", "%linear_1"),
             "node_transpose_1": _fx("transpose.int", "%view_1, 1, 2"),
             "node_select_1": "%select_1 : [num_users=1] = call_function[target=torch.ops.aten.select.int]"
                              "(args = (%transpose_1, 1, 0), kwargs = {})"}
    for n in nodes:
        p = n.metadata_props.add()
        p.key, p.value = FX, calls[n.name]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [4, 32, 64])],
                              [helper.make_tensor_value_info(out, F, [4, 32, 500])],
                              [numpy_helper.from_array(_w(64, 1000), "w"),
                               numpy_helper.from_array(np.array([4, 32, 2, 500], np.int64), "s4"),
                               numpy_helper.from_array(np.array(0, np.int64), "zero")])
    p = graph.metadata_props.add()
    p.key, p.value = SIG, _signature(["w"])
    path = tmp_path / f"{out}.onnx"
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    return str(path)


def test_a_copy_named_only_by_the_output_frees_the_views_base(tmp_path):
    # eager's `.contiguous()` of the first stream copies 4 x 32 x 500 floats and frees the head's whole
    # output (4 x 2 x 32 x 500) once the forward returns; the returned view would keep that base
    copied, _ = _torch(_stream_head(tmp_path, "clone_1"), batch_size=4)
    view, _ = _torch(_stream_head(tmp_path, "select_1"), batch_size=4)
    assert view["peak"] - copied["peak"] == 4 * 32 * 500 * 4


def _tied_listed(tmp_path, name, listed, scope="enc.embed", read="head.weight"):
    """A 16 -> 16 MatMul reading `read` (its fx call names the placeholder), recorded inside module
    `scope`; the graph signature lists `read`, `enc.embed.weight` and `listed`, no initializer those."""
    nodes = [helper.make_node("MatMul", ["x", read], ["y"], name="node_mm")]
    p = nodes[0].metadata_props.add()
    p.key, p.value = "pkg.torch.onnx.name_scopes", repr(["", scope, "linear"])
    call = _fx("linear.default", f"%x, %p_{read.replace('.', '_')}")
    return _dynamo_file(tmp_path, name, nodes, [(read, _w(16, 16))], [2, 16], [2, 16],
                        [*listed, "enc.embed.weight", read], calls={"node_mm": call})


def test_an_unread_module_holding_a_tied_parameters_name_is_named_apart(tmp_path):
    # BART's `model.shared`: one table with `encoder.embed_tokens` and `lm_head`; torch.export lists
    # every name and reads one; an op inside `enc.embed` reading `head.weight` while `enc.embed.weight`
    # is read by none shows the tie, so `shared` (nothing but a `weight`, beside read modules) may be it
    import json

    import jsonschema
    from click.testing import CliRunner

    from memplan_cli.cli import main
    from memplan_cli.report.table import torch_unread_note
    from memplan_cli.schemas import load_schema

    path = _tied_listed(tmp_path, "tied", ["shared.weight"])
    t, _ = _torch(path)
    assert t["coverage"]["tied_parameters"] == {"shared.weight": "head.weight"}
    assert "unread_parameters" not in t["coverage"]
    assert t["coverage"]["unread_note"].startswith("1 parameter(s) no op reads under its own name may be a tied one "
                                                   "the file reads under another (shared.weight as head.weight)")
    assert torch_unread_note({"figures": {"torch": t}}).endswith("(JSON figures.torch.coverage.tied_parameters)")
    # the figure is the file's either way
    plain, _ = _torch(_tied_listed(tmp_path, "plain", []))
    assert t["peak"] == plain["peak"]
    doc = json.loads(CliRunner().invoke(main, ["analyze", path, "-p", "torch", "-l", "cce", "-f", "json"]).output)
    jsonschema.validate(doc, load_schema("analysis"))
    # beside a truly unread module, each is named on its own clause
    both, _ = _torch(_tied_listed(tmp_path, "both", ["shared.weight", "vision.weight", "vision.bias"]))
    assert both["coverage"]["unread_parameters"] == ["vision.weight", "vision.bias"]
    assert both["coverage"]["unread_modules"] == ["vision"]
    assert both["coverage"]["unread_note"].startswith("not counted: 2 parameter(s) no op of the file reads (vision)")
    assert "; 1 parameter(s) no op reads under its own name may be a tied one" in both["coverage"]["unread_note"]


@pytest.mark.parametrize("how", ["read under its own name", "not only tied names", "inside an unread tower",
                                 "own parameter read", "own parameter folded"])
def test_an_unread_module_without_a_tie_the_file_shows_stays_unread(tmp_path, how):
    # MT5's `shared` where the graph reads `encoder.embed_tokens.weight` inside its own module: the file
    # shows no tie; a module holding a bias too, or a position table inside a tower none of whose
    # parameters is read, is no tied table; a module whose own `weight` some op reads is not an alias
    listed = {"read under its own name": ["shared.weight"],
              "not only tied names": ["shared.weight", "shared.bias"],
              "inside an unread tower": ["vision.pos.weight", "vision.proj.weight", "vision.proj.bias"],
              "own parameter read": ["shared.weight"], "own parameter folded": ["shared.weight"]}[how]
    scope = "head" if how == "read under its own name" else "enc.embed"
    path = _tied_listed(tmp_path, how.replace(" ", "_"), listed, scope=scope)
    if how == "own parameter read":
        import onnx

        m = onnx.load(path)
        m.graph.initializer.append(numpy_helper.from_array(np.asarray(_w(16, 16)), "enc.embed.weight"))
        m.graph.node.append(helper.make_node("MatMul", ["y", "enc.embed.weight"], ["z"], name="node_own"))
        m.graph.output[0].name = "z"
        onnx.save(m, path)
    if how == "own parameter folded":  # a constant the optimizer folded from `enc.embed.weight`
        import onnx

        m = onnx.load(path)
        m.graph.initializer.append(numpy_helper.from_array(np.asarray(_w(16, 16)), "val_0"))
        m.graph.node.append(helper.make_node("MatMul", ["y", "val_0"], ["z"], name="node_own"))
        m.graph.output[0].name = "z"
        _record_folded(m.graph, "val_0", [16, 16], ["enc.embed.weight"])
        onnx.save(m, path)
    t, _ = _torch(path)
    assert "tied_parameters" not in t["coverage"]
    # (read inside `head`, the op enters no `enc.embed`: its weight is unread as well)
    extra = ["enc.embed.weight"] if how == "read under its own name" else []
    assert sorted(t["coverage"]["unread_parameters"]) == sorted(listed + extra)
