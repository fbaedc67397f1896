"""Torch facts of the op families issue 39 found missing or wrong on networks the profile was not
fitted to; each figure here was measured with torch 2.14 on one thread (the per-op allocator events
of the one op, forward and backward). devtools/torch_family_zoo.py checks them on whole networks."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import helper  # noqa: E402

from memplan_cli.analysis import analyze  # noqa: E402
from memplan_cli.config import TrainConfig  # noqa: E402
from tests.ops.gradcheck import onnx_model, save  # noqa: E402


def _group_norm(tmp_path, n=4, c=32, h=16, groups=4, affine=True):
    """torch.onnx's GroupNorm (TorchScript's pattern): Reshape (N, G, -1), InstanceNormalization with
    ones / zeros of G, Reshape back, Mul by the weight unsqueezed to (C, 1, 1), Add of the bias; a
    convolution before it so that its input needs a gradient."""
    nodes = [helper.make_node("Conv", ["x", "cw"], ["a"], kernel_shape=[1, 1]),
             helper.make_node("Reshape", ["a", "s1"], ["r"]),
             helper.make_node("InstanceNormalization", ["r", "ones", "zeros"], ["i"]),
             helper.make_node("Shape", ["a"], ["sh"]),
             helper.make_node("Reshape", ["i", "sh"], ["b" if affine else "y"])]
    inits = {"cw": np.zeros((c, c, 1, 1), np.float32), "s1": np.array([n, groups, -1], np.int64),
             "ones": np.ones(groups, np.float32), "zeros": np.zeros(groups, np.float32)}
    if affine:
        nodes += [helper.make_node("Unsqueeze", ["gw", "ax"], ["gw3"]),
                  helper.make_node("Mul", ["b", "gw3"], ["m"]),
                  helper.make_node("Unsqueeze", ["gb", "ax"], ["gb3"]),
                  helper.make_node("Add", ["m", "gb3"], ["y"])]
        inits.update({"gw": np.ones(c, np.float32), "gb": np.zeros(c, np.float32),
                      "ax": np.array([1, 2], np.int64)})
    return save(tmp_path, onnx_model(nodes, [("x", (n, c, h, h))], [("y", (n, c, h, h))], inits))


def _cols(path, **cfg):
    a = analyze(path, TrainConfig(**{"loss": "mse", **cfg}), profile="torch")
    return a, a.extras["per_layer_extra"]


def test_group_norm_export_is_read_back_as_one_native_group_norm(tmp_path):
    # measured (torch 2.14) for (4, 32, 16, 16), 4 groups: forward the output (131,072 B) and mean /
    # rstd (64 B each); backward the input's gradient (131,072 B), the weight's and bias's (128 B each)
    # and two (N, C) float accumulators (512 B each) freed in the op
    a, cols = _cols(_group_norm(tmp_path), batch_size=4)
    gn = [v for k, v in cols.items() if "InstanceNormalization" in k or "Mul" in k or "Add" in k]
    assert sum(v["fwd_mem_out"] for v in gn) == 131072
    assert sum(v["fwd_mem_tmp"] for v in gn) == 2 * 64
    assert sum(v["bwd_mem_tmp"] for v in gn) == 2 * 512
    assert sum(v["bwd_mem_out"] for v in gn) == 131072 + 2 * 128
    names = {b.name for b in a.buffers.buffers}
    # the exporter's ones / zeros of G are no tensors in eager; the weight and bias (their unsqueezed
    # views, folded by the loader) are parameters with their gradients
    assert "ones" not in names and "zeros" not in names and {"gw3", "gb3", "gw3:grad", "gb3:grad"} <= names


def test_group_norm_without_affine_parameters(tmp_path):
    a, cols = _cols(_group_norm(tmp_path, groups=1, affine=False), batch_size=4)
    gn = [v for k, v in cols.items() if "InstanceNormalization" in k or "Reshape" in k]
    assert sum(v["fwd_mem_out"] for v in gn) == 131072 and sum(v["fwd_mem_tmp"] for v in gn) == 2 * 16
    assert sum(v["bwd_mem_out"] for v in gn) == 131072


def test_group_norm_of_one_group_per_channel_without_the_reshape_back(tmp_path):
    # the dynamo export of GroupNorm(C, C) on (N, C, L): the reshape to (N, C, L) is x's own shape, and
    # the optimizer removed the identity reshape back: still one native_group_norm (its output, mean
    # and rstd of (N, C), the input's gradient, two (N, C) accumulators in backward)
    nodes = [helper.make_node("Conv", ["x", "cw"], ["a"], kernel_shape=[1]),
             helper.make_node("Reshape", ["a", "s1"], ["r"]),
             helper.make_node("InstanceNormalization", ["r", "ones", "zeros"], ["i"]),
             helper.make_node("Mul", ["i", "gw"], ["m"]),
             helper.make_node("Add", ["m", "gb"], ["y"])]
    inits = {"cw": np.zeros((8, 8, 1), np.float32), "s1": np.array([4, 8, -1], np.int64),
             "ones": np.ones(8, np.float32), "zeros": np.zeros(8, np.float32),
             "gw": np.ones((8, 1), np.float32), "gb": np.zeros((8, 1), np.float32)}
    path = save(tmp_path, onnx_model(nodes, [("x", (4, 8, 10))], [("y", (4, 8, 10))], inits))
    a, cols = _cols(path, batch_size=4)
    gn = [v for k, v in cols.items() if k.split()[1] in ("Reshape", "InstanceNormalization", "Mul", "Add")]
    assert sum(v["fwd_mem_out"] for v in gn) == 4 * 8 * 10 * 4
    assert sum(v["fwd_mem_tmp"] for v in gn) == 2 * 4 * 8 * 4
    names = {b.name for b in a.buffers.buffers}
    assert "i" not in names and "m" not in names


def test_an_op_without_torch_facts_is_estimated_and_named(tmp_path):
    # InstanceNormalization not written by a GroupNorm (torch's InstanceNorm2d) has no measured rule:
    # the general rule estimates it (saves its inputs, a new gradient per input) and the report names
    # it with its bytes at the peak, in the JSON and in the table's header
    from memplan_cli.report.table import torch_estimate_note

    nodes = [helper.make_node("Conv", ["x", "cw"], ["a"], kernel_shape=[1, 1]),
             helper.make_node("InstanceNormalization", ["a", "s", "b"], ["y"])]
    inits = {"cw": np.zeros((8, 8, 1, 1), np.float32), "s": np.ones(8, np.float32), "b": np.zeros(8, np.float32)}
    path = save(tmp_path, onnx_model(nodes, [("x", (2, 8, 4, 4))], [("y", (2, 8, 4, 4))], inits))
    a, _ = _cols(path, batch_size=2)
    cov = a.extras["torch"]["coverage"]
    assert (cov["ops"], cov["measured"]) == (3, 2)  # Conv, InstanceNormalization, the loss
    (est,) = cov["estimated"]
    assert est["type"] == "InstanceNormalization" and est["bytes_at_peak"] > 0
    assert cov["estimated_bytes_at_peak"] == est["bytes_at_peak"] and cov["says_so"]
    note = torch_estimate_note({"figures": {"torch": a.extras["torch"]}})
    assert "InstanceNormalization" in note and f"{est['bytes_at_peak']:,d} B" in note


def test_a_model_measured_rules_cover_says_nothing_estimated(tmp_path):
    from memplan_cli.profiles.torch import coverage_line

    a, _ = _cols(_group_norm(tmp_path), batch_size=4)
    cov = a.extras["torch"]["coverage"]
    assert cov["estimated"] == [] and cov["measured"] == cov["ops"] and not cov["says_so"]
    assert coverage_line(cov).startswith(f"measured rules cover {cov['ops']} of {cov['ops']} eager ops of this model")


@pytest.mark.parametrize("divisor_shape", [(4, 64, 1), (4, 64, 16)])
def test_div_whose_divisor_needs_its_gradient_holds_four_output_sized_tensors(tmp_path, divisor_shape):
    # F.normalize's x / norm (XCA's q and k): div backward makes the divisor's gradient first, through
    # `self / other`, its quotient by other and `-grad` (measured, torch 2.14, (4, 64, 16): four
    # 16,384 B tensors live at once, broadcast divisor or not), then the dividend's gradient
    nodes = [helper.make_node("Mul", ["x", "two"], ["a"]),
             helper.make_node("Mul", ["x", "three"], ["d"]),
             helper.make_node("Div", ["a", "d" if divisor_shape[-1] > 1 else "dn"], ["y"])]
    inits = {"two": np.full((4, 64, 16), 2, np.float32), "three": np.full((4, 64, 16), 3, np.float32),
             "ax2": np.array([2], np.int64)}
    if divisor_shape[-1] == 1:
        nodes[1] = helper.make_node("Mul", ["x", "three"], ["d"])
        nodes.insert(2, helper.make_node("ReduceL2", ["d", "ax2"], ["dn"], keepdims=1))
    path = save(tmp_path, onnx_model(nodes, [("x", (4, 64, 16))], [("y", (4, 64, 16))], inits))
    a, cols = _cols(path, batch_size=4)
    div = next(v for k, v in cols.items() if k.split()[1] == "Div")
    assert div["bwd_mem_out"] + div["bwd_mem_tmp"] == 4 * 16384


def test_dropout_on_a_parameter_trains_it(tmp_path):
    # DeBERTa reads its relative-position table through Dropout: the table is the op's weight, its
    # gradient is dX (memplan's rule and the torch profile alike); eager's unfused dropout keeps a
    # float noise tensor of the table's size
    nodes = [helper.make_node("Dropout", ["rel", "p"], ["d"]),
             helper.make_node("MatMul", ["x", "d"], ["y"])]
    inits = {"rel": np.ones((16, 32), np.float32), "p": np.array(0.1, np.float32)}
    path = save(tmp_path, onnx_model(nodes, [("x", (4, 8, 16))], [("y", (4, 8, 32))], inits))
    a, cols = _cols(path, batch_size=4)
    names = {b.name: b.size for b in a.buffers.buffers}
    assert names["rel:grad"] == 16 * 32 * 4
    assert next(v for k, v in cols.items() if k.split()[1] == "Dropout")["fwd_mem_tmp"] == 16 * 32 * 4
    m = analyze(path, TrainConfig(loss="mse", batch_size=4))
    assert any(b.name.startswith("rel") and b.category == "gradient" for b in m.buffers.buffers)


def test_layer_norm_of_a_parameter_trains_it(tmp_path):
    # DeBERTa-v3 normalises its relative-position table (norm_rel_ebd="layer_norm"): the table is the
    # op's weight, its gradient dX; native_layer_norm saves it with a float mean and rstd per row
    nodes = [helper.make_node("LayerNormalization", ["rel", "g", "b"], ["n"], axis=-1),
             helper.make_node("MatMul", ["x", "n"], ["y"])]
    inits = {"rel": np.ones((16, 32), np.float32), "g": np.ones(32, np.float32), "b": np.zeros(32, np.float32)}
    path = save(tmp_path, onnx_model(nodes, [("x", (4, 8, 16))], [("y", (4, 8, 32))], inits))
    a, cols = _cols(path, batch_size=4)
    names = {b.name: b.size for b in a.buffers.buffers}
    assert names["rel:grad"] == 16 * 32 * 4 and names["g:grad"] == 32 * 4
    ln = next(v for k, v in cols.items() if k.split()[1] == "LayerNormalization")
    assert ln["fwd_mem_out"] == 16 * 32 * 4 and ln["fwd_mem_tmp"] == 2 * 16 * 4


def test_gather_keeps_its_input_and_index_for_backward(tmp_path):
    # GatherBackward0 (torch's generated autograd code, from derivatives.yaml's gather_backward(grad,
    # self, dim, index, ...)) saves self and index: DeBERTa's c2p / p2c scores (gathered from a bmm)
    # stay alive until backward (measured on fam_rel_drop: -6.34 % without them, -0.38 % with)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["s"]),
             helper.make_node("GatherElements", ["s", "idx"], ["g"], axis=2),
             helper.make_node("Relu", ["g"], ["y"])]
    idx = np.zeros((4, 8, 8), np.int64)
    inits = {"w": np.ones((16, 12), np.float32), "idx": idx}
    path = save(tmp_path, onnx_model(nodes, [("x", (4, 8, 16))], [("y", (4, 8, 8))], inits))
    a, _ = _cols(path, batch_size=4)
    s = next(b for b in a.buffers.buffers if b.name == "s")
    gather_bwd = max(st.index for st in a.buffers.steps if st.kind != "forward" and "GatherElements" in st.label)
    assert s.last >= gather_bwd


def test_a_parameter_added_with_a_broadcast_gets_a_gradient_of_its_own_shape(tmp_path):
    """A position embedding (1, S, C) added to every sample (and a (C,) shift): add's backward hands
    the incoming (N, S, C) gradient on, the engine sums it to the parameter's shape (validate_outputs:
    sum_to), a new tensor AccumulateGrad keeps as `.grad` until the optimizer step. Measured on
    devtools/torch_family_zoo.py fam_pos_embed (torch 2.14): its backward peak holds the shift's
    gradient."""
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Add", ["r", "pos"], ["a"]),
             helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("Add", ["b", "shift"], ["y"])]
    inits = {"pos": np.zeros((1, 8, 16), np.float32), "shift": np.zeros(16, np.float32)}
    path = save(tmp_path, onnx_model(nodes, [("x", (4, 8, 16))], [("y", (4, 8, 16))], inits))
    a, _ = _cols(path, batch_size=4, optimizer="adam")
    end = len(a.buffers.steps) - 1
    grads = sorted((b.size, b.last) for b in a.buffers.buffers if b.category == "gradient")
    assert grads == [(64, end), (512, end)]


def _linear_over_pixels(tmp_path, back_to_channels_first):
    """A 1x1 convolution, its output permuted channels-last, a Linear (MatMul + Add) over the pixels;
    the result permuted back (or not): the Linear's incoming gradient is then a permuted view."""
    nodes = [helper.make_node("Conv", ["x", "cw"], ["a"], kernel_shape=[1, 1]),
             helper.make_node("Transpose", ["a"], ["t"], perm=[0, 2, 3, 1]),
             helper.make_node("MatMul", ["t", "w"], ["m"]),
             helper.make_node("Add", ["m", "b"], ["l" if back_to_channels_first else "y"])]
    if back_to_channels_first:
        nodes.append(helper.make_node("Transpose", ["l"], ["y"], perm=[0, 3, 1, 2]))
    inits = {"cw": np.zeros((32, 32, 1, 1), np.float32), "w": np.zeros((32, 32), np.float32),
             "b": np.zeros(32, np.float32)}
    y = (4, 32, 8, 8) if back_to_channels_first else (4, 8, 8, 32)
    return save(tmp_path, onnx_model(nodes, [("x", (4, 32, 8, 8))], [("y", y)], inits))


