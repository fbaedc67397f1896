"""The torch profile's facts for transformer and sequence ops, on tiny hand-built ONNX graphs (no torch
needed). Each expected figure follows from a fact read off torch 2.14's allocator events
(devtools/torch_oracle.py checks whole networks against the real thing when torch is installed)."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper, save

from memplan_cli.analysis import analyze_graph
from memplan_cli.config import TrainConfig
from memplan_cli.errors import UnsupportedOpError
from memplan_cli.loaders import load_model

F = TensorProto.FLOAT


def _model(tmp_path, nodes, inputs, outputs, inits=(), name="m"):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                              [helper.make_tensor_value_info(n, F, s) for n, s in outputs],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits])
    path = tmp_path / f"{name}.onnx"
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    return load_model(str(path))


def _run(g, **cfg):
    return analyze_graph(g, TrainConfig(**{"loss": "cce", **cfg}), profile="torch")


def _cols(a, name):
    return next(v for k, v in a.extras["per_layer_extra"].items() if k.endswith(f"({name})"))


def _w(*shape):
    return np.full(shape, 0.1, np.float32)


def test_pow_backward_makes_two_input_sized_temporaries(tmp_path):
    # pow(h, 2)'s backward is grad * (2 * h.pow(1)): h.pow(1) and 2 * it (32 B each) live while the
    # gradient of h (32 B) is made; forward keeps h
    g = _model(tmp_path, [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
                          helper.make_node("Pow", ["h", "two"], ["y"], name="pow")],
               [("x", F, [2, 4])], [("y", [2, 4])], [("w", _w(4, 4)), ("two", np.float32(2.0))])
    c = _cols(_run(g), "pow")
    assert c["bwd_mem_tmp"] == 64 and c["bwd_mem_out"] == 32 and c["fwd_mem_out"] == 32


def test_elementwise_max_keeps_both_and_masks_each_side(tmp_path):
    # maximum's backward, per side: a bool mask (8 B), grad / 2 (32 B), an equality mask (8 B), then
    # where(): that side's gradient (32 B); the sides run one after the other
    g = _model(tmp_path, [helper.make_node("MatMul", ["x", "w1"], ["a"], name="mm1"),
                          helper.make_node("MatMul", ["x", "w2"], ["b"], name="mm2"),
                          helper.make_node("Max", ["a", "b"], ["y"], name="max")],
               [("x", F, [2, 4])], [("y", [2, 4])], [("w1", _w(4, 4)), ("w2", _w(4, 4))])
    c = _cols(_run(g), "max")
    assert c["bwd_mem_tmp"] == 48 and c["bwd_mem_out"] == 64


def test_split_outputs_are_views_and_a_missing_gradient_is_zeros(tmp_path):
    # split makes no tensor; its backward concatenates the outputs' gradients, zeros (16 B) for the
    # third output nothing read, into h's gradient (48 B)
    g = _model(tmp_path, [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
                          helper.make_node("Split", ["h", "sizes"], ["a", "b", "c"], axis=1, name="split"),
                          helper.make_node("Mul", ["a", "b"], ["y"], name="mul")],
               [("x", F, [2, 4])], [("y", [2, 2])], [("w", _w(4, 6)), ("sizes", np.array([2, 2, 2], np.int64))])
    c = _cols(_run(g), "split")
    assert c["fwd_mem_out"] == 0 and c["bwd_mem_tmp"] == 16 and c["bwd_mem_out"] == 48


def test_reshape_copies_only_when_no_view_exists(tmp_path):
    # after a transpose, flattening the two swapped axes has no view (a 96 B copy); splitting the last
    # axis of a narrowed tensor has one
    g = _model(tmp_path, [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
                          helper.make_node("Transpose", ["h"], ["t"], perm=[0, 2, 1], name="tr"),
                          helper.make_node("Reshape", ["t", "s12"], ["f"], name="flat"),
                          helper.make_node("Slice", ["h", "st", "en", "ax"], ["n"], name="narrow"),
                          helper.make_node("Reshape", ["n", "s222"], ["r"], name="view"),
                          helper.make_node("Reshape", ["r", "s8"], ["r8"], name="back"),
                          helper.make_node("Concat", ["f", "r8"], ["y"], axis=1, name="cat")],
               [("x", F, [2, 3, 4])], [("y", [2, 20])],
               [("w", _w(4, 4)), ("s12", np.array([2, 12], np.int64)), ("st", np.array([0], np.int64)),
                ("en", np.array([2], np.int64)), ("ax", np.array([1], np.int64)),
                ("s222", np.array([2, 2, 2, 2], np.int64)), ("s8", np.array([2, 8], np.int64))])
    a = _run(g)
    assert _cols(a, "flat")["fwd_mem_out"] == 96
    assert _cols(a, "view")["fwd_mem_out"] == 0


def test_elementwise_result_keeps_a_transposed_layout(tmp_path):
    # TensorIterator writes t * 2 in t's (transposed) layout: flattening it then copies (96 B)
    g = _model(tmp_path, [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
                          helper.make_node("Transpose", ["h"], ["t"], perm=[0, 2, 1], name="tr"),
                          helper.make_node("Mul", ["t", "two"], ["m"], name="scale"),
                          helper.make_node("Reshape", ["m", "s12"], ["y"], name="flat")],
               [("x", F, [2, 3, 4])], [("y", [2, 12])],
               [("w", _w(4, 4)), ("two", np.float32(2.0)), ("s12", np.array([2, 12], np.int64))])
    assert _cols(_run(g), "flat")["fwd_mem_out"] == 96


def test_dropout_of_zero_is_its_input(tmp_path):
    g = _model(tmp_path, [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
                          helper.make_node("Dropout", ["h", "r"], ["y"], name="drop")],
               [("x", F, [2, 4])], [("y", [2, 4])], [("w", _w(4, 4)), ("r", np.float32(0.0))])
    c = _cols(_run(g), "drop")
    assert c["fwd_mem_out"] == 0 and c["fwd_mem_tmp"] == 0 and c["bwd_mem_out"] == 0


def _attention(tmp_path, after_softmax=(), extra=(), name="att", safe=False, mask=False, dynamo_kt=False,
               mask_shape=(4, 4), mask_nodes=()):
    """torch.onnx's decomposition of F.scaled_dot_product_attention on (1, 2 heads, 4, 8); `safe`:
    with the Where(IsNaN(p), 0, p) of its _safe_softmax; `mask`: a constant (4, 4) mask added;
    `dynamo_kt`: k transposed as the dynamo exporter's function does (Reshape to 3-D, Transpose (0, 2, 1),
    Reshape back), else as TorchScript's symbolic (one Transpose of the last two axes)."""
    nodes = [helper.make_node("MatMul", ["x", "wqkv"], ["qkv"], name="qkv"),
             helper.make_node("Reshape", ["qkv", "s5"], ["r5"], name="view"),
             helper.make_node("Transpose", ["r5"], ["p"], perm=[2, 0, 3, 1, 4], name="permute"),
             helper.make_node("Split", ["p"], ["q1", "k1", "v1"], axis=0, num_outputs=3, name="unbind"),
             helper.make_node("Squeeze", ["q1", "a0"], ["q"], name="sq_q"),
             helper.make_node("Squeeze", ["k1", "a0"], ["k"], name="sq_k"),
             helper.make_node("Squeeze", ["v1", "a0"], ["v"], name="sq_v"),
             *([helper.make_node("Reshape", ["k", "k3"], ["k3d"], name="k3d"),
                helper.make_node("Transpose", ["k3d"], ["k3t"], perm=[0, 2, 1], name="k3t"),
                helper.make_node("Reshape", ["k3t", "kt4"], ["kt"], name="kt")] if dynamo_kt else
               [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2], name="kt")]),
             helper.make_node("Mul", ["q", "s"], ["qs"], name="scale_q"),
             helper.make_node("Mul", ["kt", "s"], ["ks"], name="scale_k"),
             helper.make_node("MatMul", ["qs", "ks"], ["scores"], name="scores"),
             helper.make_node("Softmax", ["scores_m" if mask else "scores"], ["probs"], axis=-1, name="softmax")]
    if mask:
        nodes.insert(-1, helper.make_node("Add", ["scores", "m"], ["scores_m"], name="mask"))
        nodes[:0] = list(mask_nodes)  # nodes that compute "m" (then no constant of that name)
    last = "probs"
    if safe:
        nodes += [helper.make_node("IsNaN", ["probs"], ["nan"], name="isnan"),
                  helper.make_node("Where", ["nan", "zero", "probs"], ["probs_s"], name="where")]
        last = "probs_s"
    for op, attrs in after_softmax:
        nodes.append(helper.make_node(op, [last, "r"], [f"{last}_d"], name="attn_drop", **attrs))
        last = f"{last}_d"
    nodes += [helper.make_node("MatMul", [last, "v"], ["o"], name="sdpa"),
              helper.make_node("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3], name="merge"),
              helper.make_node("Reshape", ["ot", "s3"], ["y0"], name="flat")]
    nodes += list(extra) or [helper.make_node("Identity", ["y0"], ["y"], name="out")]
    inits = [("wqkv", _w(16, 48)), ("s5", np.array([1, 4, 3, 2, 8], np.int64)), ("a0", np.array([0], np.int64)),
             ("s", np.float32(8 ** -0.25)), ("s3", np.array([1, 4, 16], np.int64)), ("r", np.float32(0.1)),
             ("zero", np.float32(0.0)), ("k3", np.array([-1, 4, 8], np.int64)),
             ("kt4", np.array([1, 2, 8, 4], np.int64))]
    if mask_nodes:  # a learned relative-position bias: table[:, idx], unsqueezed to (1, heads, 4, 4)
        pos = np.arange(4)
        inits += [("table", _w(2, 7)), ("idx", (pos[:, None] - pos[None, :] + 3).astype(np.int64)),
                  ("a0m", np.array([0], np.int64))]
    else:
        inits.append(("m", np.zeros(mask_shape, np.float32)))
    return _model(tmp_path, nodes, [("x", F, [1, 4, 16])], [("y", [1, 4, 16])], inits, name)


@pytest.mark.parametrize("shape,frozen,math", [
    ((4, 4), True, False), ((1, 2, 4, 4), True, False), ((1, 1, 4, 1), True, False),  # the flash kernel's
    ((2, 4, 4), True, True),      # 3 dims: the math path
    ((1, 2, 4, 4), False, True)])  # a mask that trains requires grad: the math path
def test_sdpa_mask_the_flash_kernel_does_not_take_is_the_math_path(tmp_path, shape, frozen, math):
    # ATen's check_attn_mask_shape (sdp_utils_cpp.h), checked with torch 2.14's _fused_sdp_choice: the CPU
    # flash kernel takes a mask that needs no gradient, of 2 dims, or of 4 whose first two are 1 or the
    # batch and 1 or the heads; otherwise the math path, op by op: the scores (128 B) kept by softmax,
    # the mask added into them in place (no tensor of its own), _safe_softmax's forward scratch (40 B)
    a = _run(_attention(tmp_path, mask=True, mask_shape=shape, name="m" + "x".join(map(str, shape))),
             **({"freeze": ("params:m",)} if frozen else {}))
    names = {b.name for b in a.buffers.buffers}
    assert ("probs" in names) == math
    if math:
        assert "scores_m" not in names and _cols(a, "mask")["fwd_mem_out"] == 0
        assert _cols(a, "softmax")["fwd_mem_out"] == 128 and _cols(a, "softmax")["fwd_mem_tmp"] == 40


def test_sdpa_mask_computed_from_a_trained_table_is_the_math_path(tmp_path):
    # Swin's / TinyViT's relative-position bias: a table gathered by a buffer of indices requires grad,
    # whatever its shape (here (1, 2, 4, 4), which the flash kernel would take without a gradient)
    nodes = [helper.make_node("Gather", ["table", "idx"], ["bias"], axis=1, name="gather"),
             helper.make_node("Unsqueeze", ["bias", "a0m"], ["m"], name="unsq")]
    a = _run(_attention(tmp_path, mask=True, mask_nodes=nodes, name="bias"))
    assert "probs" in {b.name for b in a.buffers.buffers}
    assert _cols(a, "gather")["bwd_mem_out"] > 0  # the table's gradient


def test_sdpa_decomposition_is_the_fused_cpu_kernel(tmp_path):
    # no (1, 2, 4, 4) score tensor: the kernel makes the output (256 B), a float logsumexp per query
    # row (1 * 2 * 4 * 4 = 32 B) and, for one thread, a scratch of q block 4 x kv block 4 scores, two
    # row vectors and a 4 x 8 output block ((16 + 8 + 32) * 4 = 224 B); backward makes q, k and v's
    # gradients (256 B each) beside a scratch of scores and their gradient plus the row sums
    # ((2 * 16 + 4) * 4 = 144 B)
    a = _run(_attention(tmp_path))
    c = _cols(a, "sdpa")
    assert c["fwd_mem_out"] == 256 and c["fwd_mem_tmp"] == 32 + 224
    assert c["bwd_mem_out"] == 3 * 256 and c["bwd_mem_tmp"] == 144
    assert not any(b.name in ("scores", "probs", "qs", "ks") for b in a.buffers.buffers)
    # the output is laid out like q (a transposed view of the projection): merging the heads is a view
    assert _cols(a, "flat")["fwd_mem_out"] == 0


def test_sdpa_with_its_dropout_written_is_the_math_path(tmp_path):
    # TorchScript writes sdpa's dropout: eager took the math path, op by op
    a = _run(_attention(tmp_path, after_softmax=[("Dropout", {})]))
    assert any(b.name == "probs" for b in a.buffers.buffers)


def test_sdpa_in_a_model_with_dropout_is_refused_without_the_dynamo_calls(tmp_path):
    # a dropout elsewhere and none in the attention: dynamo's export (which drops sdpa's dropout) cannot
    # say without its recorded calls whether eager ran the fused kernel or the math path
    g = _attention(tmp_path, extra=[helper.make_node("Dropout", ["y0", "r"], ["y"], name="drop")], dynamo_kt=True)
    with pytest.raises(UnsupportedOpError, match="scaled_dot_product_attention in a model with dropout"):
        _run(g)


def test_torchscript_sdpa_without_its_dropout_is_the_fused_kernel_beside_other_dropout(tmp_path):
    # TorchScript writes sdpa's Dropout whenever dropout_p != 0: none in the attention is dropout_p 0,
    # whatever dropout the model has elsewhere (timm's attn_drop 0 beside proj_drop): the fused kernel
    a = _run(_attention(tmp_path, extra=[helper.make_node("Dropout", ["y0", "r"], ["y"], name="drop")]))
    c = _cols(a, "sdpa")
    assert c["fwd_mem_out"] == 256 and c["fwd_mem_tmp"] == 32 + 224
    assert not any(b.name in ("scores", "probs") for b in a.buffers.buffers)


def test_tied_weight_gradients_sum_out_of_place(tmp_path):
    # the embedding table W (40 B) also projects back (h @ W^T): its first gradient comes through the
    # transpose, a non-contiguous view the engine does not add into: the embedding's backward makes
    # its own (40 B, a temporary) and the sum (40 B, W's .grad)
    g = _model(tmp_path, [helper.make_node("Gather", ["W", "ids"], ["h"], name="emb"),
                          helper.make_node("Transpose", ["W"], ["Wt"], perm=[1, 0], name="tie"),
                          helper.make_node("MatMul", ["h", "Wt"], ["y"], name="head")],
               [("ids", TensorProto.INT64, [2, 3])], [("y", [2, 3, 5])], [("W", _w(5, 2))])
    c = _cols(_run(g), "emb")
    assert c["bwd_mem_out"] == 40 and c["bwd_mem_tmp"] == 40


def test_a_tied_weights_sum_is_made_after_the_lookups_incoming_gradient_is_freed(tmp_path):
    # the engine adds the lookup's gradient of W into the one waiting in W's input buffer after the
    # lookup's backward has returned (engine.cpp evaluate_function): the incoming gradient of its
    # output e (2 x 3 x 2 floats, 48 B, nothing else reads it) is freed before the sum is made, and the
    # two addends live until it is
    g = _model(tmp_path, [helper.make_node("Gather", ["W", "ids"], ["e"], name="emb"),
                          helper.make_node("Relu", ["e"], ["h"], name="act"),
                          helper.make_node("Transpose", ["W"], ["Wt"], perm=[1, 0], name="tie"),
                          helper.make_node("MatMul", ["h", "Wt"], ["y"], name="head")],
               [("ids", TensorProto.INT64, [2, 3])], [("y", [2, 3, 5])], [("W", _w(5, 2))])
    bufs = _run(g).buffers.buffers
    incoming = next(b for b in bufs if b.name == "e:grad")
    head = next(b for b in bufs if b.name == "Wt:grad")  # the head's, through the transpose
    lookup, total = sorted((b for b in bufs if b.name == "W:grad"), key=lambda b: b.first)
    assert incoming.last == lookup.first < total.first  # freed when the lookup's backward returns
    assert head.last == lookup.last == total.first and total.last == max(b.last for b in bufs)


def test_recurrent_layers_are_refused_with_the_reason(tmp_path):
    nodes = [helper.make_node("LSTM", ["x", "W", "R"], ["y"], hidden_size=3, name="lstm")]
    g = _model(tmp_path, nodes, [("x", F, [5, 2, 4])], [("y", [5, 1, 2, 3])],
               [("W", _w(1, 12, 4)), ("R", _w(1, 12, 3))])
    with pytest.raises(UnsupportedOpError, match="oneDNN's fused RNN"):
        _run(g)


def test_lora_adapters_run_beside_their_projection(tmp_path):
    # `--lora` appends the adapter ops to the graph; eager runs them right after the projection they
    # patch, so the model's output requires grad and backward reaches A's gradient (4 x 2 floats,
    # 32 B) and, at B, B's (2 x 4, 32 B) and that of x A (2 x 2, 16 B) through the head
    g = _model(tmp_path, [helper.make_node("MatMul", ["x", "wq"], ["h"], name="q_proj"),
                          helper.make_node("Relu", ["h"], ["r"], name="act"),
                          helper.make_node("MatMul", ["r", "wo"], ["y"], name="head")],
               [("x", F, [2, 4])], [("y", [2, 3])], [("wq", _w(4, 4)), ("wo", _w(4, 3))])
    a = _run(g, lora_rank=2)
    assert _cols(a, "q_proj.lora_A")["bwd_mem_out"] == 32 and _cols(a, "q_proj.lora_B")["bwd_mem_out"] == 48
    assert _cols(a, "q_proj")["bwd_mem_out"] == 0  # the frozen projection's input needs no gradient


def test_sdpa_with_a_folded_key(tmp_path):
    # nn.MultiheadAttention's decomposition reaches k^T through a (batch x heads, S, d) k that is never
    # 4-D: still the fused kernel (no score tensor), with k's sizes taken from k^T
    nodes = [helper.make_node("MatMul", ["x", "wq"], ["q0"], name="q_proj"),
             helper.make_node("Reshape", ["q0", "s4"], ["q1"], name="q_view"),
             helper.make_node("Transpose", ["q1"], ["q"], perm=[0, 2, 1, 3], name="q_heads"),
             helper.make_node("MatMul", ["x", "wk"], ["k0"], name="k_proj"),
             helper.make_node("Reshape", ["k0", "s3"], ["k1"], name="k_view"),
             helper.make_node("Transpose", ["k1"], ["k2"], perm=[1, 0, 2], name="k_heads"),
             helper.make_node("Transpose", ["k2"], ["k3"], perm=[0, 2, 1], name="k_t"),
             helper.make_node("Reshape", ["k3", "s4t"], ["kt"], name="k_4d"),
             helper.make_node("MatMul", ["x", "wv"], ["v0"], name="v_proj"),
             helper.make_node("Reshape", ["v0", "s4"], ["v1"], name="v_view"),
             helper.make_node("Transpose", ["v1"], ["v"], perm=[0, 2, 1, 3], name="v_heads"),
             helper.make_node("Mul", ["q", "s"], ["qs"], name="scale_q"),
             helper.make_node("Mul", ["kt", "s"], ["ks"], name="scale_k"),
             helper.make_node("MatMul", ["qs", "ks"], ["scores"], name="scores"),
             helper.make_node("Softmax", ["scores"], ["probs"], axis=-1, name="softmax"),
             helper.make_node("MatMul", ["probs", "v"], ["o"], name="sdpa"),
             helper.make_node("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3], name="merge"),
             helper.make_node("Reshape", ["ot", "s3o"], ["y"], name="flat")]
    inits = [("wq", _w(16, 16)), ("wk", _w(16, 16)), ("wv", _w(16, 16)), ("s4", np.array([1, 4, 2, 8], np.int64)),
             ("s3", np.array([4, 2, 8], np.int64)), ("s4t", np.array([1, 2, 8, 4], np.int64)),
             ("s", np.float32(8 ** -0.25)), ("s3o", np.array([1, 4, 16], np.int64))]
    a = _run(_model(tmp_path, nodes, [("x", F, [1, 4, 16])], [("y", [1, 4, 16])], inits))
    assert not any(b.name in ("scores", "probs") for b in a.buffers.buffers)
    assert _cols(a, "sdpa")["fwd_mem_tmp"] == 32 + 224  # logsumexp and the one-thread scratch, as above



def _record(node, call):
    """What torch.onnx's dynamo exporter records beside a node (`pkg.torch.onnx.fx_node`)."""
    node.metadata_props.add(key="pkg.torch.onnx.fx_node", value=f"%{call.split(' = ')[0]} : [num_users=1] = "
                            f"call_function[target=torch.ops.{call.split(' = ')[1].split('(')[0]}]"
                            f"({call.split('(', 1)[1]}")
    return node


def _recorded_attention(tmp_path, p, name, mask_arg="None", **kw):
    """_attention's graph with a dropout elsewhere and sdpa's call recorded beside its decomposition."""
    g = _attention(tmp_path, extra=[helper.make_node("Dropout", ["y0", "r"], ["y"], name="drop")], name=name, **kw)
    import onnx

    path = tmp_path / f"{name}.onnx"
    m = onnx.load(str(path))
    call = (f"sdpa = aten.scaled_dot_product_attention.default(args = (%q, %k, %v, {mask_arg}, {p}), "
            f"kwargs = {{scale: 0.35}})")
    for n in m.graph.node:
        if n.name in ("scale_q", "scale_k", "scores", "softmax", "sdpa", "mask", "isnan", "where"):
            _record(n, call)
    onnx.save(m, str(path))
    del g
    return load_model(str(path))


def test_sdpa_recorded_dropout_is_the_math_path(tmp_path):
    # dynamo writes no Dropout for sdpa's own but records dropout_p = 0.1 beside its ops: eager's CPU
    # flash kernel takes no dropout, so the math path ran: the (1, 2, 4, 4) probabilities (128 B) are
    # kept, and the dropout makes its output and float noise (128 B each) before the matmul with v
    a = _run(_recorded_attention(tmp_path, 0.1, "rec"))
    assert any(b.name == "probs" for b in a.buffers.buffers)
    c = _cols(a, "sdpa")
    assert c["fwd_mem_out"] == 128 + 256 and c["fwd_mem_tmp"] == 128


def test_sdpa_recorded_dropout_of_zero_is_the_fused_kernel(tmp_path):
    # a recorded dropout_p of 0 says the fused kernel ran, a dropout elsewhere notwithstanding
    a = _run(_recorded_attention(tmp_path, 0.0, "rec0"))
    assert not any(b.name in ("scores", "probs") for b in a.buffers.buffers)


def test_select_is_a_view_and_a_lost_clone_a_copy(tmp_path):
    # h (2, 3, 4: 96 B) is permuted, then its first row picked (Gather of a 0-d index: eager's select,
    # a view); its backward makes a zeroed gradient of the input's size (96 B)
    def graph(name, call=None):
        nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
                 helper.make_node("Transpose", ["h"], ["t"], perm=[1, 0, 2], name="perm"),
                 helper.make_node("Gather", ["t", "i"], ["s"], axis=0, name="select"),
                 helper.make_node("Relu", ["s"], ["y"], name="act")]
        if call:
            _record(nodes[2], call)
        return _model(tmp_path, nodes, [("x", F, [2, 3, 4])], [("y", [2, 4])],
                      [("w", _w(4, 4)), ("i", np.array(0, np.int64))], name)
    c = _cols(_run(graph("sel")), "select")
    assert c["fwd_mem_out"] == 0 and c["bwd_mem_out"] == 96
    # the call dynamo recorded reads `%clone`, an aten.clone (`.contiguous()`) the file dropped: eager
    # selected from a contiguous copy of the permuted h (96 B), made before the select
    a = _run(graph("clone", "select = aten.select.int(args = (%clone, 0, 0), kwargs = {})"))
    assert _cols(a, "select")["fwd_mem_out"] == 96


def test_a_lost_clone_read_twice_is_read_at_both_inputs(tmp_path):
    # `c = t.contiguous(); c * c` under dynamo: the Mul reads the permuted view twice and records
    # mul(%clone, %clone). Both inputs are the copy (96 B, saved by the Mul); the permuted h is then
    # freed in forward, where a Mul that still saved the view at input 1 kept h alive to its backward
    nodes = [_record(helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
                     "h = aten.matmul.default(args = (%x, %p_w), kwargs = {})"),
             _record(helper.make_node("Transpose", ["h"], ["t"], perm=[1, 0, 2], name="perm"),
                     "permute = aten.permute.default(args = (%h, [1, 0, 2]), kwargs = {})"),
             _record(helper.make_node("Mul", ["t", "t"], ["y"], name="sq"),
                     "mul = aten.mul.Tensor(args = (%clone, %clone), kwargs = {})")]
    a = _run(_dynamo_fill_model(tmp_path, nodes, [2, 3, 4], [3, 2, 4], [("w", _w(4, 4))], ["w"], "sq"), loss="mse")
    h = next(b for b in a.buffers.buffers if b.name == "h")
    assert a.buffers.steps[h.last].kind == "forward"
    assert [b.size for b in a.buffers.buffers if b.name.endswith(":clone")] == [96]


def _gated_by_a_clone(tmp_path, call, name):
    """s = tanh(h); y = s * h.clone() (xLSTM's mLSTM step: `scaF_act * matC_old.clone()`), the
    Mul's call recorded as `call`; h is (2, 3, 4) floats, 96 B."""
    nodes = [_record(helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
                     "h = aten.matmul.default(args = (%x, %p_w), kwargs = {})"),
             _record(helper.make_node("Tanh", ["h"], ["s"], name="gate"),
                     "s = aten.tanh.default(args = (%h,), kwargs = {})"),
             _record(helper.make_node("Mul", ["s", "h"], ["y"], name="gated"), call)]
    return _run(_dynamo_fill_model(tmp_path, nodes, [2, 3, 4], [2, 3, 4], [("w", _w(4, 4))], ["w"], name),
                loss="mse")


def test_a_lost_clone_at_a_later_argument_is_a_copy_the_mul_saves(tmp_path):
    # mul(%s, %clone): the Mul reads the copy at input 1 (its inputs are the call's arguments in
    # order) and saves it, since s requires grad: 96 B alive from forward to the Mul's backward
    a = _gated_by_a_clone(tmp_path, "y = aten.mul.Tensor(args = (%s, %clone), kwargs = {})", "late")
    copies = [b for b in a.buffers.buffers if b.name.endswith(":clone")]
    assert [b.size for b in copies] == [96]
    assert a.buffers.steps[copies[0].last].kind != "forward"
    # the same file recording a call whose arguments are not the op's inputs in order makes no copy
    a = _gated_by_a_clone(tmp_path, "y = aten.addcmul.default(args = (%z, %s, %clone), kwargs = {})", "other")
    assert not [b for b in a.buffers.buffers if b.name.endswith(":clone")]


def test_cumsum_backward_makes_two_temporaries(tmp_path):
    # torch.cumsum's backward flips the gradient and sums it: two temporaries of the input's size
    # (32 B each) besides its gradient (32 B); forward keeps nothing
    g = _model(tmp_path, [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
                          helper.make_node("CumSum", ["h", "ax"], ["y"], name="cumsum")],
               [("x", F, [2, 4])], [("y", [2, 4])], [("w", _w(4, 4)), ("ax", np.array(1, np.int64))])
    c = _cols(_run(g), "cumsum")
    assert c["bwd_mem_tmp"] == 64 and c["bwd_mem_out"] == 32 and c["fwd_mem_tmp"] == 0


def test_gather_elements_keeps_its_index_for_a_gradient(tmp_path):
    # torch.gather keeps its int64 index (2 x 4: 64 B) while the data needs a gradient
    g = _model(tmp_path, [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
                          helper.make_node("Cast", ["i32"], ["idx"], to=TensorProto.INT64, name="cast"),
                          helper.make_node("GatherElements", ["h", "idx"], ["y"], axis=1, name="gather")],
               [("x", F, [2, 4]), ("i32", TensorProto.INT32, [2, 4])], [("y", [2, 4])], [("w", _w(4, 4))])
    a = _run(g)
    idx = next(b for b in a.buffers.buffers if b.name == "idx")
    assert idx.size == 64 and a.buffers.steps[idx.last].kind == "calcDerivative"


def test_sdpa_math_path_safe_softmax_and_its_mask(tmp_path):
    # the math path's _safe_softmax is one op: it keeps its result only (128 B), the IsNaN mask is no
    # saved tensor but a forward scratch beside an isneginf mask and a bool per row (32 + 8 B); the
    # constant mask the call received as a computed value (`%mask_1`) is a forward value, not held
    # (a hand-built file does not say it is no parameter: frozen here, as dynamo's signature says)
    a = _run(_recorded_attention(tmp_path, 0.1, "safe", mask_arg="%mask_1", safe=True, mask=True),
             freeze=("params:m",))
    assert not any(b.name == "nan" for b in a.buffers.buffers)
    assert _cols(a, "softmax")["fwd_mem_out"] == 128 and _cols(a, "softmax")["fwd_mem_tmp"] == 40
    m = next(b for b in a.buffers.buffers if b.name == "m")
    assert a.buffers.steps[m.first].kind == "forward" and a.buffers.steps[m.last].kind == "forward"
    # a mask the call reads from a buffer (`%b_...`) is held the whole step
    a = _run(_recorded_attention(tmp_path, 0.1, "safe_b", mask_arg="%b_mask", safe=True, mask=True),
             freeze=("params:m",))
    m = next(b for b in a.buffers.buffers if b.name == "m")
    assert m.first == 0 and m.last == len(a.buffers.steps) - 1


def test_dropouts_the_export_merged_are_separate_draws(tmp_path):
    # peft's lora_dropout of q_proj and of v_proj: two draws of one input, which dynamo's optimizer
    # merged into one Dropout; its readers record them as `%getitem` and `%getitem_2`: eager made two
    # outputs and two float noise tensors (32 B each)
    def graph(name, second):
        nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
                 helper.make_node("Dropout", ["h", "r"], ["d"], name="drop"),
                 _record(helper.make_node("MatMul", ["d", "wa"], ["a"], name="a"),
                         "linear = aten.linear.default(args = (%getitem, %p_wa), kwargs = {})"),
                 _record(helper.make_node("MatMul", ["d", "wb"], ["b"], name="b"),
                         f"linear_1 = aten.linear.default(args = (%{second}, %p_wb), kwargs = {{}})"),
                 helper.make_node("Add", ["a", "b"], ["y"], name="add")]
        return _model(tmp_path, nodes, [("x", F, [2, 4])], [("y", [2, 4])],
                      [("w", _w(4, 4)), ("wa", _w(4, 4)), ("wb", _w(4, 4)), ("r", np.float32(0.1))], name)
    noise = [b for b in _run(graph("two", "getitem_2")).buffers.buffers if b.name.endswith(":noise")]
    assert [b.size for b in noise] == [32, 32]
    noise = [b for b in _run(graph("one", "getitem")).buffers.buffers if b.name.endswith(":noise")]
    assert [b.size for b in noise] == [32]


