"""The whole pipeline on a hand-built graph: the complete buffer list, derived by hand."""
import numpy as np
import pytest

from memplan_cli.check.schedule import check_schedule
from memplan_cli.config import TrainConfig
from memplan_cli.errors import ConfigError, UnsupportedOpError
from memplan_cli.ir.graph import Graph, Operand, Operation
from memplan_cli.passes.pipeline import build_training_graph
from memplan_cli.profiles.memplan import PROFILE
from tests.passes.graphs import chain, conv_relu_fc

# Steps of conv_relu_fc with MSE (derived by hand from the rules):
#  0 fwd Conv(+ReLU6): x w0 b0 -> c0, relu mask   7 calcDerivative FC: dy, w1 -> df
#  1 fwd Relu: c0 -> r (in place over c0)        8 applyGradient FC
#  2 fwd Reshape: r -> f (a view of r)           9 calcDerivative Reshape: df -> dr (in place)
#  3 fwd FC: f w1 b1 -> y                        10 calcDerivative Relu: r, dr -> dc0 (in place)
#  4 fwd Loss: y label -> loss                   11 calcGradient Conv: mask, dc0, x -> dc0, dw0, db0
#  5 calcDerivative Loss: y label -> dy (over label)   12 applyGradient Conv
#  6 calcGradient FC: dy, f -> dw1, db1
STEPS = [("forward", 0), ("forward", 1), ("forward", 2), ("forward", 3), ("forward", 4),
         ("calcDerivative", 4), ("calcGradient", 3), ("calcDerivative", 3), ("applyGradient", 3),
         ("calcDerivative", 2), ("calcDerivative", 1), ("calcGradient", 0), ("applyGradient", 0)]

# name: (category, aligned bytes, first, last)
SGD_BUFFERS = {
    "x": ("non-const", 2 * 8 * 8 * 3 * 4, 0, 11),  # read by the Conv's calcGradient (dW = X * dY)
    "w0": ("trainable", 432, 0, 12), "b0": ("trainable", 16, 0, 12),
    "shape": ("trainable", 16, 0, 12),  # int32[2]: 8 B aligned to 16
    "w1": ("trainable", 10240, 0, 12), "b1": ("trainable", 48, 0, 12),  # 40 B -> 48
    # c0, r (in place) and f (view): one buffer, r read by the Relu's derivative at step 10
    "c0": ("non-const", 2048, 0, 10),
    # ReLU6 derivative from 1 bit per element: 512 elements -> 64 B, forward to the Conv's backward
    "#0:relu_mask": ("extra", 64, 0, 11),
    "y": ("non-const", 80, 3, 5),
    "label": ("non-const", 80, 4, 7),  # dy is written over the label and read by the FC until step 7
    "loss": ("non-const", 16, 4, 12),  # read after the step
    "w1:grad": ("gradient", 10240, 6, 8), "b1:grad": ("gradient", 48, 6, 8),
    "f:bp": ("back-prop", 2048, 7, 11),  # df, dr, dc0: one buffer (in place), last read at step 11
    "w0:grad": ("gradient", 432, 11, 12), "b0:grad": ("gradient", 16, 11, 12),
}
ADAM_STATE = {f"{w}:{s}": ("opt-variable", SGD_BUFFERS[w][1], 0, 12)
              for w in ("w0", "b0", "w1", "b1") for s in ("m", "v")}


def _buffers(bl):
    return {b.name: (b.category, b.size, b.first, b.last) for b in bl.buffers}


@pytest.mark.parametrize("optimizer,expected", [("sgd", SGD_BUFFERS), ("adam", {**SGD_BUFFERS, **ADAM_STATE})])
def test_complete_buffer_list_by_hand(optimizer, expected):
    bl = PROFILE.build(conv_relu_fc(), TrainConfig(optimizer=optimizer))
    assert [(s.kind, s.op) for s in bl.steps] == STEPS
    assert _buffers(bl) == expected
    owners = {b.name: b.owner for b in bl.buffers}
    assert owners["c0"] == "#0 Conv2D" and owners["w1:grad"] == "#3 FullyConnected"
    assert owners["x"] == owners["w0"] == "#0 Conv2D" and owners["w1"] == "#3 FullyConnected"
    assert owners["label"] == "#4 Loss (mse)"
    check_schedule(bl.training_graph, bl)


