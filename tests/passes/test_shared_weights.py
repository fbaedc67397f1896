"""Shared weights: a tied embedding (the table read by a Gather and by the output projection) and
one bias read by two Adds. One gradient per weight, contributions accumulated like branch-point
back-props, the update after every contribution and every backward read of the old value; finite
differences and verify agree."""
import numpy as np
import pytest
from onnx import TensorProto, helper

from memplan_cli.passes.policy import Policy
from tests.ops.gradcheck import check_gradients, check_verify, onnx_model, save, training_graph

IDS = np.array([[0, 2, 0], [4, 1, 3]], np.int64)


def _tied(tmp_path):
    # ids -> Gather(E) -> Add(b) -> Gemm(., E, transB) (the output projection reads the same table)
    # the second Add reuses the bias b
    nodes = [helper.make_node("Gather", ["E", "ids"], ["e"]),
             helper.make_node("Add", ["e", "b"], ["h"]),
             helper.make_node("Reshape", ["h", "rs"], ["h2"]),
             helper.make_node("Gemm", ["h2", "E"], ["logits"], transB=1),
             helper.make_node("Add", ["logits", "b5"], ["y0"]),
             helper.make_node("Reshape", ["h", "rs"], ["h3"]),
             helper.make_node("Add", ["h3", "b"], ["z"]),
             helper.make_node("MatMul", ["z", "w"], ["z2"]),
             helper.make_node("Add", ["y0", "z2"], ["y"])]
    inits = {"E": np.ones((5, 4), np.float32), "b": np.ones((4,), np.float32), "b5": np.ones((5,), np.float32),
             "w": np.ones((4, 5), np.float32), "rs": np.array([6, 4], np.int64)}
    return save(tmp_path, onnx_model(nodes, [("ids", (2, 3), TensorProto.INT64)], [("y", (6, 5))], inits))


def _named(tg, name):
    return next(o.index for o in tg.graph.operands if o.name == name)


@pytest.mark.parametrize("policy", [Policy(), Policy.baseline()])
def test_one_gradient_with_accumulated_contributions(tmp_path, policy):
    tg = training_graph(_tied(tmp_path), policy)
    E, b = _named(tg, "E"), _named(tg, "b")
    assert E in tg.grad and b in tg.grad
    contribs = {w: [t for t in tg.tensors if t.role == "disposable" and t.operand == w] for w in (E, b)}
    want = 1 if policy.accumulate_in_place else 2  # two contributors each
    assert len(contribs[E]) == want and len(contribs[b]) == want
    grads = [s for s in tg.steps if s.kind == "calcGradient" and (
        tg.grad[E] in s.writes or any(d == tg.grad[E] for _, d, _ in s.accumulate))]
    assert len(grads) == 2
    apply = next(s for s in tg.steps if s.kind == "applyGradient" and tg.grad[E] in s.reads)
    assert apply.index > max(s.index for s in grads)
    # the one update of E comes after every backward step that reads E's old value
    readers = [s.index for s in tg.steps if s.kind != "applyGradient" and s.kind != "forward"
               and tg.fwd[E] in s.reads]
    assert apply.index > max(readers)


def test_finite_differences(tmp_path):
    assert check_gradients(_tied(tmp_path), feeds={"ids": IDS}) >= 40


@pytest.mark.parametrize("opt", ["sgd", "adam"])
def test_verify(tmp_path, opt):
    doc = check_verify(_tied(tmp_path), "-O", opt)
    assert doc["weights_updated"] == 4  # E, b, b5, w: each updated once


def test_a_frozen_reader_of_a_trained_weight_reads_it_before_the_update(tmp_path):
    # only the Gather trains: E's update must wait for the Gemm's calcDerivative, which reads E
    tg = training_graph(_tied(tmp_path), trainable=(0,))
    E = _named(tg, "E")
    apply = next(s for s in tg.steps if s.kind == "applyGradient" and tg.grad[E] in s.reads)
    readers = [s.index for s in tg.steps if s.kind == "calcDerivative" and tg.fwd[E] in s.reads]
    assert readers and apply.index > max(readers)


def _kept_parameters(tmp_path):
    """Parameters that reach data-movement ops the constant folding keeps: a tied table read through
    a Transpose, a class token Expanded to the batch and Concatenated, position rows Sliced from a
    table, a bias Reshaped and also used as is."""
    nodes = [helper.make_node("Gather", ["E", "ids"], ["e"]),                       # [2,3,4]
             helper.make_node("Slice", ["wpe", "s0", "s3", "ax0"], ["pos"]),          # [3,4]
             helper.make_node("Add", ["e", "pos"], ["h"]),
             helper.make_node("Expand", ["cls", "cshape"], ["c"]),                    # [2,1,4]
             helper.make_node("Concat", ["c", "h"], ["hc"], axis=1),                  # [2,4,4]
             helper.make_node("Reshape", ["b", "bshape"], ["b3"]),                    # [1,1,4]
             helper.make_node("Add", ["hc", "b3"], ["hb"]),
             helper.make_node("Add", ["hb", "b"], ["hb2"]),
             helper.make_node("Transpose", ["E"], ["Et"], perm=[1, 0]),               # [4,5]
             helper.make_node("MatMul", ["hb2", "Et"], ["y"])]                        # [2,4,5]
    inits = {"E": np.ones((5, 4), np.float32), "wpe": np.ones((6, 4), np.float32), "cls": np.ones((1, 1, 4), np.float32),
             "b": np.ones((4,), np.float32), "s0": np.array([0], np.int64), "s3": np.array([3], np.int64),
             "ax0": np.array([0], np.int64), "cshape": np.array([2, 1, 4], np.int64),
             "bshape": np.array([1, 1, 4], np.int64)}
    return save(tmp_path, onnx_model(nodes, [("ids", (2, 3), TensorProto.INT64)], [("y", (2, 4, 5))], inits))


def test_parameters_train_through_the_data_movement_ops_folding_keeps(tmp_path):
    p = _kept_parameters(tmp_path)
    tg = training_graph(p)
    weights = {tg.graph.operands[w].name: tg.graph.operands[w].shape for w in tg.grad}
    # each float parameter of the file is trained once, with its own shape: nothing folded into a copy
    assert weights == {"E": (5, 4), "wpe": (6, 4), "cls": (1, 1, 4), "b": (4,)}
    assert check_gradients(p, feeds={"ids": IDS}) >= 40
    check_verify(p, "-O", "adam")
