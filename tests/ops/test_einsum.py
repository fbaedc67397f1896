"""ops/einsum.py: ONNX Einsum (torch.einsum in TorchScript exports): forward against onnx.reference
(explicit, implicit output, ellipsis, a sum over an operand's own letter, three operands, broadcasting),
every operand's gradient by finite differences, what backward keeps, verify; traces refused."""
import numpy as np
import pytest
from click.testing import CliRunner
from onnx import helper
from onnx.reference import ReferenceEvaluator

from memplan_cli.cli import main
from memplan_cli.loaders import load_model
from tests.ops.gradcheck import check_gradients, check_verify, onnx_model, save, training_graph

CASES = [  # equation, input shapes, output shape
    ("bhqd,bhkd->bhqk", [(2, 2, 3, 4), (2, 2, 5, 4)], (2, 2, 3, 5)),
    ("ij,jk", [(3, 4), (4, 5)], (3, 5)),                       # implicit output: ik
    ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 5)], (2, 3, 5)),
    ("ibnd,jbnd->bnij", [(3, 2, 2, 4), (5, 2, 2, 4)], (2, 2, 3, 5)),  # XLNet's attention scores
    ("ij,k->ijk", [(2, 3), (4,)], (2, 3, 4)),                  # outer product
    ("bij,bjk,bkl->bil", [(2, 3, 4), (2, 4, 2), (2, 2, 5)], (2, 3, 5)),
    ("bij->bi", [(2, 3, 4)], (2, 3)),                          # j summed: its gradient broadcasts back
    ("bij,xj->bix", [(2, 3, 4), (1, 4)], (2, 3, 1)),
]


@pytest.mark.parametrize("eq,shapes,out", CASES)
def test_forward_matches_onnx_reference(tmp_path, eq, shapes, out):
    names = [f"x{k}" for k in range(len(shapes))]
    m = onnx_model([helper.make_node("Einsum", names, ["y"], equation=eq)], list(zip(names, shapes)),
                   [("y", out)], {}, opset=13)
    rng = np.random.default_rng(0)
    feeds = {n: rng.normal(size=s).astype(np.float32) for n, s in zip(names, shapes)}
    want = ReferenceEvaluator(m).run(None, feeds)[0]
    op = next(o for o in load_model(save(tmp_path, m)).operations if o.type == "Einsum")
    got = np.einsum(op.attrs["equation"], *[feeds[n] for n in names])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("eq,shapes,out", CASES)
def test_gradients_of_every_operand_and_verify(tmp_path, eq, shapes, out):
    # operand 0 is an activation (x + p), the others parameters: back-prop and gradients both run
    rng = np.random.default_rng(1)
    names = ["a"] + [f"w{k}" for k in range(1, len(shapes))]
    nodes = [helper.make_node("Add", ["x", "p"], ["a"]), helper.make_node("Einsum", names, ["y"], equation=eq)]
    inits = {"p": rng.normal(size=shapes[0]).astype(np.float32)}
    inits.update({n: rng.normal(size=s).astype(np.float32) for n, s in zip(names[1:], shapes[1:])})
    p = save(tmp_path, onnx_model(nodes, [("x", shapes[0])], [("y", out)], inits, opset=13))
    tg = training_graph(p)
    k = next(o.index for o in tg.graph.operations if o.type == "Einsum")
    kept = {tg.graph.operands[i].name for i in tg.rules[k].kept_forward()}
    assert kept == set(names[1:]) | ({"a"} if len(names) > 1 else set())  # the others, for each gradient
    assert check_gradients(p) >= 8 * len(shapes)
    check_verify(p)


def test_a_trace_is_refused_in_one_line(tmp_path):
    m = onnx_model([helper.make_node("Einsum", ["x"], ["y"], equation="ii->i")], [("x", (3, 3))], [("y", (3,))], {},
                   opset=13)
    r = CliRunner().invoke(main, ["analyze", save(tmp_path, m)])
    assert r.exit_code == 2 and "trace" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_an_operand_used_twice_sums_both_positions(tmp_path):
    """einsum("bi,bi->b", a, a): the gradient of a is 2 a dY, read from a itself (kept for backward)."""
    nodes = [helper.make_node("Add", ["x", "p"], ["a"]), helper.make_node("Einsum", ["a", "a"], ["s"], equation="bi,bi->b"),
             helper.make_node("Mul", ["s", "q"], ["y"])]
    inits = {"p": np.linspace(-1, 1, 8).reshape(2, 4).astype(np.float32), "q": np.array([0.5, 1.5], np.float32)}
    p = save(tmp_path, onnx_model(nodes, [("x", (2, 4))], [("y", (2,))], inits, opset=13))
    tg = training_graph(p)
    k = next(o.index for o in tg.graph.operations if o.type == "Einsum")
    assert {tg.graph.operands[i].name for i in tg.rules[k].kept_forward()} == {"a"}
    assert check_gradients(p) >= 8
    check_verify(p)
