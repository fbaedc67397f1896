#!/usr/bin/env python3
"""Survey memplan on a corpus of real exports; write a markdown report (dev-only, not a test).

    python scripts/survey_corpus.py                         # ../corpus, main's memplan
    python scripts/survey_corpus.py --memplan .venv/bin/memplan --corpus DIR -o notes/survey.md
    python scripts/survey_corpus.py --only bert --no-verify # a few models, quickly

Runs under any Python with `onnx` and `tflite` (memplan's own venv has both). For every model of
DIR/manifest.json (written by scripts/build_corpus.py), through the CLI only:
1. `memplan analyze MODEL -b 8 -O adam -t all -f json`: refused (exit 2, the message), or figures.
   The figures are checked:
   - trainable bytes = 4 x float parameters. Two truths: the framework's parameter count
     (manifest `params`, torch `parameters()` / Keras trainable weights) and the file's own float
     constants counted here (initializers, Constant / ConstantOfShape values; TFLite float32 buffers).
     memplan's trainable category also holds non-float constants (shapes, indices) and aligns every
     buffer to 16 bytes, so the report says which of exact / aligned / neither holds.
   - gradient bytes > 0 (a model that trains nothing is wrong), opt-variable = 2 x gradient (Adam).
2. `memplan verify MODEL -b 2 -O sgd` on those whose naive total at batch 8 fits in 3 GiB.
3. `memplan analyze MODEL -p onert -b 8 -O adam -q`: a figure or a refusal.
Exit 70, a traceback, a second stderr line or a timeout is a WRONG outcome, listed on its own.
`--pytorch-converted` also runs analyze + verify on the onnx package's pytorch-converted models
(`-b 2`) and pytorch-operator models (at their own batch).
Deterministic output (sorted), timings only in their own column.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter, defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
ALIGN = 16
NAIVE_LIMIT = 3 * 1024 ** 3
FLOAT_ONNX = {1: 4, 10: 2, 11: 8, 16: 2}  # float, float16, double, bfloat16: bytes per element


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


# ---------------------------------------------------------------- the file's own parameter count
def onnx_params(path: str) -> dict:
    """Float constants of an ONNX file: {float_params, float_bytes_aligned, const_bytes_aligned}.

    Initializers and Constant nodes (value tensors) count by dtype, except torch.onnx's Constant
    nodes (traced values and buffers: it writes every parameter as an initializer); ConstantOfShape
    counts when its shape input is an initializer or Constant (the zoo's light models build weights
    that way).
    Scalars (< 2 elements) are listed apart: exporters emit them for eps, sqrt(d), 0.5 in GELU."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    m = onnx.load(path, load_external_data=False)
    vals: dict[str, tuple[int, int]] = {}  # name -> (elements, dtype code)
    small_int: dict[str, np.ndarray] = {}

    def add(name, dims, dtype, t=None):
        n = int(np.prod(dims)) if len(dims) else 1
        vals[name] = (n, dtype)
        if t is not None and dtype in (6, 7) and n <= 16 and t.data_location != 1:
            small_int[name] = numpy_helper.to_array(t)

    def walk(g):
        for t in g.initializer:
            add(t.name, list(t.dims), t.data_type, t)
        for node in g.node:
            if node.op_type == "Constant":
                for a in node.attribute:
                    if a.name == "value" and not (m.producer_name == "pytorch" and a.t.data_type in FLOAT_ONNX):
                        add(node.output[0], list(a.t.dims), a.t.data_type, a.t)
                    elif a.name in ("value_float",):
                        add(node.output[0], [], 1)
                    elif a.name in ("value_floats",):
                        add(node.output[0], [len(a.floats)], 1)
            elif node.op_type == "ConstantOfShape" and node.input and node.input[0] in small_int:
                dt = 1
                for a in node.attribute:
                    if a.name == "value":
                        dt = a.t.data_type
                add(node.output[0], [int(x) for x in small_int[node.input[0]].ravel()], dt)
            for a in node.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    walk(a.g)

    walk(m.graph)
    used = {i for node in m.graph.node for i in node.input}
    fl = [(n, dt) for name, (n, dt) in vals.items() if name in used and dt in FLOAT_ONNX]
    return {
        "float_params": sum(n for n, _ in fl if n > 1),
        "float_scalars": sum(n for n, _ in fl if n <= 1),
        "float_bytes_aligned": sum(_align(n * FLOAT_ONNX[dt]) for n, dt in fl),
        "opset": max((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), default=0),
    }


