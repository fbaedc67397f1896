"""The pipeline on the sample models: hand calculations, branch points, formats, the schedule checker."""
import os

import pytest

from memplan_cli.check.schedule import check_schedule
from memplan_cli.config import TrainConfig
from memplan_cli.loaders import load_model
from memplan_cli.passes.policy import Policy
from memplan_cli.profiles.memplan import PROFILE

SAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "sample_models")


def _load(name, batch):
    path = os.path.join(SAMPLES, name)
    if not os.path.exists(path):
        pytest.skip(f"{name} not generated")
    return load_model(path, batch_size=batch)


def _a16(n):
    return -(-n // 16) * 16


def test_mnist_b32_adam_weight_sums_from_parameter_counts():
    # the Kaggle MNIST CNN's parameter tensors (Keras summary): conv 5x5x1x32 + 32, conv 5x5x32x32 + 32,
    # conv 3x3x32x64 + 64, conv 3x3x64x64 + 64, dense 3136x128 + 128, dense 128x10 + 10 = 484,714
    params = [800, 32, 25600, 32, 18432, 64, 36864, 64, 401408, 128, 1280, 10]
    assert sum(params) == 484714
    float_bytes = sum(_a16(4 * n) for n in params)  # 1,938,864: only the 10-float bias needs padding
    bl = PROFILE.build(_load("mnist.circle", 32), TrainConfig(batch_size=32, optimizer="adam"))
    naive = bl.naive_by_category()
    assert naive["gradient"] == float_bytes
    assert naive["opt-variable"] == 2 * float_bytes
    assert naive["trainable"] == float_bytes + 16  # plus the Reshape's int32[2] shape (8 B -> 16)


def test_mobilenetv2_residual_adds_produce_disposable_contributions():
    g = _load("mobilenetv2.circle", 10)
    bl = PROFILE.build(g, TrainConfig(batch_size=10, optimizer="adam"))
    tg = bl.training_graph
    adds = [op for op in tg.graph.operations if op.type == "Add"]
    assert len(adds) == 10
    disposable = [t for t in tg.tensors if t.category == "disposable"]
    # each residual block's input has two consumers (the expand conv and the Add): the first
    # contribution in backward order goes straight into its back-prop, the other is disposable
    assert len(disposable) == 10
    assert {t.operand for t in disposable} == {op.inputs[0] for op in adds} | {op.inputs[1] for op in adds} & {
        t.operand for t in disposable}
    for t in disposable:
        step = next(s for s in tg.steps if s.kind == "calcDerivative" and s.op == t.op)
        assert (t.id, tg.bp[t.operand], False) in step.accumulate
    # without in-place accumulation every contribution is disposable
    bl2 = PROFILE.build(g, TrainConfig(batch_size=10), accumulate_in_place=False)
    assert sum(1 for t in bl2.training_graph.tensors if t.category == "disposable") == 20


@pytest.mark.parametrize("model,batch", [("mnist", 32), ("mobilenetv2", 10)])
def test_onnx_and_circle_give_the_same_buffers_up_to_explained_differences(model, batch):
    cfg = TrainConfig(batch_size=batch, optimizer="adam")
    # cheap recompute off: ONNX's standalone Clip (ReLU6) can be recomputed in backward, circle's fused
    # one cannot, which is a real difference of the two files (test_cheap_recompute.py)
    c = PROFILE.build(_load(f"{model}.circle", batch), cfg, cheap_recompute=False)
    o = PROFILE.build(_load(f"{model}.onnx", batch), cfg, cheap_recompute=False)
    cb = sorted((b.category, b.size) for b in c.buffers)
    ob = sorted((b.category, b.size) for b in o.buffers)
    # ONNX writes Conv + Relu as two ops; the Relu runs in place over the Conv output and its
    # backward in place over its back-prop, so the buffers are the same, only the steps differ.
    # Naive counts every tensor, so ONNX's has each activation's output and its back-prop more.
    og = o.training_graph
    acts = [og.tensors[t] for t in og.aliases
            if og.tensors[t].role == "activation" and og.graph.operations[og.tensors[t].op].type in ("Relu", "Relu6")]
    assert acts
    act_bytes = sum(_a16(t.nbytes) for t in acts)
    nc, no = c.naive_by_category(), o.naive_by_category()
    assert no["non-const"] - nc["non-const"] == act_bytes
    assert no["back-prop"] - nc["back-prop"] == act_bytes  # each activation's dX has its output's shape
    if model == "mnist":
        assert cb == ob
        return
    # MobileNetV2: the same, except constants: ONNX's Pad amounts are int64[8] (64 B) where circle
    # has int32[4,2] (32 B). (The loader turns Clip(0, 6) into Relu6 without its two scalar bounds.)
    only_c = [x for x in cb if x not in ob or cb.count(x) > ob.count(x)]
    diff = sorted(set(cb) ^ set(ob))
    assert all(cat == "trainable" for cat, _ in diff), diff
    same = ("gradient", "opt-variable", "disposable", "extra")
    assert {k: nc[k] for k in same} == {k: no[k] for k in same}
    assert no["trainable"] - nc["trainable"] == 4 * (64 - 32)
    assert only_c == [("trainable", 32)] * 4


@pytest.mark.parametrize("name,batch", [("mnist.circle", 4), ("mnist.tflite", 4), ("mnist.onnx", 4),
                                        ("mobilenetv2.circle", 2), ("mobilenetv2.tflite", 2),
                                        ("mobilenetv2.onnx", 2)])
@pytest.mark.parametrize("policy", ["memplan", "baseline"])
def test_schedule_checker_passes_on_every_sample(name, batch, policy):
    g = _load(name, batch)
    opts = {} if policy == "memplan" else {k: getattr(Policy.baseline(), k) for k in Policy.names()}
    for opt in ("sgd", "adam"):
        bl = PROFILE.build(g, TrainConfig(batch_size=batch, optimizer=opt), **opts)
        assert check_schedule(bl.training_graph, bl) > len(bl.steps)
