"""`--profile torch` on dynamo exports against PyTorch itself (needs torch; skipped without it, as in
CI): the exporter's optimizer folds BatchNorm and a zero pad into the convolutions, and the profile
reads them back from the file's metadata (profiles/torch/export.py)."""
import os
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
torch_oracle = pytest.importorskip("devtools.torch_oracle")


@pytest.mark.parametrize("name,optimizer", [("cnn_bn", "sgd"), ("misc", "adam")])
def test_dynamo_export_matches_torch(name, optimizer, monkeypatch):
    monkeypatch.setenv("MEMPLAN_PYTHON", os.environ.get("MEMPLAN_PYTHON", sys.executable))
    (row,) = torch_oracle.run([name], [optimizer], [2], dynamo=True)
    assert "error" in row, row["profile"]
    assert abs(row["error"]) <= 0.03, row
    assert abs(row["profile"]["tensors"]["peak"] / row["memtracker"]["Total"] - 1) <= 0.03, row
