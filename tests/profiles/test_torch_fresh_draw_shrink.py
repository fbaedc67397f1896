"""devtools/torch_fresh_draw.py --hf-shrink (needs torch, and transformers for the builds; skipped
without them, as in CI): a transformers type's own defaults shrunk consistently, the overrides a
--draw file records rebuilding the same network, and a draw without the flag left as it was."""
import json

import pytest

pytest.importorskip("torch")
draw = pytest.importorskip("devtools.torch_fresh_draw")

# deepseek_v3-style defaults: multi-head latent attention, routed experts in groups, dense first layers
MLA = {"hidden_size": 7168, "num_attention_heads": 128, "num_key_value_heads": 128, "head_dim": 64,
       "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "kv_lora_rank": 512,
       "q_lora_rank": 1536, "intermediate_size": 18432, "moe_intermediate_size": 2048,
       "n_routed_experts": 256, "num_experts_per_tok": 8, "n_shared_experts": 1, "n_group": 8,
       "topk_group": 4, "first_k_dense_replace": 3, "num_hidden_layers": 61, "vocab_size": 129280,
       "bos_token_id": 0, "eos_token_id": 1, "max_position_embeddings": 4096}


def test_mla_defaults_shrink_consistently():
    ov = draw._shrink_one(MLA)
    assert (ov["hidden_size"], ov["num_attention_heads"], ov["num_key_value_heads"]) == (64, 4, 4)
    f = 64 / 16  # the main head width (64) becomes 16: every head width by the same factor
    assert (ov["qk_nope_head_dim"], ov["qk_rope_head_dim"], ov["v_head_dim"]) == (128 / f, 64 / f, 128 / f)
    # widths scale with the hidden size, by multiples of 8 (grouped expert matmuls need 16-byte strides)
    assert all(ov[k] % 8 == 0 and ov[k] > 0 for k in ("kv_lora_rank", "q_lora_rank", "intermediate_size",
                                                      "moe_intermediate_size"))
    assert ov["n_routed_experts"] == 4 and ov["num_experts_per_tok"] == 2 and ov["n_group"] == ov["topk_group"] == 1
    assert ov["num_hidden_layers"] == 2 and ov["first_k_dense_replace"] == 1  # one dense, one MoE layer
    assert ov["vocab_size"] == 1000 and "bos_token_id" not in ov  # ids inside the vocabulary stay


def test_special_ids_move_into_the_vocabulary():
    ov = draw._shrink_one({"vocab_size": 51865, "bos_token_id": 50256, "eos_token_id": 50256,
                           "pad_token_id": 50256, "decoder_start_token_id": 50257})
    assert ov["vocab_size"] == 1000
    assert ov["bos_token_id"] == ov["eos_token_id"] == ov["pad_token_id"]  # one id stays one id
    assert ov["decoder_start_token_id"] != ov["bos_token_id"]
    assert all(0 <= ov[k] < 1000 for k in ("bos_token_id", "decoder_start_token_id"))


def test_layers_keep_each_kind():
    kinds = ["sliding_attention"] * 5 + ["full_attention"]
    ov = draw._shrink_one({"num_hidden_layers": 30, "layer_types": kinds * 5,
                           "mlp_layer_types": ["dense"] + ["sparse"] * 29})
    assert ov["num_hidden_layers"] == len(ov["layer_types"]) == len(ov["mlp_layer_types"])
    assert set(ov["layer_types"]) == set(kinds) and set(ov["mlp_layer_types"]) == {"dense", "sparse"}
    # one kind only: the first two layers
    ov = draw._shrink_one({"num_hidden_layers": 24, "layer_types": ["full_attention"] * 24})
    assert ov["layer_types"] == ["full_attention"] * 2 and ov["num_hidden_layers"] == 2


def test_overrides_rebuild_the_same_network():
    pytest.importorskip("transformers")
    ov = draw.hf_shrink_overrides("deepseek_v3")
    assert ov["experts_implementation"] == "batched_mm"
    kept = json.loads(json.dumps(["hf", "deepseek_v3", {"config": ov}]))  # through a --draw file
    first = draw.hf_shrunk_builder("deepseek_v3", ov)
    again = draw._entry(*kept)[1]
    assert draw._params_on_meta(first) == draw._params_on_meta(again) < 12e6
    assert draw._runs(again, draw.IDS)
    cfg = again().m.config
    assert cfg.vocab_size == 1000 and cfg.n_routed_experts == 4 and cfg.num_hidden_layers == 2


def test_a_draw_without_the_flag_is_unchanged():
    pytest.importorskip("transformers")
    entry = draw._entry("hf", "llama", {})  # what every earlier --draw file's transformers record holds
    cfg = entry[1]().m.config
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.vocab_size) == (64, 2, 1000)
    assert entry[3] == ("hf", "llama", {})


def test_audio_classifier_inputs():
    from types import SimpleNamespace as NS

    # a waveform first; AST's input_values is a spectrogram of max_length frames
    wave = draw.hf_class_inputs(NS(feature_size=1), "input_values")
    assert wave == [(draw.HF_CLASS_WAVE,)]
    ast = draw.hf_class_inputs(NS(max_length=64, num_mel_bins=128), "input_values")
    assert ast == [(draw.HF_CLASS_WAVE,), (64, 128)]
    # wav2vec2-bert's input_features: frames of feature_projection_input_dim stacked features
    assert draw.hf_class_inputs(NS(feature_projection_input_dim=160), "input_features") == [(32, 160)]


def test_efficientnet_top_width_follows_its_coefficient():
    # transformers' EfficientNet: the top conv is round_filters(1280) at width_coefficient, its BatchNorm hidden_dim
    d = {"width_coefficient": 2.0, "depth_coefficient": 3.1, "hidden_dim": 2560, "image_size": 600}
    for level in (0, 1):
        ov = draw.hf_class_overrides(d, level)
        assert ov["width_coefficient"] == 1.0 and ov["hidden_dim"] == 1280
    assert "hidden_dim" not in draw.hf_class_overrides(d, 2)
    assert draw.hf_class_overrides({"hidden_dim": 2560}, 0)["hidden_dim"] == 640  # no coefficient: a width


def test_a_window_fits_the_last_stage():
    # Swin at 64 x 64: patches of 4, four stages -> a 2 x 2 map last; a window of 7 would not fit it
    d = {"window_size": 7, "patch_size": 4, "depths": [2, 2, 6, 2], "image_size": 224}
    assert draw.hf_class_overrides(d, 0)["window_size"] == 2
    assert "window_size" not in draw.hf_class_overrides({**d, "window_size": 2}, 0)


def test_an_image_classifier_of_token_ids():
    from types import SimpleNamespace as NS

    # ImageGPT classifies sequences of colour-cluster ids: token ids over its own vocabulary
    assert draw.hf_class_inputs(NS(vocab_size=513), "input_ids") == [("ids", draw.IDS[1], 513)]
