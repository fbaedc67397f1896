"""`--profile nntrainer` against the real nntrainer 0.6.0, measured (tests/fixtures/nntrainer, condensed
by devtools/nntrainer_fixtures.py from ../shared/fixtures/nntrainer; its README says how they were
measured): 4 models x batch 1/8/32 x SGD/Adam x memory_optimization on (OptimizedV1) / off
(BasicPlanner) = 48 configurations.

For every configuration and both pools: the planned pool size, and request by request in nntrainer's
token order its role (the name after the layer: `out0:grad`, `helper_idx`, `weight:opt1`, ...; layer
names differ where nntrainer renames: `…/activation_realized`, `cross_softmax0`), bytes, validity and
offset. Every offset is checked: the tie order of nntrainer's std::sort is reproduced in all 96 pools.
"""
import json
import pathlib

import pytest

from memplan_cli.analysis import plan_buffer_list
from memplan_cli.config import TrainConfig
from memplan_cli.loaders import load_model
from memplan_cli.profiles.nntrainer import PROFILE

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "nntrainer"
MODELS = ("mnist_cnn", "mlp", "resnet_small", "bn_cnn")


def _cases():
    for m in MODELS:
        doc = json.loads((FIXTURES / f"{m}.json").read_text())
        for c in doc["configurations"]:
            mode = "opt" if c["memory_optimization"] else "basic"
            yield pytest.param(m, c, id=f"{m}-b{c['batch']}-{c['optimizer']}-{mode}")


def _role(name: str) -> str:
    return name.split(":", 1)[1]


@pytest.mark.parametrize("model,conf", list(_cases()))
def test_pools_equal_the_real_nntrainer(model, conf):
    g = load_model(str(FIXTURES / f"{model}.onnx"), batch_size=conf["batch"])
    # the fixtures' INI: Loss = cross with a softmax output layer
    cfg = TrainConfig(batch_size=conf["batch"], optimizer=conf["optimizer"], loss="cce")
    bl = PROFILE.build(g, cfg, memory_optimization=conf["memory_optimization"])
    assert bl.info["last_order"] == conf["end_order"]
    plans = {p.pool.name: p for p in plan_buffer_list(bl)}
    for pool in ("weight", "tensor"):
        real = conf["pools"][pool]
        p = plans[f"{pool}_pool"]
        assert p.pool.planner == ("nntrainer-v1" if conf["memory_optimization"] else "nntrainer-basic")
        mine = [(_role(b.name), b.size, b.first, b.last + 1, off) for b, off in zip(p.buffers, p.plan.offsets)]
        theirs = [(_role(n), size, lo, hi, off) for n, size, lo, hi, off in real["requests"]]
        assert mine == theirs, pool
        assert p.plan.arena == real["size"], pool


def test_every_fixture_is_here():
    confs = [c for m in MODELS for c in json.loads((FIXTURES / f"{m}.json").read_text())["configurations"]]
    assert len(confs) == 48
    assert {(c["batch"], c["optimizer"], c["memory_optimization"]) for c in confs} == {
        (b, o, m) for b in (1, 8, 32) for o in ("sgd", "adam") for m in (True, False)}


def test_the_condensed_fixtures_are_the_shared_ones():
    """When ../shared is present, the condensed copy still says what the measurements say."""
    shared = pathlib.Path(__file__).resolve().parents[2] / ".." / "shared" / "fixtures" / "nntrainer"
    if not shared.is_dir():
        pytest.skip("../shared/fixtures/nntrainer is not present")
    from devtools.nntrainer_fixtures import condense

    for m in MODELS:
        ours = json.loads((FIXTURES / f"{m}.json").read_text())["configurations"]
        docs = [json.loads(p.read_text()) for p in sorted((shared / m).glob(f"{m}_b*.json"))]
        assert len(docs) == 12
        for d in docs:
            c = condense(d)
            assert c in ours
