"""BatchNormalization: batch statistics (train) and stored ones (frozen), gradients by finite
differences under both modes, verify, what backward keeps, the running-statistics outputs, the
pytorch-converted eval-form models (opset 6), and the --batchnorm flag in the JSON report."""
import os

import numpy as np
import onnx
import pytest
from onnx import helper

from memplan_cli.errors import ModelError
from memplan_cli.loaders import load_model
from tests.execute.helpers import run_backward
from tests.ops.gradcheck import analyze_json, check_gradients, check_verify, onnx_model, save, training_graph

C = 3


def _inits(rng):
    return {"p": rng.normal(size=(C, 4, 4)).astype(np.float32),
            "scale": rng.uniform(0.5, 1.5, C).astype(np.float32), "bias": rng.normal(size=C).astype(np.float32),
            "mean": rng.normal(size=C).astype(np.float32), "var": rng.uniform(0.5, 2, C).astype(np.float32),
            "q": rng.normal(size=(C, 4, 4)).astype(np.float32)}


def _model(opset=15, outputs=("bn",), **attrs):
    # x -> Add(p) -> BN -> Mul(q) -> y: p's gradient flows through BN's calcDerivative
    nodes = [helper.make_node("Add", ["x", "p"], ["a"]),
             helper.make_node("BatchNormalization", ["a", "scale", "bias", "mean", "var"], list(outputs), **attrs),
             helper.make_node("Mul", ["bn", "q"], ["y"])]
    outs = [("y", (2, C, 4, 4))] + [(o, (C,)) for o in outputs[1:]]
    return onnx_model(nodes, [("x", (2, C, 4, 4))], outs, _inits(np.random.default_rng(0)), opset=opset)


def _bn(tg):
    return next(o for o in tg.graph.operations if o.type == "BatchNormalization")


def test_loads_with_epsilon_and_momentum(tmp_path):
    g = load_model(save(tmp_path, _model(epsilon=1e-3, momentum=0.8)))
    op = next(o for o in g.operations if o.type == "BatchNormalization")
    assert op.attrs["epsilon"] == pytest.approx(1e-3) and op.attrs["momentum"] == pytest.approx(0.8)


@pytest.mark.parametrize("mode", ["train", "frozen"])
def test_gradients_and_verify(tmp_path, mode):
    p = save(tmp_path, _model())
    # p, scale, bias and q: 4 weights of 12 samples, under both policies
    assert check_gradients(p, batchnorm=mode) >= 60
    check_verify(p, "-b", "2", "--batchnorm", mode)


def test_train_mode_uses_batch_statistics(tmp_path):
    tg = training_graph(save(tmp_path, _model()))
    mem = run_backward(tg, {}, backward=False)
    v = {t.name: np.asarray(mem.view(t.id)) for t in tg.tensors if t.name in ("bn", "scale", "bias")}
    bn, scale, bias = v["bn"], v["scale"], v["bias"]  # seeded values (memplan never reads weight bytes)
    xhat = (bn - bias.reshape(1, C, 1, 1)) / scale.reshape(1, C, 1, 1)
    np.testing.assert_allclose(xhat.mean(axis=(0, 2, 3)), 0, atol=1e-9)
    np.testing.assert_allclose(xhat.var(axis=(0, 2, 3)), 1, rtol=1e-4)


def test_what_backward_keeps(tmp_path):
    p = save(tmp_path, _model())
    tg = training_graph(p)
    r = tg.rules[_bn(tg).index]
    names = [tg.graph.operands[v].name for v in r.kept_forward()]
    assert set(names) == {"a", "scale"} and [e.what for e in r.extras] == ["bn_mean", "bn_invstd"]
    assert all(e.shape == (C,) for e in r.extras)
    # frozen: an affine op; dX reads the stored variance and scale, X is kept for dscale only
    tg = training_graph(p, batchnorm="frozen")
    r = tg.rules[_bn(tg).index]
    assert not r.extras and "a" in [tg.graph.operands[v].name for v in r.kept_forward()]
    tg = training_graph(p, batchnorm="frozen", trainable=(0, 2))  # BN not selected: nothing trains in it
    r = tg.rules[_bn(tg).index]
    assert r.calc_gradient is None
    assert {tg.graph.operands[v].name for v in r.kept_forward()} == {"scale", "var"}


def test_frozen_trains_only_scale_and_bias(tmp_path):
    p = save(tmp_path, _model())
    tg = training_graph(p, batchnorm="frozen")
    trained = {tg.graph.operands[o].name for o in tg.grad}
    assert {"scale", "bias"} <= trained and not {"mean", "var"} & trained