def test_exact_reads_and_writes_of_the_backward_steps():
    tg = build_training_graph(conv_relu_fc(), TrainConfig())
    names = lambda ids: [tg.tensors[t].name for t in ids]  # noqa: E731
    s = tg.steps
    assert (names(s[6].reads), names(s[6].writes)) == (["y:bp", "f"], ["w1:grad", "b1:grad"])
    assert (names(s[7].reads), names(s[7].writes)) == (["y:bp", "w1"], ["f:bp"])
    assert (names(s[8].reads), names(s[8].writes)) == (["w1:grad", "w1", "b1:grad", "b1"], ["w1", "b1"])
    assert (names(s[11].reads), names(s[11].writes)) == (["#0:relu_mask", "c0:bp", "x"],
                                                         ["c0:bp", "w0:grad", "b0:grad"])
    # the aliases behind the folded buffers
    root = lambda n: tg.tensors[tg.root(next(t.id for t in tg.tensors if t.name == n))].name  # noqa: E731
    assert [root(n) for n in ("r", "f", "c0:bp", "r:bp", "y:bp")] == ["c0", "c0", "f:bp", "f:bp", "label"]


def test_naive_sums_per_category():
    # naive: every tensor its own bytes, the in-place and view aliases too (r, f; dy, dr, dc0)
    bl = PROFILE.build(conv_relu_fc(), TrainConfig(optimizer="adam"))
    naive = bl.naive_by_category()
    assert naive["trainable"] == 432 + 16 + 16 + 10240 + 48
    assert naive["gradient"] == 432 + 16 + 10240 + 48
    assert naive["opt-variable"] == 2 * naive["gradient"]
    # x, c0, r, f, y, label, loss
    assert naive["non-const"] == 1536 + 3 * 2048 + 80 + 80 + 16
    # dy (written over the label), df, dr, dc0
    assert naive["back-prop"] == 80 + 3 * 2048
    assert naive["disposable"] == 0 and naive["extra"] == 64
    # the buffers fold the aliases: what in-place and views save is the difference
    folded = {c: sum(b.size for b in bl.buffers if b.category == c) for c in naive}
    assert naive["non-const"] - folded["non-const"] == 2 * 2048  # r, f
    assert naive["back-prop"] - folded["back-prop"] == 80 + 2 * 2048  # dy, dr, dc0 (df holds them)
    assert bl.naive_total() == sum(naive.values())


def test_last_n_trainable_ops_counts_every_op_and_prunes_the_backward_region():
    # the last 2 model ops are Reshape and FC: only the FC trains; nothing before it runs backward
    tg = build_training_graph(conv_relu_fc(), TrainConfig(trainable=2))
    assert tg.trainable_ops == {3}
    assert tg.backward_ops == {3, 4}
    assert [(s.kind, s.op) for s in tg.steps[5:]] == [("calcDerivative", 4), ("calcGradient", 3), ("applyGradient", 3)]
    assert not any(t.category == "back-prop" and t.operand == 6 for t in tg.tensors)  # no back-prop for f


def test_no_trainable_op_means_forward_only():
    tg = build_training_graph(conv_relu_fc(), TrainConfig(trainable="none"))
    assert {s.kind for s in tg.steps} == {"forward"}


def test_trainable_list_out_of_range_is_a_config_error():
    with pytest.raises(ConfigError):
        build_training_graph(conv_relu_fc(), TrainConfig(trainable=(9,)))


def test_op_without_backward_rule_inside_the_region_names_op_and_index():
    g = chain("NoSuchOp")  # an op type no module registers
    with pytest.raises(UnsupportedOpError, match=r"op #1 NoSuchOp .*backward region"):
        build_training_graph(g, TrainConfig())


def test_op_without_backward_rule_before_the_region_runs_forward_only():
    g = Graph([Operand(0, "x", (2, 8), is_input=True), Operand(1, "e", (2, 8)),
               Operand(2, "w", (4, 8), is_const=True), Operand(3, "y", (2, 4))],
              [Operation(0, "NoSuchOp", [0], [1]), Operation(1, "FullyConnected", [1, 2, -1], [3])], [0], [3])
    tg = build_training_graph(g, TrainConfig())
    assert tg.backward_ops == {1, 2}
    assert [(s.kind, s.op) for s in tg.steps if s.op == 0] == [("forward", 0)]


def test_profile_options_are_checked():
    with pytest.raises(ConfigError, match="unknown memplan profile option 'inplce'"):
        PROFILE.build(conv_relu_fc(), TrainConfig(), inplce=False)


def test_rules_can_be_overridden_by_a_profile():
    from memplan_cli.passes.rules import OpRule, StepIO

    def relu_keeping_input(op, ctx):
        x, y = op.inputs[0], op.outputs[0]
        return OpRule(forward=StepIO([("fwd", x)], [("fwd", y)]),
                      calc_derivative=StepIO([("fwd", x), ("bp", y)], [("bp", x)]))

    tg = build_training_graph(conv_relu_fc(), TrainConfig(), rules={"Relu": relu_keeping_input})
    step = next(s for s in tg.steps if s.kind == "calcDerivative" and s.op == 1)
    assert [tg.tensors[t].name for t in step.reads] == ["c0", "r:bp"]


