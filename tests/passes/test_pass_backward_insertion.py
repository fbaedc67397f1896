"""backward-insertion on its own: every op's rule and the tensors training needs."""
import pytest

from memplan_cli.errors import UnsupportedOpError
from memplan_cli.ir.graph import Graph, Operand, Operation
from memplan_cli.passes.infra import run_checked
from tests.passes.graphs import conv_relu_fc, up_to


def test_tensors_per_operand_back_prop_and_gradient():
    tg, p = up_to("backward-insertion", conv_relu_fc())
    assert run_checked(p, tg)
    role = {t.name: (t.category, t.role) for t in tg.tensors}
    assert role["x"] == ("non-const", "input") and role["label"] == ("non-const", "label")
    assert role["w0"] == ("trainable", "weight") and role["shape"] == ("trainable", "constant")
    assert role["loss"] == ("non-const", "loss")
    assert {n for n, (c, _) in role.items() if c == "gradient"} == {"w0:grad", "b0:grad", "w1:grad", "b1:grad"}
    assert {n for n, (c, _) in role.items() if c == "back-prop"} == {"c0:bp", "r:bp", "f:bp", "y:bp"}
    names = {tg.tensors[t].name for t in tg.persistent}
    assert names == {"w0", "b0", "shape", "w1", "b1"}
    assert {tg.tensors[t].name for t in tg.fed} == {"x", "label"} and {tg.tensors[t].name for t in tg.live_out} == {"loss"}
    assert set(tg.rules) == {0, 1, 2, 3, 4}


def test_an_op_without_a_rule_inside_the_backward_region_is_refused_by_name():
    ops = [Operand(0, "x", (2, 4), is_input=True), Operand(1, "w", (4, 4), is_const=True),
           Operand(2, "a", (2, 4)), Operand(3, "y", (2, 4), is_output=True)]
    g = Graph(ops, [Operation(0, "FullyConnected", [0, 1, -1], [2]), Operation(1, "NoSuchOp", [2], [3])], [0], [3])
    tg, p = up_to("backward-insertion", g)
    with pytest.raises(UnsupportedOpError, match="op #1 NoSuchOp is inside the backward region"):
        run_checked(p, tg)