def tflite_params(path: str) -> dict:
    """Float32 constant tensors of a TFLite / circle file (tensors with a non-empty buffer)."""
    import tflite

    with open(path, "rb") as f:
        buf = f.read()
    model = tflite.Model.GetRootAsModel(buf, 0)
    params = scalars = aligned = 0
    for si in range(model.SubgraphsLength()):
        sg = model.Subgraphs(si)
        for ti in range(sg.TensorsLength()):
            t = sg.Tensors(ti)
            b = model.Buffers(t.Buffer())
            has = (b is not None and b.DataLength() > 0) or (b is not None and b.Size() > 0)
            if not has or t.Type() != 0:  # 0 = FLOAT32
                continue
            n = 1
            for d in t.ShapeAsNumpy() if t.ShapeLength() else []:
                n *= int(d)
            if n > 1:
                params += n
            else:
                scalars += n
            aligned += _align(4 * n)
    return {"float_params": params, "float_scalars": scalars, "float_bytes_aligned": aligned, "opset": None}


def file_params(path: str) -> dict:
    try:
        return onnx_params(path) if path.endswith(".onnx") else tflite_params(path)
    except Exception as e:  # the survey reports it; memplan's own verdict comes from memplan
        return {"error": f"{type(e).__name__}: {e}"}


# ---------------------------------------------------------------- running memplan
def _n(v) -> str:
    """An int with thousands separators; anything else (a '-' for unknown) as it is."""
    return f"{v:,}" if isinstance(v, int) else str(v)


def run(cmd: list[str], timeout: float) -> dict:
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                           env={**os.environ, "NO_COLOR": "1", "MEMPLAN_DEBUG": ""})
    except subprocess.TimeoutExpired:
        return {"rc": "timeout", "out": "", "err": f"no answer within {timeout:.0f} s", "s": timeout}
    return {"rc": p.returncode, "out": p.stdout, "err": p.stderr.strip(), "s": time.monotonic() - t0}


def message(err: str, path: str) -> str:
    """The one stderr line without the file name; a traceback's last line."""
    lines = [ln for ln in err.splitlines() if ln.strip()]
    if not lines:
        return ""
    line = lines[-1] if "Traceback" in err else lines[0]
    line = line.replace(path + ": ", "").replace(path, "MODEL").replace("memplan: error: ", "")
    return line.strip()


_NORMALISE = [
    (re.compile(r"op #\d+ "), "op "),
    (re.compile(r"N below \d+"), "N below K"),
    (re.compile(r"tensor '[^']*'"), "tensor 'T'"),
    (re.compile(r"\(#\d+[^)]*\)"), ""),
    (re.compile(r"'[^']*/[^']*'"), "'NAME'"),
    (re.compile(r"\b\d{3,}\b"), "N"),
]


def normalise(msg: str) -> str:
    for rx, rep in _NORMALISE:
        msg = rx.sub(rep, msg)
    return msg


def blocker_key(msg: str) -> str:
    """What blocks: the op or attribute a refusal names, else the normalised message."""
    m = re.search(r"op (?:#\d+ )?(\w+) is inside the backward region", msg)
    if m:
        return f"no backward rule: {m.group(1)}"
    m = re.search(r"unsupported (?:ONNX |TFLite |circle )?op(?:erator)?(?: type)?:? '?([\w.]+)'?", msg, re.I)
    if m:
        return f"unsupported op: {m.group(1)}"
    return normalise(msg)


