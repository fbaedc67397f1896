"""A stand-in held-out set for `--profile torch` (issue 39): draw timm models and transformers configs
that no zoo of devtools/ names, with a printed random seed, and measure each once through
devtools/torch_oracle.py. Dev-only, needs torch, timm and transformers.

    python devtools/torch_fresh_draw.py --seed 3911 --timm 20 --hf 6 --list          # the draw only
    python devtools/torch_fresh_draw.py --seed 3911 --timm 20 --hf 6 --draw d.json -b 4 -O adam \
        --cache measured.json --exports exports --json fresh_ts.json
    python devtools/torch_fresh_draw.py --seed 3911 --draw d.json -b 4 -O adam --dynamo \
        --cache measured.json --exports exports --json fresh_dyn.json
    python devtools/torch_fresh_draw.py --seed 3911 --draw d.json -b 4 -O adam --torch-only \
        --cache measured.json --exports exports      # torch's side only: memplan is not run

--torch-only exports and measures without running memplan, so that the networks can be drawn and
measured before the rules they are judged on are settled; a later run with the same --cache and
--exports analyses them with the rules of that moment and measures nothing again.

A later draw (after the rules changed) takes a new seed and `--exclude d.json` for each earlier draw,
so it holds no model an earlier one measured.
--exclude-named adds what the repository itself records of earlier draws, for when their --draw files
are gone: every row of a draw table in docs/ (timm and torchvision names, transformers types, a task
head's type under that head) and every timm model named anywhere in docs/, devtools/, tests/ or the
README.

--draw keeps the draw (a later run takes the same models), --cache torch's measurements (the same
for both exporters), --exports the exports: re-checking the profile after a rule changed measures
and exports nothing again.

The draw is fixed before anything is measured: candidates are shuffled with the seed and taken in
that order; a candidate is skipped (and said so) only when it has more than --max-params parameters
or does not build and run forward in eager at the fixed input (timm: 3 x 64 x 64, with img_size=64
when the model needs it; transformers: 32 token ids of a 1000-word vocabulary, a small config: hidden
64, 2 layers, 4 heads, eager attention). Nothing about memplan decides the draw.

--hf-shrink: a transformers type the small config cannot build (its attributes are spelled otherwise,
it is over --max-params from its expert counts or sub-configs, a head width does not divide) is tried
once more from its own defaults, every size shrunk the same way (hf_shrink_overrides); the draw file
records the overrides, so a later run rebuilds the same network. Without the flag a draw, and every
earlier --draw file, is what it was.

--hf-vision N and --hf-audio N add transformers' own image- and audio-classification types
(AutoModelForImageClassification / AutoModelForAudioClassification, names fr_hfv_* and fr_hfa_*),
drawn with their own stream of the seed: each type's default config with its stages cut to one
block, its layers to two and its widths to a quarter (tried with its widths kept, then as it is,
when that does not build), 3 x 64 x 64 images, 4,000 waveform samples or a short spectrogram;
the overrides and the input shape go into the --draw file.
--hf-task N adds N transformers types per head the other sources do not build (names fr_hft_<head>_*:
a masked LM, token classification, question answering with its two outputs, multiple choice, an
encoder-decoder seq2seq LM), each from the SMALL config or, when that does not build, the shrunk
defaults; the loss each head's outputs carry is described at HF_TASKS.
--hf-type HEAD:TYPE builds one named type under one head (or `all:TYPE`, under each head it has) the
same way, excluded or not: for tracing a type that missed, never for a held-out set.

    python devtools/torch_fresh_draw.py --seed 54201 --timm 0 --hf 0 --hf-type all:mra --list
--torchvision N adds N torchvision models (its own generator: the timm / transformers draw of a seed
is unchanged) from the classification, segmentation, video and optical-flow builders, random weights,
10 classes; each at the first input it runs at (images 3 x 64 x 64, else 224 x 224; clips 3 x 8 x 64
x 64, else 16 x 224 x 224; RAFT's two images 64 x 64, else 128 x 128). Segmentation models train on
their per-pixel "out", RAFT on its last flow; detection builders are left out (see TV_SHAPES).

    python devtools/torch_fresh_draw.py --timm 0 --hf 0 --torchvision 200 --draw tv.json --list

--image-size N and --seq-len N draw and measure at a user's sizes instead of 64 x 64 and 32 tokens
(timm, transformers' image classifiers and torchvision's image and segmentation models take N x N
images; transformers' text types N token ids, their position tables at least N long); batch and
optimizer are the oracle's -b and -O as before. The --draw file records the sizes and a later run
reads them back; names drawn at other sizes end in __iN / __tN, so one --cache never mixes two sizes.
--resize-from DRAW.json takes an earlier draw's models (its seed and records) at the new sizes:

    python devtools/torch_fresh_draw.py --resize-from d.json --image-size 224 --draw d224.json -b 2 -O sgd \
        --torch-only --cache measured224.json --exports exports224
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "devtools"))
sys.path.insert(0, ROOT)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402

import torch_family_zoo  # noqa: E402,F401 (registers its modules in the oracle's zoo)
import torch_holdout_zoo  # noqa: E402,F401
import torch_oracle as T  # noqa: E402

ZOO_FILES = ("torch_oracle.py", "torch_vision_zoo.py", "torch_zoo_seq.py", "torch_holdout_zoo.py",
             "torch_family_zoo.py", "torch_conv_sweep.py")
IMG = (3, 64, 64)
IDS = ("ids", 32, 1000)
SMALL = dict(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
             max_position_embeddings=128, num_key_value_heads=4, head_dim=16, use_cache=False, pad_token_id=0)


def used_names() -> tuple[set, set]:
    """Quoted names in the zoo files (timm model names) and the transformers Config classes they build
    (as model types, lower case without separators)."""
    text = ""
    for f in ZOO_FILES:
        p = os.path.join(ROOT, "devtools", f)
        if os.path.exists(p):
            text += open(p).read()
    quoted = set(re.findall(r"[\"']([A-Za-z0-9_.]+)[\"']", text))
    configs = {c[:-len("Config")].lower() for c in re.findall(r"\b([A-Z][A-Za-z0-9]+Config)\b", text)}
    return quoted, configs


def named_in_repo() -> list:
    """Earlier draws as the repository records them (--exclude-named): [(source, name, {})] for each
    draw-table row of docs/ and each timm model named in docs/, devtools/, tests/ or the README."""
    import timm

    text = ""
    for top in ("docs", "devtools", "tests", "README.md"):
        path = os.path.join(ROOT, top)
        files = [path] if os.path.isfile(path) else [os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs]
        for f in sorted(files):
            with open(f, "rb") as fh:
                data = fh.read()
            if b"\0" not in data[:8000]:  # text files only, as git grep -I reads them
                text += data.decode("utf-8", "replace") + "\n"
    out = []
    for lib, name in re.findall(r"^\| (timm|transformers|torchvision) ([A-Za-z0-9_.-]+)", text, re.M):
        head, _, t = name.partition("_")
        if lib == "transformers" and head in HF_TASKS and t:
            out.append(("hft", f"{head}:{t}", {}))
        else:
            out.append(({"timm": "timm", "torchvision": "tv"}.get(lib, "hf"), name, {}))
    # a task head's row written with a space (`| transformers mlm ultravbert |`, `| mlm eurobert |`, the
    # tables of the heads' scouting draws): that type under that head
    heads = "|".join(HF_TASKS)
    for head, t in re.findall(rf"^\| (?:transformers )?({heads}) ([A-Za-z0-9_.-]+)", text, re.M):
        out.append(("hft", f"{head}:{t}", {}))
    words = set(re.findall(r"[A-Za-z0-9_.-]+", text))
    out += [("timm", n, {}) for n in timm.list_models() if n in words]
    return out


def _norm(model_type: str) -> str:
    return model_type.replace("-", "").replace("_", "").lower()


def timm_candidates(rng, quoted):
    import timm

    names = sorted(n for n in timm.list_models() if n not in quoted)
    rng.shuffle(names)
    return names


def hf_candidates(rng, configs):
    from transformers.models.auto.modeling_auto import (MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
                                                        MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES)

    types = sorted(set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES) | set(MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES))
    types = [t for t in types if _norm(t) not in configs]
    rng.shuffle(types)
    return types


def _params_on_meta(build) -> int:
    with torch.device("meta"):
        m = build()
    return sum(p.numel() for p in m.parameters())


def timm_builder(name):
    def build(kw):
        import timm

        return timm.create_model(name, pretrained=False, num_classes=10, **kw)
    return build


def _lm_or_classifier(model_type: str, cfg):
    """The type's causal LM where transformers has one, else its sequence classifier (10 labels): its
    logits."""
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    auto = AutoModelForCausalLM if model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES else \
        AutoModelForSequenceClassification
    if auto is AutoModelForSequenceClassification:
        cfg.num_labels = 10
    return T._Logits(auto.from_config(cfg))


def _eager_attention(cfg) -> None:
    """Eager attention in the config and its sub-configs (a composite's text and vision parts): the
    attention docs/torchprof.md measures."""
    cfg._attn_implementation = "eager"
    for sub in vars(cfg).values():
        if hasattr(sub, "_attn_implementation") and hasattr(sub, "to_dict"):
            sub._attn_implementation = "eager"


def hf_builder(model_type):
    def build():
        from transformers import AutoConfig

        cfg = AutoConfig.for_model(model_type, **SMALL)
        cfg._attn_implementation = "eager"
        return _lm_or_classifier(model_type, cfg)
    return build


# ---- transformers' own image and audio classifiers (--hf-vision N, --hf-audio N) ------------------
# Each type's default config, shrunk the same way for every type: stages and layers cut to one or two,
# widths divided by 4, images 64 x 64, a short input of the type's own modality. Layer drop (a random
# layer skip per step) and SpecAugment's masks (drawn with numpy per step) are switched off: an export
# traces one draw of them while torch measures another. A type whose shrunk config does not build or
# run is tried with its widths kept, then with its sizes as they are, then skipped and said so.
HF_CLASS_SOURCES = {"hfv": "vision", "hfa": "audio"}
HF_CLASS_IMAGE = 64
HF_CLASS_WAVE = 4000  # samples: 0.25 s at 16 kHz
HF_CLASS_DEPTH_KEYS = ("depths", "num_block_repeats", "depth")
HF_CLASS_LAYER_KEYS = ("num_hidden_layers", "encoder_layers", "decoder_layers", "n_layer")
HF_CLASS_WIDTH_KEYS = ("hidden_size", "hidden_sizes", "intermediate_size", "d_model", "encoder_ffn_dim",
                       "decoder_ffn_dim", "embed_dim", "hidden_dim", "embedding_size", "conv_dim",
                       "output_hidden_size", "classifier_proj_size", "tdnn_dim", "num_filters", "n_embd")
HF_CLASS_OFF = {"layerdrop": 0.0, "encoder_layerdrop": 0.0, "decoder_layerdrop": 0.0, "mask_time_prob": 0.0,
                "mask_feature_prob": 0.0, "apply_spec_augment": False}


def hf_class_candidates(rng, kind, configs):
    from transformers.models.auto import modeling_auto as ma

    names = (ma.MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES if kind == "vision"
             else ma.MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES)
    types = [t for t in sorted(names) if _norm(t) not in configs]
    rng.shuffle(types)
    return types


def _hf_class_width(v):
    return max(8, (v // 4) // 8 * 8) if _is_int(v) and v >= 32 else v


def hf_class_overrides(cfg, level: int) -> dict:
    """The overrides of a type's default config: level 0 shrinks depths and widths, 1 depths only, 2 neither
    (the image size, the sequence bounds and the random structure are set at every level)."""
    d = cfg.to_dict() if not isinstance(cfg, dict) else cfg
    out = {k: v for k, v in HF_CLASS_OFF.items() if k in d}
    for k, sub in d.items():  # a composite config (CLIP, SigLIP): its towers shrunk alike
        if isinstance(sub, dict) and "model_type" in sub:
            out[k] = sub | hf_class_overrides(sub, level)
    if "image_size" in d:
        out["image_size"] = [HF_CLASS_IMAGE] * 2 if isinstance(d["image_size"], (list, tuple)) else HF_CLASS_IMAGE
    depths = next((d[k] for k in HF_CLASS_DEPTH_KEYS if isinstance(d.get(k), list)), None)
    if _is_int(d.get("window_size")) and _is_int(d.get("patch_size")) and depths:
        # a window no wider than the last stage's map (Donut's Swin sizes its position bias by the
        # configured window even where the map is smaller)
        fit = max(1, HF_CLASS_IMAGE // d["patch_size"] // 2 ** (len(depths) - 1))
        if d["window_size"] > fit:
            out["window_size"] = fit
    if "max_source_positions" in d:  # whisper: the encoder takes exactly 2 x this many frames
        out["max_source_positions"] = 32
    if "max_target_positions" in d:
        out["max_target_positions"] = 32
    if "max_length" in d and "num_mel_bins" in d:  # AST: frames of the spectrogram
        out["max_length"] = 64
    if level <= 1:
        for k in HF_CLASS_LAYER_KEYS:
            if isinstance(d.get(k), int) and d[k] > 2:
                out[k] = 2
        for k in HF_CLASS_DEPTH_KEYS:
            if isinstance(d.get(k), list) and d[k] and all(isinstance(x, int) for x in d[k]):
                out[k] = [min(x, 1) for x in d[k]]
        for k in ("width_coefficient", "depth_coefficient", "depth_multiplier"):
            if isinstance(d.get(k), float) and d[k] > 1.0:
                out[k] = 1.0
        # EfficientNet's top width is hidden_dim, its last conv's round_filters(1280): scaled alike
        if "width_coefficient" in out and _is_int(d.get("hidden_dim")):
            out["hidden_dim"] = int(d["hidden_dim"] / d["width_coefficient"])
    if level == 0:
        for k in HF_CLASS_WIDTH_KEYS:
            if k == "hidden_dim" and "width_coefficient" in d:
                continue  # the coefficient sizes it (above)
            v = d.get(k)
            w = [_hf_class_width(x) for x in v] if isinstance(v, list) else _hf_class_width(v)
            if w != v:
                out[k] = w
    return out


def _hf_class_config(model_type: str, overrides: dict):
    from transformers import AutoConfig

    cfg = AutoConfig.for_model(model_type, **overrides)
    cfg.num_labels = 10
    cfg._attn_implementation = "eager"
    return cfg


def hf_class_inputs(cfg, input_name: str) -> list:
    """Candidate input shapes (without the batch) for the model's main input."""
    if input_name == "pixel_values":
        return [(getattr(cfg, "num_channels", 3), HF_CLASS_IMAGE, HF_CLASS_IMAGE)]
    if input_name == "input_ids" and _is_int(getattr(cfg, "vocab_size", None)):  # ImageGPT: colour-cluster ids
        return [("ids", IDS[1], cfg.vocab_size)]
    out = [(HF_CLASS_WAVE,)] if input_name == "input_values" else []  # AST's input_values is a spectrogram
    if getattr(cfg, "max_source_positions", None) and getattr(cfg, "num_mel_bins", None):
        out.append((cfg.num_mel_bins, 2 * cfg.max_source_positions))
    if getattr(cfg, "max_length", None) and getattr(cfg, "num_mel_bins", None):
        out.append((cfg.max_length, cfg.num_mel_bins))
    if input_name == "input_values":
        return out
    for k in ("feature_size", "num_mel_bins", "input_feat_per_channel", "feature_projection_input_dim"):
        if isinstance(getattr(cfg, k, None), int):
            out.append((32, getattr(cfg, k)))
    return out


class _HFClassLogits(torch.nn.Module):
    def __init__(self, m, input_name):
        super().__init__()
        self.m = m
        self.input_name = input_name

    def forward(self, x):
        return self.m(**{self.input_name: x}).logits


def hf_class_builder(kind: str, model_type: str, overrides: dict):
    def build():
        from transformers import AutoModelForAudioClassification, AutoModelForImageClassification

        auto = AutoModelForImageClassification if kind == "vision" else AutoModelForAudioClassification
        m = auto.from_config(_hf_class_config(model_type, overrides))
        return _HFClassLogits(m, m.main_input_name)
    return build


def draw_hf_classes(seed: int, n: int, kind: str, max_params: float, log=print, exclude=()) -> dict:
    """{zoo name: entry} of n transformers image (kind "vision") or audio ("audio") classification types
    none of the zoo files nor `exclude` names, shuffled with its own stream of `seed`."""
    source = next(s for s, k in HF_CLASS_SOURCES.items() if k == kind)
    rng = random.Random(f"{seed}-{source}")
    _, configs = used_names()
    configs |= {_norm(name) for src, name, _ in exclude if src == "hf" or src in HF_CLASS_SOURCES}
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for t in hf_class_candidates(rng, kind, configs):
            if len(out) >= n:
                break
            whys = []
            for level in (0, 1, 2):
                if level:
                    whys.append(why)
                why = "no config"
                try:
                    overrides = hf_class_overrides(_hf_class_config(t, {}), level)
                    b = hf_class_builder(kind, t, overrides)
                    nparams = _params_on_meta(b)
                    if nparams > max_params:
                        why = f"{nparams / 1e6:.1f} M parameters"
                        continue
                    cfg = _hf_class_config(t, overrides)
                    name = b().input_name
                    why = f"no input shape for its main input {name!r}"
                    for shape in hf_class_inputs(cfg, name):
                        try:
                            if _runs(b, shape):
                                kw = {"config": overrides, "input": list(shape)}
                                out[f"fr_{source}_{t}"] = _entry(source, t, kw)
                                log(f"draw transformers {kind} {t} {kw} ({nparams / 1e6:.2f} M parameters)")
                                break
                            why = "output is not float logits"
                        except Exception as e:  # noqa: BLE001 (a type that does not run here is skipped)
                            why = f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:100]}"
                    if f"fr_{source}_{t}" in out:
                        break
                except Exception as e:  # noqa: BLE001
                    why = f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:100]}"
            else:
                whys.append(why)
                log(f"skip transformers {kind} {t}: does not build / run (shrunk: {whys[0]}; as it is: {whys[-1]})")
    return out


