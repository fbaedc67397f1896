"""`--profile torch` where a TorchScript file leaves out what eager holds and cannot say so itself:
a module's causal table folded to the slice its forward reads (profiles/torch/attention.py
`folded_causal_tables`: ImageGPT's and OpenAI GPT's non-persistent `bias`), and the model's output made
as a view of a larger tensor, which a `.contiguous()` the file does not record would have copied
(profiles/torch/replay.py `dropped_contiguous`, `output_views`: ProphetNet's `predict_logits[:, 0]`), and a
broadcast view a module hands to several submodules (`handed_down`, `handed_views`: MPNet's position bias).
Both are named with the peak had it happened; the figure does not move. Tiny hand-built ONNX graphs
as torch.onnx's TorchScript exporter writes them (producer "pytorch", Constant nodes under module
scopes; no torch needed)."""
import json

import jsonschema
import numpy as np
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from memplan_cli.cli import main
from memplan_cli.profiles.torch.figures import coverage_line
from memplan_cli.report.table import torch_causal_tables_note, torch_copied_views_note
from memplan_cli.schemas import load_schema
from tests.profiles.test_torch_export import _save, _signature
from tests.profiles.test_torch_export import _torch as _torch_and_analysis

F = TensorProto.FLOAT


def _const(name, arr):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(arr)), name=name[:-9])


def _save_ts(tmp_path, name, nodes, inits, x_shape, y_shape, producer="pytorch", sig=None):
    """A file as torch.onnx's TorchScript exporter names itself (producer "pytorch")."""
    return _save(tmp_path, name, nodes, inits, x_shape, y_shape, sig=sig, producer=producer)


def _masked(tmp_path, name, rows=256, tokens=8, start=0, mask_dtype=bool, sig=None, mask_dims=4):
    """x (2, T, 16) plus a learned position table of `rows` rows read at positions start .. start + T - 1
    (a Gather of a constant), scores x x^T masked by a (1, 1, T, T) constant under `/m/h.0/attn`
    (a Where; `mask_dtype` float: OpenAI GPT's `w * b`), then a Linear to 10 classes of the mean."""
    t = tokens
    tri = np.tril(np.ones((t, t), mask_dtype)).reshape((1,) * (mask_dims - 2) + (t, t))
    nodes = [_const("/m/Constant_output_0", np.arange(start, start + t, dtype=np.int64)),
             helper.make_node("Gather", ["m.wpe.weight", "/m/Constant_output_0"], ["pos"], name="/m/wpe/Gather"),
             helper.make_node("Add", ["x", "pos"], ["h"], name="/m/Add"),
             helper.make_node("MatMul", ["h", "m.q.weight"], ["q"], name="/m/h.0/attn/q/MatMul"),
             helper.make_node("Transpose", ["h"], ["hT"], perm=[0, 2, 1], name="/m/h.0/attn/Transpose"),
             helper.make_node("MatMul", ["q", "hT"], ["s3"], name="/m/h.0/attn/MatMul"),
             _const("/m/h.0/attn/Constant_output_0", np.array([1], np.int64)),
             helper.make_node("Unsqueeze", ["s3", "/m/h.0/attn/Constant_output_0"], ["s"],
                              name="/m/h.0/attn/Unsqueeze"),
             _const("/m/h.0/attn/Constant_1_output_0", tri)]
    if mask_dtype is bool:
        nodes += [_const("/m/h.0/attn/Constant_2_output_0", np.array(-1e4, np.float32)),
                  helper.make_node("Where", ["/m/h.0/attn/Constant_1_output_0", "s", "/m/h.0/attn/Constant_2_output_0"],
                                   ["w"], name="/m/h.0/attn/Where")]
    else:
        nodes += [helper.make_node("Mul", ["s", "/m/h.0/attn/Constant_1_output_0"], ["w"], name="/m/h.0/attn/Mul")]
    nodes += [helper.make_node("Softmax", ["w"], ["p"], axis=-1, name="/m/h.0/attn/Softmax"),
              _const("/m/Constant_1_output_0", np.array([1, 3], np.int64)),
              helper.make_node("ReduceMean", ["p", "/m/Constant_1_output_0"], ["pm"], keepdims=0, name="/m/ReduceMean"),
              helper.make_node("Gemm", ["pm", "m.fc.weight", "m.fc.bias"], ["y"], transB=1, name="/m/fc/Gemm")]
    inits = [("m.wpe.weight", np.full((rows, 16), 0.1, np.float32)), ("m.q.weight", np.full((16, 16), 0.1, np.float32)),
             ("m.fc.weight", np.full((10, t), 0.1, np.float32)), ("m.fc.bias", np.zeros(10, np.float32))]
    return _save_ts(tmp_path, name, nodes, inits, [2, t, 16], [2, 10], sig=sig)


def _torch(path):
    return _torch_and_analysis(path)[0]


