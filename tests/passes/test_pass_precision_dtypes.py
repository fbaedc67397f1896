"""precision-dtypes on its own: the forward graph's float32 operands under --precision."""
from memplan_cli.config import TrainConfig
from memplan_cli.passes.infra import run_checked
from tests.passes.graphs import conv_relu_fc, up_to


def _dtypes(tg):
    return {o.name: o.dtype for o in tg.graph.operands}


def test_32_true_changes_nothing():
    tg, p = up_to("precision-dtypes", conv_relu_fc())
    before = _dtypes(tg)
    assert not run_checked(p, tg)
    assert _dtypes(tg) == before


def test_bf16_true_retypes_every_float32_operand():
    tg, p = up_to("precision-dtypes", conv_relu_fc(), TrainConfig(precision="bf16-true"))
    assert run_checked(p, tg)
    d = _dtypes(tg)
    assert d["shape"] == "int32" and {v for k, v in d.items() if k != "shape"} == {"bfloat16"}


def test_bf16_mixed_lowers_the_conv_and_fc_outputs_only():
    tg, p = up_to("precision-dtypes", conv_relu_fc(), TrainConfig(precision="bf16-mixed"))
    run_checked(p, tg)
    d = _dtypes(tg)
    assert d["c0"] == d["y"] == "bfloat16"  # autocast's "lower" ops
    assert d["w0"] == d["w1"] == d["x"] == d["label"] == "float32"  # parameters, inputs, labels stay
