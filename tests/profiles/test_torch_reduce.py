"""Torch facts of the reductions (ops/reduce.py): what each eager op saves and what its forward and
backward allocate beside its output and the input's gradient. Each figure was measured with torch 2.14
on one thread, on one reduction of a [4, 32, 128] float32 tensor (the allocator's events of that op's
forward and backward alone); devtools/torch_reduce_zoo.py checks them on whole networks, both
exporters."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

from memplan_cli.analysis import analyze  # noqa: E402
from memplan_cli.config import TrainConfig  # noqa: E402
from memplan_cli.errors import UnsupportedOpError  # noqa: E402
from tests.ops.gradcheck import onnx_model, save  # noqa: E402

SHAPE = (4, 32, 128)
IN = 4 * 32 * 128  # elements of the reduced tensor


def _model(tmp_path, op, axes, keepdims=0, call=None):
    """x + p -> op(axes) -> * q: the reduction's input needs its gradient; `call`: the aten call the
    dynamo exporter records for the node (e.g. "aten.amax.default"), none for a TorchScript export."""
    rank = len(SHAPE)
    red = set(a % rank for a in axes) if axes else set(range(rank))
    out = [1 if k in red else n for k, n in enumerate(SHAPE)] if keepdims else \
        [n for k, n in enumerate(SHAPE) if k not in red]
    attrs = {"keepdims": keepdims}
    inits = {"p": np.zeros(SHAPE[1:], np.float32), "q": np.ones(out[1:] or [1], np.float32)}
    ins = ["h"]
    if axes:
        inits["ax"] = np.array(axes, np.int64)
        ins.append("ax")
    node = helper.make_node(op, ins, ["r"], name="red", **attrs)
    if call:
        p = node.metadata_props.add()
        p.key = "pkg.torch.onnx.fx_node"
        p.value = f"%r : [num_users=1] = call_function[target=torch.ops.{call}](args = (%h, {list(axes or [])}), kwargs = {{}})"
    nodes = [helper.make_node("Add", ["x", "p"], ["h"]), node, helper.make_node("Mul", ["r", "q"], ["y"])]
    path = save(tmp_path, onnx_model(nodes, [("x", SHAPE)], [("y", out)], inits, opset=18), "m.onnx")
    return str(path)


def _red(tmp_path, op, axes, keepdims=0, call=None):
    """The reduction's per-layer columns, and the ops the report names as estimated."""
    a = analyze(_model(tmp_path, op, axes, keepdims, call), TrainConfig(loss="mse", batch_size=4), profile="torch")
    cols = a.extras["per_layer_extra"]
    red = next(v for k, v in cols.items() if "(red)" in k)
    estimated = [e["type"] for e in a.extras["torch"]["coverage"]["estimated"]]
    return red, estimated


@pytest.mark.parametrize("axis", [-1, 1])
def test_logsumexp(tmp_path, axis):
    """Forward: the shifted exp (input-sized) and the maxes (output-sized) beside the result; backward:
    (self - result) and its exp beside the input's gradient. Measured: forward peak 66,560 B (last axis)
    / 69,632 B (axis 1) with the 512 / 2,048 B result; backward 196,608 B with the gradient."""
    out = IN // SHAPE[axis]
    red, estimated = _red(tmp_path, "ReduceLogSumExp", [axis], call="aten.logsumexp.default")
    assert red["fwd_mem_out"] == 4 * out and red["fwd_mem_tmp"] == 4 * IN + 4 * out
    assert red["bwd_mem_tmp"] == 2 * 4 * IN and red["bwd_mem_out"] == 4 * IN
    assert estimated == []


@pytest.mark.parametrize("axis,measured", [(-1, 148_992), (1, 153_600)])
def test_amax(tmp_path, axis, measured):
    """scale_grad_by_count: the bool mask, its int64 count, the quotient and the mask cast to float beside
    the gradient (measured backward peaks with the 65,536 B gradient)."""
    red, estimated = _red(tmp_path, "ReduceMax", [axis], call="aten.amax.default")
    assert red["bwd_mem_tmp"] + red["bwd_mem_out"] == measured and estimated == []


def test_max_dim_keeps_its_int64_indices_only(tmp_path):
    """max.dim: values and int64 indices in forward (measured peak 6,144 B), the indices kept; backward
    scatters into a zeroed gradient (65,536 B, nothing else)."""
    red, _ = _red(tmp_path, "ReduceMax", [1], call="aten.max.dim")
    assert red["fwd_mem_out"] + red["fwd_mem_tmp"] == 6144
    assert red["bwd_mem_tmp"] == 0 and red["bwd_mem_out"] == 4 * IN


