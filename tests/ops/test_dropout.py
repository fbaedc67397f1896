"""Dropout across opsets: dropping in training (a 1-byte-per-element bool mask kept for backward, or
the model's own mask output), an identity with --dropout off and with ratio 0, the unused
(unshaped) opset-9 mask output, the zoo's light models, and --dropout in the JSON report."""
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from memplan_cli.loaders import load_model
from tests.execute.helpers import run_backward
from tests.ops.gradcheck import analyze_json, check_gradients, check_verify, onnx_model, save, training_graph

X = (2, 3, 4)


def _model(opset=13, ratio=0.4, mask=False, training_mode=None, **attrs):
    # x -> Add(p) -> Dropout -> Mul(q) -> y: p's gradient flows through the Dropout's calcDerivative
    inits = {"p": np.linspace(-1, 1, 12).reshape(3, 4).astype(np.float32),
             "q": np.linspace(0.5, 2, 12).reshape(3, 4).astype(np.float32)}
    ins = ["a"]
    if opset >= 12:
        if ratio is not None:
            inits["r"] = np.array(ratio, np.float32)
        ins.append("r" if ratio is not None else "")
        if training_mode is not None:
            inits["t"] = np.array(training_mode, bool)
            ins.append("t")
    elif ratio is not None:
        attrs["ratio"] = ratio
    outs = ["d"] + (["m"] if mask else [])
    nodes = [helper.make_node("Add", ["x", "p"], ["a"]), helper.make_node("Dropout", ins, outs, **attrs),
             helper.make_node("Mul", ["d", "q"], ["y"])]
    return onnx_model(nodes, [("x", X)], [("y", X)], inits, opset=opset)


def _op(tg):
    return next(o for o in tg.graph.operations if o.type == "Dropout")


def _values(tg, names, backward=False):
    mem = run_backward(tg, {}, backward=backward)
    return {t.name: np.asarray(mem.view(t.id)).copy() for t in tg.tensors if t.name in names}


@pytest.mark.parametrize("opset,mask", [(13, False), (13, True), (12, False), (10, True), (7, False),
                                        (9, False), (6, False)])
def test_training_drops_and_passes_finite_differences(tmp_path, opset, mask):
    p = save(tmp_path, _model(opset, mask=mask))
    assert load_model(p).operations[1].attrs["ratio"] == pytest.approx(0.4)
    tg = training_graph(p)
    v = _values(tg, ("a", "d"))
    kept = v["d"] != 0
    assert 0 < kept.mean() < 1  # some dropped, some kept
    np.testing.assert_allclose(v["d"][kept], v["a"][kept] / 0.6)
    assert check_gradients(p) >= 24
    check_verify(p, "-b", "2")


def test_backward_keeps_a_one_byte_bool_mask_only(tmp_path):
    tg = training_graph(save(tmp_path, _model()))
    r = tg.rules[_op(tg).index]
    assert r.kept_forward() == []
    assert [(e.what, e.shape, e.dtype) for e in r.extras] == [("dropout_mask", X, "bool")]
    mask = next(t for t in tg.tensors if t.role == "extra:dropout_mask")
    assert mask.nbytes == 24  # 1 byte per element
    # the model's own mask output is what backward keeps instead
    tg = training_graph(save(tmp_path, _model(mask=True), "m.onnx"))
    r = tg.rules[_op(tg).index]
    assert not r.extras and [tg.graph.operands[v].name for v in r.kept_forward()] == ["m"]


@pytest.mark.parametrize("model,flag", [(dict(ratio=0.0), "train"), (dict(), "off"),
                                        (dict(opset=9, ratio=0.0), "train"), (dict(opset=6), "off")])
def test_identity_forms(tmp_path, model, flag):
    p = save(tmp_path, _model(**model))
    tg = training_graph(p, dropout=flag)
    r = tg.rules[_op(tg).index]
    assert not r.extras and r.kept_forward() == [] and r.view is not None
    v = _values(tg, ("a", "d"))
    np.testing.assert_array_equal(v["a"], v["d"])
    assert check_gradients(p, dropout=flag) >= 24
    check_verify(p, "-b", "2", "--dropout", flag)


def test_training_mode_false_and_is_test_still_drop_in_training(tmp_path):
    # the export's inference form; a training step drops all the same (as BN's eval form)
    for m in (_model(training_mode=False), _model(opset=6, is_test=1)):
        tg = training_graph(save(tmp_path, m))
        assert len(tg.rules[_op(tg).index].extras) == 1


def test_default_ratio_and_refusals(tmp_path):
    assert load_model(save(tmp_path, _model(ratio=None))).operations[1].attrs["ratio"] == 0.5
    assert load_model(save(tmp_path, _model(opset=9, ratio=None))).operations[1].attrs["ratio"] == 0.5
    m = _model()
    m.graph.input.append(helper.make_tensor_value_info("rr", TensorProto.FLOAT, []))
    m.graph.node[1].input[1] = "rr"
    from memplan_cli.errors import ModelError

    with pytest.raises(ModelError, match="ratio computed at run time"):
        load_model(save(tmp_path, m, "rr.onnx"))
    with pytest.raises(ModelError, match="outside"):
        load_model(save(tmp_path, _model(opset=9, ratio=1.5), "r15.onnx"))