def _linear_bwd_tmp(path):
    _, cols = _cols(path, batch_size=4)
    return sum(v["bwd_mem_tmp"] for k, v in cols.items() if "FullyConnected" in k)


def test_a_linear_over_pixels_copies_a_permuted_incoming_gradient_to_rows(tmp_path):
    # ATen's linear runs addmm on x.reshape(-1, k) and views the result back; that view's backward
    # (grad.reshape) copies a gradient whose strides do not fold to rows: measured (torch 2.14, one
    # thread) as a clone of 32,768 B, (4, 8, 8, 32) floats, alive through AddmmBackward
    assert _linear_bwd_tmp(_linear_over_pixels(tmp_path, True)) == 4 * 8 * 8 * 32 * 4


def test_a_linear_over_pixels_with_a_contiguous_incoming_gradient_copies_nothing(tmp_path):
    assert _linear_bwd_tmp(_linear_over_pixels(tmp_path, False)) == 0


def _einsum(tmp_path, equation, shape, out_shape):
    """Two activations (the input scaled by two parameters) contracted by one Einsum."""
    nodes = [helper.make_node("Mul", ["x", "p1"], ["a"]), helper.make_node("Mul", ["x", "p2"], ["b"]),
             helper.make_node("Einsum", ["a", "b"], ["y"], equation=equation)]
    inits = {"p1": np.ones(shape[-1], np.float32), "p2": np.ones(shape[-1], np.float32)}
    return save(tmp_path, onnx_model(nodes, [("x", shape)], [("y", out_shape)], inits))


