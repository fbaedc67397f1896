"""Cheap recompute: a forward result later ops read in backward is recomputed from what backward keeps
anyway (BatchNorm / LayerNorm output from input and statistics, GELU output from its input), on tiny
hand-built graphs: lifetimes, refusals, finite-difference gradients and verify under both settings."""
import numpy as np
from onnx import helper

from memplan_cli.config import TrainConfig
from memplan_cli.loaders import load_model
from memplan_cli.passes.policy import Policy
from memplan_cli.profiles.memplan import PROFILE
from tests.ops.gradcheck import check_gradients, check_verify, onnx_model, save

RNG = np.random.default_rng(0)
C = 4


def _conv_bn_gelu(tmp_path, batchnorm_inputs=("c", "scale", "bias", "mean", "var")):
    # x -> Conv(w0) -> BN -> Gelu -> Conv(w1) -> y: the Gelu reads BN's output in backward, the second
    # Conv reads the Gelu's output (dW)
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", list(batchnorm_inputs), ["bn"]),
             helper.make_node("Gelu", ["bn"], ["g"]),
             helper.make_node("Conv", ["g", "w1"], ["y"])]
    inits = {"w0": RNG.normal(size=(C, 2, 3, 3)).astype(np.float32),
             "scale": RNG.uniform(0.5, 1.5, C).astype(np.float32), "bias": RNG.normal(size=C).astype(np.float32),
             "mean": np.zeros(C, np.float32), "var": np.ones(C, np.float32),
             "w1": RNG.normal(size=(3, C, 1, 1)).astype(np.float32)}
    m = onnx_model(nodes, [("x", (2, 2, 4, 4))], [("y", (2, 3, 4, 4))], inits, opset=20)
    return save(tmp_path, m)


def _ln_matmul(tmp_path):
    # x -> MatMul(w0) -> LayerNorm -> MatMul(w1) -> y: the second MatMul reads LN's output (dW)
    nodes = [helper.make_node("MatMul", ["x", "w0"], ["h"]),
             helper.make_node("LayerNormalization", ["h", "g", "b"], ["n"], axis=-1),
             helper.make_node("MatMul", ["n", "w1"], ["y"])]
    inits = {"w0": RNG.normal(size=(6, 8)).astype(np.float32), "g": RNG.uniform(0.5, 1.5, 8).astype(np.float32),
             "b": RNG.normal(size=8).astype(np.float32), "w1": RNG.normal(size=(8, 3)).astype(np.float32)}
    return save(tmp_path, onnx_model(nodes, [("x", (2, 5, 6))], [("y", (2, 5, 3))], inits))


def _build(path, **flags):
    return PROFILE.build(load_model(path), TrainConfig(optimizer="sgd"), **flags)


def _first_backward(bl):
    return next(s.index for s in bl.steps if s.kind != "forward")


def _forward_end(bl):
    """The first step after the forward pass: a backward step or a recompute step."""
    return next(s.index for s in bl.steps if s.kind != "forward" or s.label.endswith("(recompute)"))


def _by_name(bl):
    return {b.name: b for b in bl.buffers}


def test_bn_and_gelu_outputs_are_not_kept_across_the_boundary(tmp_path):
    p = _conv_bn_gelu(tmp_path)
    on, off = _build(p), _build(p, cheap_recompute=False)
    b_on, b_off = _first_backward(on), _first_backward(off)
    # off: BN's and Gelu's outputs live from forward into backward (PyTorch keeps both too)
    assert _by_name(off)["bn"].last > b_off and _by_name(off)["g"].last > b_off
    # on: neither crosses the boundary; copies written by recompute steps in backward do
    names = _by_name(on)
    assert not any(n in names and names[n].first < b_on < names[n].last for n in ("bn", "g"))
    rec = [s for s in on.steps if s.label.endswith("(recompute)")]
    assert [on.steps[s.index].kind for s in rec] == ["forward", "forward"] and all(s.index > b_on for s in rec)
    assert {"bn@recompute", "g@recompute"} <= set(names)
    # the copies live only from their recompute step to their backward readers
    assert names["bn@recompute"].first > b_on and names["g@recompute"].first > b_on
    live_on = sum(b.size for b in on.buffers if b.category == "non-const" and b.first < b_on <= b.last)
    live_off = sum(b.size for b in off.buffers if b.category == "non-const" and b.first < b_off <= b.last)
    assert live_on < live_off


def test_bn_recompute_gradients_and_verify(tmp_path):
    p = _conv_bn_gelu(tmp_path)
    assert check_gradients(p, policies=(Policy(), Policy(cheap_recompute=False))) >= 20
    for mode in ("train", "frozen"):
        doc = check_verify(p, "-b", "2", "--batchnorm", mode, "-O", "adam")
        assert doc["passed"]


def test_layernorm_output_recomputed_from_its_statistics(tmp_path):
    p = _ln_matmul(tmp_path)
    on = _build(p)
    assert "n@recompute" in _by_name(on)
    assert _by_name(on)["n"].last < _first_backward(on)
    assert check_gradients(p, policies=(Policy(), Policy(cheap_recompute=False))) >= 20
    check_verify(p, "-b", "2")


