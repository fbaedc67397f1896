"""A parameter through a standalone activation trains (ConViT's gating: Sigmoid(gate); SwinV2's
logit scale: Clip(logit_scale, max)): its gradient by finite differences, verify. Before, the rule
ignored it and its gradient was missing (the backward-insertion guard now refuses such a rule)."""
import numpy as np
import pytest
from onnx import TensorProto, helper

from tests.ops.gradcheck import analyze_json, check_gradients, check_verify, onnx_model, save


@pytest.mark.parametrize("act", ["Sigmoid", "Tanh", "Relu", "Clip"])
def test_a_parameter_through_an_activation_trains(tmp_path, act):
    nodes = []
    ins = ["g"]
    inits = {"g": np.linspace(-1.5, 1.5, 6).reshape(1, 6).astype(np.float32),
             "w": np.linspace(-1, 1, 18).reshape(6, 3).astype(np.float32)}
    if act == "Clip":  # torch.clamp(logit_scale, max=log(100)): an upper bound only
        nodes.append(helper.make_node("Constant", [], ["hi"], value=helper.make_tensor("v", TensorProto.FLOAT, [], [1.0])))
        ins = ["g", "", "hi"]
    nodes += [helper.make_node(act, ins, ["a"]), helper.make_node("Mul", ["x", "a"], ["m"]),
              helper.make_node("MatMul", ["m", "w"], ["y"])]
    p = save(tmp_path, onnx_model(nodes, [("x", (2, 6))], [("y", (2, 3))], inits))
    assert analyze_json(p, "-O", "adam")["categories"]["gradient"]["naive"] == 32 + 80  # g (24 B), w (72 B)
    assert check_gradients(p) >= 24
    check_verify(p, "-b", "2")
