"""lora-insertion on its own: adapters beside a targeted projection, the caller's graph untouched."""
from memplan_cli.config import TrainConfig
from memplan_cli.passes.infra import run_checked
from tests.passes.graphs import projection, up_to


def test_an_adapter_replaces_the_projection_output_by_base_plus_scaled_update():
    g = projection()
    tg, p = up_to("lora-insertion", g, TrainConfig(lora_rank=2))
    assert run_checked(p, tg)
    ops = tg.graph.operations
    assert [op.type for op in ops] == ["MatMul", "MatMul", "MatMul", "Mul", "Add"]
    assert [op.source_type for op in ops[1:]] == ["LoRA"] * 4
    base, add = ops[0], ops[4]
    assert add.outputs == [2] and tg.graph.operands[base.outputs[0]].name == "y.base"
    (ad,) = tg.lora.adapters
    a, b = tg.graph.operands[ad["A"]], tg.graph.operands[ad["B"]]
    assert (a.shape, b.shape, ad["in"], ad["out"]) == ((8, 2), (2, 8), 8, 8)
    assert tg.lora.rank == 2 and tg.lora.frozen == {1}  # the model's own weight stays frozen
    assert len(g.operations) == 1 and g.operations[0].outputs == [2]  # the caller's graph


def test_without_a_rank_nothing_changes():
    g = projection()
    tg, p = up_to("lora-insertion", g, TrainConfig())
    assert not run_checked(p, tg)
    assert tg.graph is g and tg.lora is None