# ---- torchvision (--torchvision N) -------------------------------------------------------------
# Classification, segmentation, video and optical-flow builders of torchvision.models; detection is
# left out: its train-mode forward needs box targets and returns a dict of losses (no logits for the
# cross-entropy the oracle and `-l cce` train with), and its proposal sampling is data-dependent.
# Quantized builders are inference models. Inputs: the first shape a model builds and runs at.
TV_SHAPES = {"image": ((3, 64, 64), (3, 224, 224)), "segmentation": ((3, 64, 64),),
             "video": ((3, 8, 64, 64), (3, 16, 224, 224)), "flow": ((6, 64, 64), (6, 128, 128))}


class _PerPixel(torch.nn.Module):
    """A segmentation model's "out" (or a video / classification model's logits) with the classes
    last, as the loss reads them."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, x):
        out = self.m(x)
        if isinstance(out, dict):
            out = out["out"]
        return out.movedim(1, -1) if out.dim() > 2 else out


class _FlowPair(torch.nn.Module):
    """RAFT on the two images stacked on channels; every refinement's flow, per pixel, is what the loss
    reads, as RAFT's sequence loss reads them all (a cross entropy over the two channels stands in for
    the end-point error). Reading the last alone would leave eager computing the others' upsampling
    for nothing, which no export holds (the exporters drop what no output reads)."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, x):
        return torch.stack(self.m(x[:, :3], x[:, 3:]), 1).movedim(2, -1)


