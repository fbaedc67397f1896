import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from memplan_cli.errors import ModelError
from memplan_cli.loaders import load_model
from memplan_cli.loaders.onnx_strip import strip_model
from tests.loaders import fbmodels as fb
from tests.loaders import onnxmodels as om


def test_tiny_cnn_matches_its_tflite_twin_except_the_unfused_relu(tmp_path):
    g = load_model(om.save(tmp_path, "m.onnx", om.tiny_cnn()))
    t = load_model(fb.write(tmp_path, "m.tflite", fb.tiny_cnn("tflite")))
    assert [op.type for op in g.operations] == ["Conv2D", "Relu", "MaxPool2D", "Reshape", "FullyConnected", "Softmax"]
    conv = g.operations[0]
    assert conv.attrs["padding"] == "SAME" and conv.attrs["layout"] == "NCHW" and conv.attrs["stride"] == (1, 1)
    assert g.operations[2].attrs["kernel"] == (2, 2)
    tpool = next(op for op in t.operations if op.type == "MaxPool2D")  # one attribute set for both formats
    assert tpool.attrs["kernel"] == (2, 2) and tpool.attrs["stride"] == g.operations[2].attrs["stride"]
    assert g.parameter_count() == t.parameter_count()
    relu_out = g.operands[g.operations[1].outputs[0]]
    assert relu_out.shape == (1, 4, 8, 8)
    # ONNX keeps Relu as its own op: exactly one more activation tensor than tflite's fused conv
    assert g.activation_bytes() == t.activation_bytes() + relu_out.nbytes
    shape_const = g.operands[g.operations[3].inputs[1]]
    assert shape_const.is_const and shape_const.dtype == "int64" and shape_const.value == (1, -1)
    assert all(o.value is None for o in g.operands if o.dtype == "float32")


@pytest.mark.parametrize("flatten", [False, True])
def test_rebatch_of_onnx_matches_tflite(tmp_path, flatten):
    g = load_model(om.save(tmp_path, "m.onnx", om.tiny_cnn(flatten=flatten)), batch_size=32)
    t = load_model(fb.write(tmp_path, "m.tflite", fb.tiny_cnn("tflite")), batch_size=32)
    extra = g.operands[g.operations[1].outputs[0]].nbytes
    assert g.activation_bytes() == t.activation_bytes() + extra
    assert g.operands[g.outputs[0]].shape == (32, 10) and not g.warnings


def test_symbolic_batch_needs_a_batch_size(tmp_path):
    m = om.tiny_cnn(flatten=True)
    for vi in (m.graph.input[0], m.graph.output[0]):
        vi.type.tensor_type.shape.dim[0].dim_param = "N"
    p = om.save(tmp_path, "m.onnx", m)
    with pytest.raises(ModelError, match="symbolic batch dimension 'N'.*-b N") as e:
        load_model(p)
    assert "invalid" not in str(e.value)  # the file is fine: the setup lacks a batch
    g = load_model(p, batch_size=8)
    assert g.operands[0].shape == (8, 3, 8, 8) and g.operands[g.outputs[0]].shape == (8, 10)


def test_other_symbolic_dims_are_an_error_until_bound(tmp_path):
    m = om.tiny_cnn()
    m.graph.input[0].type.tensor_type.shape.dim[2].dim_param = "H"
    p = om.save(tmp_path, "m.onnx", m)
    with pytest.raises(ModelError, match=r"symbolic dimension 'H' \(graph input 'input', position 2\).*--dim H=N"):
        load_model(p, batch_size=2)
    assert load_model(p, batch_size=2, dims={"H": 8}).operands[0].shape == (2, 3, 8, 8)


