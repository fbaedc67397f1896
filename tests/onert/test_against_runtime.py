"""memplan's onert profile against the real onert 0.1.0: every ALLOC line, byte for byte.

Runs onert in a child interpreter (this one's) when `onert` is importable, else skips with the
reason. The full matrix (mnist, MobileNetV2, every batch/optimizer/planner/cut, the zoo at six
configurations each) is benchmarks/onert_match.py; this is a representative subset that stays
within seconds.
"""
import os

import pytest

from memplan_cli.config import TrainConfig
from memplan_cli.errors import UnsupportedOpError
from memplan_cli.profiles.onert import predict_alloc_lines, tensorplan
from devtools.onert_runtime import available, run_onert
from memplan_cli.profiles.onert.trainir import build_train_ir
from devtools import zoo
from devtools.modelgen import to_graph

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "sample_models")

pytestmark = [
    pytest.mark.onert,
    pytest.mark.skipif(not available(), reason="onert 0.1.0 is not installed (pip install -e '.[onert]', "
                                                "cp311 x86-64 only): no runtime to compare against"),
]

# (model, batch, optimizer, trainable ops (-1 all), planner)
ZOO_CASES = [
    ("tiny_cnn", 3, "adam", -1, "wic"), ("tiny_cnn", 2, "sgd", 2, "firstfit"),
    ("depthwise", 2, "sgd", -1, "wic"), ("depthwise", 5, "adam", -1, "firstfit"), ("depthwise", 1, "adam", 2, "bump"),
    ("residual", 2, "adam", -1, "wic"), ("residual", 3, "sgd", -1, "firstfit"), ("residual", 2, "sgd", 5, "bump"),
    ("residual", 1, "adam", 3, "firstfit"),
    ("resnet_projection", 4, "adam", -1, "wic"), ("resnet_projection", 2, "sgd", -1, "firstfit"),
    ("elementwise", 2, "sgd", -1, "bump"), ("elementwise", 5, "adam", 3, "wic"), ("elementwise", 2, "adam", 1, "firstfit"),
    ("two_branches", 2, "adam", -1, "wic"), ("two_branches", 5, "sgd", -1, "firstfit"), ("two_branches", 1, "sgd", 3, "bump"),
    ("pooling", 4, "adam", -1, "firstfit"), ("pooling", 2, "sgd", 4, "wic"),
    ("padded_max_pool", 4, "adam", -1, "wic"), ("padded_max_pool", 3, "sgd", 4, "bump"),
    ("arithmetic", 3, "sgd", -1, "firstfit"), ("arithmetic", 2, "adam", -1, "bump"),
    ("shared_const", 2, "adam", -1, "wic"), ("shared_const", 3, "sgd", -1, "firstfit"),
    ("two_inputs", 2, "sgd", -1, "firstfit"), ("two_inputs", 4, "adam", 2, "wic"),
    ("dead_input", 2, "sgd", -1, "firstfit"),
    ("mobilenet_block", 2, "adam", -1, "wic"), ("mobilenet_block", 3, "sgd", -1, "firstfit"),
    ("mobilenet_block", 1, "sgd", 6, "bump"),
]


def compare(path, graph, batch, optimizer, trainable, planner):
    got = run_onert(path, batch=batch, optimizer=optimizer, trainable_ops=trainable, planner=planner)
    assert got["ok"], f"onert failed: {got['error'] or got['tail']}"
    cfg = TrainConfig(batch_size=batch, optimizer=optimizer, trainable=trainable if trainable >= 0 else "all")
    # stage "compile": what onert allocates, also for models it compiles but cannot train (their
    # refusal is checked against the runtime in test_refusals.py)
    want = predict_alloc_lines(graph, cfg, planner=planner, threads=os.cpu_count(), stage="compile")
    assert want == got["alloc_lines"]
    return got


@pytest.mark.parametrize("name,batch,optimizer,trainable,planner", ZOO_CASES)
def test_zoo_model(tmp_path, name, batch, optimizer, trainable, planner):
    mb = zoo.ZOO[name]()
    path = mb.save(str(tmp_path / f"{name}.circle"))
    compare(path, to_graph(mb, batch), batch, optimizer, trainable, planner)


@pytest.mark.parametrize("name,trainable", [("depthwise", 2), ("branch_orders", 3)])
def test_hash_map_orders(tmp_path, name, trainable):
    """FirstFit with a frozen prefix, where onert's hash-container orders change a capacity:
    depthwise claims y_true' before x' (it used to be a strict xfail: memplan claimed x' first);
    branch_orders plans its forward walk in another topological order than it generates kernels."""
    mb = zoo.ZOO[name]()
    path = mb.save(str(tmp_path / f"{name}.circle"))
    compare(path, to_graph(mb, 2), 2, "sgd", trainable, "firstfit")


