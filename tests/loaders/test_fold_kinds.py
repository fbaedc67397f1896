"""What a constant folded at load is (opgraph/fold.py): a ConstantOfShape fill standing in for a weight
(the zoo's light models) trains; a mask computed from fills, indices and scalars (Swin's shifted-window
attention mask: ConstantOfShape, ScatterND, Reshape, Sub, Equal, Where) is a buffer and does not."""
import numpy as np
import pytest
from onnx import TensorProto, helper

from tests.ops.gradcheck import check_verify, onnx_model, save, training_graph


def _c(name, v, dtype=TensorProto.INT64, dims=None):
    v = list(v)
    return helper.make_node("Constant", [], [name], value=helper.make_tensor(name, dtype, [len(v)] if dims is None
                                                                               else dims, v))


def _model():
    fill = helper.make_tensor("v", TensorProto.FLOAT, [1], [0.0])
    one = helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0])
    nodes = [
        # a weight written as a fill (zoo light): ConstantOfShape -> MatMul weight
        _c("wshape", [4, 4]), helper.make_node("ConstantOfShape", ["wshape"], ["w"], value=one),
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        # a mask: zeros, two rows set by ScatterND, compared and turned into an additive mask
        _c("mshape", [3, 4]), helper.make_node("ConstantOfShape", ["mshape"], ["zeros"], value=fill),
        _c("idx", [0, 2], dims=[2, 1]), helper.make_node("ConstantOfShape", ["ushape"], ["upd"], value=one),
        _c("ushape", [2, 4]),
        helper.make_node("ScatterND", ["zeros", "idx", "upd"], ["marks"]),
        helper.make_node("Reshape", ["marks", "mshape"], ["marks2"]),
        helper.make_node("Sub", ["marks2", "half"], ["centred"]),
        helper.make_node("Add", ["h", "centred"], ["y"]),
    ]
    # constants first so that the graph is topologically sorted
    nodes = [n for n in nodes if n.op_type == "Constant"] + [n for n in nodes if n.op_type != "Constant"]
    return onnx_model(nodes, [("x", (3, 4))], [("y", (3, 4))], {"half": np.full((4,), 0.5, np.float32)})


def test_a_fill_weight_trains_and_a_computed_mask_does_not(tmp_path):
    p = save(tmp_path, _model())
    tg = training_graph(p)
    g = tg.graph
    trained = sorted(g.operands[w].name for w in tg.grad)
    assert trained == ["half", "w"]  # the fill weight and the file's own float constant; not the mask
    mask = next(o for o in g.operands if o.name == "marks2")
    assert mask.is_const and mask.computed
    check_verify(p)


@pytest.mark.parametrize("producer,trains", [("pytorch", False), ("onnx-caffe2", True)])
def test_a_torch_onnx_constant_node_is_a_buffer(tmp_path, producer, trains):
    """torch.onnx writes parameters as initializers; a float Constant node is a traced value or a
    non-persistent buffer (timm's anti-aliasing filter, SwinV2's coordinate table): no gradient. Other
    producers (the zoo's Caffe2 conversions) may write weights so: those train."""
    import onnx
    from onnx import TensorProto, helper

    from tests.ops.gradcheck import analyze_json, check_verify, onnx_model

    c = helper.make_tensor("cv", TensorProto.FLOAT, [1, 3, 3, 2], np.linspace(-1, 1, 18).astype(np.float32))
    nodes = [helper.make_node("Constant", [], ["C"], value=c),
             helper.make_node("MatMul", ["C", "w"], ["t"]),
             helper.make_node("Add", ["x", "t"], ["y"])]
    m = onnx_model(nodes, [("x", (2, 3, 3, 4))], [("y", (2, 3, 3, 4))], {"w": np.ones((2, 4), np.float32)})
    m.producer_name = producer
    p = str(tmp_path / "m.onnx")
    onnx.save(m, p)
    grad = analyze_json(p, "-O", "adam")["categories"]["gradient"]["naive"]
    assert grad == 2 * 4 * 4 + (80 if trains else 0)  # w; C's 72 bytes take 80 in the 16-byte-aligned arena
    check_verify(p, "-b", "2")