def test_depthwise_clip6_global_pool_and_matmul_add(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])
    inits = [om._w("dw", [4, 1, 3, 3]), numpy_helper.from_array(np.array(0, np.float32), "lo"),
             numpy_helper.from_array(np.array(6, np.float32), "hi"), om._w("W", [4, 5]), om._w("b", [5]),
             numpy_helper.from_array(np.array([1, 4], np.int64), "s")]
    nodes = [helper.make_node("Conv", ["x", "dw"], ["d"], group=4, pads=[1, 1, 1, 1]),
             helper.make_node("Clip", ["d", "lo", "hi"], ["c"]),
             helper.make_node("GlobalAveragePool", ["c"], ["gp"]),
             helper.make_node("Reshape", ["gp", "s"], ["f"]),
             helper.make_node("MatMul", ["f", "W"], ["mm"]),
             helper.make_node("Add", ["mm", "b"], ["y"])]
    g = load_model(om.save(tmp_path, "m.onnx", om.model(nodes, [x], [y], inits)))
    assert [op.type for op in g.operations] == ["DepthwiseConv2D", "Relu6", "Mean", "Reshape", "FullyConnected"]
    assert g.operations[0].attrs["depth_multiplier"] == 1
    assert g.operations[2].attrs["axes"] == (2, 3) and g.operations[2].attrs["keep_dims"]
    assert "mm" not in {o.name for o in g.operands}  # the MatMul's output only ONNX had is gone
    assert [g.operands[i].name for i in g.operations[4].inputs] == ["f", "W", "b"]
    g.verify()


def test_external_weights_are_never_opened(tmp_path):
    p = om.save(tmp_path, "m.onnx", om.tiny_cnn(), save_as_external_data=True, all_tensors_to_one_file=True,
                location="m.bin", size_threshold=100)
    os.remove(tmp_path / "m.bin")  # if the loader touched the weights this would fail
    g = load_model(p)
    assert g.parameter_count() == 4 * 27 + 4 + 640 + 10


def test_small_external_shape_constant_is_read(tmp_path):
    p = om.save(tmp_path, "m.onnx", om.tiny_cnn(), save_as_external_data=True, all_tensors_to_one_file=True,
                location="m.bin", size_threshold=0)
    g = load_model(p, batch_size=4)
    assert g.operands[g.operations[3].inputs[1]].value == (1, -1)
    assert g.operands[g.outputs[0]].shape == (4, 10)


def test_stripping_leaves_out_embedded_weights(tmp_path):
    m = om.tiny_cnn()
    m.graph.initializer.append(om._w("big", [256, 256]))  # unused, 256 KiB of data
    data = m.SerializeToString()
    stripped, has_graph = strip_model(data, len(data))
    assert has_graph and len(stripped) < 2000 < len(data) - 250_000
    back = onnx.load_from_string(stripped)
    assert [t.name for t in back.graph.initializer][-1] == "big"
    g = load_model(om.save(tmp_path, "m.onnx", m))
    assert "big" not in {o.name for o in g.operands} and "initializer" in g.warnings[0]


def test_sniffing_onnx_named_tflite(tmp_path):
    assert load_model(om.save(tmp_path, "m.tflite", om.tiny_cnn())).source_format == "onnx"


def test_constant_nodes_become_constant_operands(tmp_path):
    m = om.tiny_cnn()
    shape = [t for t in m.graph.initializer if t.name == "shape"][0]
    m.graph.initializer.remove(shape)
    m.graph.node.insert(0, helper.make_node("Constant", [], ["shape"], value=shape))
    g = load_model(om.save(tmp_path, "m.onnx", m))
    s = [o for o in g.operands if o.name == "shape"][0]
    assert s.is_const and s.value == (1, -1) and "Constant" not in {op.source_type for op in g.operations}


