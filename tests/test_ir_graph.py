import pytest

from memplan_cli.ir.graph import Graph, GraphError, Operand, Operation
from memplan_cli.opgraph import contract


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


def _conv_add():
    """x -> Conv2D(w) -> c; Add(c, x2) -> y"""
    ops = [Operation(0, "Conv2D", [0, 1, -1], [2], {"padding": "SAME", "stride": (1, 1), "dilation": (1, 1),
                                                    "activation": "RELU"}),
           Operation(1, "Add", [2, 3], [4], {"activation": "NONE"})]
    operands = [Operand(0, "x", (1, 4, 4, 1), is_input=True), Operand(1, "w", (1, 3, 3, 1), is_const=True),
                Operand(2, "c", (1, 4, 4, 1)), Operand(3, "x2", (1, 4, 4, 1), is_input=True),
                Operand(4, "y", (1, 4, 4, 1), is_output=True)]
    return Graph(operands, ops, [0, 3], [4])


def test_contract_accepts_a_well_formed_graph():
    _conv_add().verify()  # the optional bias (-1) is fine


@pytest.mark.parametrize("break_it,words", [
    (lambda g: setattr(g.operations[1], "inputs", [2]), "op #1 Add needs 2 input(s), has 1"),
    (lambda g: setattr(g.operations[0], "inputs", [0, -1, -1]), "op #0 Conv2D needs 2 input(s), has 1"),
    (lambda g: g.operations[0].attrs.update(padding="8"), "unknown padding '8'"),
    (lambda g: g.operations[0].attrs.update(activation="ACT_9"), "unknown fused activation 'ACT_9'"),
    (lambda g: g.operations[0].attrs.update(stride=(0, 1)), "non-positive stride (0, 1)"),
    (lambda g: setattr(g, "inputs", [0]), "operand 3 (x2), which is neither constant, a graph input"),
    (lambda g: setattr(g.operands[1], "shape", (1 << 20, 1 << 20, 1 << 10, 1)), "over the 281,474,976,710,656"),
])
def test_contract_refuses_what_rules_would_misread(break_it, words):
    g = _conv_add()
    break_it(g)
    with pytest.raises(GraphError) as e:
        contract.verify(g)  # the IR's checks and the op registry's contracts, as the loaders run them
    assert words in str(e.value)


def _concat_reshape(axis=1, cat_shape=(1, 8, 2), flat=(1, 16)):
    """x (1, 4, 2), c (1, 4, 2) -> Concat(axis) -> z -> Reshape -> y"""
    ops = [Operation(0, "Concat", [0, 1], [2], {"axis": axis, "activation": "NONE"}),
           Operation(1, "Reshape", [2], [3], {})]
    operands = [Operand(0, "x", (1, 4, 2), is_input=True), Operand(1, "c", (1, 4, 2), is_const=True),
                Operand(2, "z", cat_shape), Operand(3, "y", flat, is_output=True)]
    return Graph(operands, ops, [0], [3])


def test_concat_and_reshape_shapes_are_checked():
    contract.verify(_concat_reshape())
    with pytest.raises(GraphError, match="disagree at dim 1"):
        contract.verify(_concat_reshape(axis=1, cat_shape=(1, 9, 2)))
    with pytest.raises(GraphError, match="disagree at dim 0"):
        contract.verify(_concat_reshape(axis=0, cat_shape=(1, 8, 2)))  # (1+1, 4, 2) would be right
    with pytest.raises(GraphError, match=r"reshapes \(1, 8, 2\) \(16 elements\) to \(1, 15\)"):
        contract.verify(_concat_reshape(flat=(1, 15)))
    _concat_reshape(flat=(1, 15)).verify()  # the IR alone knows no op: only the structure is checked


def test_a_dynamo_export_record_is_read_through_the_graph():
    g = _chain()
    assert g.export_record() is None and g.signature() == {} and g.signature_parameters() == set()
    assert g.folded_from() == {}
    g.metadata["torch_export"] = {"signature": {"p_w": ("PARAMETER", "fc.weight"), "b_m": ("BUFFER", "bn.mean"),
                                                "x": ("USER_INPUT", "x")},
                                  "folded_from": {"val_3": ["fc.weight", "bn.mean"]}}
    assert g.export_record()["signature"]["p_w"] == ("PARAMETER", "fc.weight")
    assert g.signature_parameters() == {"fc.weight"}
    assert g.folded_from() == {"val_3": ["fc.weight", "bn.mean"]}


def test_only_the_graph_reads_the_dynamo_export_record():
    # config, the report, the loaders' parameter rule, the fold and the rules each read the record by
    # hand; now Graph.export_record and its helpers are the one reader (the ONNX loader writes it), by
    # its key's text or by the constant
    import ast
    import pathlib

    def names_the_key(path) -> bool:
        text = path.read_text()
        return '"torch_export"' in text or any(isinstance(n, ast.Name) and n.id == "TORCH_EXPORT"
                                               for n in ast.walk(ast.parse(text)))

    pkg = pathlib.Path(__file__).parents[1] / "memplan_cli"
    by_hand = sorted(p.relative_to(pkg).as_posix() for p in pkg.rglob("*.py") if names_the_key(p))
    assert by_hand == ["ir/graph.py", "loaders/onnx_loader.py"]
