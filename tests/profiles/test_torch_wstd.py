"""Weight-standardised convolutions (timm's StdConv2d / ScaledStdConv2d: the weight reshaped to
(1, out, -1), `F.batch_norm` in training mode over it without running statistics, reshaped back with
`reshape_as(weight)`, then conv2d) as the torch profile replays them, on hand-built graphs written
the way TorchScript exports them. devtools/torch_family_zoo.py checks whole networks (fam_stdconv,
fam_scaled_stdconv, fam_bit, fam_nf_*) against torch's allocator."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import helper  # noqa: E402

from memplan_cli.analysis import analyze  # noqa: E402
from memplan_cli.config import TrainConfig  # noqa: E402
from tests.ops.gradcheck import onnx_model, save  # noqa: E402

OUT, IN, K = 8, 4, 3
W_BYTES = OUT * IN * K * K * 4


def _std_conv(tmp_path, stem=False):
    """TorchScript's StdConv2d: Reshape(w, (1, OUT, -1)); the exporter's input_mean / input_var
    (ReduceMean over a transposed copy, and the variance written out) that only make the running
    statistics; BatchNormalization(training_mode=1) with ones / zeros; Reshape(., Shape(w)); Conv
    (without a bias) of a 1x1 convolution's output, or of the graph's input (`stem`)."""
    nodes = [helper.make_node("Reshape", ["w", "s3"], ["wr"]),
             helper.make_node("Reshape", ["wr", "s3"], ["wr2"]),
             helper.make_node("Transpose", ["wr2"], ["wt"], perm=[0, 2, 1]),
             helper.make_node("ReduceMean", ["wt", "ax"], ["mean"], keepdims=0),
             helper.make_node("ReduceMean", ["wt", "ax"], ["mean1"], keepdims=1),
             helper.make_node("Sub", ["wt", "mean1"], ["d"]),
             helper.make_node("Mul", ["d", "d"], ["d2"]),
             helper.make_node("ReduceMean", ["d2", "ax"], ["var"], keepdims=0),
             helper.make_node("BatchNormalization", ["wr", "ones", "zeros", "mean", "var"], ["wn", "rm", "rv"],
                              epsilon=1e-5, momentum=1.0, training_mode=1),
             helper.make_node("Shape", ["w"], ["ws"]),
             helper.make_node("Reshape", ["wn", "ws"], ["wc"]),
             helper.make_node("Conv", ["x", "w0"], ["a"], kernel_shape=[1, 1]),
             helper.make_node("Conv", ["x" if stem else "a", "wc"], ["y"], kernel_shape=[K, K], pads=[1, 1, 1, 1])]
    inits = {"w": np.ones((OUT, IN, K, K), np.float32), "w0": np.ones((IN, 2, 1, 1), np.float32),
             "s3": np.array([1, OUT, -1], np.int64), "ax": np.array([0, 1], np.int64),
             "ones": np.ones(OUT, np.float32), "zeros": np.zeros(OUT, np.float32)}
    if stem:
        nodes.pop(-2)
        del inits["w0"]
    x = (2, IN if stem else 2, 8, 8)
    return save(tmp_path, onnx_model(nodes, [("x", x)], [("y", (2, OUT, 8, 8))], inits))


def _analyze(path, **cfg):
    return analyze(path, TrainConfig(**{"loss": "mse", "optimizer": "sgd", **cfg}), profile="torch")


def test_batch_norm_without_running_statistics_runs_alone(tmp_path):
    """The exporter's input_mean / input_var chains make only BatchNormalization's running statistics
    (outputs 1 and 2, read by nobody): eager's native_batch_norm computes its own and nothing else."""
    a = _analyze(_std_conv(tmp_path), batch_size=2)
    cols = a.extras["per_layer_extra"]
    assert not [k for k in cols if k.split()[1] in ("ReduceMean", "Mean", "Var", "Sub", "Transpose")]
    bn = next(v for k, v in cols.items() if k.split()[1] == "BatchNormalization")
    # its output and save_mean / save_invstd (the weight-sized output is the standardised weight)
    assert bn["fwd_mem_out"] == W_BYTES and bn["fwd_mem_tmp"] == 2 * OUT * 4


def test_the_standardised_weight_is_held_until_the_convolution_backward(tmp_path):
    """convolution saves its weight as well as its input (derivatives.yaml: convolution_backward(grad,
    input, weight, ...)): a weight computed each step (batch_norm's output) lives until the
    convolution's backward, not only until its forward."""
    a = _analyze(_std_conv(tmp_path), batch_size=2)
    steps = a.buffers.steps
    wn = next(b for b in a.buffers.buffers if b.name == "wn")
    assert wn.size == W_BYTES
    assert steps[wn.last].kind != "forward" and "Conv" in steps[wn.last].label


def _conv_backward(a):
    """The last convolution's backward steps: {kind: [buffers made there]} ("calcDerivative", the
    input's gradient; "calcGradient", the weight's)."""
    steps = a.buffers.steps
    last = max((s.label for s in steps if "Conv2D" in s.label), key=lambda lb: int(lb.split()[0][1:]))
    at = {i: s.kind for i, s in enumerate(steps) if s.kind != "forward" and s.label == last}
    made = {}
    for b in a.buffers.buffers:
        if b.first in at:
            made.setdefault(at[b.first], []).append(b)
    return made


