import pytest
from click.testing import CliRunner

from memplan_cli.cli import main
from memplan_cli.errors import ModelError
from memplan_cli.loaders import load_model
from tests.loaders import fbmodels as fb


@pytest.mark.parametrize("fmt", ["circle", "tflite"])
def test_tiny_cnn_loads_with_shapes_consts_and_attrs(tmp_path, fmt):
    g = load_model(fb.write(tmp_path, f"m.{fmt}", fb.tiny_cnn(fmt)))
    assert g.source_format == fmt
    assert [op.type for op in g.operations] == ["Conv2D", "MaxPool2D", "Reshape", "FullyConnected", "Softmax"]
    assert [op.source_type for op in g.operations][:2] == ["CONV_2D", "MAX_POOL_2D"]
    conv, pool, reshape, fc, _ = g.operations
    assert conv.attrs["activation"] == "RELU" and conv.attrs["padding"] == "SAME"
    assert conv.attrs["stride"] == (1, 1) and conv.attrs["dilation"] == (1, 1)
    assert pool.attrs["kernel"] == (2, 2) and pool.attrs["stride"] == (2, 2) and pool.attrs["padding"] == "VALID"
    assert fc.attrs["activation"] == "NONE"
    consts = {o.name for o in g.operands if o.is_const}
    assert consts == {"conv/w", "conv/b", "shape", "fc/w", "fc/b"}  # the int32 Reshape shape is kept
    shape_const = g.operands[reshape.inputs[1]]
    assert shape_const.dtype == "int32" and shape_const.value == (1, 64)
    assert g.operands[1].value is None  # weights are never read
    assert g.parameter_count() == 4 * 27 + 4 + 640 + 10
    assert g.operands[0].is_input and g.operands[10].is_output
    assert g.activation_bytes() == 4 * (192 + 256 + 64 + 64 + 10 + 10)


def test_sniffing_ignores_the_extension(tmp_path):
    g = load_model(fb.write(tmp_path, "really_tflite.onnx", fb.tiny_cnn("tflite")))
    assert g.source_format == "tflite"


def test_extended_negative_builtin_code_keeps_its_name(tmp_path):
    t = [fb.tensor("x", [1, 4]), fb.tensor("y", [1, 4])]
    data = fb.build(t, [fb.op(-2, [0], [1])], [0], [1])  # INSTANCE_NORM = -2, deprecated code 127
    g = load_model(fb.write(tmp_path, "m.circle", data))
    assert g.operations[0].type == "INSTANCE_NORM"


def test_more_than_one_subgraph_is_a_warning(tmp_path):
    t = [fb.tensor("x", [1, 4]), fb.tensor("y", [1, 4])]
    data = fb.build(t, [fb.op(fb.OPS.RELU, [0], [1])], [0], [1], extra_subgraphs=2)
    g = load_model(fb.write(tmp_path, "m.circle", data))
    assert any("3 subgraphs" in w for w in g.warnings)
    assert g.operations[0].type == "Relu"


def test_mean_axes_and_pad_paddings_are_read(tmp_path):
    t = [fb.tensor("x", [1, 4, 4, 2]), fb.tensor("pads", [4, 2], "int32", [0, 0, 1, 1, 1, 1, 0, 0]),
         fb.tensor("p", [1, 6, 6, 2]), fb.tensor("axes", [2], "int32", [1, 2]), fb.tensor("m", [1, 2])]
    ops = [fb.op(fb.OPS.PAD, [0, 1], [2]), fb.op(fb.OPS.MEAN, [2, 3], [4], fb.mean_opts(), fb.BO.ReducerOptions)]
    g = load_model(fb.write(tmp_path, "m.tflite", fb.build(t, ops, [0], [4], "tflite")))
    assert g.operations[1].type == "Mean" and g.operations[1].attrs == {"axes": (1, 2), "keep_dims": False}
    assert g.operands[1].value == (0, 0, 1, 1, 1, 1, 0, 0)
    assert g.parameter_count() == 0  # int constants are not parameters
    assert g.constant_bytes() == 32 + 8


