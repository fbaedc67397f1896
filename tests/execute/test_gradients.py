"""The reference kernels as the executor binds them (ops.py: fused activations, ReLU masks, in-place
back-props, onert's transposed copies, argmax buffers, branch accumulation, NCHW) against central
finite differences of the loss, on the tiny graphs of `graphs.py` in float64.

test_kernels.py checks each kernel alone; this checks every gradient and input back-prop a whole
training graph computes, with memplan's rules and with every saving rule off (onert's graph), so a
binding that feeds a kernel the wrong tensor, layout or sign shows up as a wrong gradient.
"""
import numpy as np
import pytest

from memplan_cli.config import TrainConfig
from memplan_cli.execute.executor import _Inputs
from memplan_cli.passes.pipeline import build_training_graph
from memplan_cli.passes.policy import Policy
from tests.execute.graphs import GRAPHS
from tests.execute.helpers import finite_difference_check

H = 1e-6
SAMPLES = 12  # elements checked per tensor (all when smaller)
POLICIES = {"memplan": Policy(), "baseline": Policy.baseline(), "singa": None}


def _singa():
    """SINGA's rules keep a fused ReLU's pre-activation or a float clip mask instead of Y, a standalone
    ReLU's input, both of a pool's tensors: other kernel routes."""
    singa = pytest.importorskip("memplan_cli.profiles.singa")
    return singa.policy(), singa.rules()
# op types each graph exercises in backward (the union must cover every op with a backward rule)
COVERS = {"Conv2D", "DepthwiseConv2D", "MaxPool2D", "AvgPool2D", "Add", "Sub", "Mul", "Div", "Relu", "Relu6",
          "Sigmoid", "Tanh", "Clip", "Softmax", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Pad", "Mean",
          "Concat", "FullyConnected", "MatMul", "Loss"}


def _float64_tg(graph, policy, loss):
    g = GRAPHS[graph]()
    for o in g.operands:
        if o.dtype == "float32":
            o.dtype = "float64"
    if policy == "singa":
        pol, rules = _singa()
        tg = build_training_graph(g, TrainConfig(optimizer="sgd", loss=loss), policy=pol, rules=rules)
    else:
        tg = build_training_graph(g, TrainConfig(optimizer="sgd", loss=loss), policy=POLICIES[policy])
    for t in tg.tensors:  # the loss value and onert's extras are declared float32
        if t.dtype == "float32":
            t.dtype = "float64"
    return tg


def test_the_graphs_cover_every_op_with_a_backward_rule():
    from memplan_cli.passes.rules import default_rules

    seen = {op.type for f in GRAPHS.values() for op in f().operations} | {"Loss"}
    assert COVERS <= seen
    # every rule type is covered, or is an alias the loaders never produce (Gemm, GlobalAveragePool),
    # or belongs to the op registry, whose families test their own gradients (tests/ops/)
    from memplan_cli import ops

    assert set(default_rules()) - seen - set(ops.all_ops()) <= {"Gemm", "GlobalAveragePool"}


@pytest.mark.parametrize("graph", sorted(GRAPHS))
@pytest.mark.parametrize("policy", sorted(POLICIES))
@pytest.mark.parametrize("loss", ["mse", "cce"])
def test_gradients_match_finite_differences(graph, policy, loss):
    tg = _float64_tg(graph, policy, loss)
    src = _Inputs(tg, 0)
    # what backward computes: every weight's gradient, and (onert's graph) the input's and label's back-prop
    targets = [(tg.fwd[o], g) for o, g in tg.grad.items()]
    written = {t for st in tg.steps for t in st.writes}
    targets += [(tg.fwd[o], b) for o, b in tg.bp.items() if tg.fwd[o] in tg.fed and b in written]
    values = {t: src.value(t, np.float64) for t, _ in targets}
    checked = finite_difference_check(tg, values, targets, SAMPLES, H)
    assert len(tg.grad) >= 6 and checked >= 40
    if policy == "baseline":
        assert any(tg.tensors[t].role == "input" for t, _ in targets)
    if policy == "singa" and graph in ("conv", "misc"):
        assert {"extra:relu_input", "extra:clip_mask"} & {t.role for t in tg.tensors}
