"""Models onert 0.1.0 cannot train, through the CLI: one line and exit 2 with `--profile onert`; with the
default profile the report still comes, and its onert column says n/a and why. No runtime needed
(test_against_runtime.py checks that onert really refuses each of them)."""
import json

import pytest
from click.testing import CliRunner

from memplan_cli.cli import main
from devtools import zoo

# model -> words of memplan's reason
REASONS = {
    "tanh_op": "onert cannot train op #1 Tanh: Tanh has no kernel",
    "sigmoid_op": "onert cannot train op #2 Sigmoid",
    "concat": "onert cannot train op #2 Concat",
    "fc_tanh": "fused activation TANH",
    "duplicate_input": "onert cannot train op #1 Add: it reads the same tensor twice",
}


def run(*args):
    r = CliRunner().invoke(main, ["analyze", *args], catch_exceptions=False, env={"NO_COLOR": "1"})
    return r.exit_code, r.stdout, r.stderr


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("untrainable")
    return {name: fn().save(str(d / f"{name}.circle")) for name, fn in zoo.UNTRAINABLE.items()}


def test_every_untrainable_model_has_a_reason():
    assert set(REASONS) == set(zoo.UNTRAINABLE)


@pytest.mark.parametrize("name", sorted(REASONS))
def test_onert_profile_one_line_exit_2(models, name):
    code, out, err = run(models[name], "--profile", "onert")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, (code, out, err)
    assert models[name] in lines[0] and REASONS[name] in lines[0] and "Traceback" not in err + out


@pytest.mark.parametrize("name", sorted(REASONS))
def test_default_profile_reports_onert_na_with_the_reason(models, name):
    code, out, err = run(models[name], "-f", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["onert"]["available"] is False and REASONS[name] in doc["onert"]["reason"]
    code, out, err = run(models[name])
    assert code == 0, err
    na = [ln for ln in out.splitlines() if ln.startswith("onert: n/a (")]
    assert len(na) == 1 and REASONS[name] in na[0]


def test_untrainable_op_outside_the_backward_region_still_fails_onert():
    """onert 0.1.0 puts every op on its train backend, so a Tanh before the trained ops fails too;
    a fused TANH outside the backward region as well (its forward kernel rejects it)."""
    from memplan_cli.config import TrainConfig
    from memplan_cli.errors import UnsupportedOpError
    from memplan_cli.profiles.onert import PROFILE
    from devtools.modelgen import to_graph

    for name in ("tanh_op", "fc_tanh"):
        with pytest.raises(UnsupportedOpError):
            PROFILE.build(to_graph(zoo.UNTRAINABLE[name]()), TrainConfig(trainable=1))


def test_duplicate_input_before_the_trained_ops_is_fine():
    """The duplicate-input check is TensorPlanner's, over the essential backward order only."""
    from memplan_cli.config import TrainConfig
    from memplan_cli.profiles.onert import predict_alloc_lines
    from devtools.modelgen import to_graph

    g = to_graph(zoo.duplicate_input(), 2)
    assert predict_alloc_lines(g, TrainConfig(batch_size=2, trainable=1))  # FC only: Add stays frozen
