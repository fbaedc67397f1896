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
