"""No op type is named outside `memplan_cli/ops/` (issue 31): what memplan knows about an op lives in
its family's module, and the code elsewhere asks the registry (an OpDef field, a profile's facts, a
source-format fact, or a constant the family exports for the ops a pass inserts).

The vocabulary checked is every op type name memplan could meet: the registry's canonical types,
the ONNX and TFLite/circle names its converters map, every ONNX operator (onnx's schemas) and every
circle builtin (circle-schema's BuiltinOperator). A string literal outside ops/ equal to one of
them fails, unless ALLOWED names that file and string, with the reason it is not an op type there.
"""
import ast
import pathlib

import pytest

PKG = pathlib.Path(__file__).resolve().parents[1] / "memplan_cli"

# (file under memplan_cli, string) -> why that string is not an op type there. Keep it small.
ALLOWED = {
    # the ONNX Constant node is a value the loader reads (an initializer by another name), never an op
    # of memplan's graph
    ("loaders/onnx_loader.py", "Constant"): "an ONNX Constant node read as a value",
    ("loaders/onnx_fold.py", "Constant"): "an ONNX Constant node read as a value",
    ("loaders/params.py", "Constant"): "an ONNX Constant node read as a value",
    ("loaders/data_sized.py", "Constant"): "an ONNX Constant node read as a value",
    # the flatbuffer format's code for "look in custom_code for the name"
    ("loaders/flatbuffer_loader.py", "CUSTOM"): "the file format's custom-op code",
    # click's placeholder in --lora's help text
    ("config.py", "RANK"): "a click metavar (--lora's, in the training-flag table)",
}
# fused-activation names (ir/vocab.py ACTIVATIONS: an op's `activation` attribute); TFLite's
# standalone RELU / TANH builtins are converted to Relu / Tanh at load, so in the graph these
# strings only ever name a fused activation
FUSED_ACTIVATIONS = {"NONE", "RELU", "RELU_N1_TO_1", "RELU6", "TANH", "SIGN_BIT", "SIGMOID"}


def op_type_names() -> set[str]:
    from memplan_cli import ops

    ld = ops._load()
    names = set(ld["ops"]) | set(ld["onnx"]) | set(ld["tflite"])
    onnx = pytest.importorskip("onnx")
    names |= {s.name for s in onnx.defs.get_all_schemas_with_history()}
    from circle_schema.v0_10.circle.BuiltinOperator import BuiltinOperator

    names |= {k for k, v in vars(BuiltinOperator).items() if not k.startswith("_") and isinstance(v, int)}
    return names


def named_op_types(path: pathlib.Path, names: set[str]) -> list[tuple[int, str]]:
    """(line, string) for each string literal of `path` that equals an op type name (docstrings
    included: a docstring equal to an op type name would be one word, and is as suspect)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
            out.append((node.lineno, node.value))
    return sorted(out)


def test_the_vocabulary_is_the_registrys_and_the_formats():
    names = op_type_names()
    from memplan_cli import ops

    assert set(ops.all_ops()) <= names
    assert {"Conv", "Gemm", "CONV_2D", "FULLY_CONNECTED", "Conv2D", "Loss"} <= names


def test_no_op_type_is_named_outside_ops():
    names = op_type_names() - FUSED_ACTIVATIONS
    bad = []
    for f in sorted(PKG.rglob("*.py")):
        rel = f.relative_to(PKG).as_posix()
        if rel.startswith("ops/"):
            continue
        bad += [f"{rel}:{line}: {s!r}" for line, s in named_op_types(f, names) if (rel, s) not in ALLOWED]
    assert not bad, ("op types named outside memplan_cli/ops/ (move the fact into the op family's module "
                     "and ask the registry):\n" + "\n".join(bad))


def test_every_allowance_is_still_needed():
    names = op_type_names()
    used = {(f.relative_to(PKG).as_posix(), s) for f in PKG.rglob("*.py") for _, s in named_op_types(f, names)}
    assert set(ALLOWED) <= used, f"allowances no file needs any more: {sorted(set(ALLOWED) - used)}"


def test_the_checker_finds_a_named_op_type(tmp_path):
    f = tmp_path / "m.py"
    f.write_text('X = ("Conv2D", "conv2d")\ndef f(op):\n    return op.type == "MatMul"\n')
    assert named_op_types(f, {"Conv2D", "MatMul"}) == [(1, "Conv2D"), (3, "MatMul")]