def _einsum_cols(path):
    a, cols = _cols(path, batch_size=2)
    return a, next(v for k, v in cols.items() if "Einsum" in k)


def test_einsum_saves_the_permuted_copies_its_bmm_reads(tmp_path):
    # ATen's einsum (sumproduct_pair) permutes C to (b, c, h, l, n) and B to (b, c, h, n, s) and reshapes
    # each to 3 dims for bmm: no view of a (b, c, l, h, n) tensor exists, so both are copied, and bmm
    # saves the copies (torch 2.14: two 16,384 B clones at (4, 2, 8, 4, 16), both saved); backward
    # reshapes the incoming (b, c, l, s, h) gradient to (b·c·h, l, s), a copy of the output's size
    a, col = _einsum_cols(_einsum(tmp_path, "bclhn,bcshn->bclsh", (2, 1, 8, 4, 16), (2, 1, 8, 8, 4)))
    assert col["fwd_mem_tmp"] == 2 * (2 * 8 * 4 * 16 * 4)
    assert col["bwd_mem_tmp"] == 2 * 8 * 8 * 4 * 4
    assert not a.extras["torch"]["coverage"]["estimated"]


def test_einsum_of_operands_already_in_bmm_order_copies_nothing(tmp_path):
    a, col = _einsum_cols(_einsum(tmp_path, "bij,bjk->bik", (2, 16, 16), (2, 16, 16)))
    assert col["fwd_mem_tmp"] == 0 and col["bwd_mem_tmp"] == 0


