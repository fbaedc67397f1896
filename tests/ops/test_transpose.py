"""Transpose: loaded from ONNX, gradients by finite differences, verify, refusal of a bad perm."""
import numpy as np
import pytest
from onnx import helper

from memplan_cli.errors import ModelError
from memplan_cli.loaders import load_model
from tests.ops.gradcheck import analyze_json, check_gradients, check_verify, onnx_model, save


def _model(perm=(0, 2, 1)):
    # x -> Add(p) -> Transpose -> MatMul(w) -> y: the Add's parameter gradient flows through Transpose
    nodes = [helper.make_node("Add", ["x", "p"], ["a"]),
             helper.make_node("Transpose", ["a"], ["t"], perm=list(perm)),
             helper.make_node("MatMul", ["t", "w"], ["y"])]
    inits = {"p": np.ones((3, 4), np.float32), "w": np.ones((3, 5), np.float32)}
    return onnx_model(nodes, [("x", (2, 3, 4))], [("y", (2, 4, 5))], inits)


def test_loads_as_the_canonical_op(tmp_path):
    g = load_model(save(tmp_path, _model()))
    t = next(op for op in g.operations if op.type == "Transpose")
    assert t.attrs["perm"] == (0, 2, 1) and t.source_type == "Transpose"


def test_gradients_flow_through_it(tmp_path):
    assert check_gradients(save(tmp_path, _model())) >= 12


def test_verify_passes_and_it_keeps_nothing(tmp_path):
    p = save(tmp_path, _model())
    check_verify(p, "-b", "2")
    doc = analyze_json(p)
    assert doc["totals"]["planned"] > 0


def test_a_perm_that_is_not_a_permutation_is_refused(tmp_path):
    m = _model()
    m.graph.node[1].attribute[0].ints[:] = [0, 1, 1]
    with pytest.raises(ModelError):
        load_model(save(tmp_path, m))


def _counted_from_end(perm):
    # x (2, 3, 4, 5) -> Transpose(perm) -> Relu -> y: the perm as TorchScript writes `permute(0, -2, -1, 1)`
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=list(perm)), helper.make_node("Relu", ["t"], ["y"])]
    return onnx_model(nodes, [("x", (2, 3, 4, 5))], [("y", (2, 4, 5, 3))], {})


def test_a_perm_counted_from_the_end_reads_as_torch_permute_does(tmp_path):
    # onnx's shape inference and onnxruntime reject negative axes in perm; torch.permute's meaning is
    # the only one (a + rank), so the file loads with the shapes torch gives, and says so
    g = load_model(save(tmp_path, _counted_from_end((0, -2, -1, 1))))
    t = next(op for op in g.operations if op.type == "Transpose")
    assert t.attrs["perm"] == (0, 2, 3, 1)
    assert tuple(g.operands[t.outputs[0]].shape) == (2, 4, 5, 3)
    assert any("perm (0, -2, -1, 1) read as (0, 2, 3, 1)" in w for w in g.warnings)


def test_a_perm_from_the_end_that_repeats_an_axis_is_still_refused(tmp_path):
    # -1 and 3 are the same axis of a rank-4 input: no permutation, nothing to read back
    with pytest.raises(ModelError):
        load_model(save(tmp_path, _counted_from_end((0, -1, 3, 1))))


def test_a_perm_from_the_end_trains_and_verifies(tmp_path):
    nodes = [helper.make_node("Add", ["x", "p"], ["a"]),
             helper.make_node("Transpose", ["a"], ["t"], perm=[0, -1, 1]),
             helper.make_node("MatMul", ["t", "w"], ["y"])]
    inits = {"p": np.ones((3, 4), np.float32), "w": np.ones((3, 5), np.float32)}
    p = save(tmp_path, onnx_model(nodes, [("x", (2, 3, 4))], [("y", (2, 4, 5))], inits))
    assert check_gradients(p) >= 12
    check_verify(p, "-b", "2")
