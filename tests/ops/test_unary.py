"""Exp, Log, Sqrt, Rsqrt, Reciprocal, Neg, Abs, Sin, Cos, Tan, the inverse trigonometric and hyperbolic
functions, Square: forward against NumPy, what backward keeps (X, Y or nothing), finite differences,
verify, TFLite builtins, the torch profile's backward temporaries."""
import numpy as np
import pytest
from onnx import helper, numpy_helper

from devtools.modelgen import ModelBuilder
from memplan_cli import ops
from memplan_cli.loaders import load_model
from tests.execute.helpers import run_backward
from tests.ops.gradcheck import check_gradients, check_verify, onnx_model, save, training_graph

SHAPE = (2, 3, 4)
RNG = np.random.default_rng(5)
POS = RNG.uniform(-0.5, 0.5, SHAPE)  # Log, Sqrt, Reciprocal (of exp(x)): away from 0
SIGNED = np.sign(RNG.uniform(-1, 1, SHAPE)) * RNG.uniform(0.3, 1.5, SHAPE)  # Abs: both signs, away from 0
UNIT = RNG.uniform(-1.5, 1.5, SHAPE)  # Acos (of 0.5 tanh(x)): inside (-1, 1), away from its ends
ABOVE_ONE = RNG.uniform(-0.5, 0.5, SHAPE)  # Acosh (of 1.5 + exp(x)): above 1, away from it

# op -> (reference, kept tensor: "a" is X, "s" is Y, None nothing, input values)
REF = {
    "Exp": (np.exp, "s", SIGNED), "Log": (np.log, "a", POS), "Sqrt": (np.sqrt, "s", POS),
    "Reciprocal": (lambda x: 1 / x, "s", POS), "Neg": (np.negative, None, SIGNED), "Abs": (np.abs, "a", SIGNED),
    "Sin": (np.sin, "a", SIGNED), "Cos": (np.cos, "a", SIGNED), "Acos": (np.arccos, "a", UNIT),
    "Asin": (np.arcsin, "a", UNIT), "Atan": (np.arctan, "a", SIGNED), "Tan": (np.tan, "s", UNIT),
    "Sinh": (np.sinh, "a", SIGNED), "Cosh": (np.cosh, "a", SIGNED), "Asinh": (np.arcsinh, "a", SIGNED),
    "Acosh": (np.arccosh, "a", ABOVE_ONE), "Atanh": (np.arctanh, "a", UNIT),
}


def _model(op):
    # p shifts x: the op sits between two trained parameters; a positive-only op gets exp(x + p)
    # (verify seeds p at random); one defined on (-1, 1) only gets 0.5 tanh(x + p), one above 1 only
    # 1.5 + exp(x + p)
    pre = [helper.make_node("Add", ["x", "p"], ["a"])] if REF[op][2] is SIGNED else \
        [helper.make_node("Add", ["x", "p"], ["z"]), helper.make_node("Tanh", ["z"], ["t"]),
         helper.make_node("Constant", [], ["half"], value=numpy_helper.from_array(np.float32(0.5))),
         helper.make_node("Mul", ["t", "half"], ["a"])] if REF[op][2] is UNIT else \
        [helper.make_node("Add", ["x", "p"], ["z"]), helper.make_node("Exp", ["z"], ["e"]),
         helper.make_node("Constant", [], ["shift"], value=numpy_helper.from_array(np.float32(1.5))),
         helper.make_node("Add", ["e", "shift"], ["a"])] if REF[op][2] is ABOVE_ONE else \
        [helper.make_node("Add", ["x", "p"], ["z"]), helper.make_node("Exp", ["z"], ["a"])]
    nodes = pre + [helper.make_node(op, ["a"], ["s"]), helper.make_node("Mul", ["s", "q"], ["y"])]
    inits = {"p": np.zeros(SHAPE[1:], np.float32), "q": np.ones(SHAPE[1:], np.float32)}
    return onnx_model(nodes, [("x", SHAPE)], [("y", SHAPE)], inits)