def test_einsum_summing_a_letter_of_one_operand_first_is_estimated(tmp_path):
    # `bij,bkj->bi`: k only in the second operand, summed out of it before the product; its gradient is
    # an expanded view of a smaller tensor, which the facts do not model: the general rule, named
    a, _ = _einsum_cols(_einsum(tmp_path, "bij,bkj->bi", (2, 16, 16), (2, 16)))
    assert [e["type"] for e in a.extras["torch"]["coverage"]["estimated"]] == ["Einsum"]


def _weight_norm(tmp_path, dim=2, dynamo=False, shape=(16, 4, 5)):
    """A Conv1d of 16 groups whose weight is torch's weight norm along `dim`, as the exporters write
    `torch._weight_norm(v, g, dim)`: ReduceL2 of v over the other axes (kept), then TorchScript's
    (v / ||v||) * g or dynamo's v * (g / ||v||)."""
    rank = len(shape)
    gshape = tuple(s if k == dim else 1 for k, s in enumerate(shape))
    nodes = [helper.make_node("ReduceL2", ["v", "axes"], ["n"], keepdims=1)]
    if dynamo:
        nodes += [helper.make_node("Div", ["g", "n"], ["q"]), helper.make_node("Mul", ["v", "q"], ["w"])]
    else:
        nodes += [helper.make_node("Div", ["v", "n"], ["q"]), helper.make_node("Mul", ["q", "g"], ["w"])]
    nodes += [helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[shape[2]], group=4,
                               pads=[shape[2] // 2] * 2)]
    inits = {"v": np.ones(shape, np.float32), "g": np.ones(gshape, np.float32),
             "axes": np.array([k for k in range(rank) if k != dim], np.int64)}
    return save(tmp_path, onnx_model(nodes, [("x", (4, 16, 12))], [("y", (4, 16, 12))], inits))


@pytest.mark.parametrize("dynamo", [False, True])
@pytest.mark.parametrize("dim", [0, 2])
def test_weight_norm_is_read_back_as_one_weight_norm_interface(tmp_path, dim, dynamo):
    # measured (torch 2.14, torch._weight_norm on one thread; v of (64, 32, 5) along its last axis,
    # (64, 32, 3, 3) along its first): forward the weight and the norms (g's size), along the last
    # axis one more g-sized buffer freed in the op; backward v's and g's gradients and, along the last
    # axis, 3 x g's bytes freed in the op. No v-sized quotient: eager's kernel makes none
    a, cols = _cols(_weight_norm(tmp_path, dim=dim, dynamo=dynamo), batch_size=4)
    wn = {k: v for k, v in cols.items() if "Mul" in k or "Div" in k or "ReduceL2" in k}
    assert len(wn) == 1
    (col,) = wn.values()
    v_b, g_b = 16 * 4 * 5 * 4, (5 if dim == 2 else 16) * 4
    last = dim == 2
    assert col["fwd_mem_out"] == v_b
    assert col["fwd_mem_tmp"] == g_b + (g_b if last else 0)
    assert col["bwd_mem_out"] == v_b + g_b
    assert col["bwd_mem_tmp"] == (3 * g_b if last else 0)
    assert not any(b.name == "q" for b in a.buffers.buffers)


def test_weight_norm_along_a_middle_axis_stays_as_written(tmp_path):
    # eager's _weight_norm takes the fused kernel only along the first or the last axis; otherwise it
    # computes v * (g / norm_except_dim(v)) op by op, which the file's ops are left to count
    a, cols = _cols(_weight_norm(tmp_path, dim=1), batch_size=4)
    assert any(b.name == "q" for b in a.buffers.buffers)


def _broadcast_matmul(tmp_path, p_batch=(4, 1, 256)):
    """A lambda layer's position term: queries (4, 4, 256, 1, 16) times per-position lambdas
    (p_batch..., 16, 16), each a parameter-scaled input so that both need a gradient."""
    nodes = [helper.make_node("Mul", ["xq", "wq"], ["q"]),
             helper.make_node("Mul", ["xp", "wp"], ["p"]),
             helper.make_node("MatMul", ["q", "p"], ["y"])]
    inits = {"wq": np.ones(16, np.float32), "wp": np.ones(16, np.float32)}
    return save(tmp_path, onnx_model(nodes, [("xq", (4, 4, 256, 1, 16)), ("xp", p_batch + (16, 16))],
                                     [("y", (4, 4, 256, 1, 16))], inits))


def test_a_matmul_broadcast_over_batch_dims_copies_the_expanded_operand_and_sums_its_gradient(tmp_path):
    """ATen's matmul of two 3+-dim operands (`_matmul_impl`) expands both to the broadcast batch dims
    and reshapes them to (batch product, rows, cols) for bmm: the lambdas, broadcast over the 4 heads,
    are copied at 4 x their size, and bmm saves that copy. Backward, bmm makes their gradient at the
    expanded size, then ExpandBackward0 sums it to theirs, after BmmBackward0's saved tensors are
    freed. Measured (torch 2.14, one thread, devtools/torch_family_zoo.py fam_bcast_mm_lambda, the
    same shapes): a 4,194,304 B clone saved in forward; in backward a 4,194,304 B bmm result, then a
    1,048,576 B sum, the expanded one freed."""
    a, cols = _cols(_broadcast_matmul(tmp_path), batch_size=4)
    col = next(v for k, v in cols.items() if "MatMul" in k)
    assert col["fwd_mem_tmp"] == 4 * 4 * 256 * 16 * 16 * 4
    bufs = {b.name: b for b in a.buffers.buffers}
    big = next(b for n, b in bufs.items() if n.endswith(":grad_expanded"))
    summed = bufs["p:grad"]
    saved = next(b for n, b in bufs.items() if n.endswith(":expanded1"))
    assert (big.size, summed.size) == (4 * 4 * 256 * 16 * 16 * 4, 4 * 256 * 16 * 16 * 4)
    assert saved.last < summed.first == big.last


def test_a_matmul_whose_operands_share_their_batch_dims_expands_nothing(tmp_path):
    a, cols = _cols(_broadcast_matmul(tmp_path, p_batch=(4, 4, 256)), batch_size=4)
    assert next(v for k, v in cols.items() if "MatMul" in k)["fwd_mem_tmp"] == 0
    assert not any(b.name.endswith(":grad_expanded") for b in a.buffers.buffers)


def test_a_4_dim_matmul_operand_of_batch_one_is_a_view_whose_gradient_is_still_summed(tmp_path):
    """(1, 1, 256, 16) @ (4, 2, 16, 256): the expanded (8, 256, 16) view needs no copy (stride-0 dims
    merge), and bmm's gradient of it is made at 131,072 B, then summed to 16,384 B. Measured (torch
    2.14, one thread, torch.profiler on the product alone): no forward copy; BmmBackward0 131,072 B
    twice, ExpandBackward0's sum 16,384 B."""
    nodes = [helper.make_node("Mul", ["xa", "wa"], ["a"]),
             helper.make_node("Mul", ["xb", "wb"], ["b"]),
             helper.make_node("MatMul", ["a", "b"], ["y"])]
    inits = {"wa": np.ones(16, np.float32), "wb": np.ones(256, np.float32)}
    path = save(tmp_path, onnx_model(nodes, [("xa", (1, 1, 256, 16)), ("xb", (4, 2, 16, 256))],
                                     [("y", (4, 2, 256, 256))], inits))
    a, cols = _cols(path)  # the file's shapes as they are (no batch flag re-batching the first input)
    assert next(v for k, v in cols.items() if "MatMul" in k)["fwd_mem_tmp"] == 0
    bufs = {b.name: b for b in a.buffers.buffers}
    big = next(b for n, b in bufs.items() if n.endswith(":grad_expanded"))
    assert (big.size, bufs["a:grad"].size) == (131072, 16384)
