"""Fine-tuning modes (issue 17): --train biases, --train ops:GLOB, --freeze ops:GLOB / params:GLOB and
a frozen-everything model. What trains, what is kept for backward, what verify proves."""
import json

import pytest
from click.testing import CliRunner

from memplan_cli import analyze
from memplan_cli.cli import main
from memplan_cli.config import TrainConfig, parse_selectors
from memplan_cli.errors import ConfigError
from memplan_cli.passes.pipeline import build_training_graph
from tests.passes.graphs import conv_relu_fc

MNIST = "sample_models/mnist.circle"
BERT = "tests/corpus/bert_tiny_dynamo.onnx"


def _align(n):
    return (n + 15) // 16 * 16


def _cli(*args):
    return CliRunner().invoke(main, list(args), env={"NO_COLOR": "1"})


def test_selectors_parse_and_the_prefix_carries_over():
    assert parse_selectors(["ops:*q_proj*,*v_proj*", "biases"]) == ("ops:*q_proj*", "ops:*v_proj*", "biases")
    assert parse_selectors(["params:w*", "ops:#3"]) == ("params:w*", "ops:#3")
    with pytest.raises(ConfigError, match="expected biases"):
        TrainConfig(train=("weights",))
    with pytest.raises(ConfigError, match="--freeze"):
        TrainConfig(freeze=("biases",))


def test_bias_only_trains_the_biases_and_keeps_no_input_for_weight_gradients():
    g = conv_relu_fc()
    tg = build_training_graph(g, TrainConfig(optimizer="adam", train=("biases",)))
    grads = sorted(tg.graph.operands[w].name for w in tg.grad)
    assert grads == ["b0", "b1"]
    assert sorted(tg.graph.operands[w].name for w in tg.opt_state) == ["b0", "b1"]
    # full training keeps the FC's input f for dW; bias-only reads only dY there
    full = build_training_graph(g, TrainConfig(optimizer="adam"))
    for t in (full, tg):
        fc = t.rules[3]
        reads = [t.graph.operands[i].name for kind, i in fc.calc_gradient.reads if kind == "fwd"]
        assert reads == (["f"] if t is full else [])
    # the back-prop still flows down to the lowest bias (the conv's)
    assert 0 in tg.backward_ops


def test_bias_only_figures_equal_the_hand_count():
    full = analyze(MNIST, batch_size=2, optimizer="adam")
    bias = analyze(MNIST, batch_size=2, optimizer="adam", train="biases")
    tg = bias.analysis.buffers.training_graph
    g = tg.graph
    biases = [g.operands[w] for w in tg.grad]
    assert biases and all(len(o.shape) == 1 for o in biases)
    want = sum(_align(o.nbytes) for o in biases)
    cats = bias.report["categories"]
    assert cats["gradient"]["naive"] == want
    assert cats["opt-variable"]["naive"] == 2 * want
    assert cats["trainable"]["naive"] == full.report["categories"]["trainable"]["naive"]  # weights stay in memory
    assert bias.planned < full.planned
    assert bias.report["config"]["train"] == ["biases"] and not bias.report["forward_only"]


def test_ops_globs_select_and_freeze_and_a_typo_is_an_error():
    g = conv_relu_fc()
    g.operations[3].name = "classifier"
    only_fc = build_training_graph(g, TrainConfig(train=("ops:classifier",)))
    assert only_fc.trainable_ops == {3} and 0 not in only_fc.backward_ops
    by_type = build_training_graph(g, TrainConfig(train=("ops:Conv*",)))
    assert by_type.trainable_ops == {0}
    frozen = build_training_graph(g, TrainConfig(freeze=("ops:#0",)))
    assert frozen.trainable_ops == {3}
    named = build_training_graph(g, TrainConfig(freeze=("params:w*",)))
    assert sorted(named.graph.operands[w].name for w in named.grad) == ["b0", "b1"]
    with pytest.raises(ConfigError, match="matches no op"):
        build_training_graph(g, TrainConfig(train=("ops:nothing*",)))
    r = _cli("analyze", MNIST, "--freeze", "params:nothing")
    assert r.exit_code == 2 and r.output.count("\n") == 1 and "matches no weight" in r.output


