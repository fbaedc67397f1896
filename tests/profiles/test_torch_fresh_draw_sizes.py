"""devtools/torch_fresh_draw.py --image-size / --seq-len / --resize-from (needs torch; skipped without
it, as in CI): the sizes reach every builder's input, a --draw file records them and a later run
reads them back, names drawn at other sizes carry them, and an earlier draw is rebuilt at new sizes."""
import argparse
import json

import pytest

pytest.importorskip("torch")
draw = pytest.importorskip("devtools.torch_fresh_draw")


@pytest.fixture(autouse=True)
def default_sizes():
    draw.set_sizes()
    yield
    draw.set_sizes()


def _args(**kw):
    ap = argparse.ArgumentParser()
    ap.add_argument("--draw")
    draw.add_size_args(ap)
    argv = []
    for k, v in kw.items():
        argv += [f"--{k.replace('_', '-')}", str(v)]
    return ap.parse_args(argv)


def test_defaults_are_the_earlier_draws_sizes():
    assert draw.IMG == (3, 64, 64) and draw.IDS[1] == 32 and draw.SMALL["max_position_embeddings"] == 128
    assert draw.size_suffix("timm") == draw.size_suffix("hf") == ""
    assert draw._entry("timm", "resnet10t", {})[2] == (3, 64, 64)


def test_sizes_reach_the_builders_inputs():
    draw.set_sizes(224, 256)
    assert draw._entry("timm", "resnet10t", {})[2] == (3, 224, 224)
    assert draw._entry("hf", "gpt2", {})[2] == ("ids", 256, 1000)
    assert draw.SMALL["max_position_embeddings"] == 256  # a position table as long as the sequence
    assert draw.TV_SHAPES["image"][0] == (3, 224, 224) and draw.TV_SHAPES["segmentation"] == ((3, 224, 224),)
    assert draw._shrink_one({"max_position_embeddings": 4096})["max_position_embeddings"] == 256
    assert (draw.size_suffix("timm"), draw.size_suffix("hf"), draw.size_suffix("hfa")) == ("__i224", "__t256", "")
    assert draw.size_suffix("hft") == "__t256"  # a task head's tokens too: one --cache never mixes sizes
    assert draw._network("fr_timm_resnet10t__i224") == "timm resnet10t at 224 x 224"
    assert draw._network("fr_hf_gpt2__t256") == "transformers gpt2 at 256 tokens"


def test_an_earlier_draw_resized():
    draw.set_sizes(160, 512)
    kept = {"seed": 7, "drawn": {
        "fr_timm_deit_tiny": ["timm", "deit_tiny", {"img_size": 64}],
        "fr_hf_plbart": ["hf", "plbart", {"config": {"d_model": 64, "max_position_embeddings": 128,
                                                     "text_config": {"max_position_embeddings": 1024}}}],
        "fr_hfv_vit": ["hfv", "vit", {"config": {"image_size": 64, "vision_config": {"image_size": [64, 64]}},
                                      "input": [3, 64, 64]}],
        "fr_hfa_whisper": ["hfa", "whisper", {"config": {}, "input": [80, 64]}],
        "fr_tv_resnet18": ["tv", "resnet18", {"kw": {"num_classes": 10}, "input": [3, 64, 64]}],
        "fr_tv_r3d_18": ["tv", "r3d_18", {"kw": {"num_classes": 10}, "input": [3, 8, 64, 64]}],
        "fr_hft_mc_ibert": ["hft", "mc:ibert", {"config": {"max_position_embeddings": 128}}]}}
    out = draw.resize_draw(kept)
    d = out["drawn"]
    assert (out["seed"], out["image_size"], out["seq_len"]) == (7, 160, 512)
    assert d["fr_timm_deit_tiny__i160"][2] == {"img_size": 160}
    cfg = d["fr_hf_plbart__t512"][2]["config"]
    assert cfg["max_position_embeddings"] == 512 and cfg["text_config"]["max_position_embeddings"] == 1024
    v = d["fr_hfv_vit__i160"][2]
    assert v["config"] == {"image_size": 160, "vision_config": {"image_size": [160, 160]}} and v["input"] == [3, 160, 160]
    assert d["fr_hfa_whisper"][2]["input"] == [80, 64]  # audio keeps its input
    assert d["fr_tv_resnet18__i160"][2]["input"] == [3, 160, 160]
    assert d["fr_tv_r3d_18__i160"][2]["input"] == [3, 8, 64, 64]  # clips keep theirs
    assert d["fr_hft_mc_ibert__t512"][2]["config"]["max_position_embeddings"] == 512
    assert kept["drawn"]["fr_timm_deit_tiny"][2] == {"img_size": 64}  # the earlier draw is untouched
    again = draw.resize_draw(json.loads(json.dumps(out)))  # a resized draw resized again: no double suffix
    assert set(again["drawn"]) == set(d)


def test_a_draw_file_keeps_its_sizes(tmp_path):
    f = tmp_path / "d.json"
    f.write_text(json.dumps({"seed": 1, "drawn": {}, "image_size": 224, "seq_len": 128}))
    assert draw.sized_draw(_args(draw=f)) is None
    assert draw.sizes() == {"image_size": 224, "seq_len": 128}
    with pytest.raises(SystemExit, match="drawn at --image-size 224, not 96"):
        draw.sized_draw(_args(draw=f, image_size=96))
    old = tmp_path / "old.json"  # a draw file from before the options: the defaults
    old.write_text(json.dumps({"seed": 1, "drawn": {}}))
    draw.sized_draw(_args(draw=old))
    assert draw.sizes() == {"image_size": 64, "seq_len": 32}