def test_unused_unshaped_mask_output_is_absent(tmp_path):
    # opset 6 is read as it is (no version conversion) and its shape inference gives the mask no
    # shape: unused, it is left out
    g = load_model(save(tmp_path, _model(opset=6, mask=True, is_test=0)))
    assert len(g.operations[1].outputs) == 1
    # read by another op, it still needs a shape: one line naming it
    m = _model(opset=6, mask=True, is_test=0)
    m.graph.node.append(helper.make_node("Mul", ["y", "m"], ["z"]))
    m.graph.output[0].name = "z"
    from memplan_cli.errors import ModelError

    with pytest.raises(ModelError, match="no shape for tensor 'm'"):
        load_model(save(tmp_path, m, "used.onnx"))
    # opsets 7-9 are converted to opset 12 first, where the mask is shaped: it stays, same shape as Y
    g = load_model(save(tmp_path, _model(opset=9, mask=True), "m9.onnx"))
    y, mk = (g.operands[i] for i in g.operations[1].outputs)
    assert mk.shape == y.shape
    # the zoo's light models (opset 9, unused masks) load
    base = os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/light")
    g = load_model(os.path.join(base, "light_squeezenet.onnx"))
    assert [o for o in g.operations if o.type == "Dropout"]


@pytest.mark.parametrize("name", ["light_squeezenet", "light_vgg19"])
def test_zoo_light_models_with_dropout_analyse(name):
    base = os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/light")
    train = analyze_json(os.path.join(base, f"{name}.onnx"), "-b", "1")
    off = analyze_json(os.path.join(base, f"{name}.onnx"), "-b", "1", "--dropout", "off")
    assert train["config"]["dropout"] == "train" and off["config"]["dropout"] == "off"
    assert off["config"]["sources"]["dropout"] == "flag"
    # the masks cost memory: never less than with dropout off
    assert off["totals"]["planned"] <= train["totals"]["planned"]
    # backward keeps each Dropout's mask (its own output, shaped by the opset-12 conversion) in
    # training, and nothing with --dropout off
    path = os.path.join(base, f"{name}.onnx")
    for flag, kept in (("train", True), ("off", False)):
        tg = training_graph(path, dropout=flag)
        for op in (o for o in tg.graph.operations if o.type == "Dropout"):
            r = tg.rules[op.index]
            assert bool(r.kept_forward() or r.extras) == kept


@pytest.mark.parametrize("ratio", [0.4, 0.0])
def test_a_parameter_read_through_dropout_trains(tmp_path, ratio):
    # DeBERTa's relative-position table goes through Dropout before use: the table is the op's weight
    # (gradient dY·mask/(1 - ratio), from the same mask), checked by finite differences and verify
    inits = {"rel": np.linspace(-1, 1, 12).reshape(3, 4).astype(np.float32), "r": np.array(ratio, np.float32)}
    nodes = [helper.make_node("Dropout", ["rel", "r"], ["d"]), helper.make_node("Mul", ["x", "d"], ["y"])]
    p = save(tmp_path, onnx_model(nodes, [("x", X)], [("y", X)], inits, opset=13))
    tg = training_graph(p)
    assert _op(tg).inputs[0] in tg.grad
    assert check_gradients(p) >= 12
    check_verify(p, "-b", "2")


def test_a_random_draw_kept_unconverted_has_flops(tmp_path):
    """Stochastic depth as TorchScript writes it (torchvision's EfficientNet in training mode):
    RandomUniformLike -> Less -> Cast -> Div -> Mul. The draw counts 1 FLOP per element and no
    backward, so the step's FLOPs (and the remat solver, which ranks plans by them) are available."""
    from memplan_cli.passes.cost import op_flops, step_flops

    nodes = [helper.make_node("Add", ["x", "p"], ["a"]),
             helper.make_node("RandomUniformLike", ["a"], ["u"], dtype=TensorProto.FLOAT),
             helper.make_node("Less", ["u", "k"], ["keep"]),
             helper.make_node("Cast", ["keep"], ["m"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["a", "m"], ["y"])]
    inits = {"p": np.linspace(-1, 1, 12).reshape(3, 4).astype(np.float32), "k": np.array(0.8, np.float32)}
    path = save(tmp_path, onnx_model(nodes, [("x", X)], [("y", X)], inits))
    g = load_model(path)
    draw = next(o for o in g.operations if o.type == "RandomUniformLike")
    assert op_flops(draw, g.operands) == (24, 0)
    flops = step_flops(training_graph(path))
    assert flops.available and flops.ops[draw.index].forward == 24