def test_running_statistics_outputs(tmp_path):
    m = _model(opset=15, outputs=("bn", "rm", "rv"), training_mode=1, momentum=0.75)
    p = save(tmp_path, m)
    tg = training_graph(p)
    mem = run_backward(tg, {}, backward=False)
    i = {t.name: np.asarray(mem.view(t.id)) for t in tg.tensors if t.name in ("a", "rm", "rv", "mean", "var")}
    view = i
    a = view["a"]
    np.testing.assert_allclose(view["rm"], 0.75 * i["mean"] + 0.25 * a.mean(axis=(0, 2, 3)), rtol=1e-6)
    np.testing.assert_allclose(view["rv"], 0.75 * i["var"] + 0.25 * a.var(axis=(0, 2, 3)), rtol=1e-6)
    assert check_gradients(p) >= 60
    check_verify(p, "-b", "2")


def test_spatial_zero_is_refused(tmp_path):
    m = _model(opset=7, spatial=0)
    with pytest.raises(ModelError, match="spatial"):
        load_model(save(tmp_path, m))


def test_parameters_must_be_per_channel(tmp_path):
    m = _model()
    m.graph.initializer[1].CopyFrom(onnx.numpy_helper.from_array(np.ones(C + 1, np.float32), "scale"))
    with pytest.raises(ModelError):
        load_model(save(tmp_path, m))
    from memplan_cli.ops.batchnorm import check

    g = load_model(save(tmp_path, _model(), "ok.onnx"))
    op = next(o for o in g.operations if o.type == "BatchNormalization")
    assert check(op, g.operands) is None
    g.operands[op.inputs[1]].shape = (C + 1,)
    assert "scale" in check(op, g.operands)


def test_pytorch_converted_eval_form():
    base = os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/pytorch-converted")
    for m in ("test_BatchNorm1d_3d_input_eval", "test_BatchNorm2d_eval", "test_BatchNorm2d_momentum_eval",
              "test_BatchNorm3d_eval", "test_BatchNorm3d_momentum_eval"):
        for mode in ("train", "frozen"):
            check_verify(os.path.join(base, m, "model.onnx"), "-O", "sgd", "--batchnorm", mode)


def test_the_report_records_the_mode(tmp_path):
    p = save(tmp_path, _model())
    assert analyze_json(p)["config"]["batchnorm"] == "train"
    train = analyze_json(p, "--batchnorm", "train")
    frozen = analyze_json(p, "--batchnorm", "frozen")
    assert frozen["config"]["batchnorm"] == "frozen" and frozen["config"]["sources"]["batchnorm"] == "flag"
    # frozen BN keeps no per-channel statistics: never more memory than training it
    assert frozen["totals"]["planned"] <= train["totals"]["planned"]


def test_weight_standardization_trains_the_weight_through_batchnorm(tmp_path):
    """timm's ScaledStdConv2d (NFNets): batch_norm over the conv weight itself, W [1, O, fan_in]
    normalised per output channel, then reshaped into the conv's weight. W is a parameter that trains
    through BN (its gradient had been left out: NFNet's gradient bytes were a third of its parameters)."""
    from onnx import helper

    from tests.ops.gradcheck import analyze_json, check_gradients, check_verify, onnx_model, save

    rng = np.random.default_rng(0)
    nodes = [helper.make_node("BatchNormalization", ["w", "gain", "zero", "m", "v"], ["ws"], epsilon=1e-5),
             helper.make_node("Reshape", ["ws", "shape"], ["wk"]),
             helper.make_node("Conv", ["x", "wk", "b"], ["y"], pads=[1, 1, 1, 1])]
    inits = {"w": rng.normal(size=(1, 4, 27)).astype(np.float32),
             "gain": np.linspace(0.1, 0.3, 4).astype(np.float32), "zero": np.zeros(4, np.float32),
             "m": np.zeros(4, np.float32), "v": np.ones(4, np.float32), "shape": np.array([4, 3, 3, 3], np.int64),
             "b": np.zeros(4, np.float32)}
    p = save(tmp_path, onnx_model(nodes, [("x", (2, 3, 5, 5))], [("y", (2, 4, 5, 5))], inits, opset=15))
    grads = analyze_json(p, "-O", "adam")["categories"]["gradient"]["naive"]
    assert grads == 27 * 4 * 4 + 3 * 16  # W (432 B) and gain, zero, b (16 B each): m, v are statistics
    assert check_gradients(p) >= 40
    check_verify(p, "-b", "2")
