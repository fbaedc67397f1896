"""ops/col2im.py: ONNX Col2Im (torch's F.fold): forward against onnx.reference, gradients by finite
differences, nothing kept for backward, verify; the torch profile's facts; a bad block one line."""
import numpy as np
import pytest
from click.testing import CliRunner
from onnx import helper
from onnx.reference import ReferenceEvaluator

from memplan_cli.analysis import analyze
from memplan_cli.cli import main
from memplan_cli.config import TrainConfig
from memplan_cli.loaders import load_model
from tests.ops.gradcheck import check_gradients, check_verify, onnx_model, run_forward, save, training_graph

# (input shape, image shape, block shape, attributes, output shape)
CASES = [((2, 12, 4), (4, 4), (2, 2), {"strides": [2, 2]}, (2, 3, 4, 4)),       # MobileViTV2's fold
         ((1, 18, 9), (5, 5), (3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}, (1, 2, 5, 5)),
         ((2, 8, 9), (4, 4), (2, 2), {}, (2, 2, 4, 4)),                           # overlapping blocks
         ((1, 8, 4), (5, 5), (2, 2), {"dilations": [2, 2], "strides": [2, 2]}, (1, 2, 5, 5))]


def _model(xs, img, blk, attrs, ys, train=True):
    inits = {"img": np.array(img, np.int64), "blk": np.array(blk, np.int64)}
    node = helper.make_node("Col2Im", ["a" if train else "x", "img", "blk"], ["r" if train else "y"], **attrs)
    if not train:
        return onnx_model([node], [("x", xs)], [("y", ys)], inits, opset=18)
    nodes = [helper.make_node("Add", ["x", "p"], ["a"]), node, helper.make_node("Mul", ["r", "q"], ["y"])]
    inits.update({"p": np.linspace(-1, 1, int(np.prod(xs[1:]))).reshape((1,) + xs[1:]).astype(np.float32),
                  "q": np.linspace(0.5, 2, int(np.prod(ys[1:]))).reshape((1,) + ys[1:]).astype(np.float32)})
    return onnx_model(nodes, [("x", xs)], [("y", ys)], inits, opset=18)


@pytest.mark.parametrize("xs,img,blk,attrs,ys", CASES)
def test_forward_matches_onnx_reference(tmp_path, xs, img, blk, attrs, ys):
    m = _model(xs, img, blk, attrs, ys, train=False)
    xv = np.random.default_rng(0).normal(size=xs).astype(np.float32)
    want = ReferenceEvaluator(m).run(None, {"x": xv})[0]
    op = next(o for o in load_model(save(tmp_path, m)).operations if o.type == "Col2Im")
    np.testing.assert_allclose(run_forward(op, [xv], [ys], xv.dtype)[0], want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("xs,img,blk,attrs,ys", CASES)
def test_gradients_keep_nothing_and_verify(tmp_path, xs, img, blk, attrs, ys):
    p = save(tmp_path, _model(xs, img, blk, attrs, ys))
    tg = training_graph(p)
    k = next(o.index for o in tg.graph.operations if o.type == "Col2Im")
    assert tg.rules[k].kept_forward() == [] and tg.rules[k].calc_derivative is not None
    assert check_gradients(p) >= 20
    check_verify(p, "-b", str(xs[0]))


def test_torch_col2im_makes_its_output_and_its_input_gradient_only(tmp_path):
    # measured (torch 2.14, one thread): F.fold of (4, 512, 16) into (4, 128, 8, 8), 2 x 2 blocks of
    # stride 2: forward the output (131,072 B), backward the input's gradient (131,072 B), nothing else
    p = save(tmp_path, _model((4, 512, 16), (8, 8), (2, 2), {"strides": [2, 2]}, (4, 128, 8, 8)))
    a = analyze(p, TrainConfig(loss="mse", batch_size=4), profile="torch")
    col = next(v for k, v in a.extras["per_layer_extra"].items() if "Col2Im" in k)
    assert (col["fwd_mem_out"], col["fwd_mem_tmp"], col["bwd_mem_out"], col["bwd_mem_tmp"]) == (131072, 0, 131072, 0)
    assert not a.extras["torch"]["coverage"]["estimated"]


def test_bad_block_is_one_line(tmp_path):
    m = onnx_model([helper.make_node("Col2Im", ["x", "img", "blk"], ["y"])], [("x", (1, 8, 5))],
                   [("y", (1, 2, 4, 4))], {"img": np.array([4, 4], np.int64), "blk": np.array([2, 2], np.int64)}, opset=18)
    r = CliRunner().invoke(main, ["analyze", save(tmp_path, m)])
    assert r.exit_code == 2 and "Traceback" not in r.output + (r.stderr or "")