def test_sdpa_mask_received_as_a_computed_value_does_not_train(tmp_path):
    # T5's position bias reaches sdpa as its mask; dynamo folds it, with the bias table, into a
    # constant memplan's parameter rules cannot place (assumed trainable). The recorded call receives
    # it as a computed value (`%clone`): in eager no parameter, so no gradient and no optimizer state
    g = _recorded_attention(tmp_path, 0.1, "t5", mask_arg="%clone", safe=True, mask=True)
    g.operands[next(o.index for o in g.operands if o.name == "m")].assumed = True
    a = _run(g, optimizer="adam")
    names = {b.name for b in a.buffers.buffers}
    assert "m" in names and not any(n.startswith("m:") for n in names)


def _layer_norm_twice(tmp_path, name, second, sub_rule=None):
    """CohereLayerNorm as dynamo writes it: `x - mean` for the variance and, computed again, for the
    normalisation (the optimizer merged the two Subs: the Mul's call names `%{second}`); rsqrt as Sqrt
    then Reciprocal, both recording `%rsqrt`. `sub_rule`: a rewrite rule recorded as making the Sub."""
    nodes = [_record(helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
                     "linear = aten.linear.default(args = (%x, %p_w), kwargs = {})"),
             _record(helper.make_node("ReduceMean", ["h", "ax"], ["mu"], name="mean"),
                     "mean = aten.mean.dim(args = (%linear, [-1], True), kwargs = {})"),
             _record(helper.make_node("Sub", ["h", "mu"], ["d"], name="sub"),
                     "sub = aten.sub.Tensor(args = (%linear, %mean), kwargs = {})"),
             _record(helper.make_node("Pow", ["d", "two"], ["p2"], name="pow"),
                     "pow_1 = aten.pow.Tensor_Scalar(args = (%sub, 2), kwargs = {})"),
             _record(helper.make_node("ReduceMean", ["p2", "ax"], ["var"], name="mean_1"),
                     "mean_1 = aten.mean.dim(args = (%pow_1, [-1], True), kwargs = {})"),
             _record(helper.make_node("Add", ["var", "eps"], ["ve"], name="add"),
                     "add = aten.add.Tensor(args = (%mean_1, 1e-05), kwargs = {})"),
             _record(helper.make_node("Sqrt", ["ve"], ["s"], name="sqrt"),
                     "rsqrt = aten.rsqrt.default(args = (%add,), kwargs = {})"),
             _record(helper.make_node("Reciprocal", ["s"], ["r"], name="recip"),
                     "rsqrt = aten.rsqrt.default(args = (%add,), kwargs = {})"),
             _record(helper.make_node("Mul", ["d", "r"], ["y"], name="mul"),
                     f"mul = aten.mul.Tensor(args = (%{second}, %rsqrt), kwargs = {{}})")]
    inits = [("w", _w(8, 8)), ("ax", np.array([-1], np.int64)), ("two", np.float32(2.0)), ("eps", np.float32(1e-5))]
    if not sub_rule:
        return _model(tmp_path, nodes, [("x", F, [2, 4, 8])], [("y", [2, 4, 8])], inits, name)
    nodes[2].metadata_props.add(key="pkg.onnxscript.rewriter.rule_name", value=sub_rule)
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [2, 4, 8])],
                              [helper.make_tensor_value_info("y", F, [2, 4, 8])],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits])
    graph.metadata_props.add(key="pkg.torch.export.ExportedProgram.graph_signature",
                             value="\n# inputs\np_w: PARAMETER target='w'\nx: USER_INPUT\n")
    path = tmp_path / f"{name}.onnx"
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    return load_model(str(path))


