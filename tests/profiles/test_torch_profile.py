"""The torch profile on tiny hand-built graphs: each expected figure is derived by hand from the
profile's rules (profiles/torch/__init__.py's docstring), which were read off torch 2.14's allocator events
(devtools/torch_oracle.py checks them against the real thing when torch is installed)."""
import json
import pathlib

import jsonschema
import pytest
from click.testing import CliRunner

from memplan_cli.analysis import analyze_graph
from memplan_cli.cli import main
from memplan_cli.config import TrainConfig
from memplan_cli.errors import UnsupportedOpError
from memplan_cli.ir.graph import Graph, Operand, Operation
from memplan_cli.schemas import load_schema

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _mlp():
    """x (2,4) -> FC(w1 (3,4)) -> h (2,3) -> Relu -> r -> FC(w2 (2,3)) -> y (2,2); float32, no biases."""
    ops = [Operation(0, "FullyConnected", [0, 1], [2], {"trans_b": True}, name="fc1"),
           Operation(1, "Relu", [2], [3], name="relu"),
           Operation(2, "FullyConnected", [3, 4], [5], {"trans_b": True}, name="fc2")]
    g = Graph([Operand(0, "x", (2, 4), is_input=True), Operand(1, "w1", (3, 4), is_const=True),
               Operand(2, "h", (2, 3)), Operand(3, "r", (2, 3)), Operand(4, "w2", (2, 3), is_const=True),
               Operand(5, "y", (2, 2), is_output=True)], ops, [0], [5])
    g.verify()
    return g


def _analyze(g, **cfg):
    return analyze_graph(g, TrainConfig(**{"loss": "cce", **cfg}), profile="torch")


def test_mlp_peak_by_hand():
    # held: w1 48 + w2 24 + x 32 + label (2 rows, int64) 16 = 120. Backward of the ReLU is the peak:
    # r (saved by fc2 and the ReLU) 24, dr 24, dh 24, w2's gradient 24, the model output y 16 and the
    # loss 4 (the training loop holds both) -> 120 + 116 = 236
    a = _analyze(_mlp())
    t = a.extras["torch"]
    assert t["peak"] == 236
    assert t["peak_op"].endswith("(relu)") and t["peak_kind"] == "calcDerivative"
    assert a.planned_total == t["peak"]  # the plan reaches the live peak: no slack is added
    assert t["split"]["parameters"] == 72 and t["split"]["batch"] == 48 and t["split"]["gradients"] == 24


def test_adam_temporaries_at_step():
    # Adam: state 2 x 72 + two 4-byte step tensors; at w2's update all gradients (72) are held, w1's
    # denom (48) is alive while w2's sqrt and quotient (24 + 24) are made: 120 + 152 + 72 + 96 + y 16
    # + loss 4 = 460 > the backward peak (236 + 152 = 388)
    t = _analyze(_mlp(), optimizer="adam").extras["torch"]
    assert t["peak"] == 460 and t["peak_kind"] == "applyGradient"
    assert t["split"]["optimizer"] == 152 + 96


def _linear_pair():
    """x (2,4) -> FC(w1 (3,4)) -> h (2,3) -> FC(w2 (2,3)) -> y (2,2)."""
    ops = [Operation(0, "FullyConnected", [0, 1], [2], {"trans_b": True}, name="fc1"),
           Operation(1, "FullyConnected", [2, 3], [4], {"trans_b": True}, name="fc2")]
    g = Graph([Operand(0, "x", (2, 4), is_input=True), Operand(1, "w1", (3, 4), is_const=True),
               Operand(2, "h", (2, 3)), Operand(3, "w2", (2, 3), is_const=True),
               Operand(4, "y", (2, 2), is_output=True)], ops, [0], [4])
    g.verify()
    return g


def _last_kind(a, name):
    b = next(b for b in a.buffers.buffers if b.name == name)
    return a.buffers.steps[b.last].kind, a.buffers.steps[b.last].label


