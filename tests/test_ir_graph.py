import pytest

from memplan_cli.ir.graph import Graph, GraphError, Operand, Operation


def _chain(cyclic=False):
    ops = [Operation(0, "Relu", [0], [1]), Operation(1, "Relu", [1], [2])]
    if cyclic:
        ops[0].inputs = [2]
    return Graph([Operand(i, f"t{i}", (1, 4)) for i in range(3)], ops, [0], [2])


def test_topological_order_of_a_chain():
    assert _chain().topological_order() == [0, 1]


def test_cycle_is_a_clear_error():
    with pytest.raises(GraphError, match="cycle"):
        _chain(cyclic=True).verify()


def test_out_of_range_operand_is_an_error():
    g = _chain()
    g.operations[1].inputs = [7]
    with pytest.raises(GraphError, match="operand 7"):
        g.verify()