def test_nodes_recording_one_fx_node_are_one_aten_op(tmp_path):
    # Sqrt then Reciprocal, both recording `%rsqrt`: eager's one rsqrt, whose result (2 x 4 x 1: 32 B)
    # it makes and saves (derivatives.yaml: its backward reads `result`); the Sqrt output is no tensor
    a = _run(_layer_norm_twice(tmp_path, "rsqrt", "sub"), loss="mse")
    assert not any(b.name == "s" for b in a.buffers.buffers)
    c = _cols(a, "recip")
    assert c["fwd_mem_out"] == 32
    r = next(b for b in a.buffers.buffers if b.name == "r")
    assert a.buffers.steps[r.last].kind != "forward"  # saved for rsqrt's (and the Mul's) backward
    assert not any(k.endswith("(sqrt)") for k in a.extras["per_layer_extra"])


def test_equal_ops_the_exporter_merged_are_computed_again(tmp_path):
    # the Mul's call reads `%sub_1`, an aten.sub no node of the file makes, while its input is the node
    # recording `%sub`: eager computed `x - mean` a second time (256 B), which the Mul saves; the first
    # is saved by the Pow. Where the call names the producer itself, there is one tensor
    a = _run(_layer_norm_twice(tmp_path, "cse", "sub_1"), loss="mse")
    bufs = {b.name: b for b in a.buffers.buffers}
    assert bufs["d:sub_1"].size == 256 and a.buffers.steps[bufs["d:sub_1"].last].kind != "forward"
    pow_bwd = next(s.index for s in a.buffers.steps if s.kind != "forward" and s.label.endswith("(pow)"))
    assert bufs["d"].last == pow_bwd
    a = _run(_layer_norm_twice(tmp_path, "one", "sub"), loss="mse")
    assert not any(b.name.startswith("d:sub") for b in a.buffers.buffers)
    # a node a named rewrite rule made may stand for other fx nodes: not read as a merge
    a = _run(_layer_norm_twice(tmp_path, "ruled", "sub_1", sub_rule="CastIdentity"), loss="mse")
    assert not any(b.name.startswith("d:sub") for b in a.buffers.buffers)


