"""docs/ops.md's table of supported ops is generated (scripts/ops_table.py) and must be up to date: adding
an op to the registry without regenerating it fails here."""
from __future__ import annotations

import importlib.util
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("ops_table", ROOT / "scripts" / "ops_table.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_readme_table_is_up_to_date(capsys):
    assert _script().main(["--check"]) == 0, capsys.readouterr().err


def test_every_registry_op_has_a_row():
    from memplan_cli import ops
    from memplan_cli.passes.rules import default_rules

    listed = {t for f in _script().families() for t in f["ops"]}
    assert set(ops.all_ops()) - {"Loss"} <= listed  # the loss is memplan's, not a source op
    assert set(default_rules()) - {"Loss"} <= listed


def test_a_new_op_makes_the_readme_stale(monkeypatch):
    from memplan_cli import ops
    from memplan_cli.ops import transpose

    s = _script()
    text = (ROOT / "docs" / "ops.md").read_text(encoding="utf-8")
    assert s.splice(text, s.render()) == text
    monkeypatch.setattr(transpose, "OPS", transpose.OPS + [ops.OpDef("FakeOp", no_grad=True)])
    monkeypatch.setattr(transpose, "ONNX", {**transpose.ONNX, "FakeOp": lambda node: None})
    table = s.render()
    assert "FakeOp" in table and s.splice(text, table) != text
