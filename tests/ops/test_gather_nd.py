"""GatherND (ONNX GatherND, TFLite GATHER_ND): forward against onnx.reference (batch_dims 0 and 1,
negative and repeated indices), the table / activation gradients by finite differences (repeats
accumulate), only the indices kept, verify."""
import numpy as np
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from memplan_cli.loaders import load_model
from tests.ops.gradcheck import check_gradients, check_verify, onnx_model, run_forward, save, training_graph

CASES = [  # data shape, indices value, batch_dims, output shape
    ((5, 4, 3), np.array([[[0, 1], [4, -1]], [[0, 1], [2, 3]]], np.int64), 0, (2, 2, 3)),  # a repeat
    ((5, 4, 3), np.array([[1], [-2], [1]], np.int64), 0, (3, 4, 3)),
    ((2, 4, 3), np.array([[3], [0]], np.int64), 1, (2, 3)),  # CLIP's pooling: one token per sample
]


def _model(ds, idx, b, ys, table):
    # table: data is a trained parameter (a bias table); else an activation x + p (the back-prop scatters)
    if table:
        nodes = [helper.make_node("GatherND", ["t", "i"], ["g"], batch_dims=b),
                 helper.make_node("Mul", ["g", "q"], ["y"])]
        inits = {"t": np.linspace(-1, 1, int(np.prod(ds))).reshape(ds).astype(np.float32),
                 "i": idx, "q": np.linspace(0.5, 2, int(np.prod(ys))).reshape(ys).astype(np.float32)}
        return onnx_model(nodes + [helper.make_node("Add", ["y", "x"], ["z"])], [("x", ys)], [("z", ys)], inits)
    nodes = [helper.make_node("Add", ["x", "p"], ["a"]),
             helper.make_node("GatherND", ["a", "i"], ["g"], batch_dims=b),
             helper.make_node("Mul", ["g", "q"], ["y"])]
    inits = {"p": np.linspace(-1, 1, int(np.prod(ds))).reshape(ds).astype(np.float32), "i": idx,
             "q": np.linspace(0.5, 2, int(np.prod(ys))).reshape(ys).astype(np.float32)}
    return onnx_model(nodes, [("x", ds)], [("y", ys)], inits)


@pytest.mark.parametrize("ds,idx,b,ys", CASES)
def test_forward_matches_onnx_reference(tmp_path, ds, idx, b, ys):
    m = onnx_model([helper.make_node("GatherND", ["x", "i"], ["y"], batch_dims=b)], [("x", ds)], [("y", ys)],
                   {"i": idx})
    xv = np.random.default_rng(0).normal(size=ds).astype(np.float32)
    want = ReferenceEvaluator(m).run(None, {"x": xv})[0]
    op = next(o for o in load_model(save(tmp_path, m)).operations if o.type == "GatherND")
    np.testing.assert_array_equal(run_forward(op, [xv, idx], [ys], np.float32)[0], want)


@pytest.mark.parametrize("table", [True, False])
@pytest.mark.parametrize("ds,idx,b,ys", CASES[:1] + CASES[2:])
def test_gradients_keep_only_the_indices_and_verify(tmp_path, ds, idx, b, ys, table):
    p = save(tmp_path, _model(ds, idx, b, ys, table))
    tg = training_graph(p)
    k = next(o.index for o in tg.graph.operations if o.type == "GatherND")
    assert [tg.graph.operands[i].name for i in tg.rules[k].kept_forward()] == ["i"]
    assert check_gradients(p) >= 10
    check_verify(p)  # at the file's own batch (the tables and indices fix it)
