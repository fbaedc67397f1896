"""A tensor a module's forward makes and hands to two or more of its submodules lives until that
forward returns (profiles/torch/replay.py `handed_down`): Python keeps it in a local between the
calls. MPNet's encoder computes its relative position bias once and adds it in every layer.
devtools/torch_family_zoo.py's fam_handed_bias / fam_handed_scores and the fresh draw's MPNet check it
against torch."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import helper  # noqa: E402

from memplan_cli.analysis import analyze  # noqa: E402
from memplan_cli.config import TrainConfig  # noqa: E402
from memplan_cli.profiles.torch.functions import child_below, module_scope  # noqa: E402
from tests.ops.gradcheck import onnx_model, save  # noqa: E402


def _names(dynamo: bool):
    """Node name and, under dynamo, the recorded name scopes (each level's module path, then the
    node's fx name) and call of an op of `module` ("enc.layer.0")."""
    def named(node, module, fx):
        if not dynamo:
            node.name = "/" + "/".join(["m", *module.split(".")]).replace("layer/", "layer.") + "/" + fx
            return node
        node.name = "node_" + fx
        levels = ["m"]
        for part in module.replace("layer.", "layer~").split("."):
            levels.append(levels[-1] + "." + part.replace("~", "."))
        for key, value in (("pkg.torch.onnx.name_scopes", repr(["", *levels, fx])),
                           ("pkg.torch.onnx.fx_node",
                            f"%{fx} : [num_users=1] = call_function[target=torch.ops.aten.{fx.split('_')[0]}"
                            f".default](args = (), kwargs = {{}})")):
            p = node.metadata_props.add()
            p.key, p.value = key, value
        return node
    return named


def _handed(tmp_path, dynamo=False, readers=2, name="m.onnx"):
    """x (4, 64, 16): the encoder makes `bias` (4, 64, 64); layer.0 adds it to x @ w1 and applies ReLU;
    layer.1 adds it (or not: readers=1) to r0 @ w2, ReLU, then a last MatMul. Add saves nothing, so
    only the encoder's local keeps `bias` past its last reader."""
    n = _names(dynamo)
    nodes = [n(helper.make_node("MatMul", ["x", "w0"], ["bias"]), "enc", "matmul"),
             n(helper.make_node("MatMul", ["x", "w1"], ["s0"]), "enc.layer.0", "matmul_1"),
             n(helper.make_node("Add", ["s0", "bias"], ["a0"]), "enc.layer.0", "add"),
             n(helper.make_node("Relu", ["a0"], ["r0"]), "enc.layer.0", "relu"),
             n(helper.make_node("MatMul", ["r0", "w2"], ["s1"]), "enc.layer.1", "matmul_2"),
             n(helper.make_node("Add", ["s1", "bias" if readers == 2 else "s1"], ["a1"]), "enc.layer.1", "add_1"),
             n(helper.make_node("Relu", ["a1"], ["r1"]), "enc.layer.1", "relu_1"),
             n(helper.make_node("MatMul", ["r1", "w3"], ["y"]), "enc.layer.1", "matmul_3")]
    inits = {"w0": np.ones((16, 64), np.float32), "w1": np.ones((16, 64), np.float32),
             "w2": np.ones((64, 64), np.float32), "w3": np.ones((64, 8), np.float32)}
    return save(tmp_path, onnx_model(nodes, [("x", (4, 64, 16))], [("y", (4, 64, 8))], inits), name)


def _bias_lifetime(path):
    a = analyze(path, TrainConfig(batch_size=4, loss="mse", optimizer="adam"), profile="torch")
    steps = a.buffers.steps
    (buf,) = [b for b in a.buffers.buffers if b.name == "bias"]
    fwd = {s.label.split("(")[-1].rstrip(")"): s.index for s in steps if s.kind == "forward"}
    return buf, fwd, a.extras["torch"]["peak"]


@pytest.mark.parametrize("dynamo", [False, True])
def test_a_tensor_handed_to_two_submodules_lives_until_the_module_returns(tmp_path, dynamo):
    buf, fwd, peak = _bias_lifetime(_handed(tmp_path, dynamo))
    last = "node_matmul_3" if dynamo else "/m/enc/layer.1/matmul_3"
    add_1 = "node_add_1" if dynamo else "/m/enc/layer.1/add_1"
    assert buf.last >= fwd[last] > fwd[add_1]
    # handed to one call only (the loop's `x = layer(x)`, rebound after it): freed after its reader
    one, fwd1, peak1 = _bias_lifetime(_handed(tmp_path, dynamo, readers=1, name="one.onnx"))
    assert one.last == fwd1["node_add" if dynamo else "/m/enc/layer.0/add"]
    assert peak > peak1


def test_module_scopes_of_both_exporters():
    class Op:
        def __init__(self, name, scope="", call=""):
            self.name, self.scope, self.call = name, scope, call

    assert module_scope(Op("/m/enc/layer.0/attn/Add")) == "/m/enc/layer.0/attn"
    assert module_scope(Op("/MatMul")) == "/"  # the root module's own op
    dyn = Op("node_add_7", "m.m.enc.m.enc.layer.0.add_7", "add_7 = aten.add.Tensor(...)")
    assert module_scope(dyn) == ".m.m.enc.m.enc.layer.0"
    assert module_scope(Op("node_x", "x", "x = aten.mul(...)")) == "."
    assert module_scope(Op("Constant_93")) == ""  # no name scope recorded
    assert child_below("/m/enc/layer.0/attn", "/m/enc") == "layer.0"
    assert child_below("/m/encoder", "/m/enc") is None and child_below("/m/enc", "/m/enc") is None
    assert child_below("/layers.0", "/") == "layers.0"
    assert child_below(".m.m.enc.m.enc.layer.0.m.enc.layer.0.attn", ".m.m.enc") == "m.enc.layer.0"
    assert child_below(".m.m.enc.m.enc.layer.1", ".m.m.enc") == "m.enc.layer.1"
    assert child_below(".pq", ".") == "pq"
