"""Gather: an embedding table (dense weight gradient, repeated indices accumulate), a Gather of
activations (picking a token), negative indices, refusals, the pytorch-converted Embedding."""
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from memplan_cli.errors import ModelError
from memplan_cli.loaders import load_model
from tests.ops.gradcheck import analyze_json, check_gradients, check_verify, onnx_model, save, training_graph

IDS = np.array([[0, 2, 0], [4, 1, -1]], np.int64)  # repeats and a negative index


def _embedding(opset=13):
    nodes = [helper.make_node("Gather", ["emb", "ids"], ["e"]),
             helper.make_node("MatMul", ["e", "w"], ["y"])]
    inits = {"emb": np.ones((5, 4), np.float32), "w": np.ones((4, 3), np.float32)}
    return onnx_model(nodes, [("ids", (2, 3), TensorProto.INT64)], [("y", (2, 3, 3))], inits, opset=opset)


def _pick_token(axis=1, index=-1):
    # x -> Add(p) -> Gather(axis, scalar index) -> MatMul(w): the back-prop scatters into one token
    idx = helper.make_tensor("i", TensorProto.INT64, [], [index])
    nodes = [helper.make_node("Add", ["x", "p"], ["a"]),
             helper.make_node("Constant", [], ["i"], value=idx),
             helper.make_node("Gather", ["a", "i"], ["g"], axis=axis),
             helper.make_node("MatMul", ["g", "w"], ["y"])]
    inits = {"p": np.ones((3, 4), np.float32), "w": np.ones((4, 5), np.float32)}
    return onnx_model(nodes, [("x", (2, 3, 4))], [("y", (2, 5))], inits)


def test_embedding_loads_and_its_table_trains(tmp_path):
    p = save(tmp_path, _embedding())
    g = load_model(p)
    op = next(o for o in g.operations if o.type == "Gather")
    assert op.attrs == {"axis": 0}
    tg = training_graph(p)
    emb = next(o.index for o in g.operands if o.name == "emb")
    assert emb in tg.grad  # dense gradient of the whole table
    ids = next(o.index for o in g.operands if o.name == "ids")
    assert ids not in tg.bp  # indices are not differentiable


def test_embedding_gradient_accumulates_repeated_indices(tmp_path):
    assert check_gradients(save(tmp_path, _embedding()), feeds={"ids": IDS}) >= 20


def test_embedding_verify(tmp_path):
    check_verify(save(tmp_path, _embedding()), "-b", "2")


def test_gather_of_activations(tmp_path):
    p = save(tmp_path, _pick_token())
    assert check_gradients(p) >= 12
    check_verify(p)


def test_gather_on_axis_0_of_activations_with_vector_indices(tmp_path):
    idx = helper.make_tensor("i", TensorProto.INT64, [3], [1, 0, 1])
    nodes = [helper.make_node("Add", ["x", "p"], ["a"]),
             helper.make_node("Constant", [], ["i"], value=idx),
             helper.make_node("Gather", ["a", "i"], ["g"], axis=-2),
             helper.make_node("MatMul", ["g", "w"], ["y"])]
    m = onnx_model(nodes, [("x", (2, 4))], [("y", (3, 5))],
                   {"p": np.ones((2, 4), np.float32), "w": np.ones((4, 5), np.float32)})
    p = save(tmp_path, m)
    assert check_gradients(p) >= 12
    check_verify(p)


def test_backward_keeps_the_indices_not_the_table(tmp_path):
    tg = training_graph(save(tmp_path, _embedding()))
    k = next(o.index for o in tg.graph.operations if o.type == "Gather")
    r = tg.rules[k]
    names = {tg.graph.operands[v].name for v in r.kept_forward()}
    assert names == {"ids"}


def test_an_axis_outside_the_data_is_refused(tmp_path):
    m = _pick_token(axis=3)
    with pytest.raises(ModelError, match="axis"):
        load_model(save(tmp_path, m))


def test_rebatch_follows_the_indices(tmp_path):
    m = _embedding()
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    doc = analyze_json(save(tmp_path, m), "-b", "4")
    assert doc["totals"]["planned"] > 0
    g = load_model(str(tmp_path / "m.onnx"), batch_size=4)
    assert next(o for o in g.operands if o.name == "e").shape == (4, 3, 4)


def test_pytorch_converted_embedding():
    d = os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/pytorch-converted/test_Embedding/model.onnx")
    check_verify(d, "-b", "1", "-O", "sgd")