def survey_model(memplan: str, entry: dict, corpus: str, verify: bool, timeout: float) -> dict:
    path = os.path.join(corpus, entry["file"])
    r = {"name": entry["name"], "family": entry.get("family", ""), "exporter": entry.get("exporter", ""),
         "format": "onnx" if path.endswith(".onnx") else "tflite", "params": entry.get("params")}
    r["file"] = file_params(path)
    a = run([memplan, "analyze", path, "-b", "8", "-O", "adam", "-t", "all", "-f", "json"], timeout)
    r["analyze_rc"], r["analyze_s"] = a["rc"], a["s"]
    r["analyze_msg"] = message(a["err"], path) if a["rc"] != 0 else ""
    r["wrong"] = []
    if a["rc"] not in (0, 2):
        r["wrong"].append(f"analyze exit {a['rc']}: {message(a['err'], path)}")
    elif a["rc"] == 2 and ("Traceback" in a["err"] or len(a["err"].splitlines()) > 1):
        r["wrong"].append(f"analyze refusal is not one line: {a['err'][:200]}")
    if a["rc"] == 0:
        d = json.loads(a["out"])
        cat = {k: v["naive"] for k, v in d["categories"].items()}
        r["trainable"], r["gradient"], r["optvar"] = cat["trainable"], cat["gradient"], cat["opt-variable"]
        r["naive"], r["planned"], r["lower_bound"] = d["totals"]["naive"], d["totals"]["planned"], d["totals"]["lower_bound"]
        r["ops"] = d["model"].get("operations")
        r["checks"] = checks(r)
        for c, ok in r["checks"].items():
            if ok is False and c in ("trains_something", "adam_2x"):
                r["wrong"].append(f"check {c} failed")
    r["verify_rc"] = None
    if verify and a["rc"] == 0 and r["naive"] <= NAIVE_LIMIT:
        v = run([memplan, "verify", path, "-b", "2", "-O", "sgd"], timeout * 3)
        r["verify_rc"], r["verify_s"] = v["rc"], v["s"]
        r["verify_msg"] = message(v["err"], path) if v["rc"] != 0 else ""
        if v["rc"] == 1:
            r["verify_msg"] = (v["out"].strip().splitlines() or [""])[-1][:300] or r["verify_msg"]
        if v["rc"] not in (0, 1, 2):
            r["wrong"].append(f"verify exit {v['rc']}: {r['verify_msg']}")
        elif v["rc"] == 1:
            r["wrong"].append(f"verify failed: {r['verify_msg']}")
    o = run([memplan, "analyze", path, "-p", "onert", "-b", "8", "-O", "adam", "-t", "all", "-q"], timeout)
    r["onert_rc"] = o["rc"]
    r["onert_msg"] = message(o["err"], path) if o["rc"] != 0 else ""
    if o["rc"] not in (0, 2):
        r["wrong"].append(f"onert exit {o['rc']}: {r['onert_msg']}")
    return r


def checks(r: dict) -> dict:
    """trainable vs 4 x params (framework, file), gradient > 0, Adam state = 2 x gradient."""
    f = r["file"]
    out = {"trains_something": r["gradient"] > 0, "adam_2x": r["optvar"] == 2 * r["gradient"]}
    if r.get("params") is not None:
        out["trainable_eq_4x_framework"] = r["trainable"] == 4 * r["params"]
        out["gradient_eq_4x_framework"] = r["gradient"] == 4 * r["params"]
    if "float_params" in f:
        out["trainable_eq_4x_file"] = r["trainable"] == 4 * (f["float_params"] + f["float_scalars"])
        out["trainable_eq_file_aligned"] = r["trainable"] == f["float_bytes_aligned"]
        out["gradient_eq_file_aligned"] = r["gradient"] == f["float_bytes_aligned"]
        lo = 4 * f["float_params"]
        out["gradient_within_alignment"] = lo <= r["gradient"] <= f["float_bytes_aligned"] + ALIGN * 4
    return out


def param_verdict(r: dict) -> str:
    c = r.get("checks") or {}
    if not c:
        return ""
    if c.get("trainable_eq_4x_framework") or c.get("trainable_eq_4x_file"):
        return "exact"
    if c.get("trainable_eq_file_aligned"):
        return "aligned"
    if c.get("gradient_eq_4x_framework") or c.get("gradient_eq_file_aligned"):
        return "gradient exact (trainable adds non-float consts)"
    if c.get("gradient_within_alignment"):
        return "gradient within alignment"
    return "MISMATCH"


# ---------------------------------------------------------------- pytorch-converted
def pytorch_converted(memplan: str, timeout: float) -> list[dict]:
    import onnx

    rows = []
    for kind, batch in (("pytorch-converted", ["-b", "2"]), ("pytorch-operator", [])):
        base = os.path.join(os.path.dirname(onnx.__file__), "backend/test/data", kind)
        rows += _onnx_package(memplan, timeout, base, kind, batch)
    return rows


