"""`--profile torch` against PyTorch itself (needs torch; skipped without it, as in CI): small zoo
modules are exported, one training step is measured with torch's profiler (allocator events) and
MemTracker, and the profile's peak must be within 3 % of the allocator's, its tensor peak within 3 %
of MemTracker's (devtools/torch_oracle.py runs the whole zoo)."""
import os
import sys
import types

import pytest

torch = pytest.importorskip("torch")
torch_oracle = pytest.importorskip("devtools.torch_oracle")


@pytest.mark.parametrize("name,optimizer", [("mlp", "adam"), ("cnn_bn", "sgd"), ("resnet_bn", "adam"),
                                            ("efficientnet", "sgd"), ("decoder", "adam"), ("lora_mlp", "adam"),
                                            # vision networks (devtools/torch_vision_zoo.py): upsampling,
                                            # pixel shuffle, ceil_mode pooling; the slow 1x1 conv path
                                            ("vis_segnet", "adam"), ("vis_shufflenet_v2_x0_5", "sgd")])
def test_profile_matches_torch(name, optimizer, monkeypatch):
    # memplan from this interpreter, unless told (a torch-only interpreter runs memplan from another)
    monkeypatch.setenv("MEMPLAN_PYTHON", os.environ.get("MEMPLAN_PYTHON", sys.executable))
    (row,) = torch_oracle.run([name], [optimizer], [2])
    assert "error" in row, row["profile"]
    assert abs(row["error"]) <= 0.03, row
    mt = row["memtracker"]
    if "Total" in mt:  # MemTracker cannot hook frozen parameters (LoRA)
        assert abs(row["profile"]["tensors"]["peak"] / mt["Total"] - 1) <= 0.03, row


def test_measured_step_runs_every_layer():
    """LayerDrop off in what the oracle trains: the module's and its config's `*layerdrop` set to 0, so
    every training forward runs every block (whatever torch's and numpy's generators draw); a module
    without one is left as it is."""
    fam = pytest.importorskip("devtools.torch_family_zoo")

    for numpy in (False, True):
        m = fam.LayerDropLM(numpy=numpy)
        m.config = types.SimpleNamespace(encoder_layerdrop=0.2, layerdrop_seed=7, dropout=0.1)
        assert torch_oracle.every_layer(m) == ["layerdrop=0.3", "config.encoder_layerdrop=0.2"]
        assert (m.layerdrop, m.config.encoder_layerdrop) == (0.0, 0.0)
        assert (m.config.layerdrop_seed, m.config.dropout) == (7, 0.1)
        calls = []
        for blk in m.mlp:
            blk.register_forward_hook(lambda *a: calls.append(1))
        m.train()
        for seed in range(20):
            torch.manual_seed(seed)
            m(torch.randn(1, 4, 64))
        assert len(calls) == 20 * len(m.mlp)
    plain = torch_oracle.build("mlp", 2)[0]
    assert torch_oracle.every_layer(plain) == []
