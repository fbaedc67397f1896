"""`--profile torch` against PyTorch itself on transposed convolutions (needs torch; skipped without
it, as in CI): a U-Net going up with ConvTranspose2d(2, stride 2) and a DCGAN-style generator with
its classifier (devtools/torch_vision_zoo.py); `devtools/torch_oracle.py --set convscratch` runs the
rest (patchify stems at 224 x 224)."""
import os
import sys

import pytest

torch = pytest.importorskip("torch")
torch_oracle = pytest.importorskip("devtools.torch_oracle")


@pytest.mark.parametrize("name,optimizer", [("cs_unet", "sgd"), ("cs_dcgan", "adam")])
def test_transposed_conv_nets_match_torch(name, optimizer, monkeypatch):
    monkeypatch.setenv("MEMPLAN_PYTHON", os.environ.get("MEMPLAN_PYTHON", sys.executable))
    (row,) = torch_oracle.run([name], [optimizer], [2])
    assert "error" in row, row["profile"]
    assert abs(row["error"]) <= 0.03, row
    assert abs(row["profile"]["tensors"]["peak"] / row["memtracker"]["Total"] - 1) <= 0.03, row
