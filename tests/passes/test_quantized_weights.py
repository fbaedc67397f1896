"""A dynamic-range quantized TF Lite file (the converter's Optimize.DEFAULT: int8 filters of the big
layers, float activations and biases): memplan trains float weights only, and the report says which
weights stay frozen because they are quantized integer constants, instead of a silent "trainable all"."""
import json

import jsonschema
from click.testing import CliRunner

from memplan_cli.cli import main
from memplan_cli.passes.loss_insertion import QUANTIZED_REASON
from memplan_cli.schemas import load_schema
from tests.loaders import fbmodels as fb


def _hybrid_fc(tmp_path) -> str:
    """input [2, 8] -> FullyConnected(int8 weight [6, 8], float bias) -> FullyConnected(float [3, 6])."""
    t = [fb.tensor("x", [2, 8]), fb.tensor("fc1/w", [6, 8], "int8", data="fill"),
         fb.tensor("fc1/b", [6], data="fill"), fb.tensor("h", [2, 6]),
         fb.tensor("fc2/w", [3, 6], data="fill"), fb.tensor("fc2/b", [3], data="fill"), fb.tensor("y", [2, 3])]
    o = [fb.op(fb.OPS.FULLY_CONNECTED, [0, 1, 2], [3], fb.fc_opts(), fb.BO.FullyConnectedOptions),
         fb.op(fb.OPS.FULLY_CONNECTED, [3, 4, 5], [6], fb.fc_opts(), fb.BO.FullyConnectedOptions)]
    return fb.write(tmp_path, "hybrid.tflite", fb.build(t, o, [0], [6], "tflite"))


def _run(*args):
    r = CliRunner().invoke(main, [*args], env={"NO_COLOR": "1", "COLUMNS": "80"})
    return r.exit_code, r.output


def test_an_int8_weight_is_reported_frozen_and_gets_no_optimizer_state(tmp_path):
    p = _hybrid_fc(tmp_path)
    code, out = _run("analyze", p, "-O", "adam", "-f", "json")
    assert code == 0, out
    doc = json.loads(out)
    jsonschema.validate(doc, load_schema("analysis"))
    assert doc["frozen_weights"] == [{"weight": "fc1/w", "op": "#0 FullyConnected", "bytes": 48,
                                      "reason": QUANTIZED_REASON}]
    # the float weights train: fc1's bias, fc2's weight and bias (6 + 18 + 3 floats), two states each
    assert doc["categories"]["opt-variable"]["naive"] == sum(2 * ((4 * n + 15) // 16 * 16) for n in (6, 18, 3))
    code, out = _run("analyze", p, "-O", "adam")
    assert code == 0 and "1 weight(s) (48 B) stay frozen: a quantized integer constant" in out, out
    assert "fc1/w" in out and max(len(line) for line in out.splitlines()) <= 80