def _onnx_package(memplan: str, timeout: float, base: str, kind: str, batch: list) -> list[dict]:
    rows = []
    for name in sorted(os.listdir(base)):
        path = os.path.join(base, name, "model.onnx")
        if not os.path.isfile(path):
            continue
        a = run([memplan, "analyze", path, "-q"], timeout)
        row = {"name": name, "analyze_rc": a["rc"], "analyze_msg": message(a["err"], path) if a["rc"] else ""}
        if a["rc"] == 0:
            v = run([memplan, "verify", path, *batch, "-O", "sgd"], timeout * 3)
            row["verify_rc"] = v["rc"]
            row["verify_msg"] = message(v["err"], path) if v["rc"] else ""
            if v["rc"] == 1:
                row["verify_msg"] = (v["out"].strip().splitlines() or [""])[-1][:200]
        rows.append(row)
        row["name"] = f"{kind}/{name}"
        print(f"  {kind} {name}: analyze {row['analyze_rc']} verify {row.get('verify_rc')}",
              file=sys.stderr)
    return rows


# ---------------------------------------------------------------- report
def pct(n: int, d: int) -> str:
    return f"{n}/{d} ({100.0 * n / d:.0f} %)" if d else "0/0"


def report(rows: list[dict], pc: list[dict] | None, memplan: str, version: str, corpus: str) -> str:
    out = []
    n = len(rows)
    ok = [r for r in rows if r["analyze_rc"] == 0]
    refused = [r for r in rows if r["analyze_rc"] == 2]
    fits = [r for r in ok if r["naive"] <= NAIVE_LIMIT]
    ver_ok = [r for r in fits if r["verify_rc"] == 0]
    wrong = [r for r in rows if r["wrong"]]
    out.append(f"# memplan on the real-export corpus\n")
    out.append(f"memplan `{version}` ({memplan}); corpus `{corpus}` ({n} models); "
               f"`scripts/survey_corpus.py` wrote this on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.\n")
    out.append("## Pass rates\n")
    out.append(f"- analyze (-b 8 -O adam -t all): **{pct(len(ok), n)}** analyse; {len(refused)} refused (exit 2); "
               f"{n - len(ok) - len(refused)} other (exit 70 / timeout)")
    pv = Counter(param_verdict(r) for r in ok)
    out.append(f"- trainable bytes vs 4 x float params: " + ", ".join(f"{k}: {v}" for k, v in sorted(pv.items())))
    out.append(f"- verify -b 2 -O sgd: **{pct(len(ver_ok), len(fits))}** of those that analyse and fit 3 GiB naive at batch 8"
               f" ({pct(len(ver_ok), n)} of the corpus)")
    on_ok = [r for r in rows if r["onert_rc"] == 0]
    out.append(f"- onert profile: {len(on_ok)} figures, {sum(r['onert_rc'] == 2 for r in rows)} refusals")
    out.append(f"- WRONG outcomes (exit 70, traceback, timeout, failed check, failed verify): **{len(wrong)}**\n")
    fams = defaultdict(list)
    for r in rows:
        fams[r["exporter"]].append(r)
    out.append("| exporter | models | analyse | verify | onert figure |")
    out.append("|---|---|---|---|---|")
    for k in sorted(fams):
        rs = fams[k]
        out.append(f"| {k} | {len(rs)} | {sum(r['analyze_rc'] == 0 for r in rs)} | "
                   f"{sum(r['verify_rc'] == 0 for r in rs)} | {sum(r['onert_rc'] == 0 for r in rs)} |")
    out.append("")

    out.append("## What blocks the most models (analyze, every op trainable)\n")
    block = defaultdict(list)
    for r in refused:
        block[blocker_key(r["analyze_msg"])].append(r)
    out.append("| models | blocker | example message (exact) |")
    out.append("|---|---|---|")
    for key, rs in sorted(block.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        names = ", ".join(sorted(r["name"] for r in rs))
        out.append(f"| {len(rs)} | {key} | `{rs[0]['analyze_msg']}` ({names}) |")
    out.append("")

    if wrong:
        out.append("## WRONG outcomes\n")
        for r in sorted(wrong, key=lambda r: r["name"]):
            for w in r["wrong"]:
                out.append(f"- **{r['name']}**: {w}")
        out.append("")
    mism = [r for r in ok if param_verdict(r) == "MISMATCH"]
    if mism:
        out.append("## Trainable bytes that match neither 4 x params nor the file's float constants\n")
        out.append("| model | trainable B | gradient B | 4 x framework params | file float params (+scalars) | file floats aligned |")
        out.append("|---|---|---|---|---|---|")
        for r in sorted(mism, key=lambda r: r["name"]):
            f = r["file"]
            fw = 4 * r["params"] if r.get("params") is not None else "-"
            out.append(f"| {r['name']} | {r['trainable']:,} | {r['gradient']:,} | {_n(fw)} | "
                       f"{_n(f.get('float_params', '-'))} (+{f.get('float_scalars', 0)}) | "
                       f"{_n(f.get('float_bytes_aligned', 0))} |")
        out.append("")

    out.append("## onert profile\n")
    ob = defaultdict(list)
    for r in rows:
        if r["onert_rc"] == 2:
            ob[blocker_key(r["onert_msg"])].append(r["name"])
    out.append("| models | refusal | models |")
    out.append("|---|---|---|")
    for key, ns in sorted(ob.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        out.append(f"| {len(ns)} | `{key}` | {', '.join(sorted(ns))} |")
    out.append(f"\nonert figures for: {', '.join(sorted(r['name'] for r in on_ok)) or 'none'}\n")

    out.append("## Every model\n")
    out.append("| model | exporter | ops | params (framework) | analyze | trainable check | verify | onert | analyze s |")
    out.append("|---|---|---|---|---|---|---|---|---|")
    for r in sorted(rows, key=lambda r: r["name"]):
        an = "ok" if r["analyze_rc"] == 0 else f"{r['analyze_rc']}: {r['analyze_msg'][:90]}"
        vr = {None: "-", 0: "ok"}.get(r["verify_rc"], f"{r['verify_rc']}: {r.get('verify_msg', '')[:80]}")
        on = "figure" if r["onert_rc"] == 0 else f"{r['onert_rc']}: {r['onert_msg'][:70]}"
        out.append(f"| {r['name']} | {r['exporter']} | {r.get('ops', '-')} | {r['params'] if r['params'] is not None else '-'} | "
                   f"{an} | {param_verdict(r)} | {vr} | {on} | {r['analyze_s']:.1f} |")
    out.append("")
    if pc is not None:
        out.append("## onnx package: pytorch-converted (verify -b 2) and pytorch-operator (own batch)\n")
        for kind in ("pytorch-converted", "pytorch-operator"):
            k_all = [r for r in pc if r["name"].startswith(kind + "/")]
            k_a = [r for r in k_all if r["analyze_rc"] == 0]
            k_v = [r for r in k_a if r.get("verify_rc") == 0]
            out.append(f"- {kind}: analyze {pct(len(k_a), len(k_all))}; of those, verify -O sgd passes {pct(len(k_v), len(k_a))}")
        bad = [r for r in pc if r["analyze_rc"] not in (0, 2) or r.get("verify_rc") not in (None, 0)]
        for r in bad:
            out.append(f"- **{r['name']}**: analyze {r['analyze_rc']} `{r['analyze_msg']}`, verify {r.get('verify_rc')} `{r.get('verify_msg', '')}`")
        cnt = Counter(blocker_key(r["analyze_msg"]) for r in pc if r["analyze_rc"] == 2)
        out.append("\nrefusals: " + "; ".join(f"{k} ({v})" for k, v in cnt.most_common()))
        out.append("")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default="../corpus")
    ap.add_argument("--memplan", default=".venv/bin/memplan")
    ap.add_argument("-o", "--output", default="survey.md")
    ap.add_argument("--json", default=None, help="also write the raw rows here")
    ap.add_argument("--only", default=None, help="comma-separated substrings of model names")
    ap.add_argument("--no-verify", action="store_true")
    ap.add_argument("--pytorch-converted", action="store_true")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per analyze (verify: 3x)")
    args = ap.parse_args(argv)
    with open(os.path.join(args.corpus, "manifest.json")) as f:
        manifest = json.load(f)["models"]
    if args.only:
        keys = args.only.split(",")
        manifest = [e for e in manifest if any(k in e["name"] for k in keys)]
    version = run([args.memplan, "--version"], 30)["out"].strip() or "?"
    rows = []
    for e in manifest:
        r = survey_model(args.memplan, e, args.corpus, not args.no_verify, args.timeout)
        print(f"{r['name']}: analyze {r['analyze_rc']} verify {r['verify_rc']} onert {r['onert_rc']} "
              f"{param_verdict(r)} {r['analyze_msg'][:100]}", file=sys.stderr)
        rows.append(r)
    pc = pytorch_converted(args.memplan, args.timeout) if args.pytorch_converted else None
    text = report(rows, pc, args.memplan, version, args.corpus)
    tmp = args.output + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, args.output)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"models": rows, "pytorch_converted": pc}, f, indent=1, sort_keys=True, default=str)
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