def test_zero_dimension_is_an_error(tmp_path):
    t = [fb.tensor("x", [1, 0]), fb.tensor("y", [1, 4])]
    p = fb.write(tmp_path, "m.circle", fb.build(t, [fb.op(fb.OPS.RELU, [0], [1])], [0], [1]))
    with pytest.raises(ModelError, match="zero dimension"):
        load_model(p)


def test_out_of_range_tensor_index_is_an_error(tmp_path):
    t = [fb.tensor("x", [1, 4]), fb.tensor("y", [1, 4])]
    p = fb.write(tmp_path, "m.circle", fb.build(t, [fb.op(fb.OPS.RELU, [5], [1])], [0], [1]))
    with pytest.raises(ModelError, match="operand 5"):
        load_model(p)


def test_resource_variables_are_an_on_device_training_model_not_a_malformed_file(tmp_path):
    """TFLiteConverter.from_saved_model on a tf.Module with train / infer signatures (TF Lite's on-device
    training recipe) keeps the weights in resource variables: VAR_HANDLE -> READ_VARIABLE. The file is
    well formed; memplan plans a model whose weights are constants, and says that in one line."""
    t = [fb.tensor("x", [1, 4]), fb.tensor("dense/bias", [], dtype="resource"), fb.tensor("b", [4]),
         fb.tensor("y", [1, 4])]
    ops = [fb.op(fb.OPS.VAR_HANDLE, [], [1]), fb.op(fb.OPS.READ_VARIABLE, [1], [2]), fb.op(fb.OPS.ADD, [0, 2], [3])]
    p = fb.write(tmp_path, "trainer.tflite", fb.build(t, ops, [0], [3], fmt="tflite"))
    with pytest.raises(ModelError, match="on-device training model") as e:
        load_model(p)
    assert "malformed" not in str(e.value) and "dense/bias" in str(e.value)
    r = CliRunner().invoke(main, ["analyze", p, "-b", "4"])
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_a_variable_state_tensor_is_state_not_a_dangling_operand(tmp_path):
    """tf_keras's LSTM through the TF Lite converter is UNIDIRECTIONAL_SEQUENCE_LSTM, whose output and
    cell state are variable tensors without data (no op writes them before it: the runtime zeroes
    them). They are state, not parameters; the file is valid, and the op memplan has no rule for is
    what the one refusal line names (it said "invalid tflite graph ... neither constant, a graph
    input, nor any op's output")."""
    t = [fb.tensor("x", [1, 3, 4]), fb.tensor("w", [8, 4], data="fill"), fb.tensor("h", [1, 2], variable=True),
         fb.tensor("y", [1, 3, 2])]
    p = fb.write(tmp_path, "lstm.tflite", fb.build(t, [fb.op(fb.OPS.UNIDIRECTIONAL_SEQUENCE_LSTM, [0, 1, 2], [3])],
                                                   [0], [3], fmt="tflite"))
    g = load_model(p)
    h = g.operands[2]
    assert h.is_const and h.computed and not h.assumed and g.parameter_count() == 32
    r = CliRunner().invoke(main, ["analyze", p])
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "UNIDIRECTIONAL_SEQUENCE_LSTM" in r.stderr and "invalid" not in r.stderr


def test_cycle_in_a_file_is_an_error(tmp_path):
    t = [fb.tensor("x", [1, 4]), fb.tensor("a", [1, 4]), fb.tensor("b", [1, 4])]
    ops = [fb.op(fb.OPS.ADD, [0, 2], [1]), fb.op(fb.OPS.RELU, [1], [2])]
    p = fb.write(tmp_path, "m.circle", fb.build(t, ops, [0], [2]))
    with pytest.raises(ModelError, match="cycle"):
        load_model(p)


def test_dynamic_batch_is_recorded(tmp_path):
    g = load_model(fb.write(tmp_path, "m.tflite", fb.tiny_cnn("tflite", dynamic=True)))
    assert g.metadata["dynamic_dims"][0] == (0,)
