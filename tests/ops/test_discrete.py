"""ops/discrete.py: ArgMax / ArgMin, Floor / Ceil / Round / Sign, integer Mod, OneHot: forward against
onnx.reference, no gradient and nothing kept, verify runs them; a float Mod is refused."""
import numpy as np
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from memplan_cli.cli import main
from memplan_cli.loaders import load_model
from tests.ops.gradcheck import analyze_json, check_gradients, check_verify, onnx_model, run_forward, save, training_graph


@pytest.mark.parametrize("t", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("axis,keepdims,last", [(1, 0, 0), (-1, 1, 0), (1, 0, 1)])
def test_arg_matches_onnx_reference(tmp_path, t, axis, keepdims, last):
    xv = np.random.default_rng(0).integers(0, 3, size=(2, 5, 3)).astype(np.float32)  # ties on purpose
    node = helper.make_node(t, ["x"], ["y"], axis=axis, keepdims=keepdims, select_last_index=last)
    ys = list(xv.shape)
    ys[axis] = 1
    ys = ys if keepdims else [d for k, d in enumerate(xv.shape) if k != axis % 3]
    m = onnx_model([node], [("x", xv.shape)], [("y", ys, TensorProto.INT64)], {})
    want = ReferenceEvaluator(m).run(None, {"x": xv})[0]
    op = next(o for o in load_model(save(tmp_path, m)).operations if o.type == t)
    np.testing.assert_array_equal(run_forward(op, [xv], [want.shape], np.int64)[0], want)


@pytest.mark.parametrize("t", ["Floor", "Ceil", "Round", "Sign"])
def test_rounding_matches_onnx_reference(tmp_path, t):
    xv = np.array([[-2.5, -1.5, -0.5, 0.0, 0.5, 1.5, 2.5, 0.7, -0.2]], np.float32)
    m = onnx_model([helper.make_node(t, ["x"], ["y"])], [("x", xv.shape)], [("y", xv.shape)], {})
    want = ReferenceEvaluator(m).run(None, {"x": xv})[0]
    op = next(o for o in load_model(save(tmp_path, m)).operations if o.type == t)
    np.testing.assert_array_equal(run_forward(op, [xv], [xv.shape], np.float32)[0], want)


@pytest.mark.parametrize("fmod", [0, 1])
def test_integer_mod_matches_onnx_reference(tmp_path, fmod):
    a = np.array([[-7, -3, 0, 3, 7, 8]], np.int64)
    b = np.array([[3, -2, 5, 2, -3, 4]], np.int64)
    m = onnx_model([helper.make_node("Mod", ["a", "b"], ["y"], fmod=fmod)],
                   [("a", a.shape, TensorProto.INT64), ("b", b.shape, TensorProto.INT64)],
                   [("y", a.shape, TensorProto.INT64)], {})
    want = ReferenceEvaluator(m).run(None, {"a": a, "b": b})[0]
    op = next(o for o in load_model(save(tmp_path, m)).operations if o.type == "Mod")
    np.testing.assert_array_equal(run_forward(op, [a, b], [a.shape], np.int64)[0], want)


def test_float_mod_is_refused(tmp_path):
    m = onnx_model([helper.make_node("Mod", ["x", "p"], ["y"], fmod=1)], [("x", (2, 3))], [("y", (2, 3))],
                   {"p": np.full((1, 3), 0.7, np.float32)})
    r = CliRunner().invoke(main, ["analyze", save(tmp_path, m)])
    assert r.exit_code == 2 and "Mod of floats" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def _pooled_head(tmp_path):
    """CLIP's text pooling: the hidden state at each sample's argmax(input_ids), then a projection; plus
    a OneHot of the ids scaled into the loss path (no gradient through either)."""
    nodes = [helper.make_node("Gather", ["emb", "ids"], ["h"]),                      # [B, S, D]
             helper.make_node("ArgMax", ["ids"], ["pos"], axis=-1, keepdims=0),       # [B]
             helper.make_node("Floor", ["h"], ["fl"]),
             helper.make_node("Sign", ["h"], ["sg"]),
             helper.make_node("Add", ["fl", "sg"], ["fs"]),
             helper.make_node("Range", ["zero", "b", "one"], ["rows"]),
             helper.make_node("Mod", ["pos", "s"], ["pm"]),
             helper.make_node("Mul", ["rows", "s"], ["base"]),
             helper.make_node("Add", ["base", "pm"], ["flat_idx"]),
             helper.make_node("Reshape", ["h", "flat"], ["hf"]),                     # [B*S, D]
             helper.make_node("Gather", ["hf", "flat_idx"], ["pooled"]),              # [B, D]
             helper.make_node("OneHot", ["pos", "depth", "vals"], ["oh"]),            # [B, S]
             helper.make_node("MatMul", ["oh", "fsw"], ["ohp"]),                      # [B, D]... via fs
             helper.make_node("MatMul", ["pooled", "w"], ["y0"]),
             helper.make_node("ReduceSum", ["fs", "ax1"], ["fss"], keepdims=0),       # [B, D]
             helper.make_node("Add", ["y0", "fss"], ["y1"]),
             helper.make_node("Add", ["y1", "ohp"], ["y"])]
    inits = {"emb": np.linspace(-1, 1, 40).reshape(10, 4).astype(np.float32),
             "w": np.linspace(0.5, 1.5, 16).reshape(4, 4).astype(np.float32),
             "fsw": np.linspace(0.1, 0.2, 20).reshape(5, 4).astype(np.float32),
             "zero": np.array(0, np.int64), "one": np.array(1, np.int64), "b": np.array(2, np.int64),
             "s": np.array(5, np.int64), "flat": np.array([-1, 4], np.int64), "depth": np.array(5, np.int64),
             "vals": np.array([0, 1], np.float32), "ax1": np.array([1], np.int64)}
    m = onnx_model(nodes, [("ids", (2, 5), TensorProto.INT64)], [("y", (2, 4))], inits)
    return save(tmp_path, m)


def test_no_gradient_nothing_kept_and_verify(tmp_path):
    p = _pooled_head(tmp_path)
    tg = training_graph(p)
    for op in tg.graph.operations:
        if op.type in ("ArgMax", "Floor", "Sign", "Mod", "OneHot"):
            assert tg.rules[op.index].backward_steps() == [], op.type
    # emb trains only through the Gather of the pooled rows (Floor / Sign give it nothing), w and fsw train;
    # OneHot's [off, on] values are not parameters
    doc = analyze_json(p, "-O", "adam")
    assert doc["categories"]["gradient"]["naive"] == (40 + 16 + 20) * 4
    feeds = {"ids": np.array([[1, 7, 3, 7, 2], [9, 0, 4, 4, 1]])}
    assert check_gradients(p, feeds=feeds) >= 12
    check_verify(p, "-b", "2")
