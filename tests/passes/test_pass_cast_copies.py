"""cast-copies on its own: what a mixed-precision step casts."""
from memplan_cli.config import TrainConfig
from memplan_cli.passes.infra import run_checked
from tests.passes.graphs import conv_relu_fc, up_to


def test_32_true_changes_nothing():
    tg, p = up_to("cast-copies", conv_relu_fc())
    assert not run_checked(p, tg)


def test_bf16_mixed_casts_the_float32_weights_a_lowered_op_reads():
    tg, p = up_to("cast-copies", conv_relu_fc(), TrainConfig(precision="bf16-mixed"))
    assert run_checked(p, tg)
    fwd = next(s for s in tg.steps if (s.kind, s.op) == ("forward", 3))
    cast = {tg.tensors[src].name: tg.tensors[dst] for src, dst in fwd.casts.items()}
    assert set(cast) >= {"w1"} and cast["w1"].dtype == "bfloat16" and cast["w1"].role == "extra:cast"
    assert all(c.id in fwd.writes for c in cast.values())


def test_16_mixed_adds_the_gradient_scaler_state():
    tg, p = up_to("cast-copies", conv_relu_fc(), TrainConfig(precision="16-mixed"))
    run_checked(p, tg)
    names = {tg.tensors[t].name for t in tg.persistent}
    assert {"grad_scaler:scale", "grad_scaler:growth_tracker"} <= names