def test_small_constant_values_are_known_and_verify_runs_with_them(tmp_path):
    """A Constant node's small float value and a float scalar keep their bytes through the stripper;
    an initializer's weights do not. verify's inputs take the known values (the file's own epsilon,
    scales and traced buffers) and draw the rest."""
    import onnx
    from onnx import TensorProto, helper

    from memplan_cli.config import TrainConfig
    from memplan_cli.execute.executor import _Inputs
    from memplan_cli.loaders import load_model
    from memplan_cli.passes.pipeline import build_training_graph
    from tests.ops.gradcheck import onnx_model

    c = helper.make_tensor("cv", TensorProto.FLOAT, [3], [0.0, 2.0, -1.0])
    nodes = [helper.make_node("Constant", [], ["C"], value=c),
             helper.make_node("Add", ["x", "C"], ["a"]),
             helper.make_node("Mul", ["a", "s"], ["m"]),
             helper.make_node("Add", ["m", "w"], ["y"])]
    m = onnx_model(nodes, [("x", (2, 3))], [("y", (2, 3))],
                   {"s": np.array(0.25, np.float32), "w": np.array([5.0, 6.0, 7.0], np.float32)})
    m.producer_name = "pytorch"
    p = str(tmp_path / "m.onnx")
    onnx.save(m, p)
    g = load_model(p)
    by = {o.name: o for o in g.operands}
    assert by["C"].value == (0.0, 2.0, -1.0) and by["C"].computed
    assert by["s"].value == (0.25,) and by["w"].value is None  # a weight's bytes are never read
    tg = build_training_graph(g, TrainConfig(optimizer="sgd", loss="mse"))
    src = _Inputs(tg, 0)
    vals = {t.name: src.value(t.id, np.float32) for t in tg.tensors if t.name in ("C", "s", "w")}
    np.testing.assert_array_equal(vals["C"], [0.0, 2.0, -1.0])
    np.testing.assert_array_equal(vals["s"], [0.25])
    assert not np.array_equal(vals["w"], [5.0, 6.0, 7.0])
    check_verify(p, "-b", "2")


def test_a_table_computed_from_a_buffer_is_folded_like_one_computed_from_integers(tmp_path):
    """A rotary table: positions x inv_freq, a BUFFER of the dynamo graph signature. Folding it trains
    no copy of a parameter, so it folds (as the exporter folds it at a fixed length): a symbolic export
    bound with --dim then holds what the fixed-length export holds."""
    from memplan_cli.loaders import load_model

    nodes = [_c("pos", list(range(8)), dims=[8, 1]), helper.make_node("Cast", ["pos"], ["posf"], to=1),
             helper.make_node("Mul", ["posf", "m.inv_freq"], ["freqs"]), helper.make_node("Cos", ["freqs"], ["cos"]),
             helper.make_node("Mul", ["x", "cos"], ["y"])]
    m = onnx_model(nodes, [("x", (2, 8, 4))], [("y", (2, 8, 4))], {"m.inv_freq": np.ones((4,), np.float32)})
    m.producer_name = "pytorch"
    m.graph.metadata_props.add(key="pkg.torch.export.ExportedProgram.graph_signature",
                               value="b_m_inv_freq: BUFFER target='m.inv_freq'\nx: USER_INPUT\n")
    g = load_model(save(tmp_path, m))
    assert [op.type for op in g.operations] == ["Mul"]
    table = g.operands[g.operations[0].inputs[1]]
    assert table.is_const and table.computed and table.shape == (8, 4)


def test_a_fill_in_a_file_listing_its_parameters_is_no_parameter(tmp_path):
    """A dynamo export lists every parameter in its graph signature: a ConstantOfShape the graph
    computes (MiniCPM3's `new_empty`, transposed, then filled by slice assignments) is a tensor eager
    makes each step, not a weight; without the signature the same fill trains (the zoo's light
    models)."""
    fill = helper.make_tensor("v", TensorProto.FLOAT, [1], [0.0])
    nodes = [_c("wshape", [4, 3]), helper.make_node("ConstantOfShape", ["wshape"], ["e"], value=fill),
             helper.make_node("Transpose", ["e"], ["et"], perm=[1, 0]),
             helper.make_node("Add", ["x", "et"], ["h"]),
             helper.make_node("MatMul", ["h", "w"], ["y"])]
    for signed in (False, True):
        m = onnx_model(nodes, [("x", (3, 4))], [("y", (3, 4))], {"w": np.ones((4, 4), np.float32)})
        if signed:
            m.graph.metadata_props.add(key="pkg.torch.export.ExportedProgram.graph_signature",
                                       value="\n# inputs\np_w: PARAMETER target='w'\nx: USER_INPUT\n")
        tg = training_graph(save(tmp_path, m))
        trained = sorted(tg.graph.operands[w].name for w in tg.grad)
        assert trained == (["w"] if signed else ["et", "w"]), signed


@pytest.mark.parametrize("producer,trains", [("pytorch", False), ("onnx-caffe2", True)])
def test_a_fill_the_graph_computes_in_a_torchscript_file_is_no_parameter(tmp_path, producer, trains):
    """torch.onnx's TorchScript exporter writes every parameter as an initializer: a ConstantOfShape
    the graph computes (Longformer's `new_zeros` padding) is a tensor eager makes each step, not a
    weight; another producer's fill may stand for a weight (the zoo's light models) and trains."""
    fill = helper.make_tensor("v", TensorProto.FLOAT, [1], [0.0])
    nodes = [_c("wshape", [4, 3]), helper.make_node("ConstantOfShape", ["wshape"], ["e"], value=fill),
             helper.make_node("Transpose", ["e"], ["et"], perm=[1, 0]),
             helper.make_node("Add", ["x", "et"], ["h"]),
             helper.make_node("MatMul", ["h", "w"], ["y"])]
    m = onnx_model(nodes, [("x", (3, 4))], [("y", (3, 4))], {"w": np.ones((4, 4), np.float32)})
    m.producer_name = producer
    p = save(tmp_path, m)
    tg = training_graph(p)
    assert sorted(tg.graph.operands[w].name for w in tg.grad) == (["et", "w"] if trains else ["w"])
    check_verify(p)
