"""ops/grid_sample.py: ONNX GridSample (bilinear, zeros; RAFT's correlation lookups): forward against
onnx's reference, both gradients by finite differences, what backward keeps, verify, the torch facts."""
import numpy as np
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from memplan_cli.loaders import load_model
from tests.ops.gradcheck import check_gradients, check_verify, onnx_model, run_forward, save, training_graph

X, G = (2, 3, 5, 4), (2, 3, 6, 2)


def _model(align, detached=False):
    # x -> Add(p) -> GridSample(., grid) -> Mul(r) -> y with grid = Tanh(g + q): p's gradient flows
    # through dX, q's through dgrid; `detached`: the grid is a model input (no gradient, as RAFT's
    # detached coordinates)
    grid = "g" if detached else "t"
    nodes = [helper.make_node("Add", ["x", "p"], ["a"]),
             helper.make_node("GridSample", ["a", grid], ["s"], mode="bilinear", padding_mode="zeros",
                              align_corners=align),
             helper.make_node("Mul", ["s", "r"], ["y"])]
    if not detached:
        nodes[1:1] = [helper.make_node("Add", ["g", "q"], ["u"]), helper.make_node("Tanh", ["u"], ["t"])]
    rng = np.random.default_rng(align)
    inits = {"p": rng.normal(size=(1, 3, 5, 4)).astype(np.float32),
             "r": np.linspace(0.5, 2, 3).reshape(1, 3, 1, 1).astype(np.float32)}
    if not detached:
        inits["q"] = rng.uniform(-0.3, 0.3, size=(1, 3, 6, 2)).astype(np.float32)
    return onnx_model(nodes, [("x", X), ("g", G)], [("y", (2, 3, 3, 6))], inits)


@pytest.mark.parametrize("align", [0, 1])
def test_forward_matches_the_onnx_reference(tmp_path, align):
    rng = np.random.default_rng(7 + align)
    xv = rng.normal(size=X)
    gv = rng.uniform(-1.2, 1.2, size=G)  # some points outside: zeros padding
    # opset 20 names the mode "linear" (what onnx's reference implements)
    node = helper.make_node("GridSample", ["x", "g"], ["y"], mode="linear", padding_mode="zeros",
                            align_corners=align)
    ref = ReferenceEvaluator(onnx_model([node], [("x", X), ("g", G)], [("y", (2, 3, 3, 6))], {}, opset=20))
    want = ref.run(None, {"x": xv.astype(np.float32), "g": gv.astype(np.float32)})[0]
    op = next(o for o in load_model(save(tmp_path, _model(align))).operations if o.type == "GridSample")
    got = run_forward(op, [xv, gv], [(2, 3, 3, 6)])[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("align", [0, 1])
def test_gradients_of_input_and_grid_keep_both_and_verify(tmp_path, align):
    p = save(tmp_path, _model(align))
    tg = training_graph(p)
    k = next(o.index for o in tg.graph.operations if o.type == "GridSample")
    assert sorted(tg.graph.operands[i].name for i in tg.rules[k].kept_forward()) == ["a", "t"]
    assert check_gradients(p) >= 20
    check_verify(p, "-b", "2")
    check_verify(p, "-b", "2", "-O", "adam")


def test_other_modes_are_refused_at_load(tmp_path):
    from click.testing import CliRunner

    from memplan_cli.cli import main

    m = _model(0)
    m.graph.node[3].attribute[1].s = b"border"  # padding_mode
    path = save(tmp_path, m)
    r = CliRunner().invoke(main, ["analyze", path])
    assert r.exit_code == 2 and "GridSample" in r.stderr and "border" in r.stderr


@pytest.mark.parametrize("detached", [False, True])
def test_torch_grid_gradient_is_made_whether_needed_or_not(tmp_path, detached):
    # grid_sampler_2d_backward_cpu: grad_grid = empty_like(grid) always; where the grid needs no
    # gradient it is a temporary of the backward, where it does it is the grid's gradient itself
    from memplan_cli.analysis import analyze
    from memplan_cli.config import TrainConfig

    a = analyze(save(tmp_path, _model(0, detached)), TrainConfig(loss="mse"), profile="torch")
    col = next(v for k, v in a.extras["per_layer_extra"].items() if k.split()[1] == "GridSample")
    assert col["bwd_mem_tmp"] == (2 * 3 * 6 * 2 * 4 if detached else 0)
