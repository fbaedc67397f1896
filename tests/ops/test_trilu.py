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


C, D = 5, 3  # the solved matrices are (2, C, C); each right-hand side (2, C, D)
SIG = "pkg.torch.export.ExportedProgram.graph_signature"


def _solve_model(tmp_path, dynamo: bool, products: bool = True) -> str:
    """`m = -a.tril(-1)`, its rows 1 and 2 written in place from the matrix written so far (the
    unrolled forward substitution transformers writes only under export, in place of
    solve_triangular), then `m + eye` applied to two right-hand sides (`products`), else multiplied
    by a constant. `dynamo`: the file carries a dynamo export's graph signature."""
    def idx(row):
        i = np.stack(np.meshgrid(np.arange(2), [row], np.arange(C), indexing="ij"), -1).reshape(2, 1, C, 3)
        return i.astype(np.int64)

    rng = np.random.default_rng(3)
    inits = {"p": np.ones((C, C), np.float32), "k": np.array(-1, np.int64), "i1": idx(1), "i2": idx(2),
             "u": np.ones((2, 1, C), np.float32), "eye": np.eye(C, dtype=np.float32),
             "w1": rng.normal(size=(C, D)).astype(np.float32), "w2": rng.normal(size=(C, D)).astype(np.float32),
             "q": np.ones((C, C), np.float32)}
    nodes = [helper.make_node("Add", ["x", "p"], ["a"], name="add"),
             helper.make_node("Trilu", ["a", "k"], ["t"], upper=0, name="tril"),
             helper.make_node("Neg", ["t"], ["n"], name="neg"),
             helper.make_node("ScatterND", ["n", "i1", "u"], ["r1"], name="row1"),
             helper.make_node("Mul", ["r1", "r1"], ["sq"], name="row_product"),
             helper.make_node("ReduceSum", ["sq"], ["s"], keepdims=1, name="row_sum"),
             helper.make_node("Mul", ["s", "u"], ["v2"], name="row_update"),
             helper.make_node("ScatterND", ["r1", "i2", "v2"], ["r2"], name="row2")]
    if products:
        nodes += [helper.make_node("Add", ["r2", "eye"], ["ut"], name="plus_eye"),
                  helper.make_node("MatMul", ["x", "w1"], ["b1"], name="rhs1"),
                  helper.make_node("MatMul", ["x", "w2"], ["b2"], name="rhs2"),
                  helper.make_node("MatMul", ["ut", "b1"], ["y1"], name="solve1"),
                  helper.make_node("MatMul", ["ut", "b2"], ["y2"], name="solve2"),
                  helper.make_node("Add", ["y1", "y2"], ["y"], name="out")]
        out = ("y", (2, C, D))
    else:
        nodes += [helper.make_node("Mul", ["r2", "q"], ["y"], name="after")]
        out = ("y", (2, C, C))
    m = onnx_model(nodes, [("x", (2, C, C))], [out], inits)
    if dynamo:
        m.graph.metadata_props.add(key=SIG, value="\n# inputs\np_p: PARAMETER target='p'\nx: USER_INPUT\n")
    return save(tmp_path, m)


