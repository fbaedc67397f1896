"""`--profile torch` against PyTorch itself on transformer modules (needs torch; skipped without it, as
in CI): a hand-written decoder on F.scaled_dot_product_attention from both exporters, and a Hugging
Face Llama whose LoRA adapters `--lora` adds to the base model's export. One training step is
measured with torch's profiler (allocator events) and MemTracker (devtools/torch_oracle.py)."""
import os
import sys

import pytest

torch = pytest.importorskip("torch")
torch_oracle = pytest.importorskip("devtools.torch_oracle")


def _check(row):
    assert "error" in row, row["profile"]
    assert abs(row["error"]) <= 0.03, row
    mt = row["memtracker"]
    if "Total" in mt:
        assert abs(row["profile"]["tensors"]["peak"] / mt["Total"] - 1) <= 0.03, row


@pytest.fixture(autouse=True)
def _memplan_here(monkeypatch):
    # memplan from this interpreter, unless told (a torch-only interpreter runs memplan from another)
    monkeypatch.setenv("MEMPLAN_PYTHON", os.environ.get("MEMPLAN_PYTHON", sys.executable))


@pytest.mark.parametrize("dynamo", [False, True])
def test_sdpa_decoder(dynamo):
    if dynamo:
        pytest.importorskip("onnxscript")
    (row,) = torch_oracle.run(["tx_sdpa"], ["adam"], [2], dynamo=dynamo)
    _check(row)


def test_llama_lora_flag():
    pytest.importorskip("transformers")
    pytest.importorskip("onnxscript")
    (row,) = torch_oracle.run(["tx_llama_lora_flag"], ["sgd"], [2], dynamo=True)
    _check(row)


def test_sdpa_dropout_recorded_by_dynamo():
    # sdpa's own dropout, which the dynamo export writes no Dropout for: the math path eager runs
    pytest.importorskip("onnxscript")
    (row,) = torch_oracle.run(["tx_sdpa_drop"], ["sgd"], [2], dynamo=True)
    _check(row)


def test_torch_encoder_with_dropout_dynamo():
    # nn.TransformerEncoder: the packed q/k/v `.contiguous()` copy the export dropped, and its selects
    pytest.importorskip("onnxscript")
    (row,) = torch_oracle.run(["tx_nn_encoder"], ["sgd"], [2], dynamo=True)
    _check(row)