def _centred_norm_ts(tmp_path, name, square="pow", second_reader="Div", axes_var=(-1,)):
    """DeBERTa's LayerNorm as TorchScript writes it: one Sub (the exporter's CSE merged the two
    `x - mean`), its square's mean the variance, Sqrt of it plus eps, and the Sub divided by it; no node
    records a call."""
    sq = helper.make_node("Pow", ["d", "two"], ["p2"], name="pow") if square == "pow" else \
        helper.make_node("Mul", ["d", "d"], ["p2"], name="pow")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
             helper.make_node("ReduceMean", ["h", "ax"], ["mu"], name="mean"),
             helper.make_node("Sub", ["h", "mu"], ["d"], name="sub"),
             sq,
             helper.make_node("ReduceMean", ["p2", "axv"], ["var"], name="mean_1"),
             helper.make_node("Add", ["var", "eps"], ["ve"], name="add"),
             helper.make_node("Sqrt", ["ve"], ["s"], name="sqrt"),
             helper.make_node(second_reader, ["d", "s"], ["y"], name="norm")]
    inits = [("w", _w(8, 8)), ("ax", np.array([-1], np.int64)), ("axv", np.array(axes_var, np.int64)),
             ("two", np.float32(2.0)), ("eps", np.float32(1e-7))]
    return _model(tmp_path, nodes, [("x", F, [2, 4, 8])], [("y", [2, 4, 8])], inits, name)


def test_a_torchscript_centred_norm_computes_x_minus_mean_twice(tmp_path):
    # TorchScript's CSE merged `(x - mean).pow(2)`'s and `(x - mean) / sqrt(..)`'s Subs: eager made two
    # (256 B each), the first saved by pow, the second computed just before the division, which saves
    # it; both Subs are named as estimated (the file cannot tell `d = x - mean` used twice)
    a = _run(_centred_norm_ts(tmp_path, "pow"), loss="mse")
    bufs = {b.name: b for b in a.buffers.buffers}
    assert bufs["d:again"].size == 256 and a.buffers.steps[bufs["d:again"].last].kind != "forward"
    pow_bwd = next(s.index for s in a.buffers.steps if s.kind != "forward" and s.label.endswith("(pow)"))
    assert bufs["d"].last == pow_bwd
    est = a.extras["torch"]["coverage"]["estimated"]
    assert [e["type"] for e in est] == ["Sub"]
    # the square as Mul(d, d), the normalisation a Mul (Cohere's rsqrt): the same reading
    a = _run(_centred_norm_ts(tmp_path, "mul", square="mul", second_reader="Mul"), loss="mse")
    assert any(b.name == "d:again" for b in a.buffers.buffers)


def test_what_is_not_a_centred_norm_read_twice(tmp_path):
    # the variance over other axes than the mean's: not the norm's form, one Sub
    a = _run(_centred_norm_ts(tmp_path, "axes", axes_var=(-2,)), loss="mse")
    assert not any(b.name.endswith(":again") for b in a.buffers.buffers)
    assert not a.extras["torch"]["coverage"]["estimated"]
    # a dynamo export records its calls: its merges are read back from them, not by this reading
    a = _run(_layer_norm_twice(tmp_path, "one", "sub"), loss="mse")
    assert not any(b.name.endswith(":again") for b in a.buffers.buffers)


def _slice_writes(tmp_path, name, reduction="none", computed_index=False):
    """MiniCPM3's key states as TorchScript writes them: `k = a.new_empty(2, 4, 8)` (a float Constant
    node), `k[..., :6].copy_(a)` and `k[..., 6:].copy_(b)` as two ScatterNDs, then a sigmoid;
    `computed_index`: the second write's index computed by the file's own ops (as TorchScript builds
    it from Expand, Unsqueeze and Concat), not stored."""
    def idx(lo, hi):
        i, j, c = np.meshgrid(np.arange(2), np.arange(4), np.arange(lo, hi), indexing="ij")
        return np.stack([i, j, c], -1).astype(np.int64)
    base = helper.make_tensor("kv", F, [2, 4, 8], np.zeros(64, np.float32))
    nodes = [helper.make_node("MatMul", ["x", "wa"], ["a"], name="mma"),
             helper.make_node("MatMul", ["x", "wb"], ["b"], name="mmb"),
             helper.make_node("Constant", [], ["k0"], value=base, name="new_empty"),
             helper.make_node("ScatterND", ["k0", "ia", "a"], ["k1"], name="write_a"),
             helper.make_node("ScatterND", ["k1", "ib", "b"], ["k2"], name="write_b", reduction=reduction),
             helper.make_node("Sigmoid", ["k2"], ["y"], name="act")]
    inits = [("wa", _w(4, 6)), ("wb", _w(4, 2)), ("ia", idx(0, 6)), ("ib", idx(6, 8))]
    if computed_index:
        nodes.insert(0, helper.make_node("Add", ["ib0", "zero"], ["ib"], name="index"))
        inits[-1:] = [("ib0", idx(6, 8)), ("zero", np.int64(0))]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [2, 4, 4])],
                              [helper.make_tensor_value_info("y", F, [2, 4, 8])],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.producer_name = "pytorch"  # a float Constant node of torch.onnx is no parameter
    path = tmp_path / f"{name}.onnx"
    save(model, str(path))
    return load_model(str(path))


