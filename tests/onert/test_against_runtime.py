"""memplan's onert profile against the real onert 0.1.0: every ALLOC line, byte for byte.

Runs onert in a child interpreter (this one's) when `onert` is importable, else skips with the
reason. The full matrix (mnist, MobileNetV2, every batch/optimizer/planner/cut) is in
benchmarks/onert_match.py; this is a representative subset that stays within seconds.
"""
import os

import pytest

from memplan_cli.config import TrainConfig
from memplan_cli.profiles.onert import predict_alloc_lines
from memplan_cli.profiles.onert.runtime import available, run_onert
from memplan_cli.testing import zoo
from memplan_cli.testing.modelgen import to_graph

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
    ("elementwise", 2, "sgd", -1, "bump"), ("elementwise", 5, "adam", 3, "wic"), ("elementwise", 2, "adam", 1, "firstfit"),
    ("two_branches", 2, "adam", -1, "wic"), ("two_branches", 5, "sgd", -1, "firstfit"), ("two_branches", 1, "sgd", 3, "bump"),
]


def compare(path, graph, batch, optimizer, trainable, planner):
    got = run_onert(path, batch=batch, optimizer=optimizer, trainable_ops=trainable, planner=planner)
    assert got["ok"], f"onert failed: {got['tail']}"
    cfg = TrainConfig(batch_size=batch, optimizer=optimizer, trainable=trainable if trainable >= 0 else "all")
    want = predict_alloc_lines(graph, cfg, planner=planner, threads=os.cpu_count())
    assert want == got["alloc_lines"]


@pytest.mark.parametrize("name,batch,optimizer,trainable,planner", ZOO_CASES)
def test_zoo_model(tmp_path, name, batch, optimizer, trainable, planner):
    mb = zoo.ZOO[name]()
    path = mb.save(str(tmp_path / f"{name}.circle"))
    compare(path, to_graph(mb, batch), batch, optimizer, trainable, planner)


@pytest.mark.xfail(strict=True, reason="known gap: onert claims x' and y_true' in unordered_map order; "
                                       "memplan claims x' first, which holds for mnist and MobileNetV2 "
                                       "but not this graph (FirstFit with a frozen prefix only)")
def test_claim_order_gap(tmp_path):
    mb = zoo.depthwise()
    path = mb.save(str(tmp_path / "depthwise.circle"))
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