def test_a_split_by_sizes_computed_from_the_data_is_sized_under_the_stated_assumption(tmp_path):
    # a mixture of experts splits its routed tokens by per-expert counts the data decides (JetMoE's
    # dynamo export): a valid file that no static shape describes; the pieces sum to the input's
    # length, taken equal (loaders/data_sized.py; tests/loaders/test_data_sized.py)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [6, 4])
    counts = helper.make_tensor_value_info("counts", TensorProto.INT64, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])
    nodes = [helper.make_node("Split", ["x", "counts"], ["a", "b"], name="route", axis=0),
             helper.make_node("Relu", ["a"], ["y"], name="act")]
    m = helper.make_model(helper.make_graph(nodes, "g", [x, counts], [y]),
                          opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(m)  # valid
    g = load_model(om.save(tmp_path, "moe.onnx", m))
    assert next(o.shape for o in g.operands if o.name == "a") == (3, 4)
    assert [d["name"] for d in g.metadata["data_sized"]["dims"]] == ["counts_0", "counts_1"]


def test_a_count_computed_from_the_data_without_a_bound_is_named_not_called_invalid(tmp_path):
    # Unique's count: no bound memplan takes; refused as what it is, not as a broken file
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [6, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])
    nodes = [helper.make_node("Unique", ["x"], ["y"], name="where")]
    m = helper.make_model(helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(m)
    with pytest.raises(ModelError) as e:
        load_model(om.save(tmp_path, "nz.onnx", m))
    msg = str(e.value)
    assert "invalid onnx file" not in msg
    assert "'y' (Unique 'where') has a size computed from the data" in msg and "static shapes" in msg


def test_a_sequence_of_tensors_is_named_not_called_invalid(tmp_path):
    # a Python list of the model read at a position the data gives: an ONNX sequence, valid, which
    # memplan does not read (read at constant positions, its pieces are read as Gathers: the next test)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [6, 4])
    k = helper.make_tensor_value_info("k", TensorProto.INT64, [])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 4])
    nodes = [helper.make_node("SplitToSequence", ["x"], ["seq"], name="unbind", axis=0),
             helper.make_node("SequenceAt", ["seq", "k"], ["y"], name="at")]
    m = helper.make_model(helper.make_graph(nodes, "g", [x, k], [y]), opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(m)
    with pytest.raises(ModelError) as e:
        load_model(om.save(tmp_path, "seq.onnx", m))
    msg = str(e.value)
    assert "invalid onnx file" not in msg and "(SplitToSequence 'unbind') is a sequence of tensors" in msg, msg


def test_a_sequence_read_at_constant_positions_is_read_as_its_pieces(tmp_path):
    # Longformer's `nonzero(as_tuple=True)` under TorchScript: pieces of one along an axis, each read
    # at a constant position, are Gathers of the sequence's input (keepdims 1 here: the axis stays)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [6, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 4])
    k = helper.make_tensor("k", TensorProto.INT64, [], [2])
    nodes = [helper.make_node("SplitToSequence", ["x"], ["seq"], name="unbind", axis=0),
             helper.make_node("SequenceAt", ["seq", "k"], ["p"], name="at"),
             helper.make_node("Relu", ["p"], ["y"])]
    m = helper.make_model(helper.make_graph(nodes, "g", [x], [y], [k]), opset_imports=[helper.make_opsetid("", 17)])
    g = load_model(om.save(tmp_path, "seq.onnx", m))
    assert next(o.shape for o in g.operands if o.name == "p") == (1, 4)


@pytest.mark.parametrize("case", ["expand_to_data", "expand_to_computed_data", "string"])
def test_a_valid_file_memplan_cannot_size_is_not_called_invalid(tmp_path, case):
    # onnx's backend test models: an Expand to a shape an input gives (test_expand_shape_model*), a
    # string tensor (test_strnorm_model_*); onnx's checker passes both, memplan cannot size them
    if case.startswith("expand"):
        ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 1]),
               helper.make_tensor_value_info("s", TensorProto.INT64, [2])]
        out = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b"])
        nodes = [helper.make_node("Expand", ["x", "s"], ["y"], name="grow")]
        if case == "expand_to_computed_data":  # the target is computed from the input's values
            nodes = [helper.make_node("Abs", ["s"], ["t"]), helper.make_node("Expand", ["x", "t"], ["y"], name="grow")]
        want = ("tensor 'y' (Expand 'grow') has a shape computed from the data (the values of input 's'), which "
                "no file records; memplan needs static shapes")
    else:
        ins = [helper.make_tensor_value_info("x", TensorProto.STRING, [2])]
        out = helper.make_tensor_value_info("y", TensorProto.STRING, [2])
        nodes, want = [helper.make_node("StringNormalizer", ["x"], ["y"], case_change_action="LOWER")], \
            "tensor 'x' has dtype string: its bytes are the text it holds, which no file records"
    m = helper.make_model(helper.make_graph(nodes, "g", ins, [out]), opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(m, full_check=True)
    with pytest.raises(ModelError) as e:
        load_model(om.save(tmp_path, f"{case}.onnx", m))
    msg = str(e.value)
    assert "invalid onnx file" not in msg and want in msg, msg


def _empty_input():  # onnx's test_castlike_*: an empty graph input
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [0, 4])
    return [helper.make_node("Relu", ["x"], ["y"])], [x], [], [0, 4], "graph input 'x' has a zero dimension at position 0 " \
        "(an empty tensor), which memplan does not plan"