def test_slice_assignments_write_into_the_tensor(tmp_path):
    # eager's copy_ into a slice makes nothing in forward and saves nothing: the first write makes the
    # new_empty tensor (256 B), the second writes into it. Backward (CopySlices, measured): each makes
    # the result, a copy of the incoming gradient (256 B), and the slice's clone, the source's
    # gradient; while the data needs its gradient (the second write's: it holds a) a zeroed slice
    # (64 B) too; the first's result is freed in the op (its data is the fresh tensor)
    a = _run(_slice_writes(tmp_path, "writes"), loss="mse")
    first, second = _cols(a, "write_a"), _cols(a, "write_b")
    assert first["fwd_mem_out"] == 256 and second["fwd_mem_out"] == 0
    assert first["fwd_mem_tmp"] == 0 and second["fwd_mem_tmp"] == 0
    assert second["bwd_mem_tmp"] == 64 and second["bwd_mem_out"] == 256 + 64
    assert first["bwd_mem_tmp"] == 256 and first["bwd_mem_out"] == 192
    assert not a.extras["torch"]["coverage"]["estimated"]
    # an accumulating ScatterND is no assignment: eager's index_add (tests/profiles/test_torch_moe.py),
    # out of place, which keeps its index and its source (b) to backward
    a = _run(_slice_writes(tmp_path, "add", reduction="add"), loss="mse")
    assert not a.extras["torch"]["coverage"]["estimated"]
    assert _cols(a, "write_b")["fwd_mem_out"] == 256


def test_an_index_the_file_computes_for_a_slice_assignment_is_no_tensor(tmp_path):
    # eager's slice assignment has no index tensor; one the TorchScript file computes with its own ops
    # (a constant eager would compute in forward, were it a tensor of eager's) adds nothing
    stored = _run(_slice_writes(tmp_path, "stored"), loss="mse")
    computed = _run(_slice_writes(tmp_path, "computed", computed_index=True), loss="mse")
    assert computed.extras["torch"]["peak"] == stored.extras["torch"]["peak"]
    assert not [b for b in computed.buffers.buffers if b.name == "ib"]


def _read_then_write(tmp_path, name, before: bool):
    """TorchScript's form of `s = a[..., :2].clone(); a[..., 6:] = s * s` (`before`), or of
    `a[..., 6:] = b; s = a[..., :2]; s * s`: the clone is written as nothing."""
    def idx(lo, hi):
        i, j, c = np.meshgrid(np.arange(2), np.arange(4), np.arange(lo, hi), indexing="ij")
        return np.stack([i, j, c], -1).astype(np.int64)
    read = [helper.make_node("Slice", ["a", "s0", "s1", "ax"], ["s"], name="slice"),
            helper.make_node("Mul", ["s", "s"], ["p"], name="sq")]
    if before:
        nodes = [helper.make_node("MatMul", ["x", "w"], ["a"], name="mm"), *read,
                 helper.make_node("ScatterND", ["a", "ic", "p"], ["k"], name="write")]
        out = [helper.make_node("Sigmoid", ["k"], ["y"], name="act")]
    else:
        nodes = [helper.make_node("MatMul", ["x", "w"], ["a0"], name="mm"),
                 helper.make_node("MatMul", ["x", "wb"], ["b"], name="mmb"),
                 helper.make_node("ScatterND", ["a0", "ic", "b"], ["a"], name="write"), *read]
        out = [helper.make_node("Sigmoid", ["p"], ["y0"], name="act"),
               helper.make_node("ReduceSum", ["a", "axk"], ["ya"], name="sum"),
               helper.make_node("Add", ["ya", "y0"], ["y"], name="add")]
    inits = [("w", _w(4, 8)), ("wb", _w(4, 2)), ("ic", idx(6, 8)), ("s0", np.array([0], np.int64)),
             ("s1", np.array([2], np.int64)), ("ax", np.array([2], np.int64)), ("axk", np.array([2], np.int64))]
    graph = helper.make_graph(nodes + out, "g", [helper.make_tensor_value_info("x", F, [2, 4, 4])],
                              [helper.make_tensor_value_info("y", F, [2, 4, 8] if before else [2, 4, 2])],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.producer_name = "pytorch"
    path = tmp_path / f"{name}.onnx"
    save(model, str(path))
    return load_model(str(path))


def test_a_slice_read_before_an_in_place_write_was_a_clone(tmp_path):
    # autograd refuses a saved tensor modified in place since: eager cloned the slice (64 B) that the
    # Mul saves before `a` is written; TorchScript wrote the clone as nothing. A slice read after the
    # write is a view of the written tensor
    a = _run(_read_then_write(tmp_path, "before", True), loss="mse")
    clone = next(b for b in a.buffers.buffers if b.name == "s:clone")
    assert clone.size == 64 and a.buffers.steps[clone.last].kind != "forward"
    a = _run(_read_then_write(tmp_path, "after", False), loss="mse")
    assert not any(b.name.endswith(":clone") for b in a.buffers.buffers)


def test_recorded_writes_are_read_by_their_call(tmp_path):
    # a dynamo file: the ScatterNDs recording slice_scatter or index_put (the functionalized copy_ /
    # index_put_) are eager's in-place writes; one recording another call (a functional scatter) is
    # not (the general rule covers it, named as estimated)
    import onnx

    def recorded(name, call):
        _slice_writes(tmp_path, name)
        path = tmp_path / f"{name}.onnx"
        m = onnx.load(str(path))
        for n in m.graph.node:
            if n.op_type == "MatMul":
                _record(n, f"{n.output[0]} = aten.mm.default(args = (%x, %w), kwargs = {{}})")
            elif n.op_type == "ScatterND":
                _record(n, f"{n.output[0]} = aten.{call}.default(args = (%k, %src), kwargs = {{}})")
            elif n.op_type == "Sigmoid":
                _record(n, "y = aten.sigmoid.default(args = (%k2,), kwargs = {})")
        onnx.save(m, str(path))
        return _run(load_model(str(path)), loss="mse")
    for call in ("slice_scatter", "index_put"):
        a = recorded(call, call)
        assert _cols(a, "write_b")["fwd_mem_out"] == 0, call
        assert not a.extras["torch"]["coverage"]["estimated"], call
    a = recorded("scatter", "scatter")
    assert _cols(a, "write_b")["fwd_mem_out"] == 256
    assert {e["type"] for e in a.extras["torch"]["coverage"]["estimated"]} == {"ScatterND"}


def test_a_recorded_row_write_is_one_write_into_the_tensor(tmp_path):
    # `a[:, 1, 6:] = b` as the dynamo exporter functionalizes it: select row 1 (a Gather), a
    # slice_scatter into it, a select_scatter putting it back: eager's one copy_ into a view of a, so
    # no tensor is made in forward and nothing is left to the general rule
    import onnx

    ic = np.stack(np.meshgrid(np.arange(2), np.arange(6, 8), indexing="ij"), -1).astype(np.int64)
    nodes = [_record(helper.make_node("MatMul", ["x", "w"], ["a"], name="mm"),
                     "a = aten.mm.default(args = (%x, %w), kwargs = {})"),
             _record(helper.make_node("MatMul", ["xb", "wb"], ["b"], name="mmb"),
                     "b = aten.mm.default(args = (%xb, %wb), kwargs = {})"),
             _record(helper.make_node("Gather", ["a", "one"], ["s"], axis=1, name="sel"),
                     "select = aten.select.int(args = (%a, 1, 1), kwargs = {})"),
             _record(helper.make_node("ScatterND", ["s", "ic", "b"], ["s2"], name="write"),
                     "slice_scatter = aten.slice_scatter.default(args = (%select, %b, 1, 6, 8), kwargs = {})"),
             _record(helper.make_node("Unsqueeze", ["s2", "ax1"], ["u"], name="unsq"),
                     "select_scatter = aten.select_scatter.default(args = (%a, %slice_scatter, 1, 1), kwargs = {})"),
             _record(helper.make_node("ScatterElements", ["a", "ie", "u"], ["k"], axis=1, name="back"),
                     "select_scatter = aten.select_scatter.default(args = (%a, %slice_scatter, 1, 1), kwargs = {})"),
             _record(helper.make_node("Sigmoid", ["k"], ["y"], name="act"),
                     "y = aten.sigmoid.default(args = (%select_scatter,), kwargs = {})")]
    inits = [("w", _w(2, 4, 8)), ("wb", _w(4, 2)), ("one", np.array(1, np.int64)), ("ic", ic),
             ("ax1", np.array([1], np.int64)), ("ie", np.ones((2, 1, 8), np.int64))]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [2, 4, 4]),
                                           helper.make_tensor_value_info("xb", F, [2, 4])],
                              [helper.make_tensor_value_info("y", F, [2, 4, 8])],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits])
    path = tmp_path / "row.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    a = _run(load_model(str(path)), loss="mse")
    assert not a.extras["torch"]["coverage"]["estimated"]
    assert _cols(a, "write")["fwd_mem_out"] == 0
    assert not any(k.endswith("(back)") and v["fwd_mem_out"] for k, v in a.extras["per_layer_extra"].items())


def _dynamo_fill_model(tmp_path, nodes, x_shape, y_shape, inits, params, name):
    """A dynamo file from input x to output y whose graph signature lists `params` (so a fill the loader
    folds, `zeros` / `zeros_like` as an Expand of a 0-d zero, is no parameter)."""
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, x_shape)],
                              [helper.make_tensor_value_info("y", F, y_shape)],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits])
    sig = "".join(f"p_{n}: PARAMETER target='{n}'\n" for n in params)
    graph.metadata_props.add(key="pkg.torch.export.ExportedProgram.graph_signature",
                             value=f"\n# inputs\n{sig}x: USER_INPUT\n")
    path = tmp_path / f"{name}.onnx"
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    return load_model(str(path))


