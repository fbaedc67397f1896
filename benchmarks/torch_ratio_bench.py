"""memplan's own plan against PyTorch eager's measured peak, network by network (dev-only: needs torch).

    python benchmarks/torch_ratio_bench.py                      # the zoo, batch 4, Adam (-O sgd: SGD)
    python benchmarks/torch_ratio_bench.py repvit_m0_9 --dynamo # some networks, dynamo export
    python benchmarks/torch_ratio_bench.py --json rows.json
    python benchmarks/torch_ratio_bench.py fam_hf_bloom tx_gpt2 --seq 128   # attention at a longer sequence

For each network (random init, training mode) it exports the module to ONNX (TorchScript exporter in
training mode with BatchNorm in training form, or `--dynamo`), measures PyTorch's CPU allocator peak
for one Adam step the way devtools/torch_oracle.py does, and runs `memplan analyze -p memplan`
(no remat) on the export. It prints
- plan / peak: memplan's planned arena over PyTorch's measured peak (issue 32 asks <= 0.9);
- saved bytes at the start of backward: PyTorch's saved tensors (unique storages packed by autograd's
  saved-tensor hooks during forward, parameters and the input batch left out) beside memplan's
  non-const buffers alive across its first backward step (forward results kept for backward, the
  model output included).
torch is never a memplan dependency: run this with an interpreter that has torch and timm; memplan
runs in a subprocess (the repository's .venv, or $MEMPLAN_PYTHON).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "devtools"))
import torch_oracle as O  # noqa: E402  (the oracle's zoo, export and measuring method)
import torch_family_zoo  # noqa: E402,F401  (adds the op-family networks, fam_*, to the oracle's zoo)

HW = 224


def _timm(name):
    def build():
        import timm
        return timm.create_model(name, pretrained=False)
    return build


def _mobilenet_v1():
    """MobileNetV1 (width 1.0): conv-BN-ReLU stem, 13 depthwise-separable blocks."""
    import torch.nn as nn

    def cbr(cin, cout, stride, groups=1, k=3):
        return [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout),
                nn.ReLU(inplace=True)]
    cfg = [(32, 64, 1), (64, 128, 2), (128, 128, 1), (128, 256, 2), (256, 256, 1), (256, 512, 2)] + \
        [(512, 512, 1)] * 5 + [(512, 1024, 2), (1024, 1024, 1)]
    layers = cbr(3, 32, 2)
    for cin, cout, s in cfg:
        layers += cbr(cin, cin, s, groups=cin) + cbr(cin, cout, 1, k=1)
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(1024, 1000))


# BatchNorm-heavy mobile CNNs in training form (issue 32), at 224 x 224, 1000 classes
NETS = {
    "repvit_m0_9": ("bn-mobile", _timm("repvit_m0_9"), (3, HW, HW)),
    "mobileone_s1": ("bn-mobile", _timm("mobileone_s1"), (3, HW, HW)),
    "regnetx_004": ("bn-mobile", _timm("regnetx_004"), (3, HW, HW)),
    "mobilenet_v1": ("bn-mobile", _mobilenet_v1, (3, HW, HW)),
    "tv_resnet18": O.ZOO["tv_resnet18"],
    "tv_mobilenet_v2": O.ZOO["tv_mobilenet_v2"],
}
O.ZOO.update(NETS)
SMALL = ["cnn", "cnn_bn", "cnn_bn_dropout", "resnet_bn", "resnet_nobn", "mobilenet", "efficientnet", "encoder",
         "encoder_relu", "decoder"]
DEFAULT = list(NETS) + SMALL


def at_seq(name: str, seq: int) -> str:
    """A zoo network at another sequence length, registered as NAME_sSEQ: token ids ("ids", S, V) or an
    embedded sequence (S, D); other inputs are refused."""
    fam, fn, shape = O.ZOO[name]
    if shape[0] == "ids":
        shape = ("ids", seq, *shape[2:])
    elif len(shape) == 2:
        shape = (seq, shape[1])
    else:
        raise SystemExit(f"torch_ratio_bench.py: {name} takes no sequence (input {shape})")
    O.ZOO[f"{name}_s{seq}"] = (fam, fn, shape)
    if name in O.FLAGS:
        O.FLAGS[f"{name}_s{seq}"] = O.FLAGS[name]
    return f"{name}_s{seq}"


def torch_saved(name: str, batch: int) -> int:
    """Bytes of the unique storages autograd saves for backward in one forward (parameters, buffers
    and the input left out): what PyTorch holds for backward when backward starts."""
    torch.set_num_threads(1)
    model, x, y = O.build(name, batch)
    skip = {p.untyped_storage().data_ptr() for p in list(model.parameters()) + list(model.buffers())}
    skip.add(x.untyped_storage().data_ptr())
    seen: dict[int, int] = {}

    def pack(t):
        s = t.untyped_storage()
        if s.data_ptr() not in skip and s.nbytes():
            seen[s.data_ptr()] = s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(x)
        loss = O._loss(out, y)
    # the model output is held to the end of the step too (memplan counts it among its buffers)
    seen.setdefault(out.untyped_storage().data_ptr(), out.untyped_storage().nbytes())
    del loss, out
    return sum(seen.values())


def memplan(path: str, batch: int, flags=(), optimizer: str = "adam") -> dict:
    r = subprocess.run(O.memplan_cmd() + ["analyze", path, "-p", "memplan", "-b", str(batch), "-O", optimizer,
                                          "-l", "cce", "-f", "json", *flags], capture_output=True, text=True, cwd=ROOT)
    if r.returncode != 0:
        return {"error": (r.stderr or r.stdout).strip().splitlines()[-1]}
    doc = json.loads(r.stdout)
    code = ("import json,sys\nfrom memplan_cli import analyze\n"
            f"a = analyze({path!r}, batch_size={batch}, optimizer={optimizer!r}, loss='cce').analysis\n"
            "bl = a.buffers\n"
            "b = next(i for i, s in enumerate(bl.steps) if s.kind != 'forward')\n"
            "print(sum(x.size for x in bl.buffers if x.category == 'non-const' and x.first < b <= x.last))\n")
    s = subprocess.run(O.memplan_cmd()[:1] + ["-c", code], capture_output=True, text=True, cwd=ROOT)
    saved = int(s.stdout.strip()) if s.returncode == 0 else None
    return {"planned": doc["totals"]["planned"], "saved": saved}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("nets", nargs="*", help=f"networks (default: all): {', '.join(DEFAULT)}")
    ap.add_argument("-b", "--batch", type=int, default=4)
    ap.add_argument("--dynamo", action="store_true", help="export with the dynamo exporter")
    ap.add_argument("-O", "--optimizer", default="adam", choices=("sgd", "momentum", "adam"))
    ap.add_argument("--seq", type=int, help="the sequence networks at this sequence length")
    ap.add_argument("--keep", metavar="DIR", help="keep the exports here")
    ap.add_argument("--json", help="write the rows as JSON here")
    a = ap.parse_args(argv)
    rows = []
    print(f"{'network':16s} {'family':10s} {'torch peak':>13s} {'memplan plan':>13s} {'plan/peak':>9s} "
          f"{'torch saved':>13s} {'memplan saved':>13s}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        where = a.keep or tmp
        os.makedirs(where, exist_ok=True)
        for name in [at_seq(n, a.seq) for n in a.nets] if a.seq else a.nets or DEFAULT:
            path = os.path.join(where, f"{name}_b{a.batch}{'_dynamo' if a.dynamo else ''}.onnx")
            if not os.path.exists(path):
                try:
                    O.export(name, a.batch, path, a.dynamo)
                except Exception as e:  # an exporter that cannot take the module: said, not fatal
                    why = (str(e).strip().splitlines() or [type(e).__name__])[-1][:120]
                    print(f"{name:16s} export failed: {type(e).__name__}: {why}", flush=True)
                    continue
            m = O.measure(name, a.optimizer, a.batch)
            ts = torch_saved(name, a.batch)
            p = memplan(path, a.batch, O.FLAGS.get(name, ()), a.optimizer)
            row = {"network": name, "family": O.ZOO[name][0], "batch": a.batch, "optimizer": a.optimizer,
                   "dynamo": a.dynamo,
                   "torch_peak": m["peak"], "torch_saved": ts, **p}
            rows.append(row)
            if "error" in p:
                print(f"{name:16s} {row['family']:10s} {m['peak']:>13,d}  memplan: {p['error']}", flush=True)
                continue
            row["ratio"] = p["planned"] / m["peak"]
            print(f"{name:16s} {row['family']:10s} {m['peak']:>13,d} {p['planned']:>13,d} {row['ratio']:>9.3f} "
                  f"{ts:>13,d} {p['saved'] if p['saved'] is not None else 'n/a':>13,}", flush=True)
    ok = [r for r in rows if r.get("ratio", 9) <= 0.9]
    print(f"{len(ok)}/{len(rows)} at or under 0.9 x PyTorch's peak")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