@pytest.mark.parametrize("args", [["--train", "ops:nothing*"], ["--train", "params:nothing*"], ["--lora", "4"]])
def test_a_selection_that_matches_nothing_suggests_inspect_on_the_file_itself(tmp_path, args):
    # the line said "`memplan inspect MODEL` lists them": a command that does not run as printed
    import shlex
    import shutil

    model = tmp_path / "my model's copy.circle"
    shutil.copy(MNIST, model)
    r = _cli("analyze", str(model), *args)
    assert r.exit_code == 2 and r.output.count("\n") == 1, r.output
    hint = r.output.split("`")[1]
    assert hint == f"memplan inspect {shlex.quote(str(model))}"
    words = shlex.split(hint)  # as a shell reads it
    ran = _cli(*words[1:])
    assert words[0] == "memplan" and ran.exit_code == 0 and "Conv2D" in ran.output, ran.output


@pytest.mark.parametrize("profile", ["onert", "nntrainer"])
def test_runtimes_that_train_whole_ops_refuse_weight_level_modes(profile):
    r = _cli("analyze", MNIST, "-p", profile, "--train", "biases")
    assert r.exit_code == 2 and "need the memplan profile" in r.output and "Traceback" not in r.output
    # an op-level selection they can express
    assert _cli("analyze", MNIST, "-p", profile, "--freeze", "ops:#0").exit_code == 0


def test_frozen_everything_is_forward_only_and_says_so():
    r = analyze(MNIST, batch_size=2, trainable_ops="none")
    assert r.report["forward_only"]
    cats = r.report["categories"]
    assert cats["gradient"]["naive"] == cats["back-prop"]["naive"] == cats["opt-variable"]["naive"] == 0
    out = " ".join(_cli("analyze", MNIST, "-b", "2", "-t", "none").output.split())  # prose wraps at 80
    assert "nothing trains" in out and "forward pass and the loss only" in out


@pytest.mark.parametrize("model,args", [(MNIST, ["--train", "biases"]), (MNIST, ["--freeze", "ops:#0"]),
                                        (BERT, ["--train", "biases"]),
                                        (BERT, ["--freeze", "ops:*attention*"])])