def test_a_recorded_select_scatter_alone_is_a_write_without_an_index_tensor(tmp_path):
    # `o = zeros_like(..); o[:, 1] = b` under dynamo: one select_scatter, a ScatterElements whose
    # indices the exporter expanded from the int 1. Eager runs copy_ into o.select(1, 1) (CopySlices):
    # the indices are no tensor (nothing held for them), the write makes the fill it writes into
    nodes = [_record(helper.make_node("Expand", ["zero", "shape"], ["zeros_like"], name="fill"),
                     "zeros_like = aten.zeros_like.default(args = (%y0,), kwargs = {})"),
             _record(helper.make_node("MatMul", ["x", "w"], ["b"], name="mmb"),
                     "b = aten.mm.default(args = (%x, %p_w), kwargs = {})"),
             _record(helper.make_node("Unsqueeze", ["b", "ax1"], ["u"], name="unsq"),
                     "select_scatter = aten.select_scatter.default(args = (%zeros_like, %b, 1, 1), kwargs = {})"),
             _record(helper.make_node("ScatterElements", ["zeros_like", "idx", "u"], ["k"], axis=1, name="write"),
                     "select_scatter = aten.select_scatter.default(args = (%zeros_like, %b, 1, 1), kwargs = {})"),
             _record(helper.make_node("Sigmoid", ["k"], ["y"], name="act"),
                     "y = aten.sigmoid.default(args = (%select_scatter,), kwargs = {})")]
    inits = [("w", _w(4, 4)), ("ax1", np.array([1], np.int64)), ("idx", np.ones((2, 1, 4), np.int64)),
             ("zero", np.float32(0.0)), ("shape", np.array([2, 3, 4], np.int64))]
    a = _run(_dynamo_fill_model(tmp_path, nodes, [2, 4], [2, 3, 4], inits, ["w"], "row_alone"), loss="mse")
    assert not a.extras["torch"]["coverage"]["estimated"]
    assert "idx" not in {b.name for b in a.buffers.buffers}
    assert _cols(a, "write")["fwd_mem_out"] == 96


def test_a_fill_the_exporter_merged_is_one_tensor_per_call(tmp_path):
    # two `torch.zeros(..)` of one shape (a recurrent state per block): the dynamo exporter folds
    # them and merges the equal constants into one, which the second block's matmul still records
    # as `%zeros_2`; eager makes two tensors, each saved by its matmul for the other side's gradient
    nodes = [_record(helper.make_node("Expand", ["zero", "shape"], ["zeros_1"], name="fill"),
                     "zeros_1 = aten.zeros.default(args = ([2, 4, 4],), kwargs = {})"),
             _record(helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
                     "h = aten.matmul.default(args = (%x, %p_w), kwargs = {})"),
             _record(helper.make_node("MatMul", ["h", "zeros_1"], ["m1"], name="state1"),
                     "m1 = aten.matmul.default(args = (%h, %zeros_1), kwargs = {})"),
             _record(helper.make_node("MatMul", ["m1", "zeros_1"], ["m2"], name="state2"),
                     "m2 = aten.matmul.default(args = (%m1, %zeros_2), kwargs = {})"),
             _record(helper.make_node("Sigmoid", ["m2"], ["y"], name="act"),
                     "y = aten.sigmoid.default(args = (%m2,), kwargs = {})")]
    inits = [("w", _w(4, 4)), ("zero", np.float32(0.0)), ("shape", np.array([2, 4, 4], np.int64))]
    a = _run(_dynamo_fill_model(tmp_path, nodes, [2, 3, 4], [2, 3, 4], inits, ["w"], "fills"), loss="mse")
    fills = [b for b in a.buffers.buffers if b.name.startswith("zeros_1")]
    assert sorted((b.name, b.size) for b in fills) == [("zeros_1", 128), ("zeros_1:zeros_2", 128)]
    assert all(b.category == "non-const" and a.buffers.steps[b.last].kind != "forward" for b in fills)
    # a view of one shared tensor (each layer's `cos.unsqueeze(1)` of a rotary table) is no new tensor
    for n in nodes:
        for prop in n.metadata_props:
            prop.value = prop.value.replace("zeros_1", "unsqueeze_1").replace("zeros_2", "unsqueeze_2").replace(
                "aten.zeros.default", "aten.unsqueeze.default")
        n.input[:] = ["unsqueeze_1" if i == "zeros_1" else i for i in n.input]
        n.output[:] = ["unsqueeze_1" if o == "zeros_1" else o for o in n.output]
    a = _run(_dynamo_fill_model(tmp_path, nodes, [2, 3, 4], [2, 3, 4], inits, ["w"], "views"), loss="mse")
    assert [b.size for b in a.buffers.buffers if b.name.startswith("unsqueeze_1")] == [128]



def test_a_copy_the_exporter_folded_and_merged_is_one_tensor_per_call(tmp_path):
    # ProphetNet's layers each `repeat` the decoder's position buckets and cast them for their own
    # gather: the dynamo exporter folds the chain into one constant that both layers read, the second
    # recording `%_to_copy_2`; `_to_copy` returns a new tensor at each call, so eager has two, each
    # saved by its reader
    nodes = [_record(helper.make_node("Expand", ["zero", "shape"], ["_to_copy_1"], name="copy"),
                     "_to_copy_1 = aten._to_copy.default(args = (%repeat,), kwargs = {dtype: torch.float32})"),
             _record(helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
                     "h = aten.matmul.default(args = (%x, %p_w), kwargs = {})"),
             _record(helper.make_node("MatMul", ["h", "_to_copy_1"], ["m1"], name="layer1"),
                     "m1 = aten.matmul.default(args = (%h, %_to_copy_1), kwargs = {})"),
             _record(helper.make_node("MatMul", ["m1", "_to_copy_1"], ["m2"], name="layer2"),
                     "m2 = aten.matmul.default(args = (%m1, %_to_copy_2), kwargs = {})"),
             _record(helper.make_node("Sigmoid", ["m2"], ["y"], name="act"),
                     "y = aten.sigmoid.default(args = (%m2,), kwargs = {})")]
    inits = [("w", _w(4, 4)), ("zero", np.float32(0.0)), ("shape", np.array([2, 4, 4], np.int64))]
    a = _run(_dynamo_fill_model(tmp_path, nodes, [2, 3, 4], [2, 3, 4], inits, ["w"], "copies"), loss="mse")
    copies = [b for b in a.buffers.buffers if b.name.startswith("_to_copy_1")]
    assert sorted((b.name, b.size) for b in copies) == [("_to_copy_1", 128), ("_to_copy_1:_to_copy_2", 128)]
    assert all(b.category == "non-const" and a.buffers.steps[b.last].kind != "forward" for b in copies)
    # `contiguous` (like `to` and `reshape`) returns its input when it can: one tensor for both
    for n in nodes:
        for prop in n.metadata_props:
            prop.value = prop.value.replace("_to_copy_", "contiguous_").replace(
                "aten._to_copy.default", "aten.contiguous.default")
        n.input[:] = ["contiguous_1" if i == "_to_copy_1" else i for i in n.input]
        n.output[:] = ["contiguous_1" if o == "_to_copy_1" else o for o in n.output]
    a = _run(_dynamo_fill_model(tmp_path, nodes, [2, 3, 4], [2, 3, 4], inits, ["w"], "may_alias"), loss="mse")
    assert [b.size for b in a.buffers.buffers if b.name.startswith("contiguous_1")] == [128]

def _unbind(tmp_path, name, read_last: bool):
    """`q, k, v = h.view(2, 3, 8).permute(1, 0, 2).unbind(0)` as the dynamo exporter writes it (a Slice and
    a Squeeze per piece, all recording `%unbind`), then `q * k (+ v)`."""
    call = "unbind = aten.unbind.int(args = (%permute,), kwargs = {})"
    nodes = [_record(helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
                     "h = aten.mm.default(args = (%x, %p_w), kwargs = {})"),
             _record(helper.make_node("Reshape", ["h", "shape"], ["r"], name="view"),
                     "view = aten.view.default(args = (%h, [2, 3, 8]), kwargs = {})"),
             _record(helper.make_node("Transpose", ["r"], ["t"], perm=[1, 0, 2], name="permute"),
                     "permute = aten.permute.default(args = (%view, [1, 0, 2]), kwargs = {})")]
    for i in range(3):
        nodes += [_record(helper.make_node("Slice", ["t", f"s{i}", f"s{i + 1}", "ax0"], [f"sl{i}"], name=f"slice{i}"),
                          call),
                  _record(helper.make_node("Squeeze", [f"sl{i}", "ax0"], [f"p{i}"], name=f"unbind_{i}"), call)]
    nodes.append(_record(helper.make_node("Mul", ["p0", "p1"], ["m" if read_last else "y"], name="mul"),
                         "mul = aten.mul.Tensor(args = (%getitem, %getitem_1), kwargs = {})"))
    if read_last:
        nodes.append(_record(helper.make_node("Add", ["m", "p2"], ["y"], name="add"),
                             "add = aten.add.Tensor(args = (%mul, %getitem_2), kwargs = {})"))
    inits = [("w", _w(4, 24)), ("shape", np.array([2, 3, 8], np.int64)), ("ax0", np.array([0], np.int64)),
             *((f"s{i}", np.array([i], np.int64)) for i in range(4))]
    return _dynamo_fill_model(tmp_path, nodes, [2, 4], [2, 8], inits, ["w"], name)


def test_a_recorded_unbind_is_one_op_whose_backward_stacks(tmp_path):
    # eager's unbind: three select views; UnbindBackward0 stacks the three gradients into one of the
    # input's size (3 x 2 x 8 floats: 192 B), where each Slice's backward would make one of its own
    a = _run(_unbind(tmp_path, "unbind3", True), loss="mse")
    cols = {k: v for k, v in a.extras["per_layer_extra"].items() if "slice" in k or "unbind_" in k}
    assert sum(v["bwd_mem_out"] for v in cols.values()) == 192
    assert sum(v["bwd_mem_tmp"] for v in cols.values()) == 0
    assert not a.extras["torch"]["coverage"]["estimated"]
    # a piece nobody reads stands in the stack as a 0-d zero expanded (unbind_backward): no zeros of its
    # size, unlike split's
    a = _run(_unbind(tmp_path, "unbind2", False), loss="mse")
    cols = {k: v for k, v in a.extras["per_layer_extra"].items() if "slice" in k or "unbind_" in k}
    assert sum(v["bwd_mem_out"] for v in cols.values()) == 192
    assert sum(v["bwd_mem_tmp"] for v in cols.values()) == 0


def test_a_cast_to_its_own_dtype_is_no_copy(tmp_path):
    # TorchScript writes `scores.float()` as a Cast even where scores are float32 already; eager's
    # Tensor.to returns the tensor itself (no copy, no autograd node): the softmax reads h (2 x 4:
    # 32 B) and nothing is made for the Cast. A Cast that changes the dtype stays a copy
    def graph(name, to):
        nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
                 helper.make_node("Cast", ["h"], ["c"], to=to, name="cast"),
                 helper.make_node("Cast", ["c"], ["f"], to=TensorProto.FLOAT, name="back"),
                 helper.make_node("Softmax", ["f"], ["y"], axis=-1, name="softmax")]
        return _model(tmp_path, nodes, [("x", F, [2, 4])], [("y", [2, 4])], [("w", _w(4, 4))], name)
    a = _run(graph("same", TensorProto.FLOAT), loss="mse")
    assert not {"c", "f"} & {b.name for b in a.buffers.buffers}
    assert _cols(a, "cast")["fwd_mem_out"] == 0 and _cols(a, "cast")["bwd_mem_out"] == 0
    a = _run(graph("half", TensorProto.FLOAT16), loss="mse")
    assert _cols(a, "cast")["fwd_mem_out"] == 16 and _cols(a, "back")["fwd_mem_out"] == 32


