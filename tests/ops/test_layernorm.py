"""LayerNormalization (opset 17): any axis, optional bias, broadcast scale, the Mean / InvStdDev
outputs; gradients by finite differences, verify, what backward keeps, refusals."""
import numpy as np
import pytest
from onnx import helper

from click.testing import CliRunner

from memplan_cli.cli import main
from memplan_cli.errors import MemplanError, ModelError
from memplan_cli.loaders import load_model
from tests.execute.helpers import run_backward
from tests.ops.gradcheck import check_gradients, check_verify, onnx_model, save, training_graph

X = (2, 3, 4, 5)


def _model(axis=-1, bias=True, outputs=("ln",), pshape=None, **attrs):
    # x -> Add(p) -> LN -> Mul(q) -> y: p's gradient flows through LN's calcDerivative
    rank = len(X)
    ax = axis % rank
    tail = X[ax:]
    rng = np.random.default_rng(0)
    ps = tail if pshape is None else pshape
    inits = {"p": rng.normal(size=X[1:]).astype(np.float32), "q": rng.normal(size=X[1:]).astype(np.float32),
             "scale": rng.uniform(0.5, 1.5, ps).astype(np.float32)}
    ins = ["a", "scale"]
    if bias:
        inits["bias"] = rng.normal(size=ps).astype(np.float32)
        ins.append("bias")
    nodes = [helper.make_node("Add", ["x", "p"], ["a"]),
             helper.make_node("LayerNormalization", ins, list(outputs), axis=axis, **attrs),
             helper.make_node("Mul", ["ln", "q"], ["y"])]
    return onnx_model(nodes, [("x", X)], [("y", X)], inits, opset=17)


def _ln(tg):
    return next(o for o in tg.graph.operations if o.type == "LayerNormalization")


@pytest.mark.parametrize("axis", [-1, 2, 1])
def test_gradients_and_verify(tmp_path, axis):
    p = save(tmp_path, _model(axis))
    assert load_model(p).operations[1].attrs["axis"] == axis % len(X)
    # p, scale, bias and q: 4 weights, 12 samples each (fewer for a small scale), both policies
    assert check_gradients(p) >= 60
    check_verify(p, "-b", "2")


def test_without_bias_and_with_a_broadcast_scale(tmp_path):
    p = save(tmp_path, _model(1, bias=False, pshape=(1, 4, 5)))
    assert check_gradients(p) >= 40
    check_verify(p, "-b", "3")


def test_forward_normalises_each_row(tmp_path):
    tg = training_graph(save(tmp_path, _model(2, bias=False)))
    mem = run_backward(tg, {}, backward=False)
    v = {t.name: np.asarray(mem.view(t.id)) for t in tg.tensors if t.name in ("ln", "scale")}
    xhat = (v["ln"] / v["scale"]).reshape(6, 20)  # seeded values: memplan never reads weight bytes
    np.testing.assert_allclose(xhat.mean(axis=1), 0, atol=1e-9)
    np.testing.assert_allclose(xhat.var(axis=1), 1, rtol=1e-4)


def test_what_backward_keeps(tmp_path):
    tg = training_graph(save(tmp_path, _model(2)))
    r = tg.rules[_ln(tg).index]
    assert {tg.graph.operands[v].name for v in r.kept_forward()} == {"a", "scale"}
    assert [e.what for e in r.extras] == ["ln_mean", "ln_invstd"] and all(e.shape == (2, 3) for e in r.extras)
    # LN alone trains (nothing below needs a back-prop): dscale reads X and the statistics, not scale
    tg = training_graph(save(tmp_path, _model(2), "b.onnx"), trainable=(1,))
    r = tg.rules[_ln(tg).index]
    assert r.calc_derivative is None and len(r.extras) == 2
    assert [tg.graph.operands[v].name for v in r.kept_forward()] == ["a"]


def test_the_models_own_statistics_outputs_are_kept_instead_of_extras(tmp_path):
    p = save(tmp_path, _model(-1, outputs=("ln", "mean", "invstd")))
    tg = training_graph(p)
    r = tg.rules[_ln(tg).index]
    assert not r.extras
    assert {tg.graph.operands[v].name for v in r.kept_forward()} == {"a", "scale", "mean", "invstd"}
    mem = run_backward(tg, {}, backward=False)
    v = {t.name: np.asarray(mem.view(t.id)) for t in tg.tensors if t.name in ("a", "mean", "invstd")}
    assert v["mean"].shape == (2, 3, 4, 1)
    np.testing.assert_allclose(v["mean"][..., 0], v["a"].mean(axis=-1))
    np.testing.assert_allclose(v["invstd"][..., 0], 1 / np.sqrt(v["a"].var(axis=-1) + 1e-5))
    assert check_gradients(p) >= 60
    check_verify(p, "-b", "2")


def test_a_loss_through_the_mean_output_is_refused(tmp_path):
    m = _model(-1, outputs=("ln", "mean"))
    m.graph.node.append(helper.make_node("Mul", ["y", "mean"], ["z"]))
    m.graph.output[0].name = "z"
    with pytest.raises(MemplanError, match="Mean output"):
        training_graph(save(tmp_path, m))


