"""Every float output trains (issue 27 item 1): one loss per output carrying one, summed; --loss-outputs
picks a subset; weights no loss depends on are reported frozen with the reason; profiles whose runtime
cannot train several outputs refuse them."""
import json

import numpy as np
import pytest
from click.testing import CliRunner

from memplan_cli.cli import main
from memplan_cli.config import TrainConfig
from memplan_cli.errors import ConfigError, UnsupportedOpError
from memplan_cli.ir.graph import Graph, Operand, Operation
from memplan_cli.passes.loss_insertion import NO_LOSS_REASON, loss_outputs, unreached_weights
from memplan_cli.passes.pipeline import build_training_graph
from memplan_cli.passes.policy import Policy
from tests.execute.helpers import run_backward


def two_heads(int_output=False):
    """x -FC(w0)+TANH-> h ; h -FC(w1)-> y1 ; h -FC(w2)-> y2 (both outputs); optionally an int32
    ArgMax of y1 as a third output."""
    ops = [Operand(0, "x", (3, 5), is_input=True), Operand(1, "w0", (6, 5), is_const=True),
           Operand(2, "h", (3, 6)), Operand(3, "w1", (4, 6), is_const=True), Operand(4, "y1", (3, 4), is_output=True),
           Operand(5, "w2", (2, 6), is_const=True), Operand(6, "y2", (3, 2), is_output=True)]
    opers = [Operation(0, "FullyConnected", [0, 1, -1], [2], {"activation": "TANH"}),
             Operation(1, "FullyConnected", [2, 3, -1], [4], {"activation": "NONE"}),
             Operation(2, "FullyConnected", [2, 5, -1], [6], {"activation": "NONE"})]
    outs = [4, 6]
    if int_output:
        ops += [Operand(7, "axis", (1,), "int32", is_const=True), Operand(8, "cls", (3,), "int32", is_output=True)]
        opers.append(Operation(3, "ArgMax", [4, 7], [8], {"axis": -1}))
        outs.append(8)
    g = Graph(ops, opers, [0], outs)
    g.verify()
    return g


def _names(tg, ids):
    return sorted(tg.graph.operands[i].name for i in ids)


def test_every_float_output_carries_a_loss_and_every_weight_trains():
    g = two_heads(int_output=True)
    assert [g.operands[o].name for o in loss_outputs(g)] == ["y1", "y2"]  # the int32 ArgMax has none
    tg = build_training_graph(g, TrainConfig(optimizer="adam"))
    loss = tg.graph.operations[tg.loss_op]
    assert [tg.graph.operands[i].name for i in loss.inputs] == ["y1", "y1:label", "y2", "y2:label"]
    assert _names(tg, tg.grad) == _names(tg, tg.opt_state) == ["w0", "w1", "w2"]
    assert unreached_weights(tg) == []
    assert {tg.tensors[t].role for t in (tg.fwd[i] for i in tg.labels)} == {"label"}


def test_one_output_keeps_its_label_name():
    g = two_heads()
    g.outputs = [4]
    g.operands[6].is_output = False
    tg = build_training_graph(g, TrainConfig())
    assert tg.graph.operands[tg.label].name == "label" and len(tg.labels) == 1
    assert _names(tg, tg.grad) == ["w0", "w1"]


def test_loss_outputs_picks_a_head_and_the_other_heads_weights_are_frozen_with_the_reason():
    tg = build_training_graph(two_heads(), TrainConfig(optimizer="adam", loss_outputs=("y2",)))
    assert _names(tg, tg.grad) == ["w0", "w2"]
    fw = unreached_weights(tg)
    assert [(w["weight"], w["bytes"], w["reason"]) for w in fw] == [("w1", 4 * 6 * 4, NO_LOSS_REASON)]
    # the other head still runs forward; nothing of it is kept for backward
    assert 1 not in tg.backward_ops


def test_loss_outputs_errors_name_the_outputs():
    g = two_heads(int_output=True)
    with pytest.raises(ConfigError, match=r"matches no model output \(the outputs: y1, y2, cls\)"):
        loss_outputs(g, ("y3",))
    with pytest.raises(ConfigError, match="cls is int32; a loss needs a float output"):
        loss_outputs(g, ("cls",))
    assert [g.operands[o].name for o in loss_outputs(g, ("y*",))] == ["y1", "y2"]


def _loss_and_grad(tg, w0):
    """The summed loss and dL/dw0 of one step with w0's value given (the rest seeded)."""
    mem = run_backward(tg, {tg.fwd[1]: w0})
    loss = float(mem.view(tg.fwd[tg.graph.outputs[0]]).reshape(-1)[0])
    return loss, np.array(mem.view(tg.grad[1]))