def _group_var(tmp_path, name, calls=None):
    """`x.var(dims, unbiased=False, keepdim=True)` over groups as both exporters write it (Mean, Sub,
    Mul(d, d), Mean), after a MatMul so that x needs a gradient, then its sqrt divides x. `calls`: the
    fx call each of the four nodes records (the dynamo exporter), none when None (TorchScript)."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
             helper.make_node("Reshape", ["h", "gs"], ["hg"], name="view"),
             helper.make_node("ReduceMean", ["hg", "ax"], ["mu"], name="mean"),
             helper.make_node("Sub", ["hg", "mu"], ["d"], name="sub"),
             helper.make_node("Mul", ["d", "d"], ["d2"], name="sq"),
             helper.make_node("ReduceMean", ["d2", "ax"], ["var"], name="mean_1"),
             helper.make_node("Sqrt", ["var"], ["sd"], name="sqrt"),
             helper.make_node("Div", ["hg", "sd"], ["yg"], name="div"),
             helper.make_node("Reshape", ["yg", "ys"], ["y"], name="back")]
    for n, c in zip(nodes[2:6], calls or ()):
        _record(n, c)
    inits = [("w", _w(8, 8)), ("gs", np.array([4, 2, 4, 4], np.int64)), ("ax", np.array([2, 3], np.int64)),
             ("ys", np.array([4, 4, 8], np.int64))]
    return _model(tmp_path, nodes, [("x", F, [4, 4, 8])], [("y", [4, 4, 8])], inits, name)


def test_var_as_the_exporters_write_it_is_one_aten_var(tmp_path):
    # eager runs one aten::var.correction: it saves its input alone (derivatives.yaml var_backward), so
    # the exporters' `x - mean` (512 B) and its square are no tensors; var's backward makes
    # `(2 / n) * grad` and the mean (the output's size, 32 B each) and `self - mean` (512 B) beside the
    # input's gradient (FunctionsManual.cpp var_backward)
    var = "var = prims.var.default(args = (%view, [2, 3], 0.0), kwargs = {})"
    for name, calls in (("ts", None), ("dyn", [var] * 4)):
        a = _run(_group_var(tmp_path, name, calls), loss="mse")
        names = {b.name for b in a.buffers.buffers}
        assert "d" not in names and "d2" not in names and "mu" not in names, name
        c = _cols(a, "mean_1")
        assert c["fwd_mem_out"] == 32 and c["fwd_mem_tmp"] == 0
        tmp = next(b for b in a.buffers.buffers if b.name.endswith("(mean_1):tmp"))
        assert tmp.size == 512 + 2 * 32
        # x (the MatMul's output) is saved until var's backward
        h = next(b for b in a.buffers.buffers if b.name == "h")
        assert a.buffers.steps[h.last].label.endswith("(mean_1)")
    # the same nodes recording aten.mean / sub / mul: a variance written by hand, four eager ops, the
    # Mul saving `x - mean`
    own = ["mean = aten.mean.dim(args = (%view, [2, 3], True), kwargs = {})",
           "sub = aten.sub.Tensor(args = (%view, %mean), kwargs = {})",
           "mul = aten.mul.Tensor(args = (%sub, %sub), kwargs = {})",
           "mean_1 = aten.mean.dim(args = (%mul, [2, 3], True), kwargs = {})"]
    a = _run(_group_var(tmp_path, "own", own), loss="mse")
    d = next(b for b in a.buffers.buffers if b.name == "d")
    assert a.buffers.steps[d.last].kind != "forward"


def test_an_integer_index_constant_gather_saves_is_held_a_shape_is_not(tmp_path):
    # TinyViT's attention_bias_idxs: an integer buffer of the module that the index op saves (gather
    # keeps its indices) is a tensor held the whole step (4 x 4 int64: 128 B); the Reshape's shape
    # constants are Python values in eager, no tensors
    nodes = [helper.make_node("Gather", ["table", "idx"], ["bias"], axis=1, name="gather"),
             helper.make_node("Unsqueeze", ["bias", "a0m"], ["m"], name="unsq")]
    a = _run(_attention(tmp_path, mask=True, mask_nodes=nodes, name="idx"))
    held = {b.name: b for b in a.buffers.buffers if b.first == 0 and b.last == len(a.buffers.steps) - 1}
    assert held["idx"].size == 128
    assert not {"s5", "s3", "a0m"} & set(held)


@pytest.mark.parametrize("uses", [1, 2, 3])
def test_a_weight_read_only_through_transposes_keeps_its_gradient(tmp_path, uses):
    # CoaT's parallel blocks share one MLP (`mlp2 = mlp3 = mlp4`): the TorchScript export reads its weight
    # W (4 x 3 floats, 48 B) through one Transpose per use. The sum of the views' gradients is W's .grad
    # (AccumulateGrad keeps a contiguous sum, copies a transposed view): it lives to the end of the step
    nodes, outs = [], []
    for k in range(uses):
        nodes += [helper.make_node("Transpose", ["W"], [f"Wt{k}"], perm=[1, 0], name=f"t{k}"),
                  helper.make_node("MatMul", [f"x{k}", f"Wt{k}"], [f"y{k}"], name=f"fc{k}")]
    nodes.append(helper.make_node("Concat", [f"y{k}" for k in range(uses)], ["y"], axis=1, name="cat"))
    g = _model(tmp_path, nodes, [(f"x{k}", F, [2, k + 1, 3]) for k in range(uses)],
               [("y", [2, uses * (uses + 1) // 2, 4])], [("W", _w(4, 3))])
    a = _run(g)
    end = len(a.buffers.steps) - 1
    kept = [b for b in a.buffers.buffers if b.category == "gradient" and b.last == end]
    assert [b.size for b in kept] == [48]


def _chunked(tmp_path, name, chunk_ends=True, pieces=3):
    """`a, b, c = h.chunk(3, -1)` as TorchScript writes it (torch.onnx's prim::ConstantChunk symbolic:
    c = (Shape(h)[-1] + 2) / 3, Slice(h, i * c, (i + 1) * c, [-1]) per piece), then `a * b (+ c)`; or,
    with `chunk_ends` False, the same three windows sliced at constant bounds (`h[:, 0:2]`, ...)."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm")]
    if chunk_ends:
        nodes += [helper.make_node("Shape", ["h"], ["shp"], name="shape"),
                  helper.make_node("Gather", ["shp", "axis"], ["dim"], axis=0, name="gather"),
                  helper.make_node("Add", ["dim", "two"], ["dim2"], name="add_shift"),
                  helper.make_node("Div", ["dim2", "three"], ["size"], name="div")]
        nodes += [helper.make_node("Mul", ["size", f"k{i + 1}"], [f"e{i + 1}"], name=f"end{i}") for i in range(3)]
    bounds = [("zero", "e1"), ("e1", "e2"), ("e2", "e3")] if chunk_ends else \
        [("zero", "c2"), ("c2", "c4"), ("c4", "c6")]
    for i, (s, e) in enumerate(bounds[:pieces]):
        nodes.append(helper.make_node("Slice", ["h", s, e, "axis"], [f"p{i}"], name=f"slice{i}"))
    nodes.append(helper.make_node("Mul", ["p0", "p1"], ["m" if pieces == 3 else "y"], name="mul"))
    if pieces == 3:
        nodes.append(helper.make_node("Add", ["m", "p2"], ["y"], name="add"))
    inits = [("w", _w(4, 6)), ("axis", np.array([-1], np.int64)), ("two", np.array([2], np.int64)),
             ("three", np.array([3], np.int64)), ("zero", np.array([0], np.int64)),
             *((f"k{i}", np.array([i], np.int64)) for i in (1, 2, 3)),
             *((f"c{i}", np.array([i], np.int64)) for i in (2, 4, 6))]
    return _model(tmp_path, nodes, [("x", F, [2, 4])], [("y", [2, 2])], inits, name)


def test_a_torchscript_chunk_is_one_split_whose_backward_cats(tmp_path):
    # chunk is split in eager: views, and one SplitBackward0 that cats the pieces' gradients into h's
    # (2 x 6 floats: 48 B); a Slice each would make a zeroed h-sized gradient of its own (3 x 48 B)
    slices = lambda a: {k: v for k, v in a.extras["per_layer_extra"].items() if "slice" in k}
    a = _run(_chunked(tmp_path, "chunk3"), loss="mse")
    assert sum(v["bwd_mem_out"] for v in slices(a).values()) == 48
    assert sum(v["bwd_mem_tmp"] for v in slices(a).values()) == 0
    assert not a.extras["torch"]["coverage"]["estimated"]
    # a piece the trace dropped (nothing read it): split_backward's zeros of its size (16 B)
    a = _run(_chunked(tmp_path, "chunk2", pieces=2), loss="mse")
    assert sum(v["bwd_mem_out"] for v in slices(a).values()) == 48
    assert sum(v["bwd_mem_tmp"] for v in slices(a).values()) == 16
    # the same windows at constant bounds are slices in eager too: one slice_backward each
    a = _run(_chunked(tmp_path, "sliced", chunk_ends=False), loss="mse")
    assert sum(v["bwd_mem_out"] + v["bwd_mem_tmp"] for v in slices(a).values()) == 3 * 48


