"""CumSum and GatherElements (RoBERTa's position and token-type ids; differentiable on floats):
gradients by finite differences, verify, what backward keeps."""
import numpy as np
import pytest
from onnx import helper

from memplan_cli.loaders import load_model
from tests.ops.gradcheck import check_gradients, check_verify, onnx_model, run_forward, save, training_graph

X = (2, 3, 4)


@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_cumsum(tmp_path, exclusive, reverse):
    rng = np.random.default_rng(4)
    inits = {"p": rng.normal(size=X[1:]).astype(np.float32), "q": rng.normal(size=X[1:]).astype(np.float32),
             "ax": np.array(1, np.int64)}
    nodes = [helper.make_node("Add", ["x", "p"], ["a"]),
             helper.make_node("CumSum", ["a", "ax"], ["c"], exclusive=exclusive, reverse=reverse),
             helper.make_node("Mul", ["c", "q"], ["y"])]
    p = save(tmp_path, onnx_model(nodes, [("x", X)], [("y", X)], inits))
    op = next(o for o in load_model(p).operations if o.type == "CumSum")
    assert op.attrs == {"axis": 1, "exclusive": exclusive, "reverse": reverse}
    assert check_gradients(p) >= 20
    check_verify(p, "-b", "3")


def test_gather_elements(tmp_path):
    rng = np.random.default_rng(5)
    idx = np.array([[[0, 2, 2, 1], [1, 1, 0, 0]]] * 2, np.int64)  # (2, 2, 4): repeats accumulate
    inits = {"p": rng.normal(size=X[1:]).astype(np.float32), "q": rng.normal(size=(2, 4)).astype(np.float32),
             "idx": idx}
    nodes = [helper.make_node("Add", ["x", "p"], ["a"]),
             helper.make_node("GatherElements", ["a", "idx"], ["g"], axis=1),
             helper.make_node("Mul", ["g", "q"], ["y"])]
    p = save(tmp_path, onnx_model(nodes, [("x", X)], [("y", (2, 2, 4))], inits))
    assert check_gradients(p) >= 16
    tg = training_graph(p)
    k = next(o.index for o in tg.graph.operations if o.type == "GatherElements")
    assert [tg.graph.operands[i].name for i in tg.rules[k].kept_forward()] == ["idx"]
    check_verify(p)


def test_gather_elements_index_smaller_than_data_and_rebatch_refusal(tmp_path):
    """An index smaller than the data on a non-gathered axis reads the leading entries (torch.gather);
    data re-batched under an index that keeps the file's batch (ViT-MAE's masking index from noise
    drawn at the export's batch) is refused rather than analysed at the wrong batch."""
    from click.testing import CliRunner

    from memplan_cli.cli import main

    idx = np.array([[[4, 0], [1, 1], [0, 3]]], np.int64)  # [1, 3, 2]
    nodes = [helper.make_node("Add", ["x", "p"], ["a"]),
             helper.make_node("GatherElements", ["a", "i"], ["g"], axis=1),
             helper.make_node("Mul", ["g", "q"], ["y"])]
    inits = {"p": np.linspace(-1, 1, 20).reshape(1, 5, 4).astype(np.float32), "i": idx,
             "q": np.linspace(0.5, 2, 6).reshape(1, 3, 2).astype(np.float32)}
    p = save(tmp_path, onnx_model(nodes, [("x", (1, 5, 4))], [("y", (1, 3, 2))], inits))
    xv = np.arange(20, dtype=np.float32).reshape(1, 5, 4)
    op = next(o for o in load_model(p).operations if o.type == "GatherElements")
    want = np.array([[[xv[0, 4, 0], xv[0, 0, 1]], [xv[0, 1, 0], xv[0, 1, 1]], [xv[0, 0, 0], xv[0, 3, 1]]]])
    np.testing.assert_array_equal(run_forward(op, [xv, idx], [(1, 3, 2)], np.float32)[0], want)
    assert check_gradients(p) >= 12
    check_verify(p)
    r = CliRunner().invoke(main, ["analyze", p, "-b", "2"])
    assert r.exit_code == 2 and "index keeps batch 1" in r.stderr and len(r.stderr.strip().splitlines()) == 1
