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


# ---- TF Lite EMBEDDING_LOOKUP(ids, table): litert-torch's nn.Embedding -----------------------------
TFL_IDS = np.array([[1, 7, 1], [3, 0, 9]], np.int32)  # a repeated row: its gradients add up


def _embedding_lookup(path, rows=10):
    """ids [2, 3] -> RESHAPE [6] -> EMBEDDING_LOOKUP(ids, table [rows, 4]) -> FULLY_CONNECTED(5), as
    litert-torch writes an nn.Embedding (ids flattened to one axis)."""
    from devtools.modelgen import ModelBuilder

    m = ModelBuilder(seed=4)
    ids = m._tensor([2, 3], "int32", name="ids")
    m.inputs.append(ids)
    flat = m.reshape(ids, [6])
    table = m.const([rows, 4])
    e = m._op(7, [flat, table], [6, 4])  # EMBEDDING_LOOKUP
    m.output(m.fully_connected(e, 5))
    return m.save(path)


def test_embedding_lookup_is_a_gather_of_the_table(tmp_path):
    p = _embedding_lookup(str(tmp_path / "emb.tflite"))
    g = load_model(p)
    op = next(o for o in g.operations if o.type == "Gather")
    assert op.source_type == "EMBEDDING_LOOKUP" and op.attrs == {"axis": 0}
    table, ids = op.inputs
    assert g.operands[table].shape == (10, 4) and g.operands[ids].dtype == "int32"
    tg = training_graph(p)
    assert table in tg.grad and ids not in tg.bp  # the whole table's gradient; ids carry none


def test_embedding_lookup_gradients_scatter_add_into_the_table(tmp_path):
    p = _embedding_lookup(str(tmp_path / "emb.tflite"))
    assert check_gradients(p, feeds={"ids": TFL_IDS}) >= 20


def test_embedding_lookup_verify(tmp_path):
    doc = check_verify(_embedding_lookup(str(tmp_path / "emb.tflite")), "-O", "adam")
    assert doc["passed"]


def test_embedding_lookup_forward_takes_rows(tmp_path):
    from tests.ops.gradcheck import run_forward

    op = next(o for o in load_model(_embedding_lookup(str(tmp_path / "emb.tflite"))).operations if o.type == "Gather")
    table = np.arange(40, dtype=np.float64).reshape(10, 4)
    ids = TFL_IDS.reshape(-1)
    (y,) = run_forward(op, [table, ids], [(6, 4)])
    assert np.array_equal(y, table[ids])


@pytest.mark.onert
def test_onert_cannot_train_embedding_lookup(tmp_path):
    """onert 0.1.0 fails to compile EMBEDDING_LOOKUP even when only the layer after it trains; the onert
    profile refuses it in one line."""
    from click.testing import CliRunner

    from devtools.onert_runtime import available, run_onert
    from memplan_cli.cli import main

    from devtools.modelgen import ModelBuilder

    m = ModelBuilder(seed=2)  # onert feeds float inputs only: constant ids, a batch-1 float input
    x = m.input([1, 12])
    ids = m.const([3], "int32", np.array([1, 7, 1], np.int32))
    e = m.reshape(m._op(7, [ids, m.const([10, 4])], [3, 4]), [1, 12])
    m.output(m.fully_connected(m.add(x, e), 5))
    p = m.save(str(tmp_path / "emb.circle"))
    r = CliRunner().invoke(main, ["analyze", p, "-p", "onert", "--trainable-ops", "1"], env={"NO_COLOR": "1"})
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1 and "EmbeddingLookup" in r.stderr
    if not available():
        pytest.skip("onert 0.1.0 is not installed: the refusal is not checked against the runtime")
    got = run_onert(p, batch=1, trainable_ops=1, steps=1)
    assert not got["ok"] and "EmbeddingLookup operation is not trainable yet" in (got["error"] or "")
