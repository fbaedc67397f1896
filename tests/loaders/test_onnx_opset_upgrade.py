"""Opset 7-9 ONNX models (the zoo's exports) are converted to opset 12 with onnx.version_converter at
load; a model the converter cannot convert is one line, exit 2; opsets < 7 and >= 10 are read as they are."""
import numpy as np
from click.testing import CliRunner
from onnx import helper

from memplan_cli.cli import main
from memplan_cli.loaders import load_model
from tests.ops.gradcheck import check_gradients, onnx_model, save


def _slice_model(opset):
    # opset 9: Slice's starts/ends are attributes; the converter turns them into constant inputs (10+)
    nodes = [helper.make_node("Add", ["x", "p"], ["a"]),
             helper.make_node("Slice", ["a"], ["y"], axes=[1], starts=[1], ends=[3])]
    inits = {"p": np.random.default_rng(0).uniform(-1, 1, (4, 3)).astype(np.float32)}
    m = onnx_model(nodes, [("x", (2, 4, 3))], [("y", (2, 2, 3))], inits, opset=opset)
    m.ir_version = 4
    return m


def test_an_opset_9_model_is_converted_to_opset_12(tmp_path):
    p = save(tmp_path, _slice_model(9))
    g = load_model(p)
    assert g.metadata["onnx_opset"] == {"file": 9, "converted_to": 12}
    sl = g.operations[-1]
    assert sl.type == "Slice" and sl.attrs["starts"] == (1,) and sl.attrs["ends"] == (3,)
    assert g.operands[sl.outputs[0]].shape == (2, 2, 3)
    assert check_gradients(p, min_checked=12) >= 12


def test_newer_and_older_opsets_are_read_as_they_are(tmp_path):
    for opset in (6, 13):
        nodes = [helper.make_node("Relu", ["x"], ["y"])]
        g = load_model(save(tmp_path, onnx_model(nodes, [("x", (2, 3))], [("y", (2, 3))], {}, opset=opset),
                            f"m{opset}.onnx"))
        assert "onnx_opset" not in g.metadata


def test_a_model_the_converter_cannot_convert_is_one_line(tmp_path):
    # an op without a schema: the converter has no adapter for it
    nodes = [helper.make_node("NoSuchOp", ["x"], ["y"])]
    p = save(tmp_path, onnx_model(nodes, [("x", (2, 3))], [("y", (2, 3))], {}, opset=9))
    r = CliRunner().invoke(main, ["analyze", p], env={"NO_COLOR": "1"})
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert len(r.output.strip().splitlines()) == 1 and "version_converter" in r.output, r.output