def test_an_empty_vector_is_a_value_of_no_bytes(tmp_path):
    """onnx's test_shape_start_greater_than_end: a shape folded to an empty vector. An empty tensor is
    a value of 0 bytes (as eager's: a mask selecting nothing), not a refusal; this graph computes
    nothing else, so analysing it says there is nothing to train."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])
    y = helper.make_tensor_value_info("y", TensorProto.INT64, [0])
    m = helper.make_model(helper.make_graph([helper.make_node("Shape", ["x"], ["y"], start=2, end=1)], "g", [x],
                                            [y]), opset_imports=[helper.make_opsetid("", 18)])
    g = load_model(om.save(tmp_path, "m.onnx", m), batch_size=2)
    out = g.operands[g.outputs[0]]
    assert out.shape == (0,) and out.nbytes == 0


def test_an_empty_shape_in_a_required_input_is_a_scalar_not_an_input_left_out(tmp_path):
    """dynamo's `x.new_zeros([])`: ConstantOfShape of an empty shape vector makes a scalar. ONNX's
    schema makes that input required, so the empty constant is a value there, where in an optional
    input (Resize's roi) it stands for one not given."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    shape = numpy_helper.from_array(np.zeros((0,), np.int64), "shape")
    one = helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["s"], value=one),
             helper.make_node("Mul", ["x", "s"], ["y"])]
    m = helper.make_model(helper.make_graph(nodes, "g", [x], [y], [shape]),
                          opset_imports=[helper.make_opsetid("", 18)])
    g = load_model(om.save(tmp_path, "m.onnx", m), batch_size=2)
    (mul,) = [op for op in g.operations if op.type == "Mul"]
    assert g.operands[mul.inputs[1]].shape == ()


def _optional_input():  # onnx's test_identity_opt: an optional value, not a tensor
    opt = helper.make_value_info("o", helper.make_optional_type_proto(
        helper.make_tensor_type_proto(TensorProto.FLOAT, [2])))
    return [helper.make_node("OptionalGetElement", ["o"], ["y"])], [opt], [], [2], \
        "graph input 'o' is an optional value, not a tensor; memplan reads tensors only"


def _run_time_k():  # onnx's test_tril_neg: Trilu's diagonal offset is an input's value
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 3]),
           helper.make_tensor_value_info("k", TensorProto.INT64, [])]
    return [helper.make_node("Trilu", ["x", "k"], ["y"], upper=0)], ins, [], [3, 3], \
        "memplan cannot plan this onnx graph: op #0 Trilu has a diagonal offset k computed at run time"


@pytest.mark.parametrize("build", [_empty_input, _optional_input, _run_time_k])
def test_a_valid_file_memplan_cannot_plan_says_why_not_invalid(tmp_path, build):
    # onnx's node test models: each passes onnx's full checker; memplan refuses it naming the reason
    nodes, ins, inits, out, want = build()
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, out)
    m = helper.make_model(helper.make_graph(nodes, "g", ins, [y], inits), opset_imports=[helper.make_opsetid("", 18)])
    onnx.checker.check_model(m, full_check=True)
    with pytest.raises(ModelError) as e:
        load_model(om.save(tmp_path, "m.onnx", m), batch_size=2)
    msg = str(e.value)
    assert "invalid" not in msg and want in msg, msg


@pytest.mark.parametrize("node", [
    helper.make_node("Unsqueeze", ["x", "axes"], ["y"], name="u"),  # onnx's test_unsqueeze_*: axes an input
    helper.make_node("ReduceSum", ["x", "axes"], ["y"], name="u", keepdims=0),  # test_reduce_*: the same
])
def test_a_shape_set_by_an_inputs_values_names_that_input(tmp_path, node):
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4]),
           helper.make_tensor_value_info("axes", TensorProto.INT64, [1])]
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    m = helper.make_model(helper.make_graph([node], "g", ins, [y]), opset_imports=[helper.make_opsetid("", 18)])
    with pytest.raises(ModelError) as e:
        load_model(om.save(tmp_path, "m.onnx", m), batch_size=2)
    assert f"tensor 'y' ({node.op_type} 'u') has a shape computed from the data (the values of input 'axes')" \
        in str(e.value), str(e.value)


