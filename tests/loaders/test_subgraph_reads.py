"""An If / Loop / Scan body reads tensors from around its node without listing them as inputs: the
loader adds them (liveness until the node runs; a gradient through them meets an op memplan cannot
train and is refused, not dropped)."""
from __future__ import annotations

import numpy as np
import onnx
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from memplan_cli.cli import main
from memplan_cli.loaders.onnx_loader import _outer_reads, load_onnx
from tests.loaders.onnxmodels import nested_if, save


def _if_over(source: str) -> onnx.ModelProto:
    """x -> MatMul(x, W) -> m -> Relu -> r; If(c) returns Identity(r) or Neg(r) (r read from outside)."""
    def branch(op, tag):
        return helper.make_graph([helper.make_node(op, ["r"], [f"o{tag}"])], f"b{tag}", [],
                                 [helper.make_tensor_value_info(f"o{tag}", TensorProto.FLOAT, [2, 4])])

    nodes = [helper.make_node("MatMul", ["x", "W"], ["m"]), helper.make_node("Relu", [source], ["r"]),
             helper.make_node("If", ["c"], ["y"], then_branch=branch("Identity", "t"), else_branch=branch("Neg", "e"))]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4]),
                                       helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
                          [numpy_helper.from_array(np.ones((4, 4), np.float32), "W")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_outer_reads_of_nested_branches_in_order_without_their_own_values():
    m = _if_over("m")
    assert _outer_reads(m.graph.node[2]) == ["r"]
    # the inner Ifs' condition and the leaves' x come from the top scope; values defined inside the
    # branches never leak out
    assert _outer_reads(nested_if(3).graph.node[0]) == ["c", "x"]
    assert _outer_reads(m.graph.node[0]) == []


def test_the_if_node_takes_what_its_branches_read(tmp_path):
    g = load_onnx(save(tmp_path, "if.onnx", _if_over("m")))
    op = next(o for o in g.operations if o.source_type == "If")
    assert [g.operands[i].name for i in op.inputs] == ["c", "r"]


def test_a_gradient_through_a_branch_is_refused_in_one_line(tmp_path):
    path = save(tmp_path, "if.onnx", _if_over("m"))
    r = CliRunner().invoke(main, ["analyze", path, "-b", "2"])
    assert r.exit_code == 2, r.output
    assert r.output.count("\n") == 1 and path in r.output and "If" in r.output


def test_a_branch_over_values_without_gradient_still_analyses(tmp_path):
    # Relu over the model input: nothing that trains reaches the If, so nothing is refused
    path = save(tmp_path, "if_input.onnx", _if_over("x"))
    r = CliRunner().invoke(main, ["analyze", path, "-b", "2", "-q"])
    assert r.exit_code == 0, r.output