def test_a_folded_causal_mask_beside_a_longer_position_table_is_named_with_its_table(tmp_path):
    path = _masked(tmp_path, "gpt", rows=256, tokens=8)
    t = _torch(path)
    tab = t["coverage"]["causal_tables"]
    # one (256, 256) bool table for the one module holding a folded (1, 1, 8, 8) mask
    assert (tab["modules"], tab["rows"], tab["slice"], tab["bytes"]) == (["/m/h.0/attn"], 256, 8, 256 * 256)
    assert tab["peak"] == t["peak"] + 256 * 256 and tab["says_so"]
    assert tab["note"].startswith("estimated: 1 module(s) read a folded 8 x 8 mask (/m/h.0/attn); if each is a "
                                  "slice of its module's 256 x 256 causal table")
    doc = json.loads(CliRunner().invoke(main, ["analyze", path, "-p", "torch", "-l", "cce", "-f", "json"]).output)
    jsonschema.validate(doc, load_schema("analysis"))
    cov = doc["figures"]["torch"]["coverage"]  # the CLI's defaults (SGD): another peak, the same rule
    assert cov["causal_tables"]["peak"] == doc["figures"]["torch"]["peak"] + 256 * 256
    assert torch_causal_tables_note(doc) == (cov["causal_tables"]["note"]
                                             + " (JSON figures.torch.coverage.causal_tables)")
    assert cov["causal_tables"]["note"] in coverage_line(cov)


def test_a_float_mask_counts_its_table_at_four_bytes_and_the_figure_does_not_move(tmp_path):
    plain = _torch(_masked(tmp_path, "bool", rows=64))
    tab = _torch(_masked(tmp_path, "float", rows=64, mask_dtype=np.float32))["coverage"]["causal_tables"]
    assert tab["bytes"] == 64 * 64 * 4
    # the rule names; the figure is the replay's as before (the bool mask is no float constant eager holds)
    assert plain["coverage"]["causal_tables"]["bytes"] == 64 * 64
    assert plain["coverage"]["causal_tables"]["peak"] - plain["peak"] == 64 * 64


def test_no_table_is_named_without_a_longer_position_table_read_from_zero(tmp_path):
    # positions from 2 (a padding offset) or a table no longer than the sequence say nothing of a table
    assert "causal_tables" not in _torch(_masked(tmp_path, "offset", start=2))["coverage"]
    assert "causal_tables" not in _torch(_masked(tmp_path, "short", rows=8))["coverage"]
    # nor a 2-D (T, T) constant (a mask made from the shapes, `torch.tril(torch.ones(T, T))`, or a folded
    # weight's transpose where the width equals T), nor an integer one (DeBERTa's relative positions)
    assert "causal_tables" not in _torch(_masked(tmp_path, "flat", mask_dims=2))["coverage"]
    assert "causal_tables" not in _torch(_masked(tmp_path, "ints", mask_dtype=np.int64, mask_dims=3))["coverage"]


def test_a_dynamo_file_lists_its_buffers_and_names_no_table(tmp_path):
    path = _masked(tmp_path, "dyn", sig=_signature(("m.wpe.weight", "m.q.weight", "m.fc.weight", "m.fc.bias")))
    assert "causal_tables" not in _torch(path)["coverage"]


def _stream_head(tmp_path, name, producer="pytorch", select=True):
    """x (2, 2, 4, 8) -> a Linear to 100 classes over both streams -> the first stream's logits
    (`h[:, 0]`, a Gather of a scalar index) as the output; `select` False: the whole logits reshaped."""
    nodes = [helper.make_node("MatMul", ["x", "m.head.weight"], ["h"], name="/m/head/MatMul")]
    if select:
        nodes += [_const("/m/Constant_output_0", np.array(0, np.int64)),
                  helper.make_node("Gather", ["h", "/m/Constant_output_0"], ["y"], axis=1, name="/m/Gather")]
        out = [2, 4, 100]
    else:
        nodes += [_const("/m/Constant_output_0", np.array([2, 800], np.int64)),
                  helper.make_node("Reshape", ["h", "/m/Constant_output_0"], ["y"], name="/m/Reshape")]
        out = [2, 800]
    return _save_ts(tmp_path, name, nodes, [("m.head.weight", np.full((8, 100), 0.1, np.float32))], [2, 2, 4, 8], out,
                    producer=producer)


def test_an_output_viewing_a_larger_tensor_is_named_with_the_peak_had_it_been_copied(tmp_path):
    path = _stream_head(tmp_path, "stream")
    t = _torch(path)
    assert "contiguous" not in t["coverage"]  # no transposed tensor: the transposes' figure is not this one
    cont = t["coverage"]["copied_views"]
    assert [(c["op"].split(" ", 1)[1], c["bytes"], c["kind"]) for c in cont["views"]] == [
        ("Gather (/m/Gather)", 2 * 4 * 100 * 4, "output")]
    # copied, the (2, 2, 4, 100) logits are freed once the forward returns: the peak beside is lower
    assert cont["peak"] < t["peak"]
    assert cont["note"].startswith("estimated: 1 output(s) viewing a larger tensor (#1 Gather (/m/Gather); 3,200 B) "
                                   "were copies if the code called `.contiguous()`")
    doc = json.loads(CliRunner().invoke(main, ["analyze", path, "-p", "torch", "-l", "cce", "-f", "json"]).output)
    jsonschema.validate(doc, load_schema("analysis"))
    cont = doc["figures"]["torch"]["coverage"]["copied_views"]
    assert cont["says_so"]
    assert torch_copied_views_note(doc) == cont["note"] + " (JSON figures.torch.coverage.copied_views)"
    assert cont["note"] in coverage_line(doc["figures"]["torch"]["coverage"])


