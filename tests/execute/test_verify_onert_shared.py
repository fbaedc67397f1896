"""`memplan verify --profile onert` on a weight two ops read (a Linear applied twice: torch.onnx writes
one initializer for both Gemms). onert's ConstantInsertionPass gives the second reader a copy that
trains on its own (its own gradient and Adam state, profiles/onert/trainir.py); the step that runs
onert's plan unties the weight the same way. Before, the second Gemm's weight gradient had no buffer
in onert's plan and verify failed the plan it had just analysed (exit 1)."""
import json

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from memplan_cli.cli import main


def _shared_linear(path, readers: int) -> str:
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((16, 16)).astype(np.float32) * 0.1, n)
             for n in ("a.weight", "b.weight")]
    inits += [numpy_helper.from_array(np.zeros(16, np.float32), n) for n in ("a.bias", "b.bias")]
    nodes = [helper.make_node("Gemm", ["x", "a.weight", "a.bias"], ["h0"], transB=1),
             helper.make_node("Relu", ["h0"], ["r0"])]
    x = "r0"
    for k in range(readers):
        nodes.append(helper.make_node("Gemm", [x, "b.weight", "b.bias"], [f"h{k + 1}"], transB=1))
        x = f"h{k + 1}"
    nodes[-1].output[0] = "y"
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16])], inits)
    p = str(path / f"shared{readers}.onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), p)
    return p


@pytest.mark.parametrize("readers", [2, 3])
def test_a_weight_several_ops_read_verifies_under_onerts_plan(tmp_path, readers):
    p = _shared_linear(tmp_path, readers)
    r = CliRunner().invoke(main, ["verify", p, "-p", "onert", "-b", "4", "-O", "adam", "-f", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["passed"] is True, doc
    # the copy's buffers hold its own weight, gradient and Adam state: nothing of the plan left unused
    r = CliRunner().invoke(main, ["verify", p, "-p", "onert", "-b", "4", "-O", "adam"])
    assert "PASS" in r.output and "hold no tensor" not in r.output, r.output
