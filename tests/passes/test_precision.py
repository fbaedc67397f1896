"""--precision (issue 43): the step's dtypes under mixed and true low precision, the cast copies a
mixed step makes, the profiles that refuse it, the report's keys, and verify proving the plans with
the real element sizes."""
import json

import pytest
from click.testing import CliRunner

from memplan_cli import analyze, ops
from memplan_cli.cli import main
from memplan_cli.config import PRECISIONS, TrainConfig
from memplan_cli.errors import ConfigError
from memplan_cli.ir.graph import Graph, Operand, Operation
from memplan_cli.passes.pipeline import build_training_graph
from tests.passes.graphs import conv_relu_fc

MNIST = "sample_models/mnist.circle"
BERT = "tests/corpus/bert_tiny_dynamo.onnx"
CONVNEXT = "tests/corpus/convnext_tiny_ts.onnx"


def _cli(*args):
    return CliRunner().invoke(main, list(args), env={"NO_COLOR": "1"})


def _dtypes(tg, role):
    return {t.dtype for t in tg.tensors if t.role == role}


def residual_ln():
    """x -FC(w0)-> a ; Add(a, x) -> r ; r * s (rank-0) -> m ; LayerNorm(m) -> n ; n -FC(w1)-> y."""
    o = [Operand(0, "x", (2, 8), is_input=True), Operand(1, "w0", (8, 8), is_const=True),
         Operand(2, "a", (2, 8)), Operand(3, "r", (2, 8)), Operand(4, "s", (), is_const=True),
         Operand(5, "m", (2, 8)), Operand(6, "g", (8,), is_const=True), Operand(7, "b", (8,), is_const=True),
         Operand(8, "n", (2, 8)), Operand(9, "w1", (4, 8), is_const=True), Operand(10, "y", (2, 4), is_output=True)]
    g = Graph(o, [Operation(0, "FullyConnected", [0, 1, -1], [2]), Operation(1, "Add", [2, 0], [3]),
                  Operation(2, "Mul", [3, 4], [5]), Operation(3, "LayerNormalization", [5, 6, 7], [8], {"axis": 1}),
                  Operation(4, "FullyConnected", [8, 9, -1], [10])], [0], [10])
    g.verify()
    return g


def test_the_names_are_lightnings_and_anything_else_is_refused():
    assert PRECISIONS == ("32-true", "bf16-mixed", "16-mixed", "bf16-true", "16-true")
    with pytest.raises(ConfigError, match="unknown precision"):
        TrainConfig(precision="bf16")
    r = _cli("analyze", MNIST, "--precision", "fp16")
    assert r.exit_code == 2 and "fp16" in r.output


def test_32_true_is_the_step_of_before():
    a = build_training_graph(conv_relu_fc(), TrainConfig(optimizer="adam"))
    b = build_training_graph(conv_relu_fc(), TrainConfig(optimizer="adam", precision="32-true"))
    assert [(t.name, t.dtype, t.shape) for t in a.tensors] == [(t.name, t.dtype, t.shape) for t in b.tensors]
    assert _dtypes(a, "extra:cast") == set()


def test_mixed_keeps_weights_gradients_and_state_in_float32_and_casts_down_where_autocast_does():
    tg = build_training_graph(residual_ln(), TrainConfig(optimizer="adam", precision="bf16-mixed"))
    g = tg.graph
    dtype = {o.name: o.dtype for o in g.operands}
    assert _dtypes(tg, "weight") == _dtypes(tg, "gradient") == _dtypes(tg, "opt-state") == {"float32"}
    assert dtype["x"] == "float32" and dtype["label"] == "float32" and dtype["loss"] == "float32"
    assert dtype["a"] == "bfloat16"  # linear: autocast's lower-precision list
    assert dtype["r"] == "float32"  # bf16 + fp32 activation: type promotion
    assert dtype["m"] == "float32"  # times a rank-0 scale: no promotion from it, r is float32 already
    assert dtype["n"] == "float32"  # layer_norm keeps its input's dtype
    assert dtype["y"] == "bfloat16"
    # an activation's back-prop is in the activation's dtype
    assert {tg.tensors[tg.bp[i]].dtype for i in tg.bp} == {"bfloat16", "float32"}
    assert tg.tensors[tg.bp[g.operations[0].outputs[0]]].dtype == "bfloat16"
    # the weights' bf16 copies (forward and the input-gradient steps), the fp32 input of the second
    # linear cast down, and the loss's fp32 copy of the bf16 logits: each live in one step only
    casts = [t for t in tg.tensors if t.role == "extra:cast"]
    assert {t.dtype for t in casts if t.op == 0} == {"bfloat16"}
    assert any(t.op == tg.loss_op and t.dtype == "float32" and t.shape == (2, 4) for t in casts)
    lt = tg.lifetimes()
    assert all(lt[t.id][0] == lt[t.id][1] for t in casts)
    steps_with = {(s.kind, s.op) for s in tg.steps if s.casts}
    assert ("forward", 0) in steps_with and ("forward", 4) in steps_with and ("calcDerivative", 4) in steps_with


