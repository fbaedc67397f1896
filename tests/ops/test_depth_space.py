"""ops/depth_space.py: ONNX DepthToSpace (DCR, CRD) / SpaceToDepth and TFLite DEPTH_TO_SPACE /
SPACE_TO_DEPTH: forward against onnx.reference and TF's definition, gradients by finite differences,
nothing kept for backward, verify."""
import numpy as np
import pytest
from click.testing import CliRunner
from onnx import helper
from onnx.reference import ReferenceEvaluator

from devtools.modelgen import ModelBuilder
from memplan_cli.cli import main
from memplan_cli.loaders import load_model
from tests.ops.gradcheck import check_gradients, check_verify, onnx_model, run_forward, save, training_graph


CASES = [("DepthToSpace", {"mode": "DCR"}, (2, 8, 2, 3), (2, 2, 4, 6)),
         ("DepthToSpace", {"mode": "CRD"}, (2, 8, 2, 3), (2, 2, 4, 6)),
         ("SpaceToDepth", {}, (2, 2, 4, 6), (2, 8, 2, 3))]


def _model(t, attrs, xs, ys, train=True):
    node = helper.make_node(t, ["a" if train else "x"], ["r" if train else "y"], blocksize=2, **attrs)
    if not train:
        return onnx_model([node], [("x", xs)], [("y", ys)], {})
    nodes = [helper.make_node("Add", ["x", "p"], ["a"]), node, helper.make_node("Mul", ["r", "q"], ["y"])]
    inits = {"p": np.linspace(-1, 1, int(np.prod(xs[1:]))).reshape((1,) + xs[1:]).astype(np.float32),
             "q": np.linspace(0.5, 2, int(np.prod(ys[1:]))).reshape((1,) + ys[1:]).astype(np.float32)}
    return onnx_model(nodes, [("x", xs)], [("y", ys)], inits)


@pytest.mark.parametrize("t,attrs,xs,ys", CASES)
def test_forward_matches_onnx_reference(tmp_path, t, attrs, xs, ys):
    m = _model(t, attrs, xs, ys, train=False)
    xv = np.random.default_rng(0).normal(size=xs).astype(np.float32)
    want = ReferenceEvaluator(m).run(None, {"x": xv})[0]
    op = next(o for o in load_model(save(tmp_path, m)).operations if o.type == t)
    np.testing.assert_array_equal(run_forward(op, [xv], [ys], xv.dtype)[0], want)


@pytest.mark.parametrize("t,attrs,xs,ys", CASES)
def test_gradients_keep_nothing_and_verify(tmp_path, t, attrs, xs, ys):
    p = save(tmp_path, _model(t, attrs, xs, ys))
    tg = training_graph(p)
    k = next(o.index for o in tg.graph.operations if o.type == t)
    assert tg.rules[k].kept_forward() == [] and tg.rules[k].calc_derivative is not None
    assert check_gradients(p) >= 20
    check_verify(p, "-b", "2")


def test_bad_block_is_one_line(tmp_path):
    m = onnx_model([helper.make_node("DepthToSpace", ["x"], ["y"], blocksize=3)], [("x", (1, 8, 2, 2))],
                   [("y", (1, 8, 2, 2))], {})
    r = CliRunner().invoke(main, ["analyze", save(tmp_path, m)])
    assert r.exit_code == 2 and "Traceback" not in r.output + r.stderr


def _tf_depth_to_space(x, b):
    n, h, w, c = x.shape
    y = np.empty((n, h * b, w * b, c // (b * b)), x.dtype)
    for i in range(h * b):
        for j in range(w * b):
            off = ((i % b) * b + (j % b)) * (c // (b * b))
            y[:, i, j, :] = x[:, i // b, j // b, off:off + c // (b * b)]
    return y


@pytest.mark.parametrize("t,code", [("DepthToSpace", 5), ("SpaceToDepth", 26)])
def test_tflite(tmp_path, t, code):
    from circle_schema.v0_10.circle import BuiltinOptions as BO
    from circle_schema.v0_10.circle.DepthToSpaceOptions import DepthToSpaceOptionsT
    from circle_schema.v0_10.circle.SpaceToDepthOptions import SpaceToDepthOptionsT

    m = ModelBuilder(seed=5)
    x = m.input([2, 4, 6, 8])
    h = m.conv2d(x, 8, 3)
    o = (DepthToSpaceOptionsT if t == "DepthToSpace" else SpaceToDepthOptionsT)()
    o.blockSize = 2
    ys = [2, 8, 12, 2] if t == "DepthToSpace" else [2, 2, 3, 32]
    kind = getattr(BO.BuiltinOptions, f"{t}Options")
    y = m._op(code, [h], ys, kind, o)
    m.output(m.fully_connected(m.reshape(y, [2, int(np.prod(ys[1:]))]), 3))
    p = m.save(str(tmp_path / "d.tflite"))
    op = next(o for o in load_model(p).operations if o.type == t)
    xv = np.random.default_rng(2).normal(size=(2, 4, 6, 8))
    got = run_forward(op, [xv], [tuple(ys)], xv.dtype)[0]
    if t == "DepthToSpace":
        np.testing.assert_array_equal(got, _tf_depth_to_space(xv, 2))
    else:  # SPACE_TO_DEPTH is DEPTH_TO_SPACE's inverse
        np.testing.assert_array_equal(_tf_depth_to_space(got, 2), xv)
    assert check_gradients(p) >= 20
    check_verify(p, "-b", "2")
