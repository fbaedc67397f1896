"""ops/scatter.py: ONNX ScatterND and ScatterElements (reduction none / add / max / min): forward
against onnx's reference, gradients of data and updates by finite differences, what backward keeps,
verify, refusals."""
import numpy as np
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from memplan_cli.errors import ModelError
from memplan_cli.loaders import load_model
from tests.ops.gradcheck import check_gradients, check_verify, onnx_model, save, training_graph

IDX = np.array([[0, 1], [2, 0]], np.int64)  # two (row, col) slices of a (B, 3, 4) tensor's [b] ...


def _model(reduction="none", idx=IDX):
    # x (2, 3, 4) + p -> a; u (from q) scattered into a at idx over axes 1, 2 of a transposed view
    nodes = [helper.make_node("Add", ["x", "p"], ["a"]),
             helper.make_node("Transpose", ["a"], ["t"], perm=[1, 2, 0]),  # (3, 4, 2)
             helper.make_node("Mul", ["q", "qs"], ["u"]),
             helper.make_node("ScatterND", ["t", "i", "u"], ["s"], reduction=reduction),
             helper.make_node("Transpose", ["s"], ["y"], perm=[2, 0, 1])]
    inits = {"p": np.linspace(-1, 1, 12).reshape(1, 3, 4).astype(np.float32), "i": idx,
             "q": np.linspace(0.5, 2, 4).reshape(2, 2).astype(np.float32),
             "qs": np.ones((2, 2), np.float32)}
    return onnx_model(nodes, [("x", (2, 3, 4))], [("y", (2, 3, 4))], inits, opset=16)


@pytest.mark.parametrize("reduction", ["none", "add", "max", "min"])
def test_forward_matches_onnx_reference(tmp_path, reduction):
    from memplan_cli.ops.scatter import forward

    rng = np.random.default_rng(1)
    data, upd = rng.normal(size=(3, 4, 2)), rng.normal(size=(2, 2))
    node = helper.make_node("ScatterND", ["d", "i", "u"], ["y"], reduction=reduction)
    want = ReferenceEvaluator(node).run(None, {"d": data, "i": IDX, "u": upd})[0]
    g = load_model(save(tmp_path, _model(reduction)))
    op = next(o for o in g.operations if o.type == "ScatterND")
    out = np.zeros_like(data)

    class Ctx:
        attrs = op.attrs

        class tg:
            graph = g

        def __init__(self):
            self.op = op

        def x(self, k):
            return [data, IDX, upd][k]

        def y(self):
            return out

    forward(Ctx())
    np.testing.assert_allclose(out, want)


@pytest.mark.parametrize("reduction", ["none", "add"])
def test_gradients_keep_only_the_indices_and_verify(tmp_path, reduction):
    p = save(tmp_path, _model(reduction))
    tg = training_graph(p)
    k = next(o.index for o in tg.graph.operations if o.type == "ScatterND")
    assert [tg.graph.operands[i].name for i in tg.rules[k].kept_forward()] == ["i"]
    assert check_gradients(p) >= 12 + 4
    check_verify(p, "-b", "2")


@pytest.mark.parametrize("reduction", ["max", "min"])
def test_selecting_reductions_keep_data_updates_and_result_and_verify(tmp_path, reduction):
    # scatter_reduce_backward (amax / amin): which value won needs data, the updates and the result
    p = save(tmp_path, _model(reduction))
    tg = training_graph(p)
    k = next(o.index for o in tg.graph.operations if o.type == "ScatterND")
    assert sorted(tg.graph.operands[i].name for i in tg.rules[k].kept_forward()) == ["i", "s", "t", "u"]
    assert check_gradients(p) >= 12 + 4
    check_verify(p, "-b", "2")


def test_selecting_reduction_splits_the_gradient_among_ties():
    # derivatives.yaml's scatter_reduce_backward: dY is shared evenly by the values equal to the result
    import memplan_cli.ops.scatter as sc

    data, upd, dy = np.array([1.0, 5.0, 2.0]), np.array([5.0, 3.0, 5.0]), np.array([1.0, 1.0, 1.0])
    where = (np.array([1, 2, 1]),)
    y = data.copy()
    np.maximum.at(y, where, upd)  # y = [1, 5, 3]: position 1 won by data and two updates
    dd, du = np.zeros(3), np.zeros(3)

    class Ctx:
        attrs = {"reduction": "max"}
        step = type("S", (), {"kind": "calcDerivative"})

        def dy(self):
            return dy

        def x(self, k):
            return [data, None, upd][k]

        def y(self):
            return y

        def dx(self, k):
            return {0: dd, 2: du}[k]

    sc._scatter_backward(Ctx(), where)
    np.testing.assert_allclose(dd, [1.0, 1 / 3, 0.0])
    np.testing.assert_allclose(du, [1 / 3, 1.0, 1 / 3])


