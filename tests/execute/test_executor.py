"""The plan executor on a hand-built training graph: a good plan passes with the right numbers, and a
shortened lifetime or an offset moved onto a live neighbour fails, naming the step and the buffers."""
import numpy as np
import pytest

from memplan_cli.execute.executor import _Inputs, execute
from tests.execute.helpers import fc_relu_mse, first_fit, with_placement


def _by_name(tg, name):
    return next(t.id for t in tg.tensors if t.name == name)


def test_a_good_plan_passes_and_matches_a_hand_computed_step():
    tg = fc_relu_mse()
    lay = first_fit(tg)
    # the placement reuses memory (it is a real plan, not one buffer per tensor)
    assert lay.arenas["arena"] < sum(p.size for p in lay.placements.values())
    res = execute(tg, lay, optimizer="sgd", learning_rate=0.1)
    assert res.passed, res.message
    assert res.max_diff == 0.0
    assert res.weights_updated == 2

    # the same SGD step by hand, from the same seeded inputs
    src = _Inputs(tg, 0)
    val = {n: src.value(_by_name(tg, n), np.float32).astype(np.float64) for n in ("x", "w", "b", "label")}
    y = np.maximum(val["x"] @ val["w"].T + val["b"], 0)
    loss = ((y - val["label"]) ** 2).mean()
    assert res.loss[0] == pytest.approx(loss, rel=1e-5)
    assert res.loss[0] == res.loss[1]


@pytest.mark.parametrize("opt", ["sgd", "momentum", "adam"])
def test_updated_weights_are_the_hand_computed_ones(opt):
    tg = fc_relu_mse(optimizer=opt)
    res = execute(tg, first_fit(tg), optimizer=opt, learning_rate=0.01)
    assert res.passed, res.message
    src = _Inputs(tg, 0)
    val = {n: src.value(_by_name(tg, n), np.float32).astype(np.float64) for n in ("x", "w", "b", "label")}
    y = np.maximum(val["x"] @ val["w"].T + val["b"], 0)
    dz = 2 * (y - val["label"]) / y.size * (y > 0)
    g = dz.T @ val["x"]
    if opt == "adam":  # first Adam step in onert's (ApplyAdam) form: lr * g / (|g| + eps / sqrt(1 - beta2))
        want = val["w"] - 0.01 * g / (np.abs(g) + 1e-7 / np.sqrt(0.001))
    else:  # sgd, and momentum from zero velocity: one plain step
        want = val["w"] - 0.01 * g
    np.testing.assert_allclose(res.updated["w"], want, rtol=1e-4, atol=1e-6)


def test_a_missing_declared_read_is_reported_as_an_inconsistent_graph():
    tg = fc_relu_mse()
    tg.steps[3].reads.remove(_by_name(tg, "x"))
    res = execute(tg, first_fit(tg))
    assert not res.passed and res.failed_step == 3
    assert "does not declare" in res.message and "x" in res.message


def test_a_shortened_lifetime_fails_at_the_step_that_reads_the_buffer():
    tg = fc_relu_mse()
    lay = first_fit(tg)
    y = tg.root(_by_name(tg, "y"))
    p = lay.placements[y]
    assert (p.first, p.last) == (0, 3)
    res = execute(tg, with_placement(lay, y, last=2))
    assert not res.passed
    assert res.failed_step == 3
    assert "step 3 (calcGradient of #0 FullyConnected)" in res.message and "y" in res.buffers
    assert "not live at step 3" in res.message


def test_a_shortened_lifetime_shows_in_the_data_without_the_liveness_check():
    """Poisoning: when the plan frees y after step 2, its bytes become NaN, and the next read fails."""
    tg = fc_relu_mse()
    lay = first_fit(tg)
    y = tg.root(_by_name(tg, "y"))
    res = execute(tg, with_placement(lay, y, last=2), check_live=False)
    assert not res.passed and res.failed_step == 3
    assert "reads y, which no longer holds what step 0 wrote" in res.message
    assert "lifetime 0..2 does not cover step 3" in res.message


def test_an_offset_moved_onto_a_live_neighbour_fails_naming_both_buffers():
    tg = fc_relu_mse()
    lay = first_fit(tg)
    x, y = tg.root(_by_name(tg, "x")), tg.root(_by_name(tg, "y"))
    # x is live over 0..3 (dW reads it at step 3); y over 0..3 too: put y on top of x
    px = lay.placements[x]
    bad = with_placement(lay, y, offset=px.offset)
    res = execute(tg, bad)
    assert not res.passed
    assert set(res.buffers) >= {"x", "y"}, res.buffers
    assert f"step {res.failed_step}" in res.message and "overwritten by" in res.message


def test_every_single_fault_in_a_small_plan_is_caught():
    """Shorten each non-persistent buffer by one step, one at a time: every one fails."""
    tg = fc_relu_mse()
    lay = first_fit(tg)
    checked = 0
    for r, p in lay.placements.items():
        if r in tg.persistent or p.last == p.first:
            continue
        for live in (True, False):
            res = execute(tg, with_placement(lay, r, last=p.last - 1), check_live=live)
            assert not res.passed, (p.name, live)
            assert p.name in res.buffers, (p.name, res.buffers, res.message)
        checked += 1
    assert checked >= 3


def test_scale_of_reads_ignores_non_floats_and_non_finite():
    """verify's tolerance for what a step writes follows the largest magnitude it computed from (an
    output near zero from cancelling inputs carries their rounding): ints and inf / NaN do not count."""
    import numpy as np

    from memplan_cli.execute.executor import _scale_of

    assert _scale_of([]) == 0.0
    assert _scale_of([np.array([1, 500], np.int64), np.array([-3.0, np.inf, np.nan, 2.0])]) == 3.0
    assert _scale_of([np.zeros((0,), np.float32), np.array([[0.5], [-7.25]], np.float32)]) == 7.25


def test_values_that_overflow_in_the_reference_run_are_unverifiable_not_a_failure(tmp_path):
    """A deep net without normalisation (timm's nf_resnet26 with its weight standardisation folded by
    the exporter) overflows float32 with seeded weights: inf flows on and a later step writes NaN.
    That is no bug in the graph or the plan: verify says it cannot check it, one line, exit 2
    (it printed FAIL, exit 1, blaming a kernel)."""
    import numpy as np
    from click.testing import CliRunner
    from onnx import helper

    from memplan_cli.cli import main
    from tests.ops.gradcheck import onnx_model, save

    # exp(exp(exp(exp(x + p)))) is inf for any x + p > 0.2 (verify seeds values in [0, 1))
    nodes = [helper.make_node("Add", ["x", "p"], ["e0"])]
    nodes += [helper.make_node("Exp", [f"e{k}"], [f"e{k + 1}"]) for k in range(4)]
    nodes.append(helper.make_node("Softmax", ["e4"], ["y"], axis=-1))
    p = save(tmp_path, onnx_model(nodes, [("x", (2, 4))], [("y", (2, 4))], {"p": np.ones((1, 4), np.float32)}))
    r = CliRunner().invoke(main, ["verify", p], env={"NO_COLOR": "1"})
    assert r.exit_code == 2, r.output
    out = r.output.strip()
    assert len(out.splitlines()) == 1 and "reads inf in the reference run" in out and "Softmax" in out
