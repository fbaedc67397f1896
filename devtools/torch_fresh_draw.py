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


def hf_builder(model_type):
    def build():
        from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSequenceClassification
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

        cfg = AutoConfig.for_model(model_type, **SMALL)
        cfg._attn_implementation = "eager"
        auto = AutoModelForCausalLM if model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES else \
            AutoModelForSequenceClassification
        if auto is AutoModelForSequenceClassification:
            cfg.num_labels = 10
        return T._Logits(auto.from_config(cfg))
    return build


def _runs(build, shape) -> bool:
    torch.manual_seed(0)
    m = build()
    m.train()
    out = m(T.example_batch(shape, 2))
    return torch.is_tensor(out) and out.dim() >= 2 and out.dtype == torch.float32


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
    for k in SHRINK_HIDDEN:
        if _is_int(d.get(k)) and d[k] > 64:
            out[k] = 64
    for k in SHRINK_HEADS:
        if _is_int(d.get(k)) and d[k] > 4:
            out[k] = 4
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
    for k in SHRINK_EXPERTS:
        if _is_int(d.get(k)) and d[k] > 4:
            out[k] = 4
    for k in SHRINK_TOP_K:
        if _is_int(d.get(k)) and d[k] > 2:
            out[k] = 2
    for k in SHRINK_SHARED:
        if _is_int(d.get(k)) and d[k] > 1:
            out[k] = 1
    for k in ("n_group", "topk_group"):
        if _is_int(d.get(k)) and d[k] > 1:
            out[k] = 1
    for k in ("max_position_embeddings", "n_positions", "n_ctx", "max_target_positions"):
        if _is_int(d.get(k)) and d[k] > 128:
            out[k] = 128
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
        from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

        cfg = hf_shrunk_config(model_type, overrides)
        cfg._attn_implementation = "eager"
        for sub in vars(cfg).values():
            if hasattr(sub, "_attn_implementation") and hasattr(sub, "to_dict"):
                sub._attn_implementation = "eager"
        auto = AutoModelForCausalLM if model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES else \
            AutoModelForSequenceClassification
        if auto is AutoModelForSequenceClassification:
            cfg.num_labels = 10
        return T._Logits(auto.from_config(cfg))
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


def _entry(source: str, name: str, kw: dict) -> tuple:
    """The oracle's zoo entry of a drawn model; `drawn` keeps what the --draw file records."""
    if source == "timm":
        b = timm_builder(name)
        return ("fresh-timm", (lambda: b(kw)), IMG, (source, name, kw))
    if kw.get("config"):  # drawn by the shrunk-defaults fallback: its overrides rebuild it
        return ("fresh-hf", hf_shrunk_builder(name, kw["config"]), IDS, (source, name, kw))
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
            for kw in ({}, {"img_size": 64}):
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
                        log(f"skip timm {name}: does not run at 64 x 64 ({type(e).__name__}: {why})")
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


EXPORTERS = {"ts": "TorchScript", "dyn": "dynamo"}


def _network(module: str) -> str:
    for prefix, lib in (("fr_timm_", "timm"), ("fr_hf_", "transformers")):
        if module.startswith(prefix):
            return f"{lib} {module[len(prefix):]}"
    return module


def _why(msg: str) -> str:
    """A refusal in a few words: the profile's reason after the op's label, or memplan's after the file."""
    msg = msg.split("torch profile: ")[-1].split(".onnx: ")[-1]
    m = re.match(r"op #\d+ \S+ \([^)]*\)(?: \([^)]*\))?:? ?(.*)", msg)
    why = re.split(r"[:;]", m.group(1) if m else msg)[0].strip()
    return why if len(why) <= 100 else why[:why.rfind(" ", 0, 100)] + " ..."


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
        within += abs(err) <= 0.03
        if abs(err) > 0.10:
            far += 1
            far_named += bool(named or unread or folded or made)
        note = "; ".join(([f"estimated: {named}"] if named else [])
                         + ([f"not counted: {len(unread)} parameters no op reads"] if unread else [])
                         + ([f"not counted: {len(folded)} ops on constants folded at load "
                             f"({sum(c['bytes'] for c in folded):,d} B)"] if folded else [])
                         + ([f"not counted: {len(made)} layers read a batch-shaped constant "
                             f"({sum(c['bytes'] for c in made):,d} B)"] if made else []))
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
    ap.add_argument("--only", metavar="PREFIX", help="measure only the drawn names that start with PREFIX "
                                                     "(fr_timm_, fr_hf_): the draw itself is unchanged")
    ap.add_argument("--torch-only", action="store_true",
                    help="export and measure torch's side only (into --cache and --exports); memplan is not run")
    ap.add_argument("--table", nargs="+", metavar="ROWS.json",
                    help="print the table of earlier --json runs (one per exporter) and stop")
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
    print(f"seed {seed}", flush=True)
    torch.set_num_threads(1)
    if args.draw and os.path.exists(args.draw):
        with open(args.draw) as f:
            kept = json.load(f)
        if kept["seed"] != seed:
            sys.exit(f"{args.draw}: a draw of seed {kept['seed']}, not {seed}")
        drawn = {k: _entry(*v) for k, v in kept["drawn"].items()}
    else:
        earlier = []
        for f in args.exclude:
            with open(f) as fh:
                earlier += json.load(fh)["drawn"].values()
        drawn = draw(seed, args.timm, args.hf, args.max_params, log=lambda s: print(s, flush=True), exclude=earlier,
                     hf_shrink=args.hf_shrink)
        if args.draw:
            with open(args.draw, "w") as f:
                json.dump({"seed": seed, "drawn": {k: v[3] for k, v in drawn.items()}}, f, indent=1)
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
