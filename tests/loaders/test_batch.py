import pytest

from memplan_cli.opgraph.rebatch import rebatch
from memplan_cli.ir.graph import Graph, GraphError, Operand, Operation
from memplan_cli.loaders import load_model
from tests.loaders import fbmodels as fb


@pytest.mark.parametrize("dynamic", [False, True])
def test_tiny_cnn_rebatched_by_the_loader(tmp_path, dynamic):
    g1 = load_model(fb.write(tmp_path, "m.tflite", fb.tiny_cnn("tflite", dynamic=dynamic)))
    g = load_model(fb.write(tmp_path, "m.tflite", fb.tiny_cnn("tflite", dynamic=dynamic)), batch_size=32)
    shapes = {o.name: o.shape for o in g.operands}
    assert shapes["input"] == (32, 8, 8, 3) and shapes["conv"] == (32, 8, 8, 4)
    assert shapes["pool"] == (32, 4, 4, 4) and shapes["flat"] == (32, 64) and shapes["prob"] == (32, 10)
    assert shapes["conv/w"] == (4, 3, 3, 3) and shapes["shape"] == (2,)
    assert g.activation_bytes() == 32 * g1.activation_bytes()
    assert g.parameter_count() == g1.parameter_count() and not g.warnings


def _g(ops, shapes, consts=(), values=None):
    values = values or {}
    operands = [Operand(i, f"t{i}", s, "int32" if i in values else "float32", is_const=i in consts,
                        value=values.get(i)) for i, s in enumerate(shapes)]
    return Graph(operands, ops, [0], [len(shapes) - 1])


def test_pad_on_batch_and_concat_on_axis0_and_mean_over_batch():
    # TFLite paddings [[1, 0], [1, 1]]: the loader's canonical pads are begins, then ends
    g = _g([Operation(0, "Pad", [0, 1], [2], {"pads": (1, 1, 0, 1)}), Operation(1, "Concat", [2, 2], [3], {"axis": 0}),
            Operation(2, "Mean", [3], [4], {"axes": (0,), "keep_dims": False})],
           [(2, 3), (2, 2), (3, 5), (6, 5), (5,)], consts={1}, values={1: (1, 0, 1, 1)})
    r = rebatch(g, 4)
    assert [o.shape for o in r.operands] == [(4, 3), (2, 2), (5, 5), (10, 5), (5,)]


def test_unknown_op_scales_dim0_with_a_warning():
    g = _g([Operation(0, "FOO", [0], [1], source_type="FOO")], [(1, 3), (1, 6)])
    r = rebatch(g, 8)
    assert r.operands[1].shape == (8, 6) and "FOO" in r.warnings[0]
    assert g.operands[1].shape == (1, 6)  # the original is untouched


def test_reshape_minus_one_and_onnx_zero():
    g = _g([Operation(0, "Reshape", [0, 1], [2], {"zero_copies_input": True})], [(1, 2, 3), (2,), (1, 6)],
           consts={1}, values={1: (0, -1)})
    assert rebatch(g, 5).operands[2].shape == (5, 6)


def test_reshape_that_cannot_fit_is_an_error():
    g = _g([Operation(0, "Reshape", [0, 1], [2])], [(1, 2, 3), (2,), (1, 6)], consts={1}, values={1: (-1, 4)})
    with pytest.raises(GraphError, match="re-batch|does not fit"):
        rebatch(g, 5)


def test_a_matmul_with_the_batch_in_a_constant_is_a_re_batch_refusal_not_a_malformed_file(tmp_path):
    # the dynamo exporter folds an attention term at the file's batch x heads (a (B*H, S, S) constant
    # read by a bmm): at another batch the shapes do not broadcast; that is memplan not following the
    # batch, said as such with the op and the shapes, never "malformed file"
    import numpy as np
    from onnx import helper

    from memplan_cli.errors import ModelError
    from tests.ops.gradcheck import onnx_model, save

    nodes = [helper.make_node("MatMul", ["x", "k"], ["y"])]
    m = onnx_model(nodes, [("x", (4, 3, 3))], [("y", (4, 3, 3))], {"k": np.zeros((4, 3, 3), np.float32)})
    p = save(tmp_path, m)
    assert load_model(p).operands
    with pytest.raises(ModelError, match=r"cannot re-batch to batch 8: op #0 MatMul.* cannot combine its inputs' "
                                         r"shapes \[8, 3, 3\], \[4, 3, 3\] \(the file fixes batch 4"):
        load_model(p, batch_size=8)


def test_a_batch_fixed_inside_the_graph_is_refused_naming_it(tmp_path):
    # a constant with the file's batch 2 in dim 0, concatenated on axis 1: at batch 4 the shapes
    # disagree, and the message says why (a batch-1 class token is broadcast instead:
    # tests/loaders/test_class_token.py)
    import numpy as np
    from onnx import helper

    from memplan_cli.errors import ModelError
    from memplan_cli.loaders import load_model
    from tests.ops.gradcheck import onnx_model, save

    nodes = [helper.make_node("Expand", ["cls", "shp"], ["c"]),
             helper.make_node("Concat", ["c", "x"], ["y"], axis=1)]
    m = onnx_model(nodes, [("x", (2, 3, 4))], [("y", (2, 4, 4))],
                   {"cls": np.zeros((1, 1, 4), np.float32), "shp": np.array([2, 1, 4], np.int64)})
    p = save(tmp_path, m)
    assert load_model(p).operands  # its own batch loads
    with pytest.raises(ModelError, match="cannot re-batch to batch 4: .*Concat.*the file fixes batch 2"):
        load_model(p, batch_size=4)
