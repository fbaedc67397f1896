"""The onnx package's own exported models (they ship with `onnx`, nothing to download):

- `pytorch-converted/`: single torch.nn modules exported by torch.onnx. Every model `analyze` accepts
  also passes `verify -b 2 -O sgd`, unless one of its ops has no reference kernel yet: then verify
  refuses it with one line naming that op (exit 2), never a crash.
- `simple/`: hand-written graphs, every one valid (onnx's full checker passes). Those memplan cannot
  plan are refused with one line saying why, never called invalid.
"""
import os

import onnx
import pytest
from click.testing import CliRunner

from memplan_cli.cli import main

DATA = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
CONVERTED = os.path.join(DATA, "pytorch-converted")
SIMPLE = os.path.join(DATA, "simple")
# the valid files of simple/ memplan cannot plan (by name prefix) and the reason it gives
CANNOT_PLAN = {
    "test_expand_shape_model": "(Expand 'test') has a shape computed from the data (the values of input 'shape')",
    "test_gradient_of_add": "(Gradient 'my_gradient', domain ai.onnx.preview.training) comes from a training step",
    "test_strnorm_model": "tensor 'x' has dtype string: its bytes are the text it holds",
    "test_sequence_model": "is a sequence of tensors",
}
# sequences only cut into pieces and read at constant positions: read as Gathers of the pieces
# (loaders/onnx_loader.py `_sequences_as_pieces`), so planned, not refused; and a sequence built by
# SequenceEmpty / SequenceInsert (at a known position) read at a known position: that tensor
# (loaders/onnx_fold.py `_read_sequences`)
PLANNED_SEQUENCES = {"test_sequence_model7", "test_sequence_model1"}


def _models(folder):
    if not os.path.isdir(folder):
        return []
    return sorted(d for d in os.listdir(folder) if os.path.isfile(os.path.join(folder, d, "model.onnx")))


def _run(*args):
    return CliRunner().invoke(main, list(args), env={"NO_COLOR": "1"})


def _ops_without_kernels(path) -> list[str]:
    from memplan_cli import ops as registry
    from memplan_cli.loaders import load_model

    g = load_model(path, batch_size=2)
    return sorted({op.type for op in g.operations if not (registry.get(op.type) and registry.get(op.type).kernels)})


def test_the_folder_is_there():
    assert len(_models(CONVERTED)) >= 80


@pytest.mark.parametrize("name", _models(CONVERTED))
def test_pytorch_converted_analyze_then_verify(name):
    path = os.path.join(CONVERTED, name, "model.onnx")
    a = _run("analyze", path, "-b", "2", "-O", "sgd")
    assert a.exit_code in (0, 2), a.output
    if a.exit_code == 2:
        assert len(a.output.strip().splitlines()) == 1 and "Traceback" not in a.output, a.output
        return
    v = _run("verify", path, "-b", "2", "-O", "sgd")
    missing = _ops_without_kernels(path)
    if missing:
        assert v.exit_code == 2 and "no reference kernel" in v.output and any(t in v.output for t in missing), \
            v.output
    else:
        assert v.exit_code == 0 and "PASS" in v.output, v.output


def test_the_simple_folder_is_there():
    assert len(_models(SIMPLE)) >= 20


@pytest.mark.parametrize("name", _models(SIMPLE))
@pytest.mark.parametrize("profile", ["memplan", "torch"])
def test_simple_models_are_planned_or_refused_with_the_reason(name, profile):
    path = os.path.join(SIMPLE, name, "model.onnx")
    onnx.checker.check_model(path, full_check=True)
    a = _run("analyze", path, "-b", "2", "-p", profile)
    reason = next((r for prefix, r in CANNOT_PLAN.items() if name.startswith(prefix)), None)
    if reason is None or name in PLANNED_SEQUENCES:
        assert a.exit_code == 0, a.output
        return
    assert a.exit_code == 2 and len(a.output.strip().splitlines()) == 1, a.output
    assert "invalid" not in a.output and reason in a.output, a.output