def test_max_over_everything(tmp_path):
    """max(): the zeroed gradient, then the mask and its int64 cast (measured 213,000 B with an 8 B
    scalar quotient the facts leave out)."""
    red, _ = _red(tmp_path, "ReduceMax", None, call="aten.max.default")
    assert red["bwd_mem_tmp"] + red["bwd_mem_out"] == 213_000 - 8


def test_torchscript_max_over_an_axis_is_amax_and_estimated(tmp_path):
    """amax or max.dim(...).values: a TorchScript export writes both as the same ReduceMax."""
    red, estimated = _red(tmp_path, "ReduceMin", [-1])
    assert red["bwd_mem_tmp"] + red["bwd_mem_out"] == 148_992 and estimated == ["ReduceMin"]


@pytest.mark.parametrize("axes,measured", [([-1], 148_480), ([1], 151_552), (None, 131_072)])
def test_prod(tmp_path, axes, measured):
    """prod_backward: the zero mask, its int64 count (through an int64 cast of the mask), result / input
    beside the gradient; prod() over everything: result / input only."""
    red, estimated = _red(tmp_path, "ReduceProd", axes)
    assert red["bwd_mem_tmp"] + red["bwd_mem_out"] == measured and estimated == []


def test_prod_over_two_axes_has_no_eager_op(tmp_path):
    with pytest.raises(UnsupportedOpError, match="no eager op does"):
        _red(tmp_path, "ReduceProd", [1, 2])


@pytest.mark.parametrize("op,axis,measured", [("ReduceL1", -1, 131_072), ("ReduceL2", -1, 131_200),
                                              ("ReduceL2", 1, 131_584)])
def test_vector_norms(tmp_path, op, axis, measured):
    """norm_backward: order 1, sgn(self); order 2, self / norm and a bool mask of norm == 0."""
    red, estimated = _red(tmp_path, op, [axis], keepdims=1)
    assert red["bwd_mem_tmp"] + red["bwd_mem_out"] == measured and estimated == []


def test_sum_backward_is_a_view_and_mean_backward_a_new_tensor(tmp_path):
    """sum_backward expands the incoming gradient (no bytes, measured 0); mean_backward divides it (the
    input's size)."""
    red, _ = _red(tmp_path, "ReduceSum", [-1])
    assert red["bwd_mem_out"] == 0 and red["bwd_mem_tmp"] == 0
    red, _ = _red(tmp_path, "ReduceMean", [-1])
    assert red["bwd_mem_out"] == 4 * IN


def _detach_model(tmp_path, detached: bool):
    """x + p -> h; amax(h) -> m; h - m, where the dynamo exporter's record of the Sub names `%detach`
    (the file feeds it `m` itself: `m = h.amax(-1, keepdim=True).detach()`), or `%m`."""
    def rec(node, text):
        p = node.metadata_props.add()
        p.key = "pkg.torch.onnx.fx_node"
        p.value = f"%{node.output[0]} : [num_users=1] = call_function[target=torch.ops.{text}, kwargs = {{}})"
        return node

    nodes = [rec(helper.make_node("Add", ["x", "p"], ["h"]), "aten.add.Tensor](args = (%x, %p)"),
             rec(helper.make_node("ReduceMax", ["h", "ax"], ["m"], keepdims=1), "aten.amax.default](args = (%h, [-1], True)"),
             rec(helper.make_node("Sub", ["h", "m"], ["y"]),
                 f"aten.sub.Tensor](args = (%h, %{'detach' if detached else 'm'})")]
    inits = {"p": np.zeros(SHAPE[1:], np.float32), "ax": np.array([-1], np.int64)}
    path = save(tmp_path, onnx_model(nodes, [("x", SHAPE)], [("y", SHAPE)], inits, opset=18),
                f"detach{int(detached)}.onnx")
    return str(path)


def test_a_detached_read_carries_no_gradient_and_frees_the_node(tmp_path):
    """`h - h.amax(-1, keepdim=True).detach()`: eager frees amax's node with the result the detach was
    taken from (nothing saved, no backward), and the Sub sends no gradient into it (measured on
    devtools/torch_reduce_zoo.py red_manual_softmax, dynamo: +2.25 % before this rule, -0.00 % after)."""
    cols = {}
    for detached in (False, True):
        a = analyze(_detach_model(tmp_path, detached), TrainConfig(loss="mse", batch_size=4), profile="torch")
        cols[detached] = {k.split(" ")[1]: v for k, v in a.extras["per_layer_extra"].items()}
    out = 4 * IN // SHAPE[-1]  # amax's result, and its gradient
    assert cols[False]["ReduceMax"]["bwd_mem_tmp"] > 0 and cols[False]["Sub"]["bwd_mem_out"] == out
    assert cols[True]["ReduceMax"]["bwd_mem_tmp"] == cols[True]["ReduceMax"]["bwd_mem_out"] == 0
    assert cols[True]["Sub"]["bwd_mem_out"] == 0