def _torchscript_file(tmp_path, nodes, inits, name):
    """A file as torch.onnx's TorchScript exporter writes one: producer "pytorch", no recorded calls,
    node and value names by module path."""
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [2, 8])],
                              [helper.make_tensor_value_info("y", F, [2, 8])],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits])
    path = tmp_path / f"{name}.onnx"
    save(helper.make_model(graph, producer_name="pytorch", opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return load_model(str(path))


def _layers_gathering(tmp_path, name, index_scope, expand=False):
    """Two layers, each `h.gather(1, idx)` of its projection; idx computed from constants
    (`arange(8).repeat(2, 1)`) under `index_scope`, read by both layers' gathers, as TorchScript's
    common-subexpression pass leaves a per-layer computation (`/m/layers.0/...` read by layers.1)."""
    nodes = [helper.make_node("Range", ["zero", "eight", "one"], [f"{index_scope}/Range_output_0"],
                              name=f"{index_scope}/Range"),
             helper.make_node("Unsqueeze", [f"{index_scope}/Range_output_0", "ax0"],
                              [f"{index_scope}/Unsqueeze_output_0"], name=f"{index_scope}/Unsqueeze"),
             helper.make_node("Expand" if expand else "Tile",
                              [f"{index_scope}/Unsqueeze_output_0", "shape" if expand else "reps"],
                              [f"{index_scope}/Tile_output_0"], name=f"{index_scope}/Tile")]
    h = "x"
    for i in range(2):
        nodes += [helper.make_node("MatMul", [h, f"layers.{i}.w"], [f"/m/layers.{i}/MatMul_output_0"],
                                   name=f"/m/layers.{i}/MatMul"),
                  helper.make_node("GatherElements", [f"/m/layers.{i}/MatMul_output_0", f"{index_scope}/Tile_output_0"],
                                   ["y" if i else f"/m/layers.{i}/GatherElements_output_0"], axis=1,
                                   name=f"/m/layers.{i}/GatherElements")]
        h = f"/m/layers.{i}/GatherElements_output_0"
    inits = [("layers.0.w", _w(8, 8)), ("layers.1.w", _w(8, 8)), ("zero", np.int64(0)), ("eight", np.int64(8)),
             ("one", np.int64(1)), ("ax0", np.array([0], np.int64)), ("reps", np.array([2, 1], np.int64)),
             ("shape", np.array([2, 8], np.int64))]
    return _torchscript_file(tmp_path, nodes, inits, name)


def test_a_torchscript_index_one_layer_computed_is_one_per_layer(tmp_path):
    # eager's layers each compute their index (2 x 8 int64: 128 B) and each gather saves its own; the
    # file's CSE left one, computed under layers.0 and read by layers.1: a second one is counted
    a = _run(_layers_gathering(tmp_path, "cse", "/m/layers.0"), loss="mse")
    idx = sorted(b.name for b in a.buffers.buffers if "Tile_output_0" in b.name)
    assert idx == ["/m/layers.0/Tile_output_0", "/m/layers.0/Tile_output_0:layers.1"]
    # computed by the parent module (a decoder's buckets handed to every layer): one tensor, as in eager
    a = _run(_layers_gathering(tmp_path, "parent", "/m"), loss="mse")
    assert [b.name for b in a.buffers.buffers if "Tile_output_0" in b.name] == ["/m/Tile_output_0"]
    # `arange(8).expand(2, 8)`: expand is a view, the gathers save the 8 values it repeats (64 B)
    a = _run(_layers_gathering(tmp_path, "expanded", "/m", expand=True), loss="mse")
    assert [b.size for b in a.buffers.buffers if "Tile_output_0" in b.name] == [64]


def test_a_torchscript_mask_computed_in_forward_is_no_held_buffer(tmp_path):
    # a float mask the file computes from constants (`zeros(2, 8) - 1e4 * (arange(8) > 3)`, folded at
    # load) is a tensor eager makes in forward each step, freed after its last reader (an Add saves
    # nothing), not a module buffer held all step; a stored constant (a Constant node: a traced
    # buffer) stays held
    nodes = [helper.make_node("MatMul", ["x", "w"], ["/m/MatMul_output_0"], name="/m/MatMul"),
             helper.make_node("Relu", ["/m/MatMul_output_0"], ["/m/Relu_output_0"], name="/m/Relu"),
             helper.make_node("Range", ["zero", "eight", "one"], ["/m/Range_output_0"], name="/m/Range"),
             helper.make_node("Greater", ["/m/Range_output_0", "three"], ["/m/Greater_output_0"], name="/m/Greater"),
             helper.make_node("Where", ["/m/Greater_output_0", "neg", "nil"], ["/m/Where_output_0"], name="/m/Where"),
             helper.make_node("Add", ["/m/Relu_output_0", "/m/Where_output_0"], ["/m/Add_output_0"], name="/m/Add"),
             helper.make_node("Constant", [], ["/m/Constant_output_0"], name="/m/Constant",
                              value=numpy_helper.from_array(np.full((2, 8), 0.5, np.float32))),
             helper.make_node("Mul", ["/m/Add_output_0", "/m/Constant_output_0"], ["y"], name="/m/Mul")]
    inits = [("w", _w(8, 8)), ("zero", np.int64(0)), ("eight", np.int64(8)), ("one", np.int64(1)),
             ("three", np.int64(3)), ("neg", np.float32(-1e4)), ("nil", np.float32(0.0))]
    a = _run(_torchscript_file(tmp_path, nodes, inits, "mask"), loss="mse")
    cat = {b.name: b.category for b in a.buffers.buffers}
    assert cat["/m/Where_output_0"] != "trainable" and cat["/m/Constant_output_0"] == "trainable"
    where = next(b for b in a.buffers.buffers if b.name == "/m/Where_output_0")
    assert where.first > 0


def test_a_torchscript_constant_only_written_into_is_no_held_buffer(tmp_path):
    # `h.index_add(0, idx, v)` as TorchScript writes it: the source scattered into a traced zeros
    # Constant (ScatterElements, its data input 0), added to the target. Eager makes no such tensor
    # (or a transient one): the Constant is a forward value, not held all step; a Constant read as
    # itself (a traced non-persistent buffer) stays held
    nodes = [helper.make_node("MatMul", ["x", "w"], ["/m/MatMul_output_0"], name="/m/MatMul"),
             helper.make_node("Constant", [], ["/m/Constant_output_0"], name="/m/Constant",
                              value=numpy_helper.from_array(np.zeros((2, 8), np.float32))),
             helper.make_node("ScatterElements", ["/m/Constant_output_0", "idx", "/m/MatMul_output_0"],
                              ["/m/ScatterElements_output_0"], axis=0, name="/m/ScatterElements"),
             helper.make_node("Constant", [], ["/m/Constant_1_output_0"], name="/m/Constant_1",
                              value=numpy_helper.from_array(np.full((2, 8), 0.5, np.float32))),
             helper.make_node("Add", ["/m/Constant_1_output_0", "/m/ScatterElements_output_0"], ["y"], name="/m/Add")]
    inits = [("w", _w(8, 8)), ("idx", np.array([[1] * 8, [0] * 8], np.int64))]
    a = _run(_torchscript_file(tmp_path, nodes, inits, "index_add"), loss="mse")
    cat = {b.name: b.category for b in a.buffers.buffers}
    assert cat["/m/Constant_output_0"] != "trainable" and cat["/m/Constant_1_output_0"] == "trainable", cat
    zeros = next(b for b in a.buffers.buffers if b.name == "/m/Constant_output_0")
    assert zeros.first > 0


def test_a_torchscript_view_one_layer_made_of_the_parents_table_stays_one_tensor(tmp_path):
    # the parent computes a table (a rotary cos: `arange(8).float() * 0.5`), each layer `unsqueeze`s it
    # and multiplies (mul saves it); TorchScript's CSE leaves layers.0's unsqueeze read by layers.1.
    # An unsqueeze is a view in eager: both layers read the parent's one tensor, no copy is counted
    nodes = [helper.make_node("Range", ["zero", "eight", "one"], ["/m/rotary/Range_output_0"], name="/m/rotary/Range"),
             helper.make_node("Cast", ["/m/rotary/Range_output_0"], ["/m/rotary/Cast_output_0"], to=F,
                              name="/m/rotary/Cast"),
             helper.make_node("Mul", ["/m/rotary/Cast_output_0", "half"], ["/m/rotary/Mul_output_0"],
                              name="/m/rotary/Mul"),
             helper.make_node("Unsqueeze", ["/m/rotary/Mul_output_0", "ax0"], ["/m/layers.0/Unsqueeze_output_0"],
                              name="/m/layers.0/Unsqueeze")]
    h = "x"
    for i in range(2):
        nodes += [helper.make_node("MatMul", [h, f"layers.{i}.w"], [f"/m/layers.{i}/MatMul_output_0"],
                                   name=f"/m/layers.{i}/MatMul"),
                  helper.make_node("Mul", [f"/m/layers.{i}/MatMul_output_0", "/m/layers.0/Unsqueeze_output_0"],
                                   ["y" if i else f"/m/layers.{i}/Mul_output_0"], name=f"/m/layers.{i}/Mul")]
        h = f"/m/layers.{i}/Mul_output_0"
    inits = [("layers.0.w", _w(8, 8)), ("layers.1.w", _w(8, 8)), ("zero", np.int64(0)), ("eight", np.int64(8)),
             ("one", np.int64(1)), ("half", np.float32(0.5)), ("ax0", np.array([0], np.int64))]
    a = _run(_torchscript_file(tmp_path, nodes, inits, "rotary_view"), loss="mse")
    assert [b.name for b in a.buffers.buffers if "Unsqueeze_output_0" in b.name] == ["/m/layers.0/Unsqueeze_output_0"]



def _fill_read(tmp_path, name, stored):
    """`torch.where(h > 0.5, h.new_zeros(2, 8), h)` with h = relu(x @ w), as TorchScript writes it
    (Longformer's chunked scores: a Where of a `new_zeros`): ConstantOfShape of a constant shape;
    `stored`: the zeros are an initializer instead (a tensor of the module's state dict)."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["/m/MatMul_output_0"], name="/m/MatMul"),
             helper.make_node("Relu", ["/m/MatMul_output_0"], ["/m/Relu_output_0"], name="/m/Relu"),
             helper.make_node("Greater", ["/m/Relu_output_0", "half"], ["/m/Greater_output_0"], name="/m/Greater"),
             helper.make_node("Where", ["/m/Greater_output_0", "/m/ConstantOfShape_output_0", "/m/Relu_output_0"],
                              ["y"], name="/m/Where")]
    if not stored:
        nodes.insert(0, helper.make_node("ConstantOfShape", ["shape"], ["/m/ConstantOfShape_output_0"],
                                         name="/m/ConstantOfShape",
                                         value=numpy_helper.from_array(np.zeros(1, np.float32))))
    inits = [("w", _w(8, 8)), ("half", np.float32(0.5))]
    inits += [("/m/ConstantOfShape_output_0", np.zeros((2, 8), np.float32))] if stored else \
        [("shape", np.array([2, 8], np.int64))]
    return _torchscript_file(tmp_path, nodes, inits, name)


def test_a_torchscript_fill_made_in_forward_is_no_held_buffer(tmp_path):
    # a fill standing alone (ConstantOfShape: `new_zeros` in forward) is a tensor eager makes each
    # step, made at its first reader and freed after its last (where saves only its condition), not
    # held all step; the same zeros stored as an initializer stay held from the step's start to its end
    made = _run(_fill_read(tmp_path, "made", stored=False), loss="mse")
    held = _run(_fill_read(tmp_path, "held", stored=True), loss="mse")
    fill = {a: next(b for b in r.buffers.buffers if b.name == "/m/ConstantOfShape_output_0")
            for a, r in (("made", made), ("held", held))}
    last = {a: max(b.last for b in r.buffers.buffers) for a, r in (("made", made), ("held", held))}
    assert fill["made"].category != "trainable" and 0 < fill["made"].first and fill["made"].last < last["made"]
    assert fill["held"].first == 0 and fill["held"].last == last["held"]