def test_verify_runs_the_modes_and_frozen_weights_stay_bit_identical(model, args):
    r = _cli("verify", model, "-b", "2", "-O", "adam", *args, "-f", "json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["passed"] and d["weights_updated"] > 0 and d["frozen_weights_unchanged"] > 0
    assert d["config"]["train"] + d["config"]["freeze"] == [a for a in args if not a.startswith("--")]


# ---- LoRA ---------------------------------------------------------------------------------------
def _one_projection():
    """x(2,8) -MatMul(q_proj.weight 8x8)-> y(2,8): one attention projection."""
    from memplan_cli.ir.graph import Graph, Operand, Operation

    ops = [Operand(0, "x", (2, 8), is_input=True), Operand(1, "q_proj.weight", (8, 8), is_const=True),
           Operand(2, "y", (2, 8), is_output=True)]
    g = Graph(ops, [Operation(0, "MatMul", [0, 1], [2], name="q_proj")], [0], [2])
    g.verify()
    return g


def test_lora_by_hand_on_one_projection():
    """r = 2: A [8, 2] and B [2, 8] train (64 B each, Adam: twice that in state); W gets no gradient.
    Kept for backward: x (for dA = x^T da, 64 B) and a = x A (for dB = a^T du, 16 B); the frozen
    projection keeps nothing (no dW, and x is an input: no dx)."""
    tg = build_training_graph(_one_projection(), TrainConfig(optimizer="adam", lora_rank=2))
    g = tg.graph
    assert sorted(g.operands[w].name for w in tg.grad) == ["q_proj.weight.lora_A", "q_proj.weight.lora_B"]
    bl = tg.to_buffer_list()
    by_cat = {}
    for b in bl.buffers:
        by_cat[b.category] = by_cat.get(b.category, 0) + b.size
    assert by_cat["gradient"] == 64 + 64 and by_cat["opt-variable"] == 2 * 128
    # activations kept for backward (weights are in memory anyway)
    kept = {g.operations[k].name: sorted(g.operands[i].name for i in tg.rules[k].kept_forward()
                                         if not g.operands[i].is_const)
            for k in tg.backward_ops if k < tg.model_ops}
    assert kept["q_proj.lora_A"] == ["x"] and kept["q_proj.lora_B"] == ["q_proj.lora_a"]
    assert kept.get("q_proj", []) == []  # the frozen projection: nothing (and it may get no backward at all)
    assert g.operands[1].index not in tg.grad and 0 not in tg.bp


def test_lora_on_real_transformer_exports_and_verify():
    for path, n in (("tests/corpus/llama_tiny_dynamo.onnx", 2), ("tests/corpus/bert_tiny_dynamo.onnx", 2)):
        r = analyze(path, batch_size=2, optimizer="adam", lora=8 if "llama" in path else 4)
        tg = r.analysis.buffers.training_graph
        adapters = tg.lora.adapters
        assert len(adapters) == n  # q and v of the one block
        rank = r.report["config"]["lora"]["rank"]
        want = sum(_align(4 * a["in"] * rank) + _align(4 * rank * a["out"]) for a in adapters)
        assert r.report["categories"]["gradient"]["naive"] == want
        assert r.report["categories"]["opt-variable"]["naive"] == 2 * want
        out = _cli("verify", path, "-b", "2", "-O", "adam", "--lora", str(rank), "-f", "json").output
        d = json.loads(out)
        assert d["passed"] and d["weights_updated"] == 2 * n and d["frozen_weights_unchanged"] > 0


def test_lora_targets_and_refusals():
    r = _cli("analyze", "sample_models/mobilenetv2.circle", "--lora", "4")
    assert r.exit_code == 2 and "--lora-targets" in r.output and r.output.count("\n") == 1
    r = _cli("analyze", "sample_models/mobilenetv2.circle", "--lora", "4", "--lora-targets", "Conv2D")
    assert r.exit_code == 2 and "no MatMul / FullyConnected" in r.output
    ok = analyze("sample_models/mobilenetv2.circle", batch_size=2, lora=4, lora_targets="FullyConnected")
    assert len(ok.analysis.buffers.training_graph.lora.adapters) == 1
    r = _cli("analyze", "tests/corpus/llama_tiny_dynamo.onnx", "--lora", "4", "-p", "onert")
    assert r.exit_code == 2 and "need the memplan profile" in r.output
    with pytest.raises(ConfigError, match="needs --lora"):
        TrainConfig(lora_targets=("MatMul",))


def test_bias_only_on_a_model_without_biases_is_refused():
    r = _cli("analyze", "tests/corpus/llama_tiny_dynamo.onnx", "--train", "biases")
    assert r.exit_code == 2 and "has no biases" in r.output and r.output.count("\n") == 1


def test_lora_combines_with_a_remat_budget():
    """The remat problem sees the adapters (its ops are the training graph's): a budget under the
    LoRA plan is planned, and verify runs the remat plan bit for bit."""
    from tests.remat.plain import plain_plan

    plain = plain_plan(BERT, 16, lora=4)  # what memplan plans without a budget
    r = analyze(BERT, batch_size=16, optimizer="adam", lora=4, budget=plain * 97 // 100)
    assert r.report["remat"]["fits"] and r.planned <= plain * 97 // 100
    v = _cli("verify", BERT, "-b", "16", "-O", "adam", "--lora", "4", "--budget", str(plain * 97 // 100))
    assert v.exit_code == 0 and "bit for bit" in v.output, v.output


def test_a_lora_type_target_skips_ops_without_a_weight():
    """`--lora-targets MatMul` takes every MatMul with a constant weight (Llama's projections) and
    skips attention's activation x activation products; an empty selector glob is refused."""
    r = analyze("tests/corpus/llama_tiny_dynamo.onnx", batch_size=2, lora=2, lora_targets="MatMul")
    tg = r.analysis.buffers.training_graph
    assert len(tg.lora.adapters) == 8  # q, k, v, o, gate, up, down, lm_head
    with pytest.raises(ConfigError, match="expected biases"):
        TrainConfig(train=("ops:",))