def test_a_rank0_constant_does_not_promote_a_bf16_tensor():
    g = residual_ln()
    g.operations[1] = Operation(1, "Relu", [2], [3])  # r = relu(a): bf16; m = r * s stays bf16
    tg = build_training_graph(g, TrainConfig(precision="bf16-mixed"))
    dtype = {o.name: o.dtype for o in tg.graph.operands}
    assert dtype["r"] == dtype["m"] == dtype["n"] == "bfloat16"


def test_true_puts_every_float_tensor_in_the_low_dtype():
    for p, low in (("bf16-true", "bfloat16"), ("16-true", "float16")):
        tg = build_training_graph(residual_ln(), TrainConfig(optimizer="adam", precision=p))
        floats = {t.dtype for t in tg.tensors if t.dtype.startswith(("float", "bfloat"))}
        assert floats == {low}, p
        assert _dtypes(tg, "extra:cast") == set()


def test_mixed_can_cost_more_than_float32_on_a_weight_heavy_step():
    # MNIST's 1.6 MB linear at batch 2: its bf16 weight copy outweighs the halved activations
    tot = {p: analyze(MNIST, batch_size=2, optimizer="adam", precision=p).report["totals"]["planned"]
           for p in ("32-true", "bf16-mixed")}
    assert tot["bf16-mixed"] > tot["32-true"]


def test_16_mixed_adds_the_gradient_scalers_state():
    bf = analyze(MNIST, batch_size=8, optimizer="adam", precision="bf16-mixed").report
    fp = analyze(MNIST, batch_size=8, optimizer="adam", precision="16-mixed").report
    # `_scale` (float32) and `_growth_tracker` (int32): one element each, 16-byte aligned
    assert fp["totals"]["naive"] - bf["totals"]["naive"] == 32
    assert fp["categories"]["opt-variable"]["planned"] - bf["categories"]["opt-variable"]["planned"] == 32


@pytest.mark.parametrize("model, batch", [(MNIST, 32), (BERT, 2), (CONVNEXT, 2)])
def test_low_precision_plans_less_and_true_about_half(model, batch):
    tot = {p: analyze(model, batch_size=batch, optimizer="adam", precision=p).report["totals"]["planned"]
           for p in PRECISIONS}
    assert tot["bf16-mixed"] < tot["32-true"]
    assert tot["bf16-true"] == tot["16-true"]
    assert 0.45 * tot["32-true"] < tot["bf16-true"] < 0.6 * tot["32-true"]


def test_every_op_family_declares_autocasts_policy_where_pytorch_has_one():
    # aten/src/ATen/autocast_mode.cpp, CPU: conv*, linear / addmm / mm / bmm / matmul, prelu, the RNN
    # layer: lower precision; the losses, 3-D pooling, prod: float32; norms follow their input
    want = {"Conv2D": "lower", "DepthwiseConv2D": "lower", "ConvTranspose2D": "lower", "FullyConnected": "lower",
            "MatMul": "lower", "Einsum": "lower", "PRelu": "lower", "LSTM": "lower", "Loss": "fp32",
            "MaxPool3D": "fp32", "AvgPool3D": "fp32", "ReduceProd": "fp32", "MaxPool2D": "",
            "LayerNormalization": "first", "BatchNormalization": "first", "Softmax": "", "Add": "bias", "Mul": "",
            "Cast": "fixed"}
    for t, policy in want.items():
        assert ops.autocast_policy(Operation(0, t, [], [])) == policy, t
    assert ops.autocast_policy(Operation(0, "Pad", [], [], {"mode": "reflect"})) == "fp32"
    assert ops.autocast_policy(Operation(0, "Pad", [], [], {"mode": "constant"})) == ""


