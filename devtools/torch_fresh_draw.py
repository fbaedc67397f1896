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

--torchvision N adds N torchvision models (its own generator: the timm / transformers draw of a seed
is unchanged) from the classification, segmentation, video and optical-flow builders, random weights,
10 classes; each at the first input it runs at (images 3 x 64 x 64, else 224 x 224; clips 3 x 8 x 64
x 64, else 16 x 224 x 224; RAFT's two images 64 x 64, else 128 x 128). Segmentation models train on
their per-pixel "out", RAFT on its last flow; detection builders are left out (see TV_SHAPES).

    python devtools/torch_fresh_draw.py --timm 0 --hf 0 --torchvision 200 --draw tv.json --list
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
    """RAFT on the two images stacked on channels; the last refinement's flow, per pixel, is what the
    loss reads (a cross entropy over its two channels stands in for the end-point error)."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, x):
        return self.m(x[:, :3], x[:, 3:])[-1].movedim(1, -1)


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


def _runs(build, shape) -> bool:
    torch.manual_seed(0)
    m = build()
    m.train()
    out = m(T.example_batch(shape, 2))
    return torch.is_tensor(out) and out.dim() >= 2 and out.dtype == torch.float32


def _entry(source: str, name: str, kw: dict) -> tuple:
    """The oracle's zoo entry of a drawn model; `drawn` keeps what the --draw file records."""
    if source == "timm":
        b = timm_builder(name)
        return ("fresh-timm", (lambda: b(kw)), IMG, (source, name, kw))
    if source == "tv":
        return ("fresh-torchvision", tv_builder(name, kw["kw"]), tuple(kw["input"]), (source, name, kw))
    return ("fresh-hf", hf_builder(name), IDS, (source, name, kw))


def draw(seed: int, n_timm: int, n_hf: int, max_params: float, log=print, exclude=()) -> dict:
    """{zoo name: (family, builder, input shape)} of the draw, in draw order. `exclude`: earlier draws
    (their --draw files' records): a new draw takes none of their models."""
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
                    continue
                if _runs(b, IDS):
                    out[f"fr_hf_{t}"] = _entry("hf", t, {})
                    log(f"draw transformers {t} ({n / 1e6:.2f} M parameters)")
            except Exception as e:  # noqa: BLE001
                why = (str(e).strip().splitlines() or [type(e).__name__])[0][:100]
                log(f"skip transformers {t}: does not build / run ({type(e).__name__}: {why})")
    return out


EXPORTERS = {"ts": "TorchScript", "dyn": "dynamo"}


def _network(module: str) -> str:
    for prefix, lib in (("fr_timm_", "timm"), ("fr_hf_", "transformers"), ("fr_tv_", "torchvision")):
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
    ap.add_argument("--torchvision", type=int, default=0, metavar="N",
                    help="also draw N torchvision models (classification, segmentation, video, optical flow)")
    ap.add_argument("--max-params", type=float, default=12e6)
    ap.add_argument("--list", action="store_true", help="print the draw and stop")
    ap.add_argument("--draw", metavar="DRAW.json",
                    help="write the draw here, or read it back when the file exists (for this seed): a later "
                         "run measures the same models even if a zoo file has named one of them since")
    ap.add_argument("--exclude", metavar="DRAW.json", action="append", default=[],
                    help="an earlier draw's --draw file: draw none of its models (repeatable)")
    ap.add_argument("--only", metavar="PREFIX", help="measure only the drawn names that start with PREFIX "
                                                     "(fr_timm_, fr_hf_, fr_tv_): the draw itself is unchanged")
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
        drawn = draw(seed, args.timm, args.hf, args.max_params, log=lambda s: print(s, flush=True), exclude=earlier)
        if args.torchvision:
            drawn.update(draw_torchvision(seed, args.torchvision, args.max_params,
                                          log=lambda s: print(s, flush=True), exclude=earlier))
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
