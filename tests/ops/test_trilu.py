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


def _torch_layers(path):
    from memplan_cli.analysis import analyze_graph
    from memplan_cli.config import TrainConfig

    a = analyze_graph(load_model(path, batch_size=2), TrainConfig(batch_size=2, optimizer="adam", loss="mse"),
                      profile="torch")
    return a, {k.split("(")[-1].rstrip(")"): v for k, v in a.extras["per_layer_extra"].items()}


def test_trilu_torch_facts_save_nothing_and_make_dx(tmp_path):
    # derivatives.yaml: tril / triu's backward is grad.tril(k) / grad.triu(k): nothing saved (the Add's
    # result is freed once the mask has read it), dX one new tensor of the input's size, no scratch
    inits = {"p": np.ones(X[1:], np.float32), "k": np.array(1, np.int64)}
    nodes = [helper.make_node("Add", ["x", "p"], ["a"], name="add"),
             helper.make_node("Trilu", ["a", "k"], ["t"], upper=0, name="tril"),
             helper.make_node("Sigmoid", ["t"], ["y"], name="act")]
    p = save(tmp_path, onnx_model(nodes, [("x", X)], [("y", X)], inits))
    a, cols = _torch_layers(p)
    size = 2 * 4 * 5 * 4
    assert cols["tril"] == {"fwd_mem_out": size, "fwd_mem_tmp": 0, "bwd_mem_tmp": 0, "bwd_mem_out": size}
    assert not a.extras["torch"]["coverage"]["estimated"]
    x_plus_p = next(b for b in a.buffers.buffers if b.name == "a")
    assert a.buffers.steps[x_plus_p.last].kind == "forward"


def test_trilu_solved_by_forward_substitution_is_named_as_estimated(tmp_path):
    # `m = -a.tril(-1)`, then its rows written in place (a ScatterND in a TorchScript file is eager's
    # write), the next row read from the written matrix: the unrolled solve transformers writes only
    # under export, in place of solve_triangular. Analysed as the file says, the region named
    import json

    from click.testing import CliRunner

    from memplan_cli.cli import main

    def idx(row):
        i = np.stack(np.meshgrid(np.arange(2), [row], np.arange(5), indexing="ij"), -1).reshape(2, 1, 5, 3)
        return i.astype(np.int64)

    inits = {"p": np.ones(X[1:], np.float32), "k": np.array(-1, np.int64), "i1": idx(1), "i2": idx(2),
             "u": np.ones((2, 1, 5), np.float32), "q": np.ones(X[1:], np.float32)}
    nodes = [helper.make_node("Add", ["x", "p"], ["a"], name="add"),
             helper.make_node("Trilu", ["a", "k"], ["t"], upper=0, name="tril"),
             helper.make_node("Neg", ["t"], ["n"], name="neg"),
             helper.make_node("ScatterND", ["n", "i1", "u"], ["w1"], name="row1"),
             helper.make_node("Mul", ["w1", "w1"], ["sq"], name="row_product"),
             helper.make_node("ReduceSum", ["sq"], ["s"], keepdims=1, name="row_sum"),
             helper.make_node("Mul", ["s", "u"], ["v2"], name="row_update"),
             helper.make_node("ScatterND", ["w1", "i2", "v2"], ["w2"], name="row2"),
             helper.make_node("Mul", ["w2", "q"], ["y"], name="after")]
    p = save(tmp_path, onnx_model(nodes, [("x", X)], [("y", X)], inits))
    r = CliRunner().invoke(main, ["analyze", p, "-b", "2", "-O", "adam", "-p", "torch", "--format", "json"])
    assert r.exit_code == 0, r.output
    cov = json.loads(r.output)["figures"]["torch"]["coverage"]
    why = {e["op"].split("(")[-1].rstrip(")"): e.get("why", "") for e in cov["estimated"]}
    # the Trilu, the chain to the first write, the writes and the ops between them; not what follows
    assert sorted(why) == ["neg", "row1", "row2", "row_product", "row_sum", "row_update", "tril"], why
    assert all("forward substitution" in w and "solve_triangular" in w for w in why.values())
    assert cov["estimated_bytes_at_peak"] > 0
    # beside it, the peak with the loop run as one op saving only its matrix (as solve_triangular does)
    assert cov["as_solve"]["loops"] == 1 and cov["as_solve"]["peak"] > 0
    from memplan_cli.config import TrainConfig
    from memplan_cli.profiles.torch import PROFILE
    from memplan_cli.profiles.torch.replay import Replay

    cfg = TrainConfig(batch_size=2, optimizer="adam", loss="mse")
    tg = PROFILE.training_graph(load_model(p, batch_size=2), cfg)
    solve = [op for op in Replay(tg, cfg, as_solve=True).ops if op.attrs.get("function") == "solve_triangular"]
    assert len(solve) == 1
    opd = tg.graph.operands
    # reads the matrix (and the writes' constants), hands on the last write's result only; no forward
    # scratch, one temporary of the result's size in its backward (grad @ X^H before the mask)
    assert [opd[v].name for v in solve[0].inputs if not opd[v].is_const] == ["a"]
    assert [opd[v].name for v in solve[0].outputs] == ["w2"]
    assert solve[0].attrs["fwd_tmp"] == 0 and solve[0].attrs["bwd_tmp"] == 2 * 4 * 5 * 4
    text = CliRunner().invoke(main, ["analyze", p, "-b", "2", "-O", "adam", "-p", "torch"], env={"NO_COLOR": "1"})
    assert text.exit_code == 0 and "as a triangular solve by forward substitution" in text.output, text.output
    assert CliRunner().invoke(main, ["analyze", p, "-b", "2", "-O", "adam"]).exit_code == 0