@pytest.mark.parametrize("loss", ["mse", "cce"])
@pytest.mark.parametrize("baseline", [False, True])
def test_the_shared_trunk_gets_the_gradient_of_the_summed_loss(loss, baseline):
    """Finite differences of the executed loss: the trunk weight w0's gradient is the sum of both
    heads' shares (a first-output-only loss would miss y2's share)."""
    g = two_heads()
    for o in (4, 6):  # CCE needs probabilities: each head ends in a softmax
        g.operations[1 if o == 4 else 2].outputs = [len(g.operands)]
        g.operands.append(Operand(len(g.operands), f"z{o}", g.operands[o].shape))
        g.operations.append(Operation(len(g.operations), "Softmax", [len(g.operands) - 1], [o], {"beta": 1.0}))
    g.verify()
    # the baseline policy (every saving rule off, onert's) also gives each label a back-prop
    tg = build_training_graph(g, TrainConfig(loss=loss), policy=Policy.baseline() if baseline else Policy())
    rng = np.random.default_rng(1)
    w0 = rng.standard_normal((6, 5)).astype(np.float32) * 0.5
    l0, grad = _loss_and_grad(tg, w0)
    eps = 1e-2
    num = np.zeros_like(w0, dtype=np.float64)
    for idx in np.ndindex(w0.shape):
        wp, wm = w0.copy(), w0.copy()
        wp[idx] += eps
        wm[idx] -= eps
        num[idx] = (_loss_and_grad(tg, wp)[0] - _loss_and_grad(tg, wm)[0]) / (2 * eps)
    assert np.abs(num).max() > 1e-3
    np.testing.assert_allclose(grad, num, rtol=2e-2, atol=2e-4)
    # and one head's loss alone gives a different gradient
    one = build_training_graph(g, TrainConfig(loss=loss, loss_outputs=("y1",)))
    assert not np.allclose(_loss_and_grad(one, w0)[1], grad, atol=1e-4)


def _cli(*args):
    r = CliRunner().invoke(main, list(args), env={"NO_COLOR": "1"})
    return r.exit_code, r.stdout, r.stderr


def _save_two_heads(tmp_path):
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    rng = np.random.default_rng(0)
    inits = [nh.from_array(rng.random((5, 6), dtype=np.float32), "w0"),
             nh.from_array(rng.random((6, 4), dtype=np.float32), "w1"),
             nh.from_array(rng.random((6, 2), dtype=np.float32), "w2")]
    nodes = [h.make_node("Gemm", ["x", "w0"], ["h0"]), h.make_node("Tanh", ["h0"], ["h"]),
             h.make_node("Gemm", ["h", "w1"], ["y1"]), h.make_node("Gemm", ["h", "w2"], ["y2"])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [2, 5])],
                     [h.make_tensor_value_info("y1", T.FLOAT, [2, 4]), h.make_tensor_value_info("y2", T.FLOAT, [2, 2])],
                     inits)
    path = str(tmp_path / "two_heads.onnx")
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]), path)
    return path


