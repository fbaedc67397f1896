"""passes/cost.py: a weight product (conv, matmul families) is charged for its weight gradient only
when the step computes it (`--train biases`, frozen weights), on the real sample models."""
import pathlib

import pytest

from memplan_cli.config import TrainConfig
from memplan_cli.loaders import load_model
from memplan_cli.passes.cost import op_flops, step_flops
from memplan_cli.passes.pipeline import build_training_graph

ROOT = pathlib.Path(__file__).parents[2]


@pytest.mark.parametrize("model", ["mnist.circle", "mobilenetv2.circle"])
def test_bias_only_is_not_charged_for_weight_gradients(model):
    g = load_model(str(ROOT / "sample_models" / model), batch_size=2)
    full = step_flops(build_training_graph(g, TrainConfig(batch_size=2)))
    tg = build_training_graph(g, TrainConfig(batch_size=2, train=("biases",)))
    biases = step_flops(tg)
    products = 0
    for k, row in biases.ops.items():
        op = tg.graph.operations[k]
        if op.type not in ("Conv2D", "DepthwiseConv2D", "FullyConnected") or not row.backward:
            continue
        f, b = op_flops(op, tg.graph.operands)
        assert op.inputs[1] not in tg.grad
        assert row.backward == f  # dX alone: what the forward costs, not 2 x
        assert full.ops[k].backward == b
        products += 1
    assert products >= 2
    assert biases.total < full.total
