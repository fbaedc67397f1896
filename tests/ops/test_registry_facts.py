"""The registry's fact tables beside OPS / ONNX / TFLITE (memplan_cli/ops/__init__.py): PROFILES merged
into OpDef.profiles, source-format facts, ONNX fusions; each declared once."""
import types

import pytest

from memplan_cli import ops
from memplan_cli.ir.graph import Operand, Operation
from memplan_cli.ops.base import OpDef


@pytest.fixture
def families(monkeypatch):
    """Stand the registry's family modules in with the given ones (the real registry comes back after)."""
    def use(*mods):
        monkeypatch.setattr(ops, "family_modules", lambda: list(mods))
        monkeypatch.setattr(ops, "_LOADED", None)
    return use


def _mod(name, **attrs):
    return types.SimpleNamespace(__name__=f"memplan_cli.ops.{name}", **attrs)


def test_profiles_merge_into_each_opdef_without_touching_a_shared_dict(families):
    shared = {"torch": {"view": True}}
    a, b = OpDef("A", profiles=shared), OpDef("B", profiles=shared)
    families(_mod("fam", OPS=[a, b],
                  PROFILES={"onert": {"A": {"weighted": True}}, "singa": {"Src": {"operator": "X"}}}))
    assert ops.profile_facts("onert", "A") == {"weighted": True}
    assert ops.profile_facts("torch", "A") == {"view": True}
    assert ops.profile_facts("onert", "B") is None  # B shared A's dict: the merge copied it
    assert shared == {"torch": {"view": True}}
    assert ops.profile_facts("singa", "Src") == {"operator": "X"}  # a source type no family defines
    assert ops.profile_facts("singa", "Other") is None


@pytest.mark.parametrize("second", [
    {"PROFILES": {"onert": {"A": {}}}},  # again in another family's table
    {"ONNX_FACTS": {"SrcOp": {"random": True}}},
])
def test_a_fact_is_declared_once(families, second):
    first = _mod("fam1", OPS=[OpDef("A", profiles={"onert": {}})], ONNX_FACTS={"SrcOp": {"random": True}})
    families(first, _mod("fam2", **second))
    with pytest.raises(RuntimeError, match="twice|two op families"):
        ops.all_ops()


def test_source_facts_and_registry_questions(families):
    families(_mod("fam", OPS=[OpDef("R", random=True), OpDef("L", lora_layout=lambda op: "IO")],
                  ONNX_FACTS={"Noise": {"random": True}, "Mm": {"weight_inputs": (1,)}},
                  TFLITE_FACTS={"KEEP": {"keeps_batch": True}}))
    assert ops.is_random("R") and ops.is_random("Noise") and not ops.is_random("L") and not ops.is_random("Mm")
    assert ops.source_facts("onnx", "Mm") == {"weight_inputs": (1,)}
    assert ops.source_facts("tflite", "KEEP") == {"keeps_batch": True} and ops.source_facts("tflite", "Mm") == {}
    assert ops.types_with("lora_layout") == ("L",)


def test_the_real_registry_answers_what_the_rooms_used_to_name():
    assert ops.get(ops.fused_activation_ops()["RELU"]).activation == "RELU"
    assert "CLIP" not in ops.fused_activation_ops()  # Clip's bounds are attributes, not a fused code
    assert ops.types_with("lora_layout") and all(ops.get(t).weight_inputs for t in ops.types_with("lora_layout"))
    assert {ops.get(t).role for t in ops.all_ops()} >= {"shape_of", "reshape", "fill", "identity"}
    assert ops.is_random("Dropout") and ops.is_random("RandomNormal")
    assert ops.source_facts("onnx", "Conv")["weight_inputs"] == (1, 2)


def _operand(i, shape, const=False, output=False):
    return Operand(i, f"t{i}", shape, "float32", is_const=const, is_output=output)


def test_the_onnx_fusion_reads_matmul_and_bias_add_as_one_fully_connected():
    from memplan_cli.ops.matmul import FC_TYPE, fuse_matmul_add

    operands = [_operand(0, (2, 3)), _operand(1, (3, 4), const=True), _operand(2, (2, 4)),
                _operand(3, (4,), const=True), _operand(4, (2, 4), output=True)]
    mm = Operation(0, "MatMul", [0, 1], [2], {}, name="mm")
    add = Operation(1, "Add", [2, 3], [4], {})
    fused = fuse_matmul_add([mm, add], operands)
    assert [(op.type, op.inputs, op.index) for op in fused] == [(FC_TYPE, [0, 1, 3], 0)]
    assert fused[0].attrs["fused_names"] == ("mm",)
    # a bias that is not a 1-D constant: both ops stay
    operands[3] = _operand(3, (2, 4))
    mm, add = Operation(0, "MatMul", [0, 1], [2], {}), Operation(1, "Add", [2, 3], [4], {})
    assert [op.type for op in fuse_matmul_add([mm, add], operands)] == ["MatMul", "Add"]