def test_ops_whose_results_reach_only_an_argmax_run_no_backward(tmp_path):
    """h = x + p; d = sum(h * h, -1); table[argmax(d)] + mean(h, 1): nothing carries a gradient back
    through the argmax, so the Mul and the sum keep no node eager runs (VQ-VAE's nearest code:
    devtools/torch_reduce_zoo.py red_vq, +144 % before this rule, +0.00 % TorchScript after). The
    Mul's saved inputs die with its node, once the argmax has read the distances."""
    nodes = [helper.make_node("Add", ["x", "p"], ["h"]), helper.make_node("Mul", ["h", "h"], ["sq"]),
             helper.make_node("ReduceSum", ["sq", "ax"], ["d"], keepdims=0),
             helper.make_node("ArgMax", ["d"], ["i"], axis=1, keepdims=0),
             helper.make_node("Gather", ["table", "i"], ["g"], axis=0),
             helper.make_node("ReduceMean", ["h", "ax1"], ["hm"], keepdims=0),
             helper.make_node("Add", ["hm", "g"], ["y"])]
    inits = {"p": np.zeros(SHAPE[1:], np.float32), "table": np.zeros((32, 128), np.float32),
             "ax": np.array([-1], np.int64), "ax1": np.array([1], np.int64)}
    path = save(tmp_path, onnx_model(nodes, [("x", SHAPE)], [("y", [4, 128])], inits, opset=18), "argmax.onnx")
    a = analyze(str(path), TrainConfig(loss="mse", batch_size=4), profile="torch")
    cols = {k.split(" ")[1]: v for k, v in a.extras["per_layer_extra"].items()}
    for op in ("Mul", "ReduceSum", "ArgMax"):
        assert cols[op]["bwd_mem_out"] == cols[op]["bwd_mem_tmp"] == 0, op
    assert cols["Gather"]["bwd_mem_out"] > 0 and cols["Mean"]["bwd_mem_out"] == 4 * IN


def test_torchscript_max_dim_with_its_indices_read(tmp_path):
    """`values, idx = h.max(1)`: TorchScript writes a ReduceMax and an ArgMax of h over axis 1; eager ran
    one max.dim (its int64 indices kept, no temporaries in backward), nothing estimated
    (devtools/torch_reduce_zoo.py red_max_indices: +3.84 % as amax, -0.00 % after)."""
    nodes = [helper.make_node("Add", ["x", "p"], ["h"]),
             helper.make_node("ReduceMax", ["h", "ax"], ["red"], keepdims=0),
             helper.make_node("ArgMax", ["h"], ["i"], axis=-2, keepdims=0),
             helper.make_node("Cast", ["i"], ["f"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["red", "f"], ["y"])]
    inits = {"p": np.zeros(SHAPE[1:], np.float32), "ax": np.array([1], np.int64)}
    path = save(tmp_path, onnx_model(nodes, [("x", SHAPE)], [("y", [4, 128])], inits, opset=18), "maxdim.onnx")
    a = analyze(str(path), TrainConfig(loss="mse", batch_size=4), profile="torch")
    red = next(v for k, v in a.extras["per_layer_extra"].items() if "ReduceMax" in k)
    assert red["fwd_mem_tmp"] == 8 * 4 * 128 and red["bwd_mem_tmp"] == 0 and red["bwd_mem_out"] == 4 * IN
    assert a.extras["torch"]["coverage"]["estimated"] == []


def test_prod_under_autocast_is_named_as_estimated(tmp_path):
    """prod is on autocast's fp32 list: under bf16-mixed eager computes on a float32 copy of a bfloat16
    input (saved, with float32 temporaries), which the facts do not model: the op is named (measured on
    red_prod: 2,407,616 B, the profile 10.9 % low)."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("ReduceProd", ["h", "ax"], ["r"],
                                                                                 keepdims=0)]
    inits = {"w": np.ones((128, 128), np.float32), "ax": np.array([-1], np.int64)}
    path = save(tmp_path, onnx_model(nodes, [("x", SHAPE)], [("r", [4, 32])], inits, opset=18), "prod.onnx")
    for precision, named in (("32-true", []), ("bf16-mixed", ["ReduceProd"])):
        a = analyze(str(path), TrainConfig(loss="mse", batch_size=4, precision=precision), profile="torch")
        assert [e["type"] for e in a.extras["torch"]["coverage"]["estimated"]] == named