def tv_candidates(rng, quoted):
    import torchvision.models as M

    kinds = {}
    for mod, kind in ((M, "image"), (M.segmentation, "segmentation"), (M.video, "video"),
                      (M.optical_flow, "flow")):
        for n in M.list_models(module=mod):
            kinds[n] = kind
    names = sorted(n for n in kinds if n not in quoted)
    rng.shuffle(names)
    return [(n, kinds[n]) for n in names]


def tv_builder(name, kw):
    def build():
        import torchvision.models as M

        m = M.get_model(name, weights=None, **kw)
        return _FlowPair(m) if name.startswith("raft") else _PerPixel(m)
    return build


def _tv_params(name, kw, max_params) -> int:
    """Parameters of the built model: on the meta device, or (RegNet computes its widths with tensors,
    which meta cannot read back) on the CPU when torchvision's weights metadata does not already put
    it far over the limit."""
    import torchvision.models as M

    try:
        return _params_on_meta(tv_builder(name, kw))
    except NotImplementedError:
        listed = min(w.meta["num_params"] for w in M.get_model_weights(name))
        if listed > 2 * max_params:
            return listed
        return sum(p.numel() for p in tv_builder(name, kw)().parameters())


def draw_torchvision(seed: int, n: int, max_params: float, log=print, exclude=()) -> dict:
    """{zoo name: entry} of `n` torchvision models (random weights, 10 classes where the builder takes
    num_classes) that no zoo file and no earlier draw names, in the seed's order; its own generator, so
    that adding it leaves the timm / transformers draw of a seed unchanged."""
    rng = random.Random(seed)
    quoted, _ = used_names()
    quoted |= {name for source, name, _ in exclude if source == "tv"}
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, kind in tv_candidates(rng, quoted):
            if len(out) >= n:
                break
            # a segmentation builder's backbone weights default to ImageNet's (a download)
            kw = {} if kind == "flow" else {"num_classes": 10} if kind != "segmentation" else \
                {"num_classes": 10, "weights_backbone": None}
            try:
                k = _tv_params(name, kw, max_params)
            except Exception as e:  # noqa: BLE001
                log(f"skip torchvision {name}: does not build ({type(e).__name__})")
                continue
            if k > max_params:
                log(f"skip torchvision {name}: {k / 1e6:.1f} M parameters")
                continue
            for shape in TV_SHAPES[kind]:
                try:
                    if _runs(tv_builder(name, kw), shape):
                        out[f"fr_tv_{name}"] = _entry("tv", name, {"kw": kw, "input": list(shape)})
                        log(f"draw torchvision {name} {'x'.join(map(str, shape))} ({k / 1e6:.2f} M parameters)")
                        break
                except Exception as e:  # noqa: BLE001
                    why = (str(e).strip().splitlines() or [type(e).__name__])[0][:100]
                    log(f"skip torchvision {name} at {'x'.join(map(str, shape))} ({type(e).__name__}: {why})")
    return out


