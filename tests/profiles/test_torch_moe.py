"""The torch profile's facts for a mixture of experts as the dynamo exporter writes it (no torch
needed): one expert's slice of a stacked weight (`weight[e]`: select, a view), the combine
(`zeros.index_add(0, index, source)`, written as an accumulating index_put: a ScatterND with
reduction add) and the `torch.zeros` it writes into, folded into a constant the call names. Each
expectation follows from ATen's rules (derivatives.yaml; autograd's saved variables of
SelectBackward0, IndexAddBackward0); devtools/torch_family_zoo.py fam_moe_* checks whole networks."""
import numpy as np
from onnx import TensorProto, helper

from tests.profiles.test_torch_export import _dynamo_file, _fx, _torch, _w

F = TensorProto.FLOAT


def _experts(tmp_path, name, combine=True, calls=True):
    """x (8, 4) -> expert 1 of a stacked weight (3, 4, 4) (`w[1]`, a Gather of a 0-d index) -> h;
    `combine`: then zeros(8, 4).index_add(0, idx, h) (ScatterND, reduction add, into the folded
    constant `val_9`, which the call names `%zeros`) -> y, else h -> y."""
    nodes = [helper.make_node("Gather", ["experts.w", "one"], ["sel"], axis=0, name="node_select"),
             helper.make_node("MatMul", ["x", "sel"], ["h"], name="node_mm")]
    inits = [("experts.w", _w(3, 4, 4)), ("one", np.array(1, np.int64))]
    fx = {"node_select": _fx("select.int", "%p_experts_w, 0, 1"), "node_mm": _fx("mm.default", "%x, %select")}
    if combine:
        nodes.append(helper.make_node("ScatterND", ["val_9", "idx", "h"], ["y"], reduction="add", name="node_put"))
        inits += [("val_9", np.zeros((8, 4), np.float32)), ("idx", np.arange(8, dtype=np.int64)[::-1].reshape(8, 1))]
        fx["node_put"] = _fx("index_put.default", "%zeros, [%idx], %mm, True")
    else:
        nodes[-1].output[0] = "y"
    return _dynamo_file(tmp_path, name, nodes, inits, [8, 4], [8, 4], ["experts.w"], calls=fx if calls else None)


def test_an_experts_slice_of_a_stacked_weight_is_a_view(tmp_path):
    # select of a parameter: a view (SelectBackward0 keeps the sizes and the index), so the slice is
    # no tensor of its own; the stacked weight still gets its gradient, of its own size
    t, a = _torch(_experts(tmp_path, "sel", combine=False), loss="mse")
    names = {b.name for b in a.buffers.buffers}
    assert "sel" not in names and "experts.w:grad" in names
    assert next(b.size for b in a.buffers.buffers if b.name == "experts.w:grad") == 3 * 4 * 4 * 4
    assert not any(e["type"] == "Gather" for e in t["coverage"]["estimated"])


def test_index_add_keeps_its_source_and_the_zeros_are_computed(tmp_path):
    t, a = _torch(_experts(tmp_path, "add"), loss="mse")
    bufs = {b.name: b for b in a.buffers.buffers}
    steps = [s.label for s in a.buffers.steps]
    put_bwd = max(i for i, s in enumerate(steps) if "node_put" in s)
    # IndexAddBackward0 saves the source (h) to its backward
    assert bufs["h"].last >= put_bwd
    # `torch.zeros` is made in forward (the call names an fx node), not held from the start
    assert bufs["val_9"].first > 0
    assert not t["coverage"]["estimated"]


def test_without_the_calls_the_zeros_are_held(tmp_path):
    # a constant no call names as computed stays a held tensor (a buffer, as before)
    _, a = _torch(_experts(tmp_path, "nocall", calls=False), loss="mse")
    assert next(b for b in a.buffers.buffers if b.name == "val_9").first == 0