def _analyze_json(p):
    import json

    from click.testing import CliRunner

    from memplan_cli.cli import main

    r = CliRunner().invoke(main, ["analyze", p, "-b", "2", "-O", "adam", "-p", "torch", "--format", "json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.output)["figures"]["torch"]


def test_a_dynamo_files_forward_substitution_is_counted_as_solve_triangular(tmp_path):
    # under dynamo the loop, `+ eye` and the two matmuls are eager's two linalg_solve_triangular calls
    # (derivatives.yaml: each saves its matrix and its result; the forward makes the result only; the
    # backward makes G_B, then G_A through one more matrix-sized temporary: measured, torch 2.14.1)
    from memplan_cli.analysis import analyze_graph
    from memplan_cli.config import TrainConfig
    from memplan_cli.ops.trilu import SOLVE_FACTS, SOLVE_TYPE
    from memplan_cli.profiles.torch import PROFILE
    from memplan_cli.profiles.torch.replay import Replay

    p = _solve_model(tmp_path, dynamo=True)
    cfg = TrainConfig(batch_size=2, optimizer="adam", loss="mse")
    tg = PROFILE.training_graph(load_model(p, batch_size=2), cfg)
    ops_ = Replay(tg, cfg, as_solve=True).ops
    opd = tg.graph.operands
    solves = [op for op in ops_ if op.type == SOLVE_TYPE]
    assert [[opd[v].name for v in op.inputs] for op in solves] == [["a", "b1"], ["a", "b2"]]
    assert [[opd[v].name for v in op.outputs] for op in solves] == [["y1"], ["y2"]]
    # its result laid out for LAPACK, each matrix column-major (measured: (512, 1, 16) for (8, 16, 32))
    assert SOLVE_FACTS["out_strides"](solves[0], opd) == (C * D, 1, C)
    names = {o.label.split("(")[-1].split(")")[0] for o in ops_}
    assert not names & {"tril", "neg", "row1", "row2", "plus_eye"}  # the loop is gone
    a = analyze_graph(load_model(p, batch_size=2), cfg, profile="torch")
    cols = {k.split("(")[-1].split(")")[0]: v for k, v in a.extras["per_layer_extra"].items()}
    mat, rhs = 2 * C * C * 4, 2 * C * D * 4
    assert cols["solve1"]["fwd_mem_out"] == rhs and cols["solve1"]["fwd_mem_tmp"] == 0
    # the second solve's backward runs first: G_A and G_B made, one matrix-sized temporary (both sides
    # need a gradient); the first's G_A is then added into it (a temporary of its own)
    assert cols["solve2"]["bwd_mem_tmp"] == mat and cols["solve2"]["bwd_mem_out"] == mat + rhs
    assert cols["solve1"]["bwd_mem_tmp"] == 2 * mat and cols["solve1"]["bwd_mem_out"] == rhs
    saved = next(b for b in a.buffers.buffers if b.name == "a")  # the matrix, saved by both solves
    assert a.buffers.steps[saved.last].kind != "forward"
    t = _analyze_json(p)
    cov = t["coverage"]
    why = {e["op"].split("(")[-1].split(")")[0]: e.get("why", "") for e in cov["estimated"]}
    assert sorted(why) == ["solve1", "solve2"], why
    assert all("solve_triangular" in w and "forward-substitution loop" in w for w in why.values())
    # beside it, the loop as written: each row's copies saved, more than the solves hold
    assert cov["as_loop"]["loops"] == 1 and cov["as_loop"]["peak"] > t["peak"]
    # the profile writes the clause once (JSON); the table's estimated line and compare's line add it
    from memplan_cli.profiles.torch import coverage_line

    assert "; " + cov["as_loop"]["note"] + " (devtools" in coverage_line(cov)
    # the families' reasons too: one clause each, written by the profile, printed by both
    from memplan_cli.report.table import torch_estimate_note

    assert cov["reasons"] == [f"2 of them ({sum(e['bytes_at_peak'] for e in cov['estimated']):,d} B) as "
                              + cov["estimated"][0]["why"]]
    assert "; " + cov["reasons"][0] + ";" in coverage_line(cov)
    assert not cov["says_so"] or "; " + cov["reasons"][0] in torch_estimate_note({"figures": {"torch": t}})
    check_verify(p, "-b", "2")


def test_a_torchscript_files_forward_substitution_is_eagers_own(tmp_path):
    # a TorchScript trace runs eager's branch (its exporter has no solve_triangular): the loop is what
    # eager ran, replayed as written, nothing named
    t = _analyze_json(_solve_model(tmp_path, dynamo=False))
    assert not t["coverage"]["estimated"] and "as_loop" not in t["coverage"]


def test_a_dynamo_loop_not_followed_by_its_products_stays_named(tmp_path):
    # a loop whose result is not `+ eye` then matmuls: replayed as written, its region named as a
    # solve eager may have run otherwise (no figure beside)
    t = _analyze_json(_solve_model(tmp_path, dynamo=True, products=False))
    cov = t["coverage"]
    why = {e["op"].split("(")[-1].rstrip(")"): e.get("why", "") for e in cov["estimated"]}
    assert sorted(why) == ["neg", "row1", "row2", "row_product", "row_sum", "row_update", "tril"], why
    assert all("forward substitution" in w and "solve_triangular" in w for w in why.values())
    assert "as_loop" not in cov
    p = _solve_model(tmp_path, dynamo=True)
    from click.testing import CliRunner

    from memplan_cli.cli import main

    text = CliRunner().invoke(main, ["analyze", p, "-b", "2", "-O", "adam", "-p", "torch"], env={"NO_COLOR": "1"})
    assert text.exit_code == 0 and "run as written instead of solve_triangular" in text.output, text.output
    assert CliRunner().invoke(main, ["analyze", p, "-b", "2", "-O", "adam"]).exit_code == 0
