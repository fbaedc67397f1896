"""Add, Sub, Mul, Div: broadcasting in both directions (gradients summed over broadcast dims), what
backward keeps, x op x, fused activations from TFLite, finite differences and verify."""
import numpy as np
import pytest
from onnx import helper

from devtools.modelgen import ModelBuilder
from memplan_cli.errors import ModelError
from memplan_cli.loaders import load_model
from memplan_cli.ops.binary import side_grads
from memplan_cli.kernels.common import reduce_to_shape
from tests.ops.gradcheck import check_gradients, check_verify, onnx_model, save, training_graph

ARITH = ["Add", "Sub", "Mul", "Div"]
RNG = np.random.default_rng(3)
# q shifts x (in [0, 1)) to [1, 3): a Div by the activation stays away from 0
FEEDS = {"q": RNG.uniform(1, 2, (1, 4)), "p": RNG.uniform(0.5, 1.5, (3, 1))}


def _model(op, swap=False):
    # a = x + q is (2, 1, 4) and needs a back-prop; p is (3, 1): each side is broadcast along some dim
    ab = ["p", "a"] if swap else ["a", "p"]
    nodes = [helper.make_node("Add", ["x", "q"], ["a"]), helper.make_node(op, ab, ["y"])]
    inits = {"q": np.ones((1, 4), np.float32), "p": np.ones((3, 1), np.float32)}
    return onnx_model(nodes, [("x", (2, 1, 4))], [("y", (2, 3, 4))], inits)


@pytest.mark.parametrize("swap", [False, True])
@pytest.mark.parametrize("op", ARITH)
def test_gradients_broadcast_both_ways_and_verify(tmp_path, op, swap):
    p = save(tmp_path, _model(op, swap))
    assert check_gradients(p, feeds=FEEDS) >= 2 * (3 + 4)
    check_verify(p, "-b", "2")


@pytest.mark.parametrize("op", ARITH)
@pytest.mark.parametrize("shapes", [((2, 3), (2, 3)), ((2, 3, 4), (4,)), ((2, 1, 4), (3, 1)), ((1,), (2, 2))])
def test_side_gradients_match_finite_differences(op, shapes):
    rng = np.random.default_rng(13)
    a = rng.uniform(-1, 1, shapes[0])
    b = rng.uniform(0.5, 2.0, shapes[1])
    r = rng.uniform(-1, 1, np.broadcast_shapes(a.shape, b.shape))
    f = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide}[op]
    ga, gb = side_grads(op, r, (True, True), a, b)
    for v, g in ((a, ga), (b, gb)):
        num = np.zeros_like(v)
        for k in range(v.size):
            old = v.flat[k]
            v.flat[k] = old + 1e-6
            hi = (r * f(a, b)).sum()
            v.flat[k] = old - 1e-6
            lo = (r * f(a, b)).sum()
            v.flat[k] = old
            num.flat[k] = (hi - lo) / 2e-6
        np.testing.assert_allclose(reduce_to_shape(np.asarray(g), v.shape), num, rtol=1e-6, atol=1e-8)


def _kept(tg, op_type):
    k = next(o.index for o in tg.graph.operations if o.type == op_type)
    return sorted(tg.graph.operands[i].name for i in tg.rules[k].kept_forward())


@pytest.mark.parametrize("op,kept", [("Add", []), ("Sub", []), ("Mul", ["s"]), ("Div", ["a", "s"])])
def test_what_backward_keeps_when_only_one_side_needs_a_gradient(tmp_path, op, kept):
    # s is a second graph input: no gradient, so Mul keeps s (for a's side) but never a
    nodes = [helper.make_node("Add", ["x", "q"], ["a"]), helper.make_node(op, ["a", "s"], ["y"])]
    m = onnx_model(nodes, [("x", (2, 4)), ("s", (2, 4))], [("y", (2, 4))], {"q": np.ones((1, 4), np.float32)})
    tg = training_graph(save(tmp_path, m))
    assert _kept(tg, op) == (["s"] if op == "Div" else kept)


def test_add_keeps_both_inputs_under_the_baseline_policy(tmp_path):
    from memplan_cli.passes.policy import Policy

    nodes = [helper.make_node("Add", ["x", "q"], ["a"]), helper.make_node("Sub", ["a", "s"], ["y"])]
    m = onnx_model(nodes, [("x", (2, 4)), ("s", (2, 4))], [("y", (2, 4))], {"q": np.ones((1, 4), np.float32)})
    tg = training_graph(save(tmp_path, m), Policy.baseline())
    assert _kept(tg, "Sub") == ["a", "s"]