def test_an_output_of_its_base_size_or_another_producer_names_nothing(tmp_path):
    # the whole logits reshaped: no larger base to free; a file torch.onnx did not write: no TorchScript trace
    assert "copied_views" not in _torch(_stream_head(tmp_path, "whole", select=False))["coverage"]
    assert "copied_views" not in _torch(_stream_head(tmp_path, "other", producer="other"))["coverage"]


def _handed(tmp_path, name, layers=2):
    """MPNet's position bias in small: a (1, 2, 4, 4) parameter expanded over the batch under `/m/enc`
    and added to the scores of each of `layers` attention layers (`/m/enc/layer.k/attn`), then a mean and
    a Linear to 10 classes."""
    nodes = [_const("/m/enc/Constant_output_0", np.array([2, 2, 4, 4], np.int64)),
             helper.make_node("Expand", ["m.enc.bias", "/m/enc/Constant_output_0"], ["bias"], name="/m/enc/Expand")]
    x = "x"
    for k in range(layers):
        sc = f"/m/enc/layer.{k}/attn"
        nodes += [helper.make_node("MatMul", [x, f"m.enc.layer.{k}.q"], [f"q{k}"], name=f"{sc}/q/MatMul"),
                  helper.make_node("Transpose", [f"q{k}"], [f"k{k}"], perm=[0, 1, 3, 2], name=f"{sc}/Transpose"),
                  helper.make_node("MatMul", [f"q{k}", f"k{k}"], [f"s{k}"], name=f"{sc}/MatMul"),
                  helper.make_node("Add", [f"s{k}", "bias"], [f"b{k}"], name=f"{sc}/Add"),
                  helper.make_node("Softmax", [f"b{k}"], [f"p{k}"], axis=-1, name=f"{sc}/Softmax"),
                  helper.make_node("MatMul", [f"p{k}", x], [f"h{k}"], name=f"{sc}/MatMul_1")]
        x = f"h{k}"
    nodes += [_const("/m/Constant_output_0", np.array([1, 2], np.int64)),
              helper.make_node("ReduceMean", [x, "/m/Constant_output_0"], ["hm"], keepdims=0, name="/m/ReduceMean"),
              helper.make_node("Gemm", ["hm", "m.fc.weight", "m.fc.bias"], ["y"], transB=1, name="/m/fc/Gemm")]
    inits = [("m.enc.bias", np.full((1, 2, 4, 4), 0.1, np.float32))] + \
        [(f"m.enc.layer.{k}.q", np.full((8, 8), 0.1, np.float32)) for k in range(layers)] + \
        [("m.fc.weight", np.full((10, 8), 0.1, np.float32)), ("m.fc.bias", np.zeros(10, np.float32))]
    return _save_ts(tmp_path, name, nodes, inits, [2, 2, 4, 8], [2, 10])


def test_a_broadcast_view_handed_to_two_layers_is_named_and_its_copy_held_to_the_module_end(tmp_path):
    from memplan_cli.config import TrainConfig
    from memplan_cli.loaders import load_model
    from memplan_cli.profiles.torch import PROFILE
    from memplan_cli.profiles.torch.replay import replay

    path = _handed(tmp_path, "handed")
    cont = _torch(path)["coverage"]["copied_views"]
    assert [(c["op"].split(" ", 1)[1], c["bytes"], c["kind"]) for c in cont["views"]] == [
        ("Expand (/m/enc/Expand)", 2 * 2 * 4 * 4 * 4, "handed")]
    assert "1 broadcast view(s) handed to several submodules (#0 Expand (/m/enc/Expand); 256 B)" in cont["note"]
    cfg = TrainConfig(loss="cce", optimizer="adam")
    tg = PROFILE.training_graph(load_model(path), cfg)
    sim = replay(tg, cfg, as_solve=True, as_contiguous=frozenset({"bias"}))[0]
    store = {s["name"]: s for s in sim.store}
    # the copy lives until the encoder's last op (the second layer's last matmul), past its last reader
    last_add = max(k for k, st in enumerate(sim.steps) if st.kind == "forward" and "layer.1/attn/Add" in st.label)
    assert store["bias:clone"]["bytes"] == 256 and store["bias:clone"]["last"] > last_add
    doc = json.loads(CliRunner().invoke(main, ["analyze", path, "-p", "torch", "-l", "cce", "-f", "json"]).output)
    jsonschema.validate(doc, load_schema("analysis"))


def test_a_broadcast_view_one_layer_reads_names_nothing(tmp_path):
    assert "copied_views" not in _torch(_handed(tmp_path, "one", layers=1))["coverage"]
