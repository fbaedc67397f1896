"""optimizer-state on its own: 0, 1 or 2 persistent state tensors per trained weight."""
import pytest

from memplan_cli.config import TrainConfig
from memplan_cli.passes.infra import run_checked
from memplan_cli.passes.policy import Policy
from tests.passes.graphs import conv_relu_fc, up_to


@pytest.mark.parametrize("optimizer,suffixes", [("sgd", []), ("momentum", ["m"]), ("adam", ["m", "v"])])
def test_state_per_trained_weight(optimizer, suffixes):
    tg, p = up_to("optimizer-state", conv_relu_fc(), TrainConfig(optimizer=optimizer))
    assert run_checked(p, tg) == bool(suffixes)
    state = sorted(t.name for t in tg.tensors if t.role == "opt-state")
    assert state == sorted(f"{w}:{s}" for w in ("w0", "b0", "w1", "b1") for s in suffixes)
    assert all(t in tg.persistent for ts in tg.opt_state.values() for t in ts)


def test_onert_gives_every_constant_state():
    tg, p = up_to("optimizer-state", conv_relu_fc(), TrainConfig(optimizer="momentum"),
                  policy=Policy(opt_state_all_constants=True))
    run_checked(p, tg)
    assert "shape:m" in {t.name for t in tg.tensors}