def test_frozen_weight_keeps_no_input():
    # addmm keeps its input only for the weight's gradient: with w2 frozen (LoRA's base projections)
    # h is freed right after fc2's forward, with w2 trained it waits for fc2's backward
    assert _last_kind(_analyze(_linear_pair()), "h") == ("calcDerivative", "#1 FullyConnected (fc2)")
    assert _last_kind(_analyze(_linear_pair(), freeze=("params:w2",)), "h") == ("forward", "#1 FullyConnected (fc2)")
    # w1 frozen: nothing before fc2 requires grad, fc1 records no node and makes no gradient
    cols = _analyze(_linear_pair(), freeze=("params:w1",)).extras["per_layer_extra"]
    assert cols["#0 FullyConnected (fc1)"]["bwd_mem_out"] == 0
    assert cols["#1 FullyConnected (fc2)"]["bwd_mem_out"] == 24  # w2's gradient only, no dh


def _pool_net(n=1):
    """x (n,2,4,4) -> Conv(w (3,2,3,3)) -> c -> MaxPool 2x2 -> p (n,3,2,2) -> Reshape -> f (n,12)."""
    g = Graph([Operand(0, "x", (n, 2, 4, 4), is_input=True), Operand(1, "w", (3, 2, 3, 3), is_const=True),
               Operand(2, "c", (n, 3, 4, 4)), Operand(3, "p", (n, 3, 2, 2)),
               Operand(4, "shape", (2,), "int64", is_const=True, value=(n, 12)), Operand(5, "f", (n, 12), is_output=True)],
              [Operation(0, "Conv2D", [0, 1], [2], {"padding": "SAME", "pads": (1, 1, 1, 1), "stride": (1, 1),
                                                   "dilation": (1, 1), "kernel": (3, 3), "group": 1,
                                                   "layout": "NCHW"}, name="conv"),
               Operation(1, "MaxPool2D", [2], [3], {"kernel": (2, 2), "stride": (2, 2), "padding": "VALID",
                                                    "pads": (0, 0, 0, 0), "dilation": (1, 1), "layout": "NCHW"},
                         name="pool"),
               Operation(2, "Reshape", [3, 4], [5], name="flat")], [0], [5])
    g.verify()
    return g


def test_maxpool_keeps_int64_indices_and_reshape_is_a_view():
    cols = _analyze(_pool_net()).extras["per_layer_extra"]
    pool = cols["#1 MaxPool2D (pool)"]
    assert pool["fwd_mem_out"] == 12 * 4 and pool["fwd_mem_tmp"] == 12 * 8
    assert pool["bwd_mem_out"] == 48 * 4  # the gradient of c
    assert cols["#2 Reshape (flat)"]["fwd_mem_out"] == 0
    # one small sample through a 3x3 kernel: eager runs the slow im2col path, whose columns
    # (N x C*KH*KW x OH*OW = 1 x 18 x 16 floats = 1152 B) are made in forward and again beside the
    # weight's gradient (216) in backward; the input needs no gradient
    conv = cols["#0 Conv2D (conv)"]
    assert conv["fwd_mem_tmp"] == 1152 and conv["bwd_mem_tmp"] == 1152 and conv["bwd_mem_out"] == 216


def test_onednn_conv_scratch_at_batch_2():
    # the same net on 2 samples runs oneDNN, which rounds channels up to 16: the 2-channel input stays
    # plain (no copy), the weight copy has 16 output channels (216 * 16 / 3 = 1152) and the scratch
    # output 16 channels (2 x 1024), of which the output's own 384 are counted apart:
    # 1152 + 2048 - 384 = 2816 (> the 2048 of scratch and output together). Backward makes only the
    # weight's gradient: a copy of the incoming gradient with 16 channels (2048) beside the blocked
    # weight's gradient (1152, of which the gradient's own 216 are counted apart), then the copy out
    # (measured: `python devtools/torch_conv_sweep.py --one "n=2,c=2,h=4,o=3,k=3,s=1,p=1,xgrad=0,bias=0"
    # --events`: backward [2048, 1152, -2048, 216, -1152])
    cols = _analyze(_pool_net(2)).extras["per_layer_extra"]
    conv = cols["#0 Conv2D (conv)"]
    assert conv["fwd_mem_tmp"] == 2816 and conv["bwd_mem_tmp"] == 2048 + 1152 - 216 and conv["bwd_mem_out"] == 216