def test_a_computed_weight_gets_its_gradient_in_the_weight_phase(tmp_path):
    """mkldnn_convolution_backward (ATen's mkldnn/Conv.cpp) makes the input's gradient when
    output_mask[0], then the weight's and the bias's when output_mask[1] or [2], each phase with its
    scratch: a weight computed each step (requires grad, no parameter) gets its gradient in the second
    phase, with that phase's scratch, as a parameter does; nothing of it exists in the first."""
    made = _conv_backward(_analyze(_std_conv(tmp_path), batch_size=2))
    first = {b.name for b in made["calcDerivative"]}
    second = {b.name for b in made["calcGradient"]}
    assert "wc:grad" in second and "wc:grad" not in first
    assert "a:grad" in first
    assert any(n.endswith(":scratch") for n in second)  # the weight phase's scratch, with no bias to train


def test_a_computed_weight_on_an_input_without_gradient_runs_the_weight_phase_only(tmp_path):
    """A convolution of the batch (a stem) whose weight is computed each step: output_mask[0] is false,
    so no input-gradient phase and none of its scratch; the weight phase runs."""
    made = _conv_backward(_analyze(_std_conv(tmp_path, stem=True), batch_size=2))
    assert not [b.name for b in made.get("calcDerivative", ()) if b.name.endswith(":scratch")]
    second = {b.name for b in made["calcGradient"]}
    assert "wc:grad" in second and any(n.endswith(":scratch") for n in second)


def test_a_weight_read_through_a_view_keeps_its_gradient_to_the_end_of_the_step(tmp_path):
    """batch_norm's backward makes the gradient of `weight.reshape(1, out, -1)`; the reshape's backward
    hands it on as a view, and AccumulateGrad keeps it as `weight.grad` until the optimizer step:
    a gradient, held to the end, not a back-prop tensor freed after the reshape's backward."""
    a = _analyze(_std_conv(tmp_path), batch_size=2, optimizer="adam")
    end = len(a.buffers.steps) - 1
    grads = [b for b in a.buffers.buffers if b.category == "gradient" and b.size == W_BYTES]
    assert len(grads) == 1 and grads[0].last == end


def _corpus(name):
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "corpus"
    params = {d["file"]: d["params"] for d in json.loads((root / "exports.json").read_text())}
    return str(root / name), params[name]


@pytest.mark.parametrize("exporter", ["ts", "dynamo"])
def test_a_real_weight_standardised_export_trains_every_parameter(exporter):
    """timm's StdConv2d and ScaledStdConv2d exported by torch.onnx (tests/corpus/wstd_tiny_*): both
    exports analyse; each parameter gets its gradient (weights, the gain, biases: 4 bytes per
    parameter torch counts), also where the dynamo exporter's optimizer folded a standardised weight
    with its gain into one constant."""
    path, params = _corpus(f"wstd_tiny_{exporter}.onnx")
    a = _analyze(path, batch_size=2, optimizer="adam", loss="cce")
    grads = sum(b.size for b in a.buffers.buffers if b.category == "gradient")
    assert grads == 4 * params
    # held: the parameters alone; the ones / zeros the exporters write for batch_norm's None weight and
    # bias are no tensors in eager (BatchNormalization's `none_fills`)
    assert sum(b.size for b in a.buffers.buffers if b.category == "trainable") == 4 * params


def test_both_exports_of_a_weight_standardised_network_replay_alike():
    """What eager runs does not depend on the exporter: the dynamo export's folded standardisations,
    run again (reshape, batch_norm with `gain * scale`, reshape back), give the TorchScript export's
    figure, up to the `gain * scale` tensor TorchScript's export lets the loader fold (16 floats)."""
    ts, _ = _corpus("wstd_tiny_ts.onnx")
    dyn, _ = _corpus("wstd_tiny_dynamo.onnx")
    a_ts = _analyze(ts, batch_size=2, optimizer="adam", loss="cce")
    a_dyn = _analyze(dyn, batch_size=2, optimizer="adam", loss="cce")
    assert 0 <= a_dyn.extras["torch"]["peak"] - a_ts.extras["torch"]["peak"] <= 16 * 4
    cov = a_dyn.extras["torch"]["coverage"]
    # batch_norm is what made the folded getitem, as the file no longer records: named as estimated
    assert {e["type"] for e in cov["estimated"]} <= {"BatchNormalization", "Mul"}
    assert sum(e["type"] == "BatchNormalization" for e in cov["estimated"]) == 2


@pytest.mark.parametrize("chain, reads_back", [
    (("stem.weight", "view", "getitem", "view_1"), True),  # StdConv2d: batch_norm's getitem
    (("stem.weight", "group_norm", "view", "view_1"), True),  # group_norm over the reshaped weight
    (("stem.weight", "mean", "sub", "var", "add", "sqrt", "expand", "view", "view_1"), True),  # (w - mean) / std
    (("stem.weight", "view", "view_1"), False),  # views alone: the weight itself, reshaped
    (("stem.weight", "stem.mask", "mul", "view_1"), False),  # a buffer in the chain (a pruning mask)
])
def test_which_folded_weight_computations_are_run_again(chain, reads_back):
    """The dynamo exporter's folded `folded_from` of a convolution's weight, as the file records it:
    a chain that computes from the convolution's own weight and nothing but its parameters is run
    again (batch_norm over the reshaped weight, named as estimated); a chain of views is the weight
    itself, and one that reads a buffer is left as the file has it."""
    from memplan_cli.loaders import load_model
    from memplan_cli.profiles.torch.export import eager_graph

    path, _ = _corpus("wstd_tiny_dynamo.onnx")
    g = load_model(path, batch_size=2)
    md = g.metadata["torch_export"]
    md["signature"] = {**md["signature"], "b_stem_mask": ("BUFFER", "stem.mask")}
    md["folded_from"] = {**md["folded_from"], "view_1": chain}
    names = {op.name for op in eager_graph(g).operations}
    assert ("view_1:batch_norm" in names) == reads_back
    assert "view_4:batch_norm" in names  # ScaledStdConv2d's, untouched