@pytest.mark.parametrize("op", ["Mul", "Add", "Div"])
def test_an_operand_with_itself(tmp_path, op):
    nodes = [helper.make_node("Add", ["x", "q"], ["a"]), helper.make_node(op, ["a", "a"], ["y"])]
    m = onnx_model(nodes, [("x", (2, 4))], [("y", (2, 4))], {"q": np.ones((1, 4), np.float32)})
    p = save(tmp_path, m)
    assert check_gradients(p, feeds={"q": FEEDS["q"]}) >= 8
    check_verify(p, "-b", "2")


@pytest.mark.parametrize("act", ["RELU", "RELU6", "TANH", "NONE"])
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
def test_tflite_fused_activation(tmp_path, op, act):
    m = ModelBuilder(seed=2)
    x = m.input([2, 6])
    h = m.fully_connected(x, 6)
    c = m.const([6], value=np.linspace(0.5, 1.5, 6, dtype=np.float32))
    y = getattr(m, op)(h, c, activation=act)
    m.output(m.fully_connected(y, 3))
    p = m.save(str(tmp_path / "m.tflite"))
    g = load_model(p)
    o = next(o for o in g.operations if o.source_type == op.upper())
    assert o.type == op.capitalize() and o.attrs["activation"] == act
    # the constant divisor c (tensor t4) is a weight: seeded near 0 unless fed
    assert check_gradients(p, feeds={"t4": np.linspace(0.5, 1.5, 6)}) >= 12
    check_verify(p, "-b", "2")


def test_flops_count_every_output_element():
    from memplan_cli import ops
    from memplan_cli.ir.graph import Operand, Operation

    operands = [Operand(0, "a", (2, 1, 4)), Operand(1, "b", (3, 1)), Operand(2, "y", (2, 3, 4))]
    for t, back in (("Add", 2), ("Mul", 4), ("Div", 6)):
        f, b = ops.get(t).flops(Operation(0, t, [0, 1], [2], {"activation": "NONE"}), operands)
        assert (f, b) == (24, back * 24)


def test_shapes_that_do_not_broadcast_are_refused():
    # (ONNX shape inference stops such a file first; a circle file has no such check)
    from memplan_cli.opgraph.contract import problems
    from memplan_cli.ir.graph import Operand, Operation

    operands = [Operand(0, "a", (2, 4)), Operand(1, "b", (3, 1)), Operand(2, "y", (2, 4))]
    assert "cannot broadcast (2, 4) and (3, 1)" in problems(Operation(0, "Mul", [0, 1], [2], {}), operands)
    operands[1] = Operand(1, "b", (1, 4))
    assert problems(Operation(0, "Mul", [0, 1], [2], {}), operands) is None
    operands[2] = Operand(2, "y", (3, 4))
    assert "not to its output" in problems(Operation(0, "Mul", [0, 1], [2], {}), operands)


def test_opset6_axis_broadcast_that_numpy_would_pair_differently_is_refused(tmp_path):
    nodes = [helper.make_node("Add", ["x", "q"], ["a"], broadcast=1, axis=1),
             helper.make_node("Relu", ["a"], ["y"])]
    m = onnx_model(nodes, [("x", (2, 3, 4, 4))], [("y", (2, 3, 4, 4))], {"q": np.ones((3,), np.float32)}, opset=6)
    with pytest.raises(ModelError, match="axis 1"):
        load_model(save(tmp_path, m))
    # trailing alignment (axis 3 for a 1-D B) is numpy broadcasting
    next(a for a in m.graph.node[0].attribute if a.name == "axis").i = 3
    m.graph.initializer[0].dims[:] = [4]
    m.graph.initializer[0].raw_data = np.ones((4,), np.float32).tobytes()
    assert any(o.type == "Add" for o in load_model(save(tmp_path, m, "t.onnx")).operations)


# ---- Pow, SquaredDifference, Max, Min ----------------------------------------------------------------
def _pow_model(exponent):
    """x + q (positive) ** exponent; a float exponent is a constant scalar, a name an input of the model."""
    nodes = [helper.make_node("Add", ["x", "q"], ["a"])]
    inits = {"q": np.ones((1, 4), np.float32)}
    if isinstance(exponent, str):
        nodes.append(helper.make_node("Pow", ["a", exponent], ["y"]))
        if exponent == "e":  # a learned exponent
            inits["e"] = np.full((3, 1), 1.5, np.float32)
    else:
        inits["c"] = np.array(exponent, np.float32)
        nodes.append(helper.make_node("Pow", ["a", "c"], ["y"]))
    return onnx_model(nodes, [("x", (2, 1, 4))], [("y", (2, 3, 4) if exponent == "e" else (2, 1, 4))], inits)