def test_report_names_the_loss_outputs_and_the_frozen_weights(tmp_path):
    import jsonschema

    path = _save_two_heads(tmp_path)
    code, out, err = _cli("analyze", path, "-O", "adam", "-f", "json")
    assert code == 0, err
    d = json.loads(out)
    assert d["config"]["loss_outputs"] == ["y1", "y2"] and d["frozen_weights"] == []
    # every weight's gradient: 5x6, 6x4 and 6x2 floats, each aligned to 16 bytes
    assert d["categories"]["gradient"]["naive"] == sum((4 * n + 15) // 16 * 16 for n in (30, 24, 12))
    code, out, err = _cli("analyze", path, "-O", "adam", "-f", "json", "--loss-outputs", "y1")
    d = json.loads(out)
    from memplan_cli.schemas import load_schema

    jsonschema.validate(d, load_schema("analysis"))
    assert d["config"]["loss_outputs"] == ["y1"] and d["config"]["sources"]["loss_outputs"] == "flag"
    assert [w["weight"] for w in d["frozen_weights"]] == ["w2"]
    code, out, err = _cli("analyze", path, "--loss-outputs", "y1")
    assert code == 0 and "mse on y1 ·" in out and "stay frozen: no loss depends on it" in out and "w2" in out
    code, out, err = _cli("analyze", path)
    assert "mse summed over 2 outputs: y1, y2 ·" in out
    code, out, err = _cli("verify", path, "-b", "3", "-O", "adam")
    assert code == 0, out + err


def test_runtimes_that_train_one_output_refuse_several(tmp_path):
    path = _save_two_heads(tmp_path)
    for profile, words in (("onert", "LossInsertionPass"), ("nntrainer", "the profile models one output")):
        code, out, err = _cli("analyze", path, "-p", profile)
        assert code == 2 and words in err and len(err.strip().splitlines()) == 1, (profile, err)
    # the memplan profile's onert column says why it has no figure
    code, out, err = _cli("analyze", path)
    assert code == 0 and "onert: n/a (onert 0.1.0 trains models with one output; this one has 2" in out
    # a name no output has is refused by every profile, not only where the loss is inserted
    for profile in ("onert", "nntrainer", "memplan"):
        code, out, err = _cli("analyze", path, "-p", profile, "--loss-outputs", "nope")
        assert code == 2 and "--loss-outputs nope matches no model output (the outputs: y1, y2)" in err


def test_diff_notes_a_change_of_loss_outputs(tmp_path):
    """A baseline written before loss_outputs existed (loss on the first output only) against today's
    report of a two-head model: diff says why the gradients grew."""
    path = _save_two_heads(tmp_path)
    code, out, err = _cli("analyze", path, "-f", "json")
    base = json.loads(out)
    del base["config"]["loss_outputs"]
    bp = tmp_path / "base.json"
    bp.write_text(json.dumps(base))
    code, out, err = _cli("diff", "--baseline", str(bp), path)
    assert code == 0, err
    assert "loss_outputs differs: the first output (older report) vs ['y1', 'y2']" in " ".join(out.split())


def test_a_head_through_an_op_without_backward_is_refused_and_the_others_can_train():
    """A head ending in an op memplan cannot differentiate (a custom op) makes the summed loss
    untrainable: one clear refusal that points at --loss-outputs; the other head alone trains."""
    g = two_heads()
    g.operations[2].outputs = [7]
    g.operands.append(Operand(7, "z", (3, 2)))
    g.operations.append(Operation(3, "MyCustom", [7], [6]))
    with pytest.raises(UnsupportedOpError, match=r"MyCustom .*--loss-outputs \(now y1, y2\)"):
        build_training_graph(g, TrainConfig())
    tg = build_training_graph(g, TrainConfig(loss_outputs=("y1",)))
    assert _names(tg, tg.grad) == ["w0", "w1"]
    assert [w["weight"] for w in unreached_weights(tg)] == ["w2"]


def test_outputs_no_gradient_flows_from_get_no_loss(tmp_path):
    """BatchNormalization's running statistics are outputs of a training-mode export, but buffers, not
    predictions: by default only the prediction y carries a loss (finite differences then match the analytic
    gradients, tests/ops/test_batchnorm.py); naming them is an error."""
    from tests.ops.gradcheck import save
    from tests.ops.test_batchnorm import _model

    from memplan_cli.loaders import load_model

    g = load_model(save(tmp_path, _model(opset=15, outputs=("bn", "rm", "rv"), training_mode=1, momentum=0.75)))
    assert [g.operands[o].name for o in loss_outputs(g)] == ["y"]  # Mul(bn, q), not rm, rv
    with pytest.raises(ConfigError, match="no gradient flows back from output rm"):
        loss_outputs(g, ("rm",))


def test_a_model_with_only_an_integer_output_still_analyses_forward_only():
    """As before: the loss sits on the first output and nothing trains (the report says so)."""
    g = two_heads(int_output=True)
    g.outputs = [8]
    for o in (4, 6):
        g.operands[o].is_output = False
    g.operations = g.operations[:2] + [g.operations[3]]
    g.operations[2].index = 2
    g.operands[5].is_const = True
    g.verify()
    assert loss_outputs(g) == [8]
    tg = build_training_graph(g, TrainConfig())
    assert not tg.grad


def test_diff_analyses_the_target_with_the_baselines_chosen_loss_outputs(tmp_path):
    path = _save_two_heads(tmp_path)
    code, out, err = _cli("analyze", path, "-f", "json", "--loss-outputs", "y1")
    bp = tmp_path / "base.json"
    bp.write_text(out)
    code, out, err = _cli("diff", "--baseline", str(bp), path, "-f", "json")
    assert code == 0, err
    d = json.loads(out)
    assert not any("loss_outputs" in n for n in d["notes"]), d["notes"]
    assert all(r["delta"] == 0 for r in d["rows"] if r["section"] == "total")


def test_an_output_another_head_reads_gets_both_gradients():
    """y1 is an output and the input of the head that makes y2 (a feature output and a classifier over
    it): dL/dy1 sums the loss's share and the second head's, checked by finite differences on w0."""
    ops = [Operand(0, "x", (3, 5), is_input=True), Operand(1, "w0", (4, 5), is_const=True),
           Operand(2, "y1", (3, 4), is_output=True), Operand(3, "w1", (2, 4), is_const=True),
           Operand(4, "y2", (3, 2), is_output=True)]
    g = Graph(ops, [Operation(0, "FullyConnected", [0, 1, -1], [2], {"activation": "TANH"}),
                    Operation(1, "FullyConnected", [2, 3, -1], [4], {"activation": "NONE"})], [0], [2, 4])
    g.verify()
    tg = build_training_graph(g, TrainConfig())
    assert _names(tg, tg.grad) == ["w0", "w1"]
    w0 = np.random.default_rng(2).standard_normal((4, 5)).astype(np.float32) * 0.5
    _, grad = _loss_and_grad(tg, w0)
    eps, num = 1e-2, np.zeros((4, 5))
    for idx in np.ndindex(w0.shape):
        wp, wm = w0.copy(), w0.copy()
        wp[idx] += eps
        wm[idx] -= eps
        num[idx] = (_loss_and_grad(tg, wp)[0] - _loss_and_grad(tg, wm)[0]) / (2 * eps)
    np.testing.assert_allclose(grad, num, rtol=2e-2, atol=2e-4)
