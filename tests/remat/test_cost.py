"""The FLOPs cost model (passes/cost.py): per-op figures by hand, counting over the steps that run,
honest silence for an op without a figure, and the report's FLOPs (JSON under the schema, --by-layer)."""
import json
import pathlib

import jsonschema
from click.testing import CliRunner

from devtools.modelgen import ModelBuilder, to_graph
from memplan_cli.cli import main
from memplan_cli.config import TrainConfig
from memplan_cli.loaders import load_model
from memplan_cli.passes import cost
from memplan_cli.passes.pipeline import build_training_graph
from memplan_cli.schemas import load_schema

ROOT = pathlib.Path(__file__).parents[2]
MNIST = str(ROOT / "sample_models" / "mnist.circle")
MOBILENET = str(ROOT / "sample_models" / "mobilenetv2.circle")
SCHEMA = load_schema("analysis")


def _small(batch=2):
    mb = ModelBuilder()
    x = mb.input([1, 8, 8, 3])
    y = mb.conv2d(x, 4, 3, activation="RELU")  # SAME: 8x8x4 out
    y = mb.depthwise_conv2d(y, 3)
    y = mb.max_pool(y)  # 4x4x4
    y = mb.reshape(y, [1, 64])
    mb.output(mb.fully_connected(y, 10))
    return to_graph(mb, batch)


def test_per_op_figures_by_hand():
    g = _small()
    conv, dw, pool, reshape, fc = g.operations
    y = 2 * 8 * 8 * 4
    # registry figures (ops/conv.py, ops/pool.py, ops/matmul.py): 3x3x3 multiply-adds per conv output,
    # 3x3 per depthwise output (|W| / channels), one compare per window element, FC with its bias
    assert cost.op_flops(conv, g.operands) == (2 * y * 27, 4 * y * 27)
    assert cost.op_flops(dw, g.operands) == (2 * y * 9, 4 * y * 9)
    assert cost.op_flops(pool, g.operands) == (2 * 4 * 4 * 4 * 4, 2 * 4 * 4 * 4 * 4)
    assert cost.op_flops(fc, g.operands) == (2 * 2 * 64 * 10 + 20, 4 * 2 * 64 * 10 + 20)
    # ops/reshape.py: a view moves no bytes
    assert cost.op_flops(reshape, g.operands) == (0, 0)


def test_every_trainable_registry_op_has_flops():
    from memplan_cli import ops as registry

    missing = [t for t, d in registry.all_ops().items() if d.rule is not None and d.flops is None]
    assert not missing, f"ops with a training rule but no FLOPs figure: {missing}"


def test_step_counts_forward_backward_and_the_optimizer():
    g = _small()
    for opt, per in (("sgd", 2), ("adam", 12)):
        tg = build_training_graph(g, TrainConfig(batch_size=2, optimizer=opt, loss="mse"))
        f = cost.step_flops(tg)
        assert f.available and f.reason == ""
        figs = {k: cost.op_flops(op, g.operands) for k, op in enumerate(tg.graph.operations)}
        assert f.forward == sum(v[0] for v in figs.values())
        assert f.backward == sum(figs[k][1] for k in tg.backward_ops)
        params = sum(tg.tensors[tg.fwd[w]].num_elements for w in tg.grad)
        assert f.optimizer == per * params
        assert f.total == f.forward + f.backward + f.optimizer


def test_a_schedule_that_runs_a_forward_twice_counts_it_twice():
    g = _small()
    tg = build_training_graph(g, TrainConfig(batch_size=2))
    before = cost.step_flops(tg)
    s = tg.steps[1]
    tg.add_step("forward", s.op, s.reads, s.writes)
    after = cost.step_flops(tg)
    assert after.ops[s.op].runs == 2
    assert after.forward - before.forward == cost.op_flops(g.operations[s.op], g.operands)[0]
    assert after.backward == before.backward


def test_mobilenetv2_multiply_adds_match_the_paper():
    # Sandler et al. 2018 (MobileNetV2, Table 3/4): 300M multiply-adds at 224x224, width 1.0
    g = load_model(MOBILENET, batch_size=1)
    macs = 0
    for op in g.operations:
        if op.type in ("Conv2D", "DepthwiseConv2D", "FullyConnected"):
            w = g.operands[op.inputs[1]].num_elements
            out = g.operands[op.outputs[0]]
            macs += out.num_elements * w // out.shape[-1]
    assert 0.98 < macs / 300e6 < 1.03
    tg = build_training_graph(g, TrainConfig(batch_size=1))
    assert cost.step_flops(tg).forward > 2 * macs  # biases and activations on top


def _no_flops(monkeypatch, op_type):
    """Take away an op type's figure (its registry entry's)."""
    from memplan_cli import ops as registry

    monkeypatch.setattr(registry.get(op_type), "flops", None)


def test_an_op_without_figures_withholds_the_step(monkeypatch):
    g = _small()
    _no_flops(monkeypatch, "Reshape")
    tg = build_training_graph(g, TrainConfig(batch_size=2))
    f = cost.step_flops(tg)
    assert not f.available and f.reason == "no FLOPs for op Reshape"
    assert f.total is None and f.forward is None


def _analyze(*args):
    return CliRunner().invoke(main, ["analyze", *args], env={"NO_COLOR": "1"})


def test_json_and_by_layer_carry_the_flops():
    r = _analyze(MNIST, "-b", "4", "-O", "adam", "--by-layer", "-f", "json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    jsonschema.validate(doc, SCHEMA)
    fl = doc["flops"]
    assert fl["available"] and fl["step"] == fl["forward"] + fl["backward"] + fl["optimizer"]
    rows = doc["by_layer"]["rows"]
    assert "fwd_flops" in doc["by_layer"]["columns"]
    assert sum(r["fwd_flops"] for r in rows) == fl["forward"]
    assert sum(r["bwd_flops"] for r in rows) == fl["backward"]
    t = _analyze(MNIST, "-b", "4", "-O", "adam", "--by-layer")
    assert "per layer (FLOPs)" in t.stdout and f"FLOPs per training step: {fl['step']:,d}" in t.stdout


def test_report_says_why_there_are_no_flops(monkeypatch):
    _no_flops(monkeypatch, "Conv2D")
    r = _analyze(MNIST, "-b", "4", "--by-layer", "-f", "json")
    doc = json.loads(r.stdout)
    jsonschema.validate(doc, SCHEMA)
    assert doc["flops"] == {"available": False, "reason": "no FLOPs for op Conv2D"}
    assert "fwd_flops" not in doc["by_layer"]["columns"]
    t = _analyze(MNIST, "-b", "4", "--by-layer")
    assert "FLOPs: n/a (no FLOPs for op Conv2D)" in t.stdout