@pytest.mark.parametrize("c", [2.0, 0.5, -1.0, 3.0])
def test_pow_by_a_constant_keeps_x_and_does_not_train_the_exponent(tmp_path, c):
    p = save(tmp_path, _pow_model(c))
    g = load_model(p)
    op = next(o for o in g.operations if o.type == "Pow")
    assert op.attrs["exponent"] == c and len(op.inputs) == 1
    tg = training_graph(p)
    assert _kept(tg, "Pow") == ["a"]
    assert sorted(g.operands[o].name for o in tg.grad) == ["q"]
    assert check_gradients(p, feeds={"q": FEEDS["q"]}) >= 4
    if c > 0:  # verify seeds q at random: a negative base has no real power
        check_verify(p, "-b", "2")


def test_pow_with_a_learned_exponent_trains_it(tmp_path):
    p = save(tmp_path, _pow_model("e"))
    tg = training_graph(p)
    assert sorted(tg.graph.operands[o].name for o in tg.grad) == ["e", "q"]
    assert _kept(tg, "Pow") == ["a", "e", "y"]
    assert check_gradients(p, feeds={"q": FEEDS["q"], "e": RNG.uniform(0.5, 2, (3, 1))}) >= 2 * 7


def test_pow_exponent_gradient_is_zero_at_a_zero_base():
    from memplan_cli.ops.binary import SPECS

    x, e = np.array([0.0, 2.0]), np.array([2.0, 2.0])
    y = x ** e
    g = SPECS["Pow"].grads(np.ones(2), [True, True], [x, e], y, {})
    np.testing.assert_allclose(g[1], [0.0, 4 * np.log(2)])
    np.testing.assert_allclose(g[0], [0.0, 4.0])


@pytest.mark.parametrize("op", ["Max", "Min"])
def test_max_min_broadcast_split_ties_and_verify(tmp_path, op):
    p = save(tmp_path, _model(op))
    assert check_gradients(p, feeds=FEEDS) >= 2 * 7
    check_verify(p, "-b", "2")
    from memplan_cli.ops.binary import SPECS

    a, b = np.array([1.0, 2.0, 3.0]), np.array([1.0, 1.0, 4.0])
    ga, gb = SPECS[op].grads(np.ones(3), [True, True], [a, b], None, {})
    assert list(ga) == ([0.5, 1, 0] if op == "Max" else [0.5, 0, 1])
    assert list(gb) == ([0.5, 0, 1] if op == "Max" else [0.5, 1, 0])


def test_three_input_max(tmp_path):
    nodes = [helper.make_node("Add", ["x", "q"], ["a"]), helper.make_node("Max", ["a", "p", "r"], ["y"])]
    inits = {"q": np.ones((1, 4), np.float32), "p": np.ones((3, 1), np.float32), "r": np.ones((4,), np.float32)}
    p = save(tmp_path, onnx_model(nodes, [("x", (2, 1, 4))], [("y", (2, 3, 4))], inits))
    assert check_gradients(p, feeds={**FEEDS, "r": RNG.uniform(0, 3, (4,))}) >= 3 + 4 + 4 + 4


def test_tflite_pow_squared_difference_maximum_minimum(tmp_path):
    m = ModelBuilder(seed=5)
    x = m.input([2, 6])
    h = m.fully_connected(x, 6)
    k = m.fully_connected(x, 6)
    d = m._op(99, [h, k], [2, 6])  # SQUARED_DIFFERENCE
    mx = m._op(55, [d, h], [2, 6])  # MAXIMUM
    mn = m._op(57, [mx, k], [2, 6])  # MINIMUM
    pw = m._op(78, [m.add(mn, m.const([6], value=np.full(6, 2.0, np.float32))),
                    m.const([], value=np.float32(2.0))], [2, 6])  # POW by a constant 2
    m.output(m.fully_connected(pw, 3))
    p = m.save(str(tmp_path / "m.tflite"))
    g = load_model(p)
    assert [o.type for o in g.operations if o.type not in ("FullyConnected", "Add")] == \
        ["SquaredDifference", "Max", "Min", "Pow"]
    assert next(o for o in g.operations if o.type == "Pow").attrs == {"exponent": 2.0}
    tg = training_graph(p)
    assert _kept(tg, "SquaredDifference") == sorted(g.operands[i].name for i in g.operations[2].inputs)
    assert check_gradients(p) >= 24
    check_verify(p, "-b", "2")