def test_refusals(tmp_path):
    m = _model()
    m.graph.node[3].attribute[0].s = b"mul"
    with pytest.raises(ModelError, match="reduction 'mul'"):
        load_model(save(tmp_path, m, "mul.onnx"))


# ---- ScatterElements -------------------------------------------------------------------------------
EIDX = np.array([[[1, 0, 3]], [[2, 2, 0]]], np.int64)  # (2, 1, 3): one row of positions along axis 1


def _elements_model(reduction="none", idx=EIDX):
    # x (2, 4, 3) + p -> a; u = x[:, :1, :] * q scattered into a along axis 1 (torch select_scatter)
    nodes = [helper.make_node("Add", ["x", "p"], ["a"]),
             helper.make_node("Slice", ["x", "s0", "s1", "ax"], ["xs"]),
             helper.make_node("Mul", ["xs", "q"], ["u"]),
             helper.make_node("ScatterElements", ["a", "i", "u"], ["y"], axis=1, reduction=reduction)]
    inits = {"p": np.linspace(-1, 1, 12).reshape(1, 4, 3).astype(np.float32), "i": idx,
             "q": np.linspace(0.5, 2, 3).reshape(1, 1, 3).astype(np.float32),
             "s0": np.array([0], np.int64), "s1": np.array([1], np.int64), "ax": np.array([1], np.int64)}
    return onnx_model(nodes, [("x", (2, 4, 3))], [("y", (2, 4, 3))], inits, opset=16)


@pytest.mark.parametrize("reduction", ["none", "add", "max", "min"])
def test_scatter_elements_forward_matches_onnx_reference(tmp_path, reduction):
    rng = np.random.default_rng(2)
    data, upd = rng.normal(size=(2, 4, 3)), rng.normal(size=(2, 1, 3))
    node = helper.make_node("ScatterElements", ["d", "i", "u"], ["y"], axis=1, reduction=reduction)
    want = ReferenceEvaluator(node).run(None, {"d": data, "i": EIDX, "u": upd})[0]
    g = load_model(save(tmp_path, _elements_model(reduction)))
    op = next(o for o in g.operations if o.type == "ScatterElements")

    class _Tg:  # the kernel reads the operands' shapes from the training graph (gradcheck.run_forward has none)
        graph = g
    import memplan_cli.ops.scatter as sc

    class Ctx:
        attrs, tg = op.attrs, _Tg

        def x(self, k):
            return [data, EIDX, upd][k]

        def y(self, k=0):
            return out
    Ctx.op = op
    out = np.zeros_like(data)
    sc.elements_forward(Ctx())
    assert np.array_equal(out, want)


@pytest.mark.parametrize("reduction", ["none", "add", "max", "min"])
def test_scatter_elements_gradients_and_verify(tmp_path, reduction):
    p = save(tmp_path, _elements_model(reduction))
    assert check_gradients(p) >= 12
    check_verify(p)


def test_scatter_elements_with_batch_1_indices_rebatches(tmp_path):
    # a batch-1 file: its index constant (1, 1, 3) serves every sample after re-batching
    nodes = [helper.make_node("Slice", ["x", "s0", "s1", "ax"], ["xs"]),
             helper.make_node("Mul", ["xs", "q"], ["u"]),
             helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], axis=1)]
    inits = {"i": EIDX[:1], "q": np.linspace(0.5, 2, 3).reshape(1, 1, 3).astype(np.float32),
             "s0": np.array([0], np.int64), "s1": np.array([1], np.int64), "ax": np.array([1], np.int64)}
    p = save(tmp_path, onnx_model(nodes, [("x", (1, 4, 3))], [("y", (1, 4, 3))], inits, opset=16))
    check_verify(p, "-b", "3")
