"""`--profile torch` against PyTorch itself on channels-last convolutions (needs torch; skipped without
it, as in CI): a two-stage ConvNeXt written with torch alone (devtools/torch_vision_zoo.py
MiniConvNeXt) from both exporters, and timm's convnext_atto when timm is there. One training step is
measured with torch's profiler (allocator events) and MemTracker (devtools/torch_oracle.py)."""
import os
import sys

import pytest

torch = pytest.importorskip("torch")
torch_oracle = pytest.importorskip("devtools.torch_oracle")


@pytest.fixture(autouse=True)
def _memplan_here(monkeypatch):
    # memplan from this interpreter, unless told (a torch-only interpreter runs memplan from another)
    monkeypatch.setenv("MEMPLAN_PYTHON", os.environ.get("MEMPLAN_PYTHON", sys.executable))


@pytest.mark.parametrize("name,optimizer,batch,dynamo", [("cl_mini", "sgd", 2, False), ("cl_mini", "adam", 1, False),
                                                         ("cl_mini", "adam", 4, True),
                                                         ("vis_convnext_atto", "sgd", 2, False)])
def test_convnext_matches_torch(name, optimizer, batch, dynamo):
    if dynamo:
        pytest.importorskip("onnxscript")
    if name.startswith("vis_"):
        pytest.importorskip("timm")
    (row,) = torch_oracle.run([name], [optimizer], [batch], dynamo=dynamo)
    assert "error" in row, row["profile"]
    assert abs(row["error"]) <= 0.03, row
    assert abs(row["profile"]["tensors"]["peak"] / row["memtracker"]["Total"] - 1) <= 0.03, row
