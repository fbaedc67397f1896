"""Where: differentiable branches with broadcasting, a non-differentiable condition, a constant fill
branch; TFLite SELECT_V2; and a small self-attention block (batched MatMul, Transpose, a masked
Softmax) end to end."""
import numpy as np
import pytest
from onnx import TensorProto, helper

from memplan_cli.errors import ModelError
from memplan_cli.loaders import load_model
from devtools.modelgen import ModelBuilder
from tests.ops.gradcheck import analyze_json, check_gradients, check_verify, onnx_model, save, training_graph


def _model(sc=(2, 1, 4), sx=(2, 3, 4), sy=(4,), fill=False):
    # cond from a comparison of the input; both branches are activations (or y a constant fill)
    nodes = [helper.make_node("Greater", ["x", "half"], ["c"]),
             helper.make_node("Add", ["x", "p"], ["a"]),
             helper.make_node("Mul", ["z", "q"], ["b"]),
             helper.make_node("Where", ["c", "a", "fill" if fill else "b"], ["w"]),
             helper.make_node("MatMul", ["w", "m"], ["y"])]
    inits = {"half": np.array(0.5, np.float32), "p": np.ones(sx[-1:], np.float32),
             "q": np.ones(sy, np.float32), "m": np.ones((4, 2), np.float32), "fill": np.array(-3.0, np.float32)}
    if fill:
        del inits["q"]
        nodes.pop(2)
    return onnx_model(nodes, [("x", sc), ("z", sy)] if not fill else [("x", sc)], [("y", (2, 3, 2))], inits)


def test_gradients_and_verify(tmp_path):
    p = save(tmp_path, _model(sc=(2, 3, 4), sx=(2, 3, 4), sy=(4,)))
    assert check_gradients(p) >= 10
    check_verify(p, "-b", "2")


def test_condition_is_not_differentiable_and_is_what_backward_keeps(tmp_path):
    tg = training_graph(save(tmp_path, _model(sc=(2, 3, 4), sx=(2, 3, 4), sy=(4,))))
    g = tg.graph
    k = next(o.index for o in g.operations if o.type == "Where")
    assert [g.operands[v].name for v in tg.rules[k].kept_forward()] == ["c"]
    assert next(o.index for o in g.operands if o.name == "c") not in tg.bp
    assert next(o.index for o in g.operations if o.type == "Greater") not in tg.backward_ops


def test_constant_fill_branch(tmp_path):
    m = _model(sc=(2, 3, 4), fill=True)
    p = save(tmp_path, m)
    assert check_gradients(p) >= 5
    check_verify(p)


def test_shapes_that_do_not_broadcast_are_refused(tmp_path):
    m = _model(sc=(2, 3, 4), sx=(2, 3, 4), sy=(4,))
    m.graph.initializer[2].CopyFrom(helper.make_tensor("q", TensorProto.FLOAT, [3], [1, 1, 1]))
    m.graph.input[1].type.tensor_type.shape.dim[0].dim_value = 3
    with pytest.raises(ModelError):
        load_model(save(tmp_path, m))


def test_tflite_select_v2(tmp_path, monkeypatch):
    from devtools import modelgen

    monkeypatch.setitem(modelgen.TYPE, "bool", 6)  # TensorType.BOOL
    m = ModelBuilder()
    x = m.input([2, 4])
    a = m.add(x, m.const([4]))
    c = m._op(61, [x, m.const([1], value=np.array([0.5], np.float32))], [2, 4], out_dtype="bool")  # GREATER
    w = m._op(123, [c, a, m.const([4])], [2, 4])
    m.output(m.fully_connected(w, 3))
    p = m.save(str(tmp_path / "m.tflite"))
    types = {o.source_type: o.type for o in load_model(p).operations}
    assert types["SELECT_V2"] == "Where" and types["GREATER"] == "Greater"
    assert check_gradients(p) >= 12
    check_verify(p, "-b", "3")


def _attention(S=3, D=4, H=2):
    """x[B,S,D] -> q,k,v (MatMul) -> heads [B,H,S,D/H] -> q.k^T / sqrt(d) -> causal Where -> Softmax
    -> .v -> merge heads -> MatMul."""
    dh = D // H

    def heads(src, dst):
        return [helper.make_node("Reshape", [src, "hs"], [dst + "_r"]),
                helper.make_node("Transpose", [dst + "_r"], [dst], perm=[0, 2, 1, 3])]

    nodes = [helper.make_node("MatMul", ["x", "wq"], ["q0"]), helper.make_node("MatMul", ["x", "wk"], ["k0"]),
             helper.make_node("MatMul", ["x", "wv"], ["v0"])]
    nodes += heads("q0", "q") + heads("k0", "k") + heads("v0", "v")
    nodes += [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
              helper.make_node("MatMul", ["q", "kt"], ["s0"]),
              helper.make_node("Div", ["s0", "scale"], ["s1"]),
              helper.make_node("Where", ["causal", "s1", "neg"], ["s2"]),
              helper.make_node("Softmax", ["s2"], ["pr"], axis=-1),
              helper.make_node("MatMul", ["pr", "v"], ["o0"]),
              helper.make_node("Transpose", ["o0"], ["o1"], perm=[0, 2, 1, 3]),
              helper.make_node("Reshape", ["o1", "ms"], ["o2"]),
              helper.make_node("MatMul", ["o2", "wo"], ["y"])]
    inits = {k: np.ones((D, D), np.float32) for k in ("wq", "wk", "wv", "wo")}
    inits.update(hs=np.array([0, S, H, dh], np.int64), ms=np.array([0, S, D], np.int64),
                 scale=np.array(np.sqrt(dh), np.float32), neg=np.array(-1e4, np.float32),
                 causal=np.tril(np.ones((S, S), bool)))
    m = onnx_model(nodes, [("x", (2, S, D))], [("y", (2, S, D))], inits)
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    m.graph.output[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    return m


def test_self_attention_block(tmp_path):
    p = save(tmp_path, _attention())
    assert check_gradients(p, batch=2) >= 40
    check_verify(p, "-b", "2")
    doc = analyze_json(p, "-b", "4")
    assert doc["totals"]["planned"] > 0