def test_the_report_says_which_precision():
    r = _cli("analyze", MNIST, "-b", "8", "--precision", "bf16-mixed", "-f", "json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["config"]["precision"] == "bf16-mixed" and doc["config"]["sources"]["precision"] == "flag"
    t = _cli("analyze", MNIST, "-b", "8", "--precision", "bf16-mixed")
    assert " · bf16-mixed · " in t.output.splitlines()[0]
    # at 32-true the header is what it was
    assert "32-true" not in _cli("analyze", MNIST, "-b", "8").output.splitlines()[0]
    d = json.loads(_cli("analyze", MNIST, "-b", "8", "-f", "json").output)
    assert d["config"]["precision"] == "32-true"


@pytest.mark.parametrize("profile, precision", [("onert", "bf16-true"), ("nntrainer", "bf16-mixed"),
                                                ("singa", "16-true"), ("torch", "16-mixed")])
def test_profiles_refuse_a_precision_they_do_not_reproduce_in_one_line(profile, precision):
    r = CliRunner().invoke(main, ["analyze", MNIST, "-b", "8", "-p", profile, "--precision", precision],
                           env={"NO_COLOR": "1"})
    assert r.exit_code == 2
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and f"--precision {precision}" in lines[0] and "float32" in lines[0], r.output


def test_the_torch_profile_under_bf16():
    fp = analyze(BERT, batch_size=2, optimizer="adam", profile="torch").report
    bf = analyze(BERT, batch_size=2, optimizer="adam", profile="torch", precision="bf16-true").report
    mixed = analyze(BERT, batch_size=2, optimizer="adam", profile="torch", precision="bf16-mixed").report
    # model.to(bfloat16): parameters and Adam's state halve (its float32 `step` counters stay); integer
    # buffers a gather reads (BERT's position ids, held the whole step) keep their bytes
    fp_t, bf_t = fp["categories"]["trainable"]["naive"], bf["categories"]["trainable"]["naive"]
    ints = fp_t - fp["figures"]["torch"]["split"]["gradients"]  # BERT trains every parameter
    assert 0 < ints < 1024 and (bf_t - ints) * 2 == fp_t - ints
    assert bf["totals"]["planned"] < 0.6 * fp["totals"]["planned"]
    # autocast: float32 parameters and state, plus the weights' bfloat16 copies
    assert mixed["categories"]["trainable"]["naive"] == fp["categories"]["trainable"]["naive"]
    assert mixed["categories"]["opt-variable"]["naive"] == fp["categories"]["opt-variable"]["naive"]


def test_the_default_onert_column_and_compare_show_na_with_the_reason():
    r = _cli("analyze", MNIST, "-b", "8", "--precision", "bf16-mixed", "-f", "json")
    doc = json.loads(r.output)
    assert "onert" not in doc["totals"]
    c = _cli("compare", MNIST, "-b", "8", "--precision", "bf16-mixed")
    assert c.exit_code == 0, c.output
    assert "onert: n/a (onert profile: onert 0.1.0 trains float32 only" in c.output.replace("\n", " ")


def test_diff_treats_precision_as_a_setup_key(tmp_path):
    base = tmp_path / "base.json"
    assert _cli("analyze", MNIST, "-b", "8", "--precision", "bf16-mixed", "-f", "json", "-o", str(base)).exit_code == 0
    same = _cli("diff", "--baseline", str(base), MNIST, "-f", "json")
    assert same.exit_code == 0, same.output
    d = json.loads(same.output)
    assert not any("precision" in n for n in d.get("notes", [])), d.get("notes")
    other = _cli("diff", "--baseline", str(base), MNIST, "--precision", "32-true", "-f", "json")
    notes = json.loads(other.output).get("notes", [])
    assert any(n.startswith("precision differs: bf16-mixed vs 32-true") for n in notes), notes


@pytest.mark.parametrize("precision", ["bf16-mixed", "16-mixed", "bf16-true", "16-true"])
@pytest.mark.parametrize("model", [MNIST, BERT])
def test_verify_proves_the_plan_with_the_real_element_sizes(model, precision):
    from memplan_cli.verification import verify_model

    cfg = TrainConfig(batch_size=2, optimizer="adam", precision=precision)
    rep = verify_model(model, cfg)
    assert rep.result.passed, rep.result.message
    assert rep.result.weights_updated > 0 and rep.result.compared > 0
    r = _cli("verify", model, "-b", "2", "-O", "adam", "--precision", precision, "-f", "json")
    assert r.exit_code == 0 and json.loads(r.output)["config"]["precision"] == precision


def test_fits_printed_commands_keep_the_precision():
    r = _cli("fit", MNIST, "-b", "8", "--budget", "6MiB", "--precision", "bf16-true", "-f", "json")
    assert r.exit_code == 0, r.output
    cmds = [o["command"] for o in json.loads(r.output)["options"] if o.get("command")]
    assert cmds and all("--precision bf16-true" in c for c in cmds)
