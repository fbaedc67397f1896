"""TopK (torch.topk / sort: a mixture of experts' router): gradients by finite differences (dX is dY
scattered at the indices, derivatives.yaml's value_selecting_reduction_backward), verify, what
backward keeps (the indices, not X), the forward kernel against NumPy, the torch facts."""
import numpy as np
import pytest
from onnx import TensorProto, helper

from memplan_cli.loaders import load_model
from tests.ops.gradcheck import analyze_json, check_gradients, check_verify, onnx_model, save, training_graph

X = (3, 6)


def _model(tmp_path, k, largest=1, axis=1):
    rng = np.random.default_rng(3)
    inits = {"p": rng.normal(size=X).astype(np.float32), "k": np.array([k], np.int64),
             "q": rng.normal(size=(X[0], k) if axis == 1 else (k, X[1])).astype(np.float32)}
    out = (X[0], k) if axis == 1 else (k, X[1])
    nodes = [helper.make_node("Add", ["x", "p"], ["a"]),
             helper.make_node("TopK", ["a", "k"], ["v", "i"], axis=axis, largest=largest),
             helper.make_node("Softmax", ["v"], ["s"], axis=-1),
             helper.make_node("Mul", ["s", "q"], ["y"])]
    return save(tmp_path, onnx_model(nodes, [("x", X)], [("y", out), ("i", out, TensorProto.INT64)], inits))


@pytest.mark.parametrize("k,largest,axis", [(2, 1, 1), (4, 0, 1), (2, 1, 0)])
def test_topk_gradients_and_verify(tmp_path, k, largest, axis):
    p = _model(tmp_path, k, largest, axis)
    op = next(o for o in load_model(p).operations if o.type == "TopK")
    assert op.attrs["axis"] == axis and op.attrs["largest"] == largest and len(op.inputs) == 1
    assert check_gradients(p) >= 8
    tg = training_graph(p)
    i = next(o.index for o in tg.graph.operations if o.type == "TopK")
    kept = {tg.graph.operands[v].name for v in tg.rules[i].kept_forward()}
    assert kept == {"i"}  # the indices, not X
    check_verify(p, "-b", "3")


def test_topk_forward_matches_numpy():
    from memplan_cli.ops import topk

    x = np.array([[3.0, 1.0, 3.0, 2.0], [0.0, -1.0, 5.0, 5.0]])
    attrs = {"axis": 1, "largest": 1}
    # through the kernel: equal values keep their order (lower index first), as ONNX asks
    outs = [np.zeros((2, 2)), np.zeros((2, 2), np.int64)]
    ctx = type("C", (), {"attrs": attrs, "x": lambda self, k: x, "y": lambda self, k=0: outs[k],
                         "tg": type("T", (), {"graph": type("G", (), {"operands": [
                             type("O", (), {"shape": (2, 2)})()]})()})(),
                         "op": type("P", (), {"outputs": [0]})()})()
    topk.forward(ctx)
    assert outs[1].tolist() == [[0, 2], [2, 3]] and outs[0].tolist() == [[3.0, 3.0], [5.0, 5.0]]


def test_topk_torch_facts_keep_the_indices(tmp_path):
    doc = analyze_json(_model(tmp_path, 2), "-b", "3", "-O", "adam", "-p", "torch")
    cov = doc["figures"]["torch"]["coverage"]
    assert not any(e["type"] == "TopK" for e in cov["estimated"])


def _routed(tmp_path, values_read: bool):
    """A score branch (x @ w_idx, relu) whose top-k picks which of h's columns go on (DeepSeek's sparse
    attention indexer, a router that keeps only indices); `values_read`: the top-k values also scale
    them (a gradient then reaches the branch)."""
    rng = np.random.default_rng(5)
    inits = {w: rng.normal(size=(64, 64)).astype(np.float32) for w in ("w_in", "w_idx", "w")}
    inits.update({"k": np.array([4], np.int64),
                  "q": rng.normal(size=(8, 4)).astype(np.float32)})
    nodes = [helper.make_node("MatMul", ["x0", "w_in"], ["x"]),  # x requires grad, as a hidden state does
             helper.make_node("MatMul", ["x", "w_idx"], ["score"]),
             helper.make_node("Relu", ["score"], ["r"]),
             helper.make_node("TopK", ["r", "k"], ["v", "i"], axis=1),
             helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("GatherElements", ["h", "i"], ["g"], axis=1)]
    if values_read:
        nodes += [helper.make_node("Mul", ["g", "v"], ["gv"]), helper.make_node("Mul", ["gv", "q"], ["y"])]
    else:
        nodes += [helper.make_node("Mul", ["g", "q"], ["y"])]
    return save(tmp_path, onnx_model(nodes, [("x0", (8, 64))], [("y", (8, 4))], inits), f"routed{values_read}.onnx")


@pytest.mark.parametrize("values_read", [False, True])
def test_topk_indices_alone_keep_no_backward_node_upstream(tmp_path, values_read):
    """An integer result carries no gradient (only floating tensors require grad; derivatives.yaml:
    topk's indices are not differentiable): when only the indices are read, the score branch's nodes
    die with their results in forward (relu's output is not held to backward), as eager frees a graph
    no live tensor refers to; when the values are read too, relu's output is saved for backward."""
    from memplan_cli.config import TrainConfig
    from memplan_cli.profiles.torch import PROFILE, replay

    cfg = TrainConfig(loss="mse", batch_size=8, optimizer="adam")
    sim = replay(PROFILE.training_graph(load_model(_routed(tmp_path, values_read)), cfg), cfg)[0]
    first_backward = next(s.index for s in sim.steps if s.kind != "forward")
    relu_out = next(s for s in sim.store if s["name"] == "r")
    assert (relu_out["last"] >= first_backward) == values_read
    idx_grads = [s for s in sim.store if "w_idx" in s["name"] and s["category"] == "gradient"]
    assert bool(idx_grads) == values_read  # w_idx trains only through the values