def _unknown_op_model(op_type: str, domain: str, opset: int):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4, 2, 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4, 2, 2])  # the file gives its shape
    attrs = {"num_groups": 2} if op_type == "GroupNormalization" else {}
    inputs = ["x", "s", "b"] if op_type == "GroupNormalization" else ["x"]
    inits = [numpy_helper.from_array(np.ones(4, np.float32), n) for n in ("s", "b")][:len(inputs) - 1]
    node = helper.make_node(op_type, inputs, ["y"], name="n", domain=domain, **attrs)
    opsets = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    return helper.make_model(helper.make_graph([node], "g", [x], [y], inits), opset_imports=opsets)


@pytest.mark.parametrize("op_type, domain, opset, want", [
    # onnx's node test test_group_normalization_*: a standard op onnx sizes only through its function body
    ("GroupNormalization", "", 21, "op GroupNormalization 'n' has no rule in memplan"),
    ("MeanVarianceNormalization", "", 13, "op MeanVarianceNormalization 'n' has no rule in memplan"),
    # an onnxruntime fused op: not a standard op at all
    ("FusedMatMul", "com.microsoft", 17, "op FusedMatMul 'n' (domain com.microsoft, not a standard ONNX op) has no "
                                         "rule in memplan"),
])
def test_an_op_without_a_rule_whose_output_onnx_cannot_size_is_named(tmp_path, op_type, domain, opset, want):
    # it read "no shape for tensor 'y' (shape inference could not infer it)", which names neither the op
    # nor that memplan has no rule for it, though the file itself gives y's shape
    with pytest.raises(ModelError) as e:
        load_model(om.save(tmp_path, "m.onnx", _unknown_op_model(op_type, domain, opset)))
    msg = str(e.value)
    assert want in msg and "cannot size its output 'y'" in msg and "invalid" not in msg, msg


def _scores_of_transposed_key(perm):
    """Attention scores a (4, 4, 32, 16) @ Transpose(k (4, 32, 4, 16), perm), y's shape left to inference."""
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, [4, 4, 32, 16])
    k = helper.make_tensor_value_info("k", TensorProto.FLOAT, [4, 32, 4, 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], name="t", perm=perm),
             helper.make_node("MatMul", ["a", "kt"], ["y"], name="scores")]
    return helper.make_model(helper.make_graph(nodes, "g", [a, k], [y]), opset_imports=[helper.make_opsetid("", 18)])


def test_a_node_onnx_rejects_on_its_inputs_shapes_is_named(tmp_path):
    # torch.onnx's TorchScript export of a Canine token classifier writes its last encoder's key as
    # Transpose(perm [0, 3, 1, 2]) where the code's transpose(1, 2).transpose(-1, -2) is [0, 2, 3, 1]:
    # the scores' MatMul multiplies (4, 4, 32, 16) by (4, 16, 32, 4), which onnx's reference runtime
    # cannot run either. It read "no shape for tensor ... (shape inference could not infer it)".
    m = _scores_of_transposed_key([0, 3, 1, 2])
    with pytest.raises(ModelError) as e:
        load_model(om.save(tmp_path, "m.onnx", m), batch_size=4)
    msg = str(e.value)
    assert "MatMul 'scores' cannot run on the shapes its inputs take here ((4, 4, 32, 16), (4, 16, 32, 4))" \
        in msg, msg
    assert "Incompatible dimensions for matrix multiplication" in msg, msg


def test_a_node_onnx_accepts_on_its_inputs_shapes_loads(tmp_path):
    # the same graph with the key transposed as the code meant: onnx accepts the MatMul, memplan sizes it
    m = _scores_of_transposed_key([0, 2, 3, 1])
    g = load_model(om.save(tmp_path, "m.onnx", m), batch_size=4)
    assert g.operands[g.outputs[0]].shape == (4, 4, 32, 32)