@pytest.mark.parametrize("op", sorted(REF))
def test_forward_keeps_gradients_and_verify(tmp_path, op):
    ref, kept, x = REF[op]
    p = save(tmp_path, _model(op))
    tg = training_graph(p)
    xid = next(t.id for t in tg.tensors if t.name == "x")
    pid = next(t.id for t in tg.tensors if t.name == "p")
    mem = run_backward(tg, {xid: x.copy(), pid: np.zeros(SHAPE[1:])}, backward=False)
    v = {t.name: np.asarray(mem.view(t.id)) for t in tg.tensors if t.name in ("a", "s")}
    np.testing.assert_allclose(v["s"], ref(v["a"]), rtol=1e-12)
    k = next(o.index for o in tg.graph.operations if o.type == op)
    assert [tg.graph.operands[i].name for i in tg.rules[k].kept_forward()] == ([kept] if kept else [])
    feeds = {"x": x, "p": np.zeros(SHAPE[1:]), "q": RNG.uniform(0.5, 1.5, SHAPE[1:])}
    assert check_gradients(p, feeds=feeds) >= 24
    check_verify(p, "-b", "2")


@pytest.mark.parametrize("builtin,code,op", [("RSQRT", 76, "Rsqrt"), ("SQUARE", 92, "Square"), ("EXP", 47, "Exp"),
                                             ("LOG", 73, "Log"), ("SQRT", 75, "Sqrt"), ("NEG", 59, "Neg"),
                                             ("ABS", 101, "Abs"), ("SIN", 66, "Sin"), ("COS", 108, "Cos")])
def test_tflite_builtins(tmp_path, builtin, code, op):
    m = ModelBuilder(seed=4)
    x = m.input([2, 6])
    h = m.fully_connected(x, 6)
    u = m._op(code, [m._op(47, [h], [2, 6])], [2, 6])  # of exp(h) > 0, for Log, Sqrt and Rsqrt
    m.output(m.fully_connected(u, 3))
    p = m.save(str(tmp_path / "m.tflite"))
    g = load_model(p)
    assert any(o.type == op and o.source_type == builtin for o in g.operations)
    assert check_gradients(p) >= 12
    check_verify(p, "-b", "2")


def test_rsqrt_and_square_keep_y_and_x(tmp_path):
    m = ModelBuilder(seed=4)
    x = m.input([2, 6])
    h = m.fully_connected(x, 6)
    r = m._op(76, [m._op(92, [h], [2, 6])], [2, 6])
    m.output(m.fully_connected(r, 3))
    tg = training_graph(m.save(str(tmp_path / "m.tflite")))
    kept = {tg.graph.operations[k].type: [tg.graph.operands[i].name for i in r.kept_forward()]
            for k, r in tg.rules.items() if tg.graph.operations[k].type in ("Rsqrt", "Square")}
    names = {o.type: tg.graph.operands[o.outputs[0]].name for o in tg.graph.operations}
    assert kept == {"Rsqrt": [names["Rsqrt"]], "Square": [tg.graph.operands[next(
        o for o in tg.graph.operations if o.type == "Square").inputs[0]].name]}


def test_flops_per_element():
    from memplan_cli.ir.graph import Operand, Operation

    operands = [Operand(0, "x", (2, 5)), Operand(1, "y", (2, 5))]
    assert ops.get("Rsqrt").flops(Operation(0, "Rsqrt", [0], [1], {}), operands) == (20, 30)
    assert ops.get("Neg").flops(Operation(0, "Neg", [0], [1], {}), operands) == (10, 10)


# torch profile: input-sized temporaries each backward formula of derivatives.yaml makes beside dX
# (ops/_pointwise.py), and whether eager saves the input or the result
TORCH_TMP = {"Asin": 4, "Acos": 5, "Atan": 2, "Sinh": 1, "Cosh": 1, "Tan": 2, "Asinh": 3, "Acosh": 3, "Atanh": 3}


@pytest.mark.parametrize("op", sorted(TORCH_TMP))
def test_torch_profile_backward_temporaries(tmp_path, op):
    from memplan_cli.analysis import analyze
    from memplan_cli.config import TrainConfig

    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"), helper.make_node(op, ["h"], ["y"], name="f")]
    p = save(tmp_path, onnx_model(nodes, [("x", (4, 8, 16))], [("y", (4, 8, 16))],
                                  {"w": np.full((16, 16), 0.01, np.float32)}))
    a = analyze(p, TrainConfig(loss="mse", batch_size=4), profile="torch")
    bufs = {b.name: b for b in a.buffers.buffers}
    assert bufs["#1 " + op + " (f):tmp"].size == TORCH_TMP[op] * 4 * 8 * 16 * 4
    assert "h:grad" in bufs and bufs["h:grad"].size == 4 * 8 * 16 * 4
    kept = "y" if op == "Tan" else "h"  # tan's backward reads its result, the others their input
    bwd = next(s.index for s in a.buffers.steps if s.kind != "forward" and s.label.endswith("(f)"))
    assert bufs[kept].last >= bwd