@pytest.mark.parametrize("attrs,pshape,why", [({"stash_type": 11}, None, "stash_type"),
                                               ({}, (3, 5), "broadcast")])
def test_refusals(tmp_path, attrs, pshape, why):
    with pytest.raises(ModelError, match=why):
        load_model(save(tmp_path, _model(-1, pshape=pshape, **attrs)))


# ---- a converter's decomposed norm whose scale and shift it merged into the next layer -----------
def _decomposed_norm(path, kind="layer", affine=False, tail="fc"):
    """x [4, 8] -> FC -> the TF Lite converter's LayerNorm over the features (MEAN, SQUARED_DIFFERENCE,
    MEAN, ADD eps, RSQRT, MUL, MUL, SUB, ADD; litert-torch's form) or RMSNorm (MUL x x, MEAN, ADD,
    RSQRT, MUL) -> [MUL gamma, ADD beta when `affine`] -> FULLY_CONNECTED (`tail` "output": none)."""
    from devtools.modelgen import ModelBuilder

    m = ModelBuilder(seed=6)
    x = m.fully_connected(m.input([4, 8]), 8)
    eps = m.const([], value=np.array(1e-5, np.float32))
    if kind == "layer":
        mean = m.mean(x, [1], keep_dims=True)
        var = m.mean(m._op(99, [x, mean], [4, 8]), [1], keep_dims=True)  # SQUARED_DIFFERENCE
    else:
        var = m.mean(m.mul(x, x), [1], keep_dims=True)
    r = m._op(76, [m.add(var, eps)], [4, 1])  # RSQRT
    y = m.mul(x, r)
    if kind == "layer":
        y = m.add(y, m.sub(m.const([], value=np.array(0.0, np.float32)), m.mul(r, mean)))
    if affine:
        y = m.add(m.mul(y, m.const([8])), m.const([8]))
    m.output(m.fully_connected(y, 4) if tail == "fc" else y)
    return m.save(path)


@pytest.mark.parametrize("kind,norm", [("layer", "LayerNorm"), ("rms", "RMSNorm")])
def test_merged_normalization_is_noted(tmp_path, kind, norm):
    import jsonschema

    from memplan_cli.schemas import load_schema
    from tests.ops.gradcheck import analyze_json

    p = _decomposed_norm(str(tmp_path / "n.tflite"), kind)
    doc = analyze_json(p, "-O", "adam")
    jsonschema.validate(doc, load_schema("analysis"))
    (m,) = doc["parameters"]["merged_normalizations"]
    assert m["norm"] == norm and m["op"].endswith("Rsqrt") and len(m["into"]) == 1 and "FullyConnected" in m["into"][0]
    r = CliRunner().invoke(main, ["analyze", p], env={"NO_COLOR": "1", "COLUMNS": "200"})
    assert r.exit_code == 0 and f"normalisation(s) without a scale or shift of their own ({norm} at op" in r.output
    assert "get no gradient of their own" in r.output
    # the merged weight trains, and only it: not frozen, the note goes once it no longer trains
    frozen = analyze_json(p, "--freeze", "params:" + m["weights"][0])
    assert "merged_normalizations" not in frozen["parameters"]


@pytest.mark.parametrize("affine,tail", [(True, "fc"), (False, "output")])
def test_norm_with_its_own_scale_or_no_next_layer_is_not_noted(tmp_path, affine, tail):
    from tests.ops.gradcheck import analyze_json

    doc = analyze_json(_decomposed_norm(str(tmp_path / "n.tflite"), "layer", affine, tail))
    assert "merged_normalizations" not in doc["parameters"]


def test_decomposed_norm_gradients_and_verify(tmp_path):
    p = _decomposed_norm(str(tmp_path / "n.tflite"))
    assert check_gradients(p) >= 12
    check_verify(p, "-b", "2")


@pytest.mark.parametrize("frozen_scale", [False, True])
def test_a_parameter_normalised_trains(tmp_path, frozen_scale):
    # DeBERTa-v3's relative-position table goes through LayerNorm before use (norm_rel_ebd="layer_norm"):
    # the table is the op's weight, its gradient dX (calcGradient), checked by finite differences and
    # verify, with the scale trained beside it or frozen
    rng = np.random.default_rng(1)
    inits = {"rel": rng.normal(size=(3, 4)).astype(np.float32), "scale": rng.uniform(0.5, 1.5, 4).astype(np.float32),
             "bias": rng.normal(size=4).astype(np.float32)}
    nodes = [helper.make_node("LayerNormalization", ["rel", "scale", "bias"], ["n"], axis=-1),
             helper.make_node("Mul", ["x", "n"], ["y"])]
    p = save(tmp_path, onnx_model(nodes, [("x", (2, 3, 4))], [("y", (2, 3, 4))], inits, opset=17))
    config = {"freeze": ("params:scale",)} if frozen_scale else {}
    tg = training_graph(p, **config)
    ln = _ln(tg)
    assert ln.inputs[0] in tg.grad and (ln.inputs[1] in tg.grad) != frozen_scale
    assert check_gradients(p, **config) >= 12
    check_verify(p, "-b", "2", *(("--freeze", "params:scale") if frozen_scale else ()))