def _onert_index(ir, k):
    """onert's operand index for TrainIR operand `k` (tensors keep theirs; inputs become x')."""
    r = ir.replay
    if k in ir.x_inputs:
        return r.permuted[k]
    if k == ir.y_true:
        return r.permuted[r.n_tensors]
    if k == ir.loss_out:
        return r.n_tensors + 1
    return k


@pytest.mark.parametrize("name,trainable", [(n, -1) for n in sorted(zoo.ZOO)] + [("branch_orders", 3),
                                                                               ("residual", 3)])
def test_claim_sequences_match_onert_log(tmp_path, name, trainable):
    """Not only the capacities: the order in which onert's planners claim every non-constant,
    back-prop, gradient and disposable tensor (its planner log) is memplan's, operand for operand."""
    mb = zoo.ZOO[name]()
    path = mb.save(str(tmp_path / f"{name}.circle"))
    got = run_onert(path, batch=2, trainable_ops=trainable, planner="firstfit")
    assert got["ok"], got["error"] or got["tail"]
    g = to_graph(mb, 2)
    ops = TrainConfig(trainable=trainable if trainable >= 0 else "all").trainable_ops(len(g.operations))
    ir = build_train_ir(g, ops, stage="compile")
    for cat, plan in (("non-const", tensorplan.plan_nonconst), ("back-prop", tensorplan.plan_backprop),
                      ("gradient", tensorplan.plan_gradient)):
        want = [_onert_index(ir, ev.key) for ev in plan(ir)]
        assert want == got["claims"].get(cat, []), cat
    # disposable back-props are (op, operand); onert logs the operand
    want = [_onert_index(ir, ev.key[1]) for ev in tensorplan.plan_disposable(ir)]
    assert want == got["claims"].get("disposable", [])


@pytest.mark.parametrize("name,onert_says", [
    ("tanh_op", "Tanh operation is not trainable yet"),
    ("sigmoid_op", "Logistic operation is not trainable yet"),
    ("concat", "Concat operation is not trainable yet"),
    ("fc_tanh", "Unsupported fused activation function"),
    ("duplicate_input", "does not support duplicate inputs of an operation"),
])
def test_both_refuse(tmp_path, name, onert_says):
    mb = zoo.UNTRAINABLE[name]()
    path = mb.save(str(tmp_path / f"{name}.circle"))
    with pytest.raises(UnsupportedOpError):
        predict_alloc_lines(to_graph(mb, 2), TrainConfig(batch_size=2))
    got = run_onert(path, batch=2, steps=1)  # fc_tanh compiles; its first training step fails
    assert not got["ok"] and onert_says in (got["error"] or "")


def test_duplicate_input_outside_the_backward_region(tmp_path):
    mb = zoo.duplicate_input()
    path = mb.save(str(tmp_path / "dup.circle"))
    compare(path, to_graph(mb, 2), 2, "sgd", 2, "firstfit")


@pytest.mark.parametrize("batch,optimizer,trainable,planner", [
    (32, "adam", -1, "wic"), (32, "adam", -1, "bump"), (32, "sgd", -1, "firstfit"), (1, "sgd", 2, "firstfit"),
    (32, "adam", 1, "wic"),
])
def test_mnist(batch, optimizer, trainable, planner):
    from memplan_cli.loaders import load_model

    path = os.path.join(ROOT, "mnist.circle")
    compare(path, load_model(path, batch_size=batch), batch, optimizer, trainable, planner)


@pytest.mark.slow
@pytest.mark.parametrize("batch,optimizer,trainable,planner", [(1, "adam", -1, "wic"), (1, "sgd", 10, "firstfit")])
def test_mobilenetv2(batch, optimizer, trainable, planner):
    from memplan_cli.loaders import load_model

    path = os.path.join(ROOT, "mobilenetv2.circle")
    compare(path, load_model(path, batch_size=batch), batch, optimizer, trainable, planner)


@pytest.mark.parametrize("batch,optimizer,planner", [(4, "adam", "wic"), (2, "sgd", "firstfit")])
def test_a_tflite_converter_export(batch, optimizer, planner):
    """A Keras CNN through TFLiteConverter.from_keras_model (tests/fixtures/tflite_converter: Conv2D,
    MaxPool, DepthwiseConv2D + relu6, Conv 1x1, AveragePool, the global pool's MEAN, Dense softmax;
    batch fixed at 1 in the file), re-batched: every ALLOC line equals onert's."""
    from memplan_cli.loaders import load_model

    path = os.path.join(os.path.dirname(__file__), "..", "fixtures", "tflite_converter", "keras_onert_cnn.tflite")
    compare(path, load_model(path, batch_size=batch), batch, optimizer, -1, planner)