def _forward(build, shape):
    torch.manual_seed(0)
    m = build()
    m.train()
    return m(T.example_batch(shape, 2))


def _is_logits(out) -> bool:
    return torch.is_tensor(out) and out.dim() >= 2 and out.dtype == torch.float32


def _runs(build, shape) -> bool:
    return _is_logits(_forward(build, shape))


# --- the shrunk-defaults fallback (--hf-shrink): a transformers type SMALL cannot build ------------
# SMALL names one set of attributes; many types spell theirs differently (n_embd, d_model, MLA ranks,
# expert counts, per-layer lists), so SMALL leaves them at the type's full size or makes them
# inconsistent. The fallback starts from the type's own defaults and shrinks every size the same way
# (a hidden width of 64, 4 heads, head widths by the factor that makes the main one 16), keeps 2 layers
# that show each distinct per-layer kind, at most 4 experts (2 per token), a 1000-word vocabulary with
# special token ids above it moved into it, and experts run as transformers' batched_mm (its default,
# grouped_mm, is a custom op neither exporter writes). The overrides are recorded in the --draw file.
SHRINK_HIDDEN = ("hidden_size", "d_model", "n_embd", "n_embed", "dim")
SHRINK_HEADS = ("num_attention_heads", "n_head", "n_heads", "num_heads", "encoder_attention_heads",
                "decoder_attention_heads", "num_encoder_attention_heads", "num_decoder_attention_heads",
                "num_self_attention_heads", "num_cross_attention_heads", "swa_num_attention_heads",
                "index_n_heads", "n_mamba_heads", "linear_num_value_heads")
SHRINK_KV_HEADS = ("num_key_value_heads", "swa_num_key_value_heads", "n_kv_heads", "num_kv_heads",
                   "linear_num_key_heads", "num_query_groups")
SHRINK_LAYERS = ("num_hidden_layers", "num_layers", "n_layer", "n_layers", "num_decoder_layers",
                 "num_encoder_layers", "encoder_layers", "decoder_layers")
SHRINK_EXPERTS = ("num_experts", "n_routed_experts", "num_local_experts", "moe_num_experts", "n_experts")
SHRINK_TOP_K = ("num_experts_per_tok", "moe_k", "top_k", "num_experts_per_token", "moe_topk")
SHRINK_SHARED = ("n_shared_experts", "num_shared_experts", "moe_num_shared_experts")
SHRINK_VOCAB = 1000


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _step(v: float, step: int) -> int:
    return max(step, step * round(v / step))


def _cap(out: dict, d: dict, keys, limit: int) -> None:
    """Each integer attribute of `keys` in `d` above `limit` set to `limit` in the overrides `out`."""
    for k in keys:
        if _is_int(d.get(k)) and d[k] > limit:
            out[k] = limit