def test_op_without_torch_facts_is_estimated_and_named():
    g = Graph([Operand(0, "x", (2, 3), is_input=True), Operand(1, "y", (2, 3), is_output=True)],
              [Operation(0, "LRN", [0], [1], {"size": 3, "alpha": 1e-4, "beta": 0.75, "bias": 1.0}, name="lrn")],
              [0], [1])
    cov = _analyze(g).extras["torch"]["coverage"]
    assert [e["type"] for e in cov["estimated"]] == ["LRN"] and cov["measured"] == cov["ops"] - 1


def test_cli_analyze_and_compare(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    w = helper.make_tensor("w", TensorProto.FLOAT, [3, 4], [0.1] * 12)
    graph = helper.make_graph([helper.make_node("Gemm", ["x", "w"], ["h"], transB=1),
                               helper.make_node("Relu", ["h"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], [w])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    r = CliRunner().invoke(main, ["analyze", str(path), "-p", "torch", "-l", "cce", "-f", "json", "--by-layer"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["profile"] == "torch" and doc["totals"]["planned"] == doc["figures"]["torch"]["peak"]
    cols = {row["op"]: row for row in doc["by_layer"]["rows"]}
    assert any("fwd_mem_out" in row for row in cols.values())
    again = CliRunner().invoke(main, ["analyze", str(path), "-p", "torch", "-l", "cce", "-f", "json", "--by-layer"])
    assert again.output == r.output  # deterministic
    c = CliRunner().invoke(main, ["compare", str(path), "-l", "cce", "-f", "json"])
    assert c.exit_code == 0, c.output
    cmp = json.loads(c.output)
    jsonschema.validate(cmp, load_schema("compare"))
    assert cmp["columns"]["torch"]["total"] == doc["figures"]["torch"]["peak"]


def test_cli_refusal_is_one_line(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    # a transposed convolution with a 5x5 kernel: its oneDNN scratch was not worked out (refused by
    # its family's facts; an op with no facts at all is estimated instead, and named)
    w = helper.make_tensor("w", TensorProto.FLOAT, [3, 3, 5, 5], [0.1] * 225)
    graph = helper.make_graph([helper.make_node("ConvTranspose", ["x", "w"], ["y"], kernel_shape=[5, 5])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 8, 8])], [w])
    path = tmp_path / "convt.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    r = CliRunner().invoke(main, ["analyze", str(path), "-p", "torch"])
    assert r.exit_code == 2, r.output
    assert "unstrided ungrouped ones up to 4" in r.output and len(r.output.strip().splitlines()) == 1


def test_cli_names_estimated_ops_in_the_header_and_compare_counts_the_model_s_ops(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("LRN", ["x"], ["y"], size=3)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 4, 4])])
    path = tmp_path / "lrn.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    r = CliRunner().invoke(main, ["analyze", str(path), "-p", "torch"])
    assert r.exit_code == 0, r.output
    head = r.output.split("\n\n")[0]  # the header, above the table
    assert "\nestimated: " in head and "LRN" in head.split("\nestimated: ")[1]
    j = CliRunner().invoke(main, ["analyze", str(path), "-p", "torch", "-f", "json"])
    doc = json.loads(j.output)
    jsonschema.validate(doc, load_schema("analysis"))
    assert doc["figures"]["torch"]["coverage"]["estimated"][0]["type"] == "LRN"
    c = CliRunner().invoke(main, ["compare", str(path), "-f", "json"])
    checked = json.loads(c.output)["columns"]["torch"]["checked"]
    assert checked.startswith("measured rules cover 1 of 2 eager ops of this model; 1 estimated, no measured rule "
                              "covering them (LRN)")
