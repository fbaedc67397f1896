"""`memplan verify --profile onert` runs onert's plan in onert's own backward order
(TrainableGraph::btopolSortOperations, the profile's `info["backward_order"]`), so that it checks
the lifetimes onert planned for, and branch contributions accumulate in onert's order.

The model: a ResNet block whose Add reads the projection conv (built after the main branch) first;
onert runs backward `Add, main branch, projection` where memplan's reverse topological order runs
`Add, projection, main branch`, and onert's plan shares bytes between back-props that only the
latter keeps live at once.
"""
import json

import numpy as np
import pytest
from click.testing import CliRunner

from devtools import zoo
from memplan_cli.analysis import analyze_graph
from memplan_cli.cli import main
from memplan_cli.config import TrainConfig
from memplan_cli.verification import verify_analysis
from memplan_cli.loaders import load_model


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return zoo.resnet_projection().save(str(tmp_path_factory.mktemp("resnet") / "resnet_projection.circle"))


def onert_analysis(path, batch, planner, optimizer="adam"):
    cfg = TrainConfig(batch_size=batch, optimizer=optimizer, loss="cce")
    return analyze_graph(load_model(path, batch_size=batch), cfg, profile="onert",
                         profile_options={"planner": planner}, path=path)


@pytest.mark.parametrize("planner", ["wic", "firstfit"])
@pytest.mark.parametrize("batch", [1, 2, 4])
def test_verify_passes_in_onerts_backward_order(model, planner, batch):
    r = CliRunner().invoke(main, ["verify", model, "-p", "onert", "--planner", planner, "-b", str(batch),
                                  "-O", "adam", "-l", "cce", "-f", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["passed"] and doc["max_difference"] == 0 and doc["weights_updated"] > 0


def test_backward_steps_follow_onerts_order(model):
    from memplan_cli.verification import onert_map

    a = onert_analysis(model, 2, "wic")
    order = a.buffers.info["backward_order"]
    tg = onert_map.onert_training_graph(a.graph, a.config, order)
    ran = list(dict.fromkeys(s.op for s in tg.steps if s.kind != "forward"))
    assert ran == [k for k in order if k in tg.backward_ops]
    # the model is one where the two orders differ: the Add's first input (the projection, op 3)
    # runs backward after the main branch (ops 2, 1)
    rev = [k for k in reversed(tg.order) if k in tg.backward_ops]
    assert ran != rev and ran.index(3) > ran.index(1)


@pytest.mark.parametrize("planner", ["wic", "firstfit"])
def test_memplans_own_order_breaks_onerts_plan(model, planner):
    """The same plan replayed in memplan's reverse topological order fails: the model discriminates."""
    a = onert_analysis(model, 4, planner)
    ok = verify_analysis(a, model)
    assert ok.result.passed
    a.buffers.info.pop("backward_order")
    bad = verify_analysis(a, model)
    assert not bad.result.passed and bad.result.conflicts


def test_an_export_that_writes_nothing_is_retried(monkeypatch, tmp_path):
    """onert 0.1.0 silently writes no trained model in ~2 % of processes: the child runs again."""
    import shutil

    from devtools import onert_check

    mnist = str(__import__("pathlib").Path(__file__).parents[2] / "sample_models" / "mnist.circle")
    calls = []

    def child(args, cwd, python, timeout):
        calls.append(args[2])
        if len(calls) >= 3:  # the third process writes its model
            shutil.copy(mnist, args[2] + "/trained.circle")
        return {"losses": [[0.5], [0.4]], "exported": len(calls) >= 3}

    monkeypatch.setattr(onert_check, "_run_child", child)
    x, y = np.zeros((1, 2), np.float32), np.zeros((1, 2), np.float32)
    r = onert_check.run_onert_steps(mnist, [x], [y])
    assert r["attempts"] == 3 and r["export_error"] is None and r["weights"]
    assert len(set(calls)) == 3  # a fresh output directory each time

    calls.clear()
    monkeypatch.setattr(onert_check, "_run_child", lambda *a: calls.append(1) or {"losses": [[0.5], [0.4]],
                                                                                  "exported": False})
    r = onert_check.run_onert_steps(mnist, [x], [y], attempts=2)
    assert len(calls) == 2 and r["weights"] is None and "2 attempts" in r["export_error"]