def test_nothing_recomputed_when_its_inputs_are_not_kept(tmp_path):
    # Sigmoid's derivative reads its output, not its input: recomputing y = sigmoid(h) would keep h
    # alive instead, so y stays kept
    nodes = [helper.make_node("MatMul", ["x", "w0"], ["h"]), helper.make_node("Sigmoid", ["h"], ["s"]),
             helper.make_node("MatMul", ["s", "w1"], ["y"])]
    inits = {"w0": RNG.normal(size=(6, 8)).astype(np.float32), "w1": RNG.normal(size=(8, 3)).astype(np.float32)}
    p = save(tmp_path, onnx_model(nodes, [("x", (2, 6))], [("y", (2, 3))], inits))
    on, off = _build(p), _build(p, cheap_recompute=False)
    assert not any(b.name.endswith("@recompute") for b in on.buffers)
    assert [(b.name, b.first, b.last) for b in on.buffers] == [(b.name, b.first, b.last) for b in off.buffers]


def test_real_exports_keep_less_and_verify():
    """Real torch.onnx exports (tests/corpus): TorchScript ConvNeXt (LayerNorm, GELU) and dynamo
    MobileNetV3 (BatchNorm, Hardswish): recompute steps appear, fewer bytes cross the boundary, and
    the plan verifies."""
    import pathlib

    corpus = pathlib.Path(__file__).resolve().parents[1] / "corpus"
    for name in ("convnext_tiny_ts.onnx", "mobilenet_v3_tiny_dynamo.onnx"):
        p = str(corpus / name)
        on, off = _build(p), _build(p, cheap_recompute=False)
        assert any(s.label.endswith("(recompute)") for s in on.steps), name
        b_on, b_off = _first_backward(on), _first_backward(off)
        live_on = sum(b.size for b in on.buffers if b.category == "non-const" and b.first < b_on <= b.last)
        live_off = sum(b.size for b in off.buffers if b.category == "non-const" and b.first < b_off <= b.last)
        assert live_on < live_off, name
        check_verify(p, "-b", "2", "-O", "adam")


def _attention(tmp_path, mask_output=True, ratio=0.25):
    # x -> q, k, v; p = Softmax(q k^T); Cast(p, float32) (an identity); Dropout; Reshape; MatMul with v:
    # the Softmax's backward keeps p, the Dropout's keeps its mask, the last MatMul's reads the dropout's
    # output (dV = d^T dY)
    from onnx import TensorProto

    drop_out = ["d", "m"] if mask_output else ["d"]
    nodes = [helper.make_node("MatMul", ["x", "wq"], ["q"]), helper.make_node("MatMul", ["x", "wk"], ["k"]),
             helper.make_node("MatMul", ["x", "wv"], ["v"]), helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["q", "kt"], ["s"]), helper.make_node("Softmax", ["s"], ["p"], axis=-1),
             helper.make_node("Cast", ["p"], ["pc"], to=TensorProto.FLOAT),
             helper.make_node("Dropout", ["pc", "ratio", "train"], drop_out),
             helper.make_node("Reshape", ["d", "shape"], ["dr"]), helper.make_node("MatMul", ["dr", "v"], ["y"])]
    inits = {w: RNG.normal(size=(6, 8)).astype(np.float32) for w in ("wq", "wk", "wv")}
    inits.update({"ratio": np.array(ratio, np.float32), "train": np.array(True), "shape": np.array([-1, 5, 5])})
    return save(tmp_path, onnx_model(nodes, [("x", (2, 5, 6))], [("y", (2, 5, 8))], inits))


def test_attention_probabilities_are_held_once(tmp_path):
    """A same-dtype Cast is a view of the probabilities, and the dropout's output is recomputed from
    them and the kept mask before the last MatMul's backward: only p and the 1-byte mask cross the
    forward/backward boundary; gradients and verify hold with and without the pass."""
    for mask_output in (True, False):
        p = _attention(tmp_path, mask_output)
        on, off = _build(p), _build(p, cheap_recompute=False)
        names = _by_name(on)
        assert "pc" not in names  # a view: p's buffer ("s": the Softmax runs in place over its input)
        b_on, b_off = _forward_end(on), _forward_end(off)
        assert "d@recompute" in names and names["d"].last < b_on < names["d@recompute"].first
        crossing = {b.name for b in on.buffers if b.category == "non-const" and b.first < b_on <= b.last}
        assert "d" not in crossing and "s" in crossing
        assert "d" in {b.name for b in off.buffers if b.category == "non-const" and b.first < b_off <= b.last}
        assert check_gradients(p, policies=(Policy(), Policy(cheap_recompute=False))) >= 20
        check_verify(p, "-b", "2", "-O", "adam")


def test_identity_dropout_and_cast_are_views(tmp_path):
    """A ratio-0 Dropout and a same-dtype Cast hold no bytes of their own: the last MatMul's backward
    reads the Softmax's output itself."""
    p = _attention(tmp_path, ratio=0.0)
    names = _by_name(_build(p))
    assert not {"pc", "d", "dr"} & set(names)
    check_verify(p, "-b", "2")