@pytest.mark.parametrize("op_type", ["Max", "Add", "Pow"])
def test_two_inputs_read_by_one_step_never_share_its_output_memory(tmp_path, op_type):
    """Y = op(x0, x1) with both graph inputs first read at step 0: Y may take x0's memory in place,
    and then x1 must not take that memory too (both are live while the step reads them). The onnx
    package's pytorch-operator Max / Min / Pow models failed verify this way."""
    from onnx import helper

    from memplan_cli.loaders import load_model
    from tests.ops.gradcheck import check_verify, onnx_model, save

    p = save(tmp_path, onnx_model([helper.make_node(op_type, ["x0", "x1"], ["y"])],
                                  [("x0", (3, 4)), ("x1", (3, 4))], [("y", (3, 4))], {}))
    tg = build_training_graph(load_model(p), TrainConfig(optimizer="sgd", loss="mse"))  # every saving rule on
    x0, x1 = (next(t.id for t in tg.tensors if t.name == n) for n in ("x0", "x1"))
    assert tg.root(x0) != tg.root(x1)
    check_verify(p)


def test_a_rule_that_leaves_a_parameter_untrained_is_refused(tmp_path):
    """A training rule that ignores a parameter on the path to the loss would silently leave its
    gradient out (BatchNormalization's rule did so for a standardized weight): one clear error."""
    from onnx import helper

    from memplan_cli.loaders import load_model
    from memplan_cli.ops import rule as R
    from tests.ops.gradcheck import onnx_model, save

    p = save(tmp_path, onnx_model([helper.make_node("Mul", ["x", "w"], ["y"])], [("x", (2, 3))], [("y", (2, 3))],
                                  {"w": np.ones((1, 3), np.float32)}))

    def activations_only(op, ctx):  # a Mul rule written for two activations
        r = R.OpRule(forward=R.forward_io(op))
        r.calc_derivative = R.StepIO([("bp", op.outputs[0])], [("bp", op.inputs[0])])
        return r

    with pytest.raises(UnsupportedOpError, match=r"reads parameter 'w' \(input 1\)"):
        build_training_graph(load_model(p), TrainConfig(optimizer="sgd", loss="mse"), rules={"Mul": activations_only})
    build_training_graph(load_model(p), TrainConfig(optimizer="sgd", loss="mse"))  # the real rule trains w


def test_a_parameter_read_only_for_its_shape_is_not_refused(tmp_path):
    """timm's weight-standardised convolutions reshape the standardised weight back with
    `reshape_as(self.weight)`: TorchScript writes Shape(weight) -> Reshape. An op that reads a
    parameter only for its shape (a `no_grad` op) contributes no gradient and needs none, as in
    autograd; the weight trains through the ops that read its values."""
    from onnx import helper

    from memplan_cli.loaders import load_model
    from tests.ops.gradcheck import check_verify, onnx_model, save

    p = save(tmp_path, onnx_model(
        [helper.make_node("Mul", ["x", "w"], ["t"]), helper.make_node("Shape", ["w"], ["s"]),
         helper.make_node("Reshape", ["t", "s"], ["y"])],
        [("x", (1, 3))], [("y", (2, 3))], {"w": np.ones((2, 3), np.float32)}))
    tg = build_training_graph(load_model(p), TrainConfig(optimizer="sgd", loss="mse"))
    w = next(o.index for o in tg.graph.operands if o.name == "w")
    assert w in tg.grad  # trained through the Mul
    check_verify(p)


def test_a_scalar_the_file_names_a_parameter_trains(tmp_path):
    """A 0-d float constant is an exporter's scalar (an epsilon, a scale) and stays frozen, unless the
    file names it a parameter: a TorchScript export's state-dict initializer (NFNet's
    `skipinit_gain = nn.Parameter(torch.tensor(0.))`), not a value it made itself (`/m/..._output_0`)."""
    from onnx import helper

    from memplan_cli.loaders import load_model
    from tests.ops.gradcheck import check_verify, onnx_model, save

    m = onnx_model([helper.make_node("Mul", ["x", "blocks.0.skipinit_gain"], ["t"]),
                    helper.make_node("Mul", ["t", "/blocks/Constant_output_0"], ["y"])],
                   [("x", (2, 3))], [("y", (2, 3))],
                   {"blocks.0.skipinit_gain": np.array(0.5, np.float32),
                    "/blocks/Constant_output_0": np.array(2.0, np.float32)})
    m.producer_name = "pytorch"
    p = save(tmp_path, m)
    tg = build_training_graph(load_model(p), TrainConfig(optimizer="adam", loss="mse"))
    names = {tg.graph.operands[w].name for w in tg.grad}
    assert names == {"blocks.0.skipinit_gain"}
    check_verify(p, "-O", "adam")
