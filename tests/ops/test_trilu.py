"""Trilu (torch.tril / triu on activations, as the dynamo exporter writes a linear attention's
causal masks): gradients by finite differences, verify, what backward keeps, the torch facts."""
import numpy as np
import pytest
from onnx import helper

from memplan_cli.loaders import load_model
from tests.ops.gradcheck import check_gradients, check_verify, onnx_model, save, training_graph

X = (2, 4, 5)


@pytest.mark.parametrize("upper,k", [(0, 0), (1, 0), (0, -1), (1, 2), (0, None)])
def test_trilu(tmp_path, upper, k):
    rng = np.random.default_rng(7)
    inits = {"p": rng.normal(size=X[1:]).astype(np.float32), "q": rng.normal(size=X[1:]).astype(np.float32)}
    ins = ["a"]
    if k is not None:
        inits["k"] = np.array(k, np.int64)
        ins.append("k")
    nodes = [helper.make_node("Add", ["x", "p"], ["a"]),
             helper.make_node("Trilu", ins, ["t"], upper=upper),
             helper.make_node("Mul", ["t", "q"], ["y"])]
    p = save(tmp_path, onnx_model(nodes, [("x", X)], [("y", X)], inits))
    op = next(o for o in load_model(p).operations if o.type == "Trilu")
    assert op.attrs == {"upper": upper, "k": k or 0}
    # the masked-out entries get no gradient: finite differences see zeros there, the rule must too
    assert check_gradients(p) >= 20
    tg = training_graph(p)
    i = next(o.index for o in tg.graph.operations if o.type == "Trilu")
    assert list(tg.rules[i].kept_forward()) == []  # grad.tril(k) reads dY only
    check_verify(p, "-b", "3")


def test_trilu_torch_profile_refuses_in_one_line(tmp_path):
    from click.testing import CliRunner

    from memplan_cli.cli import main

    inits = {"p": np.ones(X[1:], np.float32), "k": np.array(0, np.int64)}
    nodes = [helper.make_node("Add", ["x", "p"], ["a"]), helper.make_node("Trilu", ["a", "k"], ["y"], upper=0)]
    p = save(tmp_path, onnx_model(nodes, [("x", X)], [("y", X)], inits))
    r = CliRunner().invoke(main, ["analyze", p, "-b", "2", "-O", "adam", "-p", "torch"], env={"NO_COLOR": "1"})
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1 and "tril / triu" in r.output, r.output
    assert CliRunner().invoke(main, ["analyze", p, "-b", "2", "-O", "adam"]).exit_code == 0