def _shrink_one(d: dict) -> dict:
    """Overrides for one config's attributes `d` (its to_dict(), sub-configs left out)."""
    out = {}
    hidden = next((d[k] for k in SHRINK_HIDDEN if _is_int(d.get(k)) and d[k] > 0), None)
    if hidden is None or hidden <= 64:
        f_hidden = 1.0
    else:
        f_hidden = hidden / 64
    heads = next((d[k] for k in SHRINK_HEADS if _is_int(d.get(k)) and d[k] > 0), None)
    head_dim = d.get("head_dim") if _is_int(d.get("head_dim")) and d["head_dim"] > 0 else \
        (hidden // heads if hidden and heads else None)
    f_head = head_dim / 16 if head_dim and head_dim > 16 else 1.0
    _cap(out, d, SHRINK_HIDDEN, 64)
    _cap(out, d, SHRINK_HEADS, 4)
    for k in SHRINK_KV_HEADS:
        if _is_int(d.get(k)) and d[k] > 1:
            out[k] = 4 if heads and d[k] >= heads else min(d[k], 2)
    for k, v in d.items():
        if k in out or not (_is_int(v) or (isinstance(v, list) and v and all(_is_int(x) for x in v))):
            continue
        if "token_id" in k or "token_index" in k or "vocab" in k:
            continue
        name = k.lower()
        scale = None
        if any(t in name for t in ("head_dim", "head_size", "d_head", "rotary_dim", "headdim")):
            scale = f_head
        elif (any(t in name for t in ("intermediate", "ffn", "n_inner", "d_ff", "_rank", "hidden_size",
                                      "embed_dim", "d_kv", "hidden_dim")) or name.endswith("_dim")) \
                and "layer" not in name and "conv" not in name:
            scale = f_hidden
        if scale and scale > 1:
            # widths by multiples of 8 where the default is one (grouped expert matmuls need 16-byte strides)
            step = 8 if scale is f_hidden else 2
            out[k] = [_step(x / scale, step) for x in v] if isinstance(v, list) else \
                _step(v / scale, step if v >= step else 1)
    _cap(out, d, SHRINK_EXPERTS, 4)
    _cap(out, d, SHRINK_TOP_K, 2)
    _cap(out, d, SHRINK_SHARED, 1)
    _cap(out, d, ("n_group", "topk_group"), 1)
    _cap(out, d, ("max_position_embeddings", "n_positions", "n_ctx", "max_target_positions"), positions_cap())
    if _is_int(d.get("vocab_size")) and d["vocab_size"] > SHRINK_VOCAB:
        out["vocab_size"] = SHRINK_VOCAB
        for k, v in d.items():
            if "vocab_size" in k and k != "vocab_size" and "type_vocab" not in k and _is_int(v) and v > SHRINK_VOCAB:
                out[k] = SHRINK_VOCAB
    ids = {}  # an id above the vocabulary -> one inside it, the same for every attribute that names it
    for k, v in sorted(d.items()):
        if not ("token_id" in k or "token_index" in k):
            continue
        vals = v if isinstance(v, list) else [v]
        if not all(_is_int(x) for x in vals) or all(x < SHRINK_VOCAB for x in vals):
            continue
        for x in vals:
            if x >= SHRINK_VOCAB and x not in ids:
                ids[x] = 0 if k == "pad_token_id" and 0 not in ids.values() else SHRINK_VOCAB - 1 - len(ids)
        out[k] = [ids.get(x, x) for x in vals] if isinstance(v, list) else ids[v]
    out.update(_shrink_layers(d))
    return out


def _shrink_layers(d: dict) -> dict:
    """2 layers (up to 4 where the type mixes more kinds): the first layer of each distinct kind the
    per-layer lists give; those lists cut to the chosen layers."""
    n = next((d[k] for k in SHRINK_LAYERS if _is_int(d.get(k)) and d[k] > 0), None)
    out = {}
    if n is None:
        return out
    per_layer = sorted(k for k, v in d.items() if isinstance(v, list) and len(v) == n and n > 2)
    keep, seen = [], set()
    for i in range(n):
        sig = tuple(str(d[k][i]) for k in per_layer)
        if sig not in seen:
            seen.add(sig)
            keep.append(i)
    keep = keep[:4]
    for i in range(n):
        if len(keep) >= 2:
            break
        if i not in keep:
            keep.append(i)
    keep.sort()
    for k in SHRINK_LAYERS:
        if _is_int(d.get(k)) and d[k] > len(keep):
            out[k] = len(keep)
    for k in per_layer:
        out[k] = [d[k][i] for i in keep]
    if _is_int(d.get("first_k_dense_replace")) and d["first_k_dense_replace"] > 1:
        out["first_k_dense_replace"] = 1
    return out


def hf_shrink_overrides(model_type: str) -> dict:
    """The overrides of the fallback for `model_type`: its own defaults' attributes shrunk, and each
    sub-config's (text_config, vision_config, ...) as a nested dict."""
    from transformers import AutoConfig, PretrainedConfig

    cfg = AutoConfig.for_model(model_type)
    experts = []

    def walk(c) -> dict:
        d = {k: v for k, v in c.to_dict().items() if not isinstance(getattr(c, k, None), PretrainedConfig)}
        experts.extend(k for k in SHRINK_EXPERTS if _is_int(d.get(k)) and d[k] > 1)
        out = _shrink_one(d)
        for k, v in vars(c).items():
            if isinstance(v, PretrainedConfig):
                sub = walk(v)
                if sub:
                    out[k] = sub
        return out
    out = walk(cfg)
    out["use_cache"] = False
    if experts:  # transformers' default (grouped_mm) is a custom op no exporter writes; batched_mm is aten
        out["experts_implementation"] = "batched_mm"
    if not isinstance(getattr(cfg, "pad_token_id", None), int) or cfg.pad_token_id >= SHRINK_VOCAB:
        out.setdefault("pad_token_id", 0)
    return out


def hf_shrunk_config(model_type: str, overrides: dict):
    """The type's config with `overrides` (hf_shrink_overrides' dict, or a --draw file's): a nested
    dict overrides that sub-config's own attributes."""
    from transformers import AutoConfig, PretrainedConfig

    base = AutoConfig.for_model(model_type)

    def merged(c, ov: dict) -> dict:
        kw = {}
        for k, v in ov.items():
            sub = getattr(c, k, None)
            if isinstance(v, dict) and isinstance(sub, PretrainedConfig):
                d = sub.to_dict()
                d.update(merged(sub, v))
                kw[k] = d
            else:
                kw[k] = v
        return kw
    return AutoConfig.for_model(model_type, **merged(base, overrides))


def hf_shrunk_builder(model_type: str, overrides: dict):
    def build():
        cfg = hf_shrunk_config(model_type, overrides)
        _eager_attention(cfg)
        return _lm_or_classifier(model_type, cfg)
    return build


def hf_shrink_try(model_type: str, max_params: float, log=print):
    """(overrides, parameters) when the fallback builds `model_type`, runs forward and stays under
    max_params; None (said in the log) when not."""
    try:
        ov = hf_shrink_overrides(model_type)
        b = hf_shrunk_builder(model_type, ov)
        n = _params_on_meta(b)
        if n > max_params:
            log(f"skip transformers {model_type} (shrunk defaults): {n / 1e6:.1f} M parameters")
            return None
        if _runs(b, IDS):
            return ov, n
        log(f"skip transformers {model_type} (shrunk defaults): the output is not float32 logits")
    except Exception as e:  # noqa: BLE001 (a model that does not build here is skipped)
        why = (str(e).strip().splitlines() or [type(e).__name__])[0][:100]
        log(f"skip transformers {model_type} (shrunk defaults): does not build / run ({type(e).__name__}: {why})")
    return None


# ---- transformers heads the other sources do not build (--hf-task N) -----------------------------
# N types per head, each head with its own stream of the seed, from that head's Auto mapping (types a
# zoo file names left out; a type drawn before under another head may come back under this one: the
# head is the new part). Each type is built as --hf builds it (SMALL, else --hf-shrink's shrunk
# defaults); the draw file records the head, the overrides and the input. What the loss reads:
# - mlm: AutoModelForMaskedLM's logits over the vocabulary at every position (the decoder's weight is
#   the input embedding's where the type ties them: one parameter read twice, its gradient summed);
# - tok: AutoModelForTokenClassification, 10 labels per token;
# - qa: AutoModelForQuestionAnswering's start and end logits, two outputs: the oracle's loss is the
#   sum of one cross-entropy per output over the 32 positions, as `-l cce` puts one loss on each
#   output and sums them (transformers' own loss halves that sum: a scalar, no memory);
# - mc: AutoModelForMultipleChoice on 2 choices of 32 tokens (the 64 ids of the input viewed as
#   (batch, 2, 32)), one logit per choice;
# - s2s: AutoModelForSeq2SeqLM's logits over the vocabulary, the decoder reading the input ids shifted
#   right behind the decoder's start token (what transformers builds from the labels), encoder-decoder
#   types only.
HF_TASKS = {"mlm": "MODEL_FOR_MASKED_LM_MAPPING_NAMES", "tok": "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES",
            "qa": "MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES", "mc": "MODEL_FOR_MULTIPLE_CHOICE_MAPPING_NAMES",
            "s2s": "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES"}
HF_TASK_AUTO = {"mlm": "AutoModelForMaskedLM", "tok": "AutoModelForTokenClassification",
                "qa": "AutoModelForQuestionAnswering", "mc": "AutoModelForMultipleChoice",
                "s2s": "AutoModelForSeq2SeqLM"}
HF_TASK_CHOICES = 2


class _HeadOutputs(torch.nn.Module):
    """A head's outputs as the loss reads them (the table above), from one tensor of token ids."""

    def __init__(self, m, head: str, start: int):
        super().__init__()
        self.m, self.head, self.start = m, head, start

    def forward(self, ids):
        if self.head == "mc":
            return self.m(input_ids=ids.view(ids.shape[0], HF_TASK_CHOICES, -1)).logits
        if self.head == "s2s":
            dec = torch.cat([torch.full_like(ids[:, :1], self.start), ids[:, :-1]], 1)
            return self.m(input_ids=ids, decoder_input_ids=dec).logits
        out = self.m(input_ids=ids)
        return (out.start_logits, out.end_logits) if self.head == "qa" else out.logits


def hf_task_input(head: str) -> tuple:
    return ("ids", IDS[1] * HF_TASK_CHOICES, IDS[2]) if head == "mc" else IDS


def hf_task_builder(head: str, model_type: str, overrides: dict):
    def build():
        import transformers

        cfg = hf_shrunk_config(model_type, overrides)
        _eager_attention(cfg)
        if head == "tok":
            cfg.num_labels = 10
        if head == "s2s" and not getattr(cfg, "is_encoder_decoder", False):
            raise ValueError("not an encoder-decoder")
        start = getattr(cfg, "decoder_start_token_id", None)
        vocab = getattr(cfg, "vocab_size", None)
        start = start if _is_int(start) and _is_int(vocab) and 0 <= start < vocab else 0
        return _HeadOutputs(getattr(transformers, HF_TASK_AUTO[head]).from_config(cfg), head, start)
    return build


def _runs_heads(build, shape) -> bool:
    """As _runs, for a head that may return several float outputs."""
    out = _forward(build, shape)
    return all(_is_logits(o) for o in (out if isinstance(out, tuple) else (out,)))


def draw_hf_tasks(seed: int, n: int, max_params: float, log=print, exclude=()) -> dict:
    """{zoo name: entry} of n types per head of HF_TASKS (fr_hft_<head>_<type>) that no zoo file names
    and no earlier draw took under the same head, each head shuffled with its own stream of `seed`."""
    from transformers.models.auto import modeling_auto as ma

    _, configs = used_names()
    taken = {tuple(name.split(":", 1)) for source, name, _ in exclude if source == "hft"}
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for head, mapping in HF_TASKS.items():
            rng = random.Random(f"{seed}-hft-{head}")
            types = [t for t in sorted(getattr(ma, mapping)) if _norm(t) not in configs and (head, t) not in taken]
            rng.shuffle(types)
            got = 0
            for t in types:
                if got >= n:
                    break
                got += _add_hf_task(out, head, t, max_params, log)
    return out


def _add_hf_task(out: dict, head: str, t: str, max_params: float, log=print) -> bool:
    """Put type t under head into out (fr_hft_<head>_<t>) from the SMALL config or, when that does not
    build or run, the shrunk defaults; False (and the reasons logged) when neither does."""
    whys = []
    for how in ("small", "shrunk"):
        try:
            ov = dict(SMALL) if how == "small" else hf_shrink_overrides(t)
            b = hf_task_builder(head, t, ov)
            k = _params_on_meta(b)
            if k > max_params:
                whys.append(f"{how}: {k / 1e6:.1f} M parameters")
                continue
            if _runs_heads(b, hf_task_input(head)):
                out[f"fr_hft_{head}_{t}"] = _entry("hft", f"{head}:{t}", {"config": ov})
                log(f"draw transformers {head} {t} ({how} config, {k / 1e6:.2f} M parameters)")
                return True
            whys.append(f"{how}: the outputs are not float32 logits")
        except Exception as e:  # noqa: BLE001 (a type that does not build here is skipped)
            why = (str(e).strip().splitlines() or [type(e).__name__])[0][:100]
            whys.append(f"{how}: {type(e).__name__}: {why}")
    log(f"skip transformers {head} {t}: " + "; ".join(whys))
    return False


def named_hf_tasks(specs: list, max_params: float, log=print) -> dict:
    """--hf-type: each HEAD:TYPE of specs built as a draw would build it (HEAD 'all': under every head of
    HF_TASKS), whether or not a zoo or an earlier draw names it; for tracing a type, not a held-out set."""
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for spec in specs:
            head, _, t = spec.partition(":")
            for h in (HF_TASKS if head == "all" else (head,)):
                if h not in HF_TASKS or not t:
                    raise SystemExit(f"--hf-type {spec}: HEAD:TYPE with HEAD one of {', '.join(HF_TASKS)} or all")
                _add_hf_task(out, h, t, max_params, log)
    return out


def _entry(source: str, name: str, kw: dict) -> tuple:
    """The oracle's zoo entry of a drawn model; `drawn` keeps what the --draw file records."""
    if source == "timm":
        b = timm_builder(name)
        return ("fresh-timm", (lambda: b(kw)), IMG, (source, name, kw))
    if source in HF_CLASS_SOURCES:
        return (f"fresh-{source}", hf_class_builder(HF_CLASS_SOURCES[source], name, kw["config"]),
                tuple(kw["input"]), (source, name, kw))
    if source == "hf" and kw.get("config"):  # drawn by the shrunk-defaults fallback: its overrides rebuild it
        return ("fresh-hf", hf_shrunk_builder(name, kw["config"]), IDS, (source, name, kw))
    if source == "tv":
        return ("fresh-torchvision", tv_builder(name, kw["kw"]), tuple(kw["input"]), (source, name, kw))
    if source == "hft":
        head, t = name.split(":", 1)
        return ("fresh-hft", hf_task_builder(head, t, kw["config"]), hf_task_input(head), (source, name, kw))
    return ("fresh-hf", hf_builder(name), IDS, (source, name, kw))


def draw(seed: int, n_timm: int, n_hf: int, max_params: float, log=print, exclude=(), hf_shrink=False) -> dict:
    """{zoo name: (family, builder, input shape)} of the draw, in draw order. `exclude`: earlier draws
    (their --draw files' records): a new draw takes none of their models. `hf_shrink`: a transformers
    type SMALL cannot build (or builds over max_params) is tried with its own defaults shrunk."""
    rng = random.Random(seed)
    quoted, configs = used_names()
    quoted |= {name for source, name, _ in exclude if source == "timm"}
    configs |= {_norm(name) for source, name, _ in exclude if source == "hf"}
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in timm_candidates(rng, quoted):
            if sum(1 for k in out if k.startswith("fr_timm_")) >= n_timm:
                break
            b = timm_builder(name)
            for kw in ({}, {"img_size": IMG[1]}):
                try:
                    n = _params_on_meta(lambda: b(kw))
                    if n > max_params:
                        log(f"skip timm {name}: {n / 1e6:.1f} M parameters")
                        break
                    if _runs(lambda: b(kw), IMG):
                        out[f"fr_timm_{name}"] = _entry("timm", name, kw)
                        log(f"draw timm {name} {kw or ''} ({n / 1e6:.2f} M parameters)")
                        break
                except Exception as e:  # noqa: BLE001 (a model that does not build here is skipped)
                    why = (str(e).strip().splitlines() or [type(e).__name__])[0][:100]
                    if kw:
                        log(f"skip timm {name}: does not run at {IMG[1]} x {IMG[2]} ({type(e).__name__}: {why})")
        for t in hf_candidates(rng, configs):
            if sum(1 for k in out if k.startswith("fr_hf_")) >= n_hf:
                break
            b = hf_builder(t)
            try:
                n = _params_on_meta(b)
                if n > max_params:
                    log(f"skip transformers {t}: {n / 1e6:.1f} M parameters")
                elif _runs(b, IDS):
                    out[f"fr_hf_{t}"] = _entry("hf", t, {})
                    log(f"draw transformers {t} ({n / 1e6:.2f} M parameters)")
                    continue
            except Exception as e:  # noqa: BLE001
                why = (str(e).strip().splitlines() or [type(e).__name__])[0][:100]
                log(f"skip transformers {t}: does not build / run ({type(e).__name__}: {why})")
            shrunk = hf_shrink_try(t, max_params, log) if hf_shrink else None
            if shrunk:
                out[f"fr_hf_{t}"] = _entry("hf", t, {"config": shrunk[0]})
                log(f"draw transformers {t} with its defaults shrunk ({shrunk[1] / 1e6:.2f} M parameters)")
    return out


# ---- input sizes (--image-size, --seq-len) --------------------------------------------------------
# Every draw before these options measured 3 x 64 x 64 images and 32 tokens. ATen's and oneDNN's kernel
# choices depend on sizes (gemm or direct convolution, blocked layouts, attention paths for longer
# sequences), so a draw can be measured at a user's sizes instead. The sizes go into the --draw file
# (read back from it), and a name drawn at sizes other than the defaults carries them (`__i224`,
# `__t256`): torch's --cache keys and the --exports files of two sizes never meet.
DEFAULT_IMAGE = 64
DEFAULT_TOKENS = 32
SIZED_SOURCES = {"timm": "image", "hfv": "image", "tv": "image", "hf": "tokens", "hft": "tokens"}


def set_sizes(image: int | None = None, tokens: int | None = None) -> None:
    """The image side (timm, transformers' image classifiers, torchvision's image and segmentation
    models) and the token count (transformers' text types) every later build and draw uses; a small
    config's position table grows to the token count where that is over 128."""
    global IMG, IDS, HF_CLASS_IMAGE
    image = image or DEFAULT_IMAGE
    tokens = tokens or DEFAULT_TOKENS
    IMG = (3, image, image)
    HF_CLASS_IMAGE = image
    IDS = ("ids", tokens, IDS[2])
    SMALL["max_position_embeddings"] = positions_cap()
    TV_SHAPES["image"] = ((3, image, image),) + (((3, 224, 224),) if image != 224 else ())
    TV_SHAPES["segmentation"] = ((3, image, image),)


def positions_cap() -> int:
    """The most positions a small or shrunk transformers config keeps: 128, or the token count."""
    return max(128, IDS[1])


def sizes() -> dict:
    """The sizes in force, as the --draw file records them."""
    return {"image_size": IMG[1], "seq_len": IDS[1]}


def size_suffix(source: str) -> str:
    """What a drawn name carries at sizes other than the defaults."""
    kind = SIZED_SOURCES.get(source)
    if kind == "image" and IMG[1] != DEFAULT_IMAGE:
        return f"__i{IMG[1]}"
    if kind == "tokens" and IDS[1] != DEFAULT_TOKENS:
        return f"__t{IDS[1]}"
    return ""


def resized(record: list) -> list:
    """An earlier draw's record (source, name, kw) rebuilt at the sizes in force: timm's img_size, an image
    classifier's image_size and input, a torchvision image's input, a shrunk config's position tables
    (each to at least the token count). Audio, video and optical flow keep their inputs."""
    source, name, kw = record
    kw = json.loads(json.dumps(kw))
    if source == "timm" and "img_size" in kw:
        kw["img_size"] = IMG[1]
    elif source == "hfv":
        kw["config"] = _resized_config(kw["config"], "image_size", IMG[1], grow_only=False)
        kw["input"] = kw["input"][:-2] + [IMG[1], IMG[2]]
    elif source == "tv" and len(kw["input"]) == 3 and kw["input"][0] == 3:
        kw["input"] = [3, IMG[1], IMG[2]]
    elif source in ("hf", "hft") and kw.get("config"):
        for key in ("max_position_embeddings", "n_positions", "n_ctx", "max_target_positions"):
            kw["config"] = _resized_config(kw["config"], key, IDS[1], grow_only=True)
    return [source, name, kw]


def _resized_config(ov: dict, key: str, value: int, grow_only: bool) -> dict:
    out = {}
    for k, v in ov.items():
        if isinstance(v, dict):
            out[k] = _resized_config(v, key, value, grow_only)
        elif k == key and _is_int(v) and not (grow_only and v >= value):
            out[k] = value
        elif k == key and isinstance(v, list) and len(v) == 2 and not grow_only:
            out[k] = [value, value]
        else:
            out[k] = v
    return out


def resize_draw(kept: dict) -> dict:
    """An earlier --draw file's draw at the sizes in force (its seed and models; the names carry the sizes)."""
    drawn = {}
    for k, rec in kept["drawn"].items():
        base = re.sub(r"__[it]\d+$", "", k)
        drawn[base + size_suffix(rec[0])] = resized(rec)
    return {"seed": kept["seed"], "drawn": drawn, **sizes(), "resized_from": kept.get("resized_from", kept["seed"])}


def add_size_args(ap) -> None:
    ap.add_argument("--image-size", type=int, metavar="N",
                    help=f"images N x N (default {DEFAULT_IMAGE}); recorded in --draw, names end __iN")
    ap.add_argument("--seq-len", type=int, metavar="N",
                    help=f"N token ids (default {DEFAULT_TOKENS}); recorded in --draw, names end __tN")
    ap.add_argument("--resize-from", metavar="DRAW.json",
                    help="measure an earlier draw's models (its seed, its records) at --image-size / --seq-len; "
                         "with --draw, the resized draw is written there")


def sized_draw(args) -> dict | None:
    """The sizes in force for this run, set: a --draw file's own (the command line may not differ), else the
    options'. With --resize-from (and no --draw file yet), that earlier draw at those sizes."""
    if args.draw and os.path.exists(args.draw):
        with open(args.draw) as f:
            kept = json.load(f)
        image, tokens = kept.get("image_size", DEFAULT_IMAGE), kept.get("seq_len", DEFAULT_TOKENS)
        for opt, given, recorded in (("--image-size", args.image_size, image), ("--seq-len", args.seq_len, tokens)):
            if given is not None and given != recorded:
                sys.exit(f"{args.draw}: drawn at {opt} {recorded}, not {given}")
        set_sizes(image, tokens)
        return None
    set_sizes(args.image_size, args.seq_len)
    if not args.resize_from:
        return None
    with open(args.resize_from) as f:
        return resize_draw(json.load(f))


EXPORTERS = {"ts": "TorchScript", "dyn": "dynamo"}


def _network(module: str) -> str:
    m = re.match(r"(.*)__([it])(\d+)$", module)
    if m:
        at = f"{m.group(3)} x {m.group(3)}" if m.group(2) == "i" else f"{m.group(3)} tokens"
        return f"{_network(m.group(1))} at {at}"
    for prefix, lib in (("fr_timm_", "timm"), ("fr_hf_", "transformers"), ("fr_hfv_", "transformers"),
                        ("fr_hfa_", "transformers"), ("fr_hft_", "transformers"), ("fr_tv_", "torchvision")):
        if module.startswith(prefix):
            return f"{lib} {module[len(prefix):]}"
    return module


def _why(msg: str) -> str:
    """A refusal in a few words: the profile's reason after the op's label, or memplan's after the file."""
    msg = msg.split("torch profile: ")[-1].split(".onnx: ")[-1]
    msg = msg.removeprefix("invalid onnx file: ")  # the loader's reason rather than its label
    m = re.match(r"op #\d+ \S+ \([^)]*\)(?: \([^)]*\))?:? ?(.*)", msg)
    why = re.split(r"[:;]", m.group(1) if m else msg)[0].strip()
    return why if len(why) <= 100 else why[:why.rfind(" ", 0, 100)] + " ..."


def _outermost(cov: dict) -> str:
    """The outermost modules of a row's unread parameters (`figures.torch.coverage.unread_modules`, since
    the report names them), two at most; "" for rows measured before."""
    mods = cov.get("unread_modules") or []
    return f" ({', '.join(mods[:2])}{' and more' if len(mods) > 2 else ''})" if mods else ""


def table(rows: list[dict]) -> str:
    """The draw's table, misses included: each refusal's reason, each estimated op's bytes at the peak
    where the profile estimated any; then the counts the issue judges by."""
    out = ["| network | exporter | torch allocator peak | `--profile torch` | error | note |",
           "|---|---|---:|---:|---:|---|"]
    n = within = refused = far = far_named = 0
    unexported = []
    for r in rows:
        net, exp = _network(r["module"]), EXPORTERS.get(r.get("export", ""), r.get("export", "?"))
        if "export_error" in r:
            unexported.append(f"{net} ({exp})")
            out.append(f"| {net} | {exp} | | not exported | | {r['export_error'].split(': ', 1)[-1]} |")
            continue
        n += 1
        p = r["profile"]
        if "peak" not in p:
            refused += 1
            out.append(f"| {net} | {exp} | {r['peak']:,d} | refused | | {_why(p.get('error', '?'))} |")
            continue
        err = r["error"]
        cov = p.get("coverage") or {}
        est = cov.get("estimated") or []
        kinds = {}
        for e in est:
            kinds[e["type"]] = kinds.get(e["type"], 0) + 1
        named = (", ".join(f"{t} x {k}" for t, k in kinds.items())
                 + f" ({sum(e['bytes_at_peak'] for e in est):,d} B at the peak)") if est else ""
        unread = cov.get("unread_parameters") or []
        folded = (cov.get("not_counted") or {}).get("ops") or []  # eager ops on constants folded at load
        made = (cov.get("constant_layers") or {}).get("constants") or []  # layers reading a batch-shaped constant
        composite = (cov.get("composite") or {}).get("language_part")  # the file is a composite's language part
        folded_params = cov.get("estimated_parameters") or []  # parameters folded to the part read
        tied = cov.get("tied_parameters") or {}  # unread ones that may be a tied parameter read under another name
        # figures beside the peak the header names: a TorchScript file's folded causal tables, the copies
        # a `.contiguous()` it does not record would have made (of transposed tensors; of other views),
        # and the position tables read at fixed rows, frozen
        beside = [f"{key.replace('_', ' ')} named ({part['peak']:,d} B)"
                  for key in ("causal_tables", "contiguous", "copied_views", "fixed_tables")
                  if (part := cov.get(key) or {}).get("says_so")]
        within += abs(err) <= 0.03
        if abs(err) > 0.10:
            far += 1
            far_named += bool(named or unread or folded or made or composite or folded_params or beside)
        note = "; ".join(([f"estimated: {named}"] if named else [])
                         + ([f"not counted: {len(unread)} parameters no op reads" + _outermost(cov)] if unread else [])
                         + ([f"not counted: {len(folded)} ops on constants folded at load "
                             f"({sum(c['bytes'] for c in folded):,d} B)"] if folded else [])
                         + ([f"not counted: {len(made)} layers read a batch-shaped constant "
                             f"({sum(c['bytes'] for c in made):,d} B)"] if made else [])
                         + ([f"estimated: {len(folded_params)} parameters folded to the part read"]
                            if folded_params else [])
                         + ([f"not counted: the composite's parts beside {composite}"] if composite else [])
                         + ([f"maybe tied: {', '.join(sorted(tied))}"] if tied else [])
                         + beside)
        out.append(f"| {net} | {exp} | {r['peak']:,d} | {p['peak']:,d} | {100 * err:+.2f} % | {note} |")
    out.append("")
    out.append(f"{within} of {n} configurations within 3 %, {refused} refused, {far} more than 10 % off "
               f"({far_named} of them with estimated ops or uncounted parameters named)"
               + (f"; not exported: {', '.join(unexported)}" if unexported else ""))
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, help="the draw's seed (default: a random one, printed)")
    ap.add_argument("--timm", type=int, default=20)
    ap.add_argument("--hf", type=int, default=6)
    ap.add_argument("--hf-vision", type=int, default=0, help="transformers image-classification types")
    ap.add_argument("--hf-audio", type=int, default=0, help="transformers audio-classification types")
    ap.add_argument("--hf-task", type=int, default=0, metavar="N",
                    help="N transformers types per head: masked LM, token classification, question answering "
                         "(two outputs), multiple choice, encoder-decoder seq2seq LM (fr_hft_<head>_<type>)")
    ap.add_argument("--hf-type", action="append", default=[], metavar="HEAD:TYPE",
                    help="build the transformers TYPE under HEAD (mlm, tok, qa, mc, s2s, or all for each) as "
                         "--hf-task would, named rather than drawn (repeatable; excluded or not)")
    ap.add_argument("--torchvision", type=int, default=0, metavar="N",
                    help="also draw N torchvision models (classification, segmentation, video, optical flow)")
    ap.add_argument("--max-params", type=float, default=12e6)
    ap.add_argument("--list", action="store_true", help="print the draw and stop")
    ap.add_argument("--hf-shrink", action="store_true",
                    help="a transformers type the small config cannot build is tried with its own defaults "
                         "shrunk (hidden 64, 4 heads, 2 layers, <= 4 experts, batched_mm experts); the "
                         "overrides go into --draw")
    ap.add_argument("--draw", metavar="DRAW.json",
                    help="write the draw here, or read it back when the file exists (for this seed): a later "
                         "run measures the same models even if a zoo file has named one of them since")
    ap.add_argument("--exclude", metavar="DRAW.json", action="append", default=[],
                    help="an earlier draw's --draw file: draw none of its models (repeatable)")
    ap.add_argument("--exclude-named", action="store_true",
                    help="also draw none of the models the repository's docs, devtools and tests name (see above)")
    ap.add_argument("--only", metavar="PREFIX", help="measure only the drawn names that start with PREFIX "
                                                     "(fr_timm_, fr_hf_, fr_hfv_, fr_hfa_, fr_hft_, fr_tv_): the draw itself "
                                                     "is unchanged")
    ap.add_argument("--torch-only", action="store_true",
                    help="export and measure torch's side only (into --cache and --exports); memplan is not run")
    ap.add_argument("--table", nargs="+", metavar="ROWS.json",
                    help="print the table of earlier --json runs (one per exporter) and stop")
    add_size_args(ap)
    args, rest = ap.parse_known_args(argv)
    if args.table:
        rows = []
        for f in args.table:
            with open(f) as fh:
                rows += json.load(fh)
        print(table(rows))
        return
    if args.torch_only and (any(a.startswith("--json") for a in rest)
                            or not any(a.startswith("--cache") for a in rest)):
        sys.exit("--torch-only keeps torch's side in --cache and writes no --json rows (they would have no profile)")
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(10 ** 6)
    resized_draw = sized_draw(args)
    if resized_draw and args.seed is None:
        seed = resized_draw["seed"]
    print(f"seed {seed}", flush=True)
    torch.set_num_threads(1)
    if args.draw and os.path.exists(args.draw):
        with open(args.draw) as f:
            kept = json.load(f)
        if kept["seed"] != seed:
            sys.exit(f"{args.draw}: a draw of seed {kept['seed']}, not {seed}")
        drawn = {k: _entry(*v) for k, v in kept["drawn"].items()}
    elif resized_draw:
        if resized_draw["seed"] != seed:
            sys.exit(f"{args.resize_from}: a draw of seed {resized_draw['seed']}, not {seed}")
        drawn = {k: _entry(*v) for k, v in resized_draw["drawn"].items()}
        if args.draw:
            with open(args.draw, "w") as f:
                json.dump(resized_draw, f, indent=1)
    else:
        earlier = []
        for f in args.exclude:
            with open(f) as fh:
                earlier += json.load(fh)["drawn"].values()
        if args.exclude_named:
            earlier += named_in_repo()
        drawn = draw(seed, args.timm, args.hf, args.max_params, log=lambda s: print(s, flush=True), exclude=earlier,
                     hf_shrink=args.hf_shrink)
        for kind, n in (("vision", args.hf_vision), ("audio", args.hf_audio)):
            if n:
                drawn.update(draw_hf_classes(seed, n, kind, args.max_params, log=lambda s: print(s, flush=True),
                                             exclude=earlier))
        if args.hf_task:
            drawn.update(draw_hf_tasks(seed, args.hf_task, args.max_params, log=lambda s: print(s, flush=True),
                                       exclude=earlier))
        if args.hf_type:
            drawn.update(named_hf_tasks(args.hf_type, args.max_params, log=lambda s: print(s, flush=True)))
        if args.torchvision:
            drawn.update(draw_torchvision(seed, args.torchvision, args.max_params,
                                          log=lambda s: print(s, flush=True), exclude=earlier))
        drawn = {k + size_suffix(v[3][0]): v for k, v in drawn.items()}
        if args.draw:
            with open(args.draw, "w") as f:
                json.dump({"seed": seed, "drawn": {k: v[3] for k, v in drawn.items()}, **sizes()}, f, indent=1)
    print("draw: " + " ".join(drawn), flush=True)
    if args.list:
        return
    T.ZOO.update({k: v[:3] for k, v in drawn.items()})
    if args.torch_only:  # the oracle's rows then say "not analysed" where the profile's figure would be
        T.predict = lambda *a, **k: {"error": "not analysed (--torch-only)"}
    T.main([n for n in drawn if n.startswith(args.only or "")] + rest)
    if args.torch_only:
        print("--torch-only: memplan was not run; the count above is of nothing analysed")


if __name__ == "__main__":
    main()
