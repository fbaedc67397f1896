"""memplan's executor against the real onert 0.1.0 on the mnist sample: the same first training step
from the model's own weights and the same inputs and labels, inside memplan's plan, gives onert's
loss, onert's updated weights (exported with `train_export_circle`) and onert's second-step loss.

Measured (batch 8, MSE): SGD lr 0.01: loss identical (0.144503), weights within 1.5e-8 (a step moves
them by up to 9.3e-4), second-step loss within 7.5e-9; Adam lr 0.001: loss identical, weights within
1.0e-6 (steps of 1e-3), second-step loss within 7.5e-9. About 2 s per case.
"""
import pathlib

import pytest

from devtools.onert_check import available, compare_with_onert

MNIST = str(pathlib.Path(__file__).parents[2] / "sample_models" / "mnist.circle")

pytestmark = [
    pytest.mark.onert,
    pytest.mark.skipif(not available(), reason="onert 0.1.0 is not installed (pip install -e '.[onert]', "
                                                "cp311 x86-64 only): no runtime to compare against"),
]


@pytest.mark.parametrize("optimizer,lr,weight_tol", [("sgd", 0.01, 1e-7), ("adam", 0.001, 1e-5)])
def test_one_step_matches_onert(optimizer, lr, weight_tol):
    r = compare_with_onert(MNIST, batch=8, optimizer=optimizer, learning_rate=lr, loss="mse")
    mine, theirs = r["loss"]
    assert mine == pytest.approx(theirs, rel=1e-6)
    mine2, theirs2 = r["loss2"]
    assert mine2 == pytest.approx(theirs2, rel=1e-6)
    assert abs(mine2 - mine) > 1e-3  # the second loss does depend on the update
    assert r["export_error"] is None and r["weights"] == 12
    assert r["max_update"] > 50 * weight_tol  # the step moved the weights far more than the tolerance
    assert r["max_weight_diff"] <= weight_tol, r


@pytest.mark.parametrize("optimizer,weight_tol", [("sgd", 1e-7), ("adam", 1e-5)])
def test_residual_projection_in_onerts_plan_matches_onert(tmp_path, optimizer, weight_tol):
    """A projection-shortcut ResNet block (onert's backward order differs from memplan's), run inside
    onert's own plan (WIC) in onert's order: onert's loss and updated weights. Measured (batch 4,
    lr 0.01): first loss identical, weights within 7.5e-9 (SGD) and 1.2e-7 (Adam)."""
    from devtools import zoo

    path = zoo.resnet_projection().save(str(tmp_path / "resnet_projection.circle"))
    r = compare_with_onert(path, batch=4, optimizer=optimizer, learning_rate=0.01, loss="cce", profile="onert")
    assert r["loss"][0] == pytest.approx(r["loss"][1], rel=1e-6)
    assert r["loss2"][0] == pytest.approx(r["loss2"][1], rel=1e-6)
    assert r["export_error"] is None and r["weights"] == 10
    assert r["max_update"] > 50 * weight_tol and r["max_weight_diff"] <= weight_tol, r