@pytest.mark.parametrize("n", [1, 2, 3])
def test_variadic_sum_broadcasts_keeps_nothing_and_verifies(tmp_path, n):
    # ONNX Sum (the zoo's ResNet-50 and ShuffleNet write their residual adds with it)
    ins = ["a", "p", "r"][:n]
    nodes = [helper.make_node("Add", ["x", "q"], ["a"]), helper.make_node("Sum", ins, ["s"]),
             helper.make_node("Mul", ["s", "w"], ["y"])]
    inits = {"q": np.ones((1, 4), np.float32), "p": np.ones((3, 1), np.float32), "r": np.ones((4,), np.float32),
             "w": np.full((1, 4), 0.5, np.float32)}
    inits = {k: v for k, v in inits.items() if k in ("q", "w", *ins)}
    shape = (2, 1, 4) if n == 1 else (2, 3, 4)
    p = save(tmp_path, onnx_model(nodes, [("x", (2, 1, 4))], [("y", shape)], inits))
    tg = training_graph(p)
    assert _kept(tg, "Sum") == []
    feeds = {k: v for k, v in FEEDS.items() if k in ("x", "q", *ins)}
    assert check_gradients(p, feeds=feeds) >= 4 + {1: 0, 2: 3, 3: 7}[n]
    check_verify(p, "-b", "2")


def test_tflite_add_n(tmp_path):
    m = ModelBuilder(seed=3)
    x = m.input([2, 6])
    h, k, j = (m.fully_connected(x, 6) for _ in range(3))
    s = m._op(106, [h, k, j], [2, 6])  # ADD_N
    m.output(m.fully_connected(s, 3))
    p = m.save(str(tmp_path / "n.tflite"))
    assert [o.type for o in load_model(p).operations].count("Sum") == 1
    assert check_gradients(p) >= 24
    check_verify(p, "-b", "2")


@pytest.mark.parametrize("n", [1, 3])
def test_onnx_mean_is_the_elementwise_mean_of_its_inputs(tmp_path, n):
    """ONNX Mean averages its inputs elementwise, broadcasting (it was read as TF Lite's reducing MEAN
    and refused): forward, each side's gradient dY / n with broadcast sides summed back, verify."""
    from memplan_cli.ops.binary import SPECS

    ins = ["a", "p", "r"][:n]
    inits = {"q": np.ones((1, 4), np.float32), "p": np.ones((3, 1), np.float32), "r": np.ones((4,), np.float32)}
    inits = {k: v for k, v in inits.items() if k in ("q", *ins)}
    shape = (2, 1, 4) if n == 1 else (2, 3, 4)
    nodes = [helper.make_node("Add", ["x", "q"], ["a"]), helper.make_node("Mean", ins, ["y"])]
    p = save(tmp_path, onnx_model(nodes, [("x", (2, 1, 4))], [("y", shape)], inits))
    assert [o.type for o in load_model(p).operations] == ["Add", "MeanOf"]
    xs = [RNG.uniform(0, 1, (2, 1, 4)), RNG.uniform(0, 1, (3, 1)), RNG.uniform(0, 1, (4,))][:n]
    want = np.mean(np.stack(np.broadcast_arrays(*xs)), axis=0)  # the ONNX spec's definition
    np.testing.assert_allclose(SPECS["MeanOf"].forward(xs, {}, None), want, rtol=1e-12)
    feeds = {k: v for k, v in FEEDS.items() if k in ("x", "q", *ins)}
    assert check_gradients(p, feeds=feeds) >= 4
    check_verify(p, "-b", "2")


@pytest.mark.parametrize("both", [True, False])
def test_torch_mul_of_two_broadcast_sides_keeps_both_products(tmp_path, both):
    # an outer product a[..., :, None] * b[..., None, :]: MulBackward0 returns both full-size gradients
    # and the engine sums each down after, so both products (2 x 5 x 5 x 4 floats: 800 B each) are alive
    # at once; where b needs no gradient only a's product is made
    from memplan_cli.analysis import analyze_graph
    from memplan_cli.config import TrainConfig

    inits = {"wa": np.full((4, 4), 0.1, np.float32), "wb": np.full((4, 4), 0.1, np.float32)}
    nodes = [helper.make_node("MatMul", ["x", "wa"], ["a0"], name="mma"),
             helper.make_node("MatMul", ["x", "wb"] if both else ["x", "x4"], ["b0"], name="mmb"),
             helper.make_node("Unsqueeze", ["a0", "ax2"], ["a"], name="ua"),
             helper.make_node("Unsqueeze", ["b0", "ax1"], ["b"], name="ub"),
             helper.make_node("Mul", ["a", "b"], ["y"], name="outer")]
    inits.update({"ax2": np.array([2], np.int64), "ax1": np.array([1], np.int64)})
    if not both:
        inits.pop("wb")
        inits["x4"] = np.eye(4, dtype=np.float32)
    p = save(tmp_path, onnx_model(nodes, [("x", (2, 5, 4))], [("y", (2, 5, 5, 4))], inits))
    cfg = TrainConfig(batch_size=2, optimizer="sgd", loss="mse", freeze=() if both else ("params:x4",))
    a = analyze_graph(load_model(p, batch_size=2), cfg, profile="torch")
    outer = next(v for k, v in a.extras["per_layer_extra"].items() if k.endswith("(outer)"))
    assert outer["bwd_mem_tmp"] == (1600 if both else 800)
