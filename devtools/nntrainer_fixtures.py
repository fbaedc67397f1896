"""Condense the measured nntrainer 0.6.0 fixtures (../shared/fixtures/nntrainer, see its README) into
tests/fixtures/nntrainer: per model, its ONNX twin without weight values (memplan reads shapes only)
and one JSON with every configuration's two pools: planned size, and each planned request in token
order as [name, bytes, validity start, validity end (exclusive), offset].

    python -m devtools.nntrainer_fixtures [SHARED_FIXTURES_DIR]
"""
from __future__ import annotations

import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "fixtures" / "nntrainer"


def condense(doc: dict) -> dict:
    pools = {}
    for pool in ("weight", "tensor"):
        src = sorted((t for t in doc["tensors"] if t["pool"] == pool and t["token"] and t["view_of"] is None),
                     key=lambda t: t["token"])
        pools[pool] = {"size": doc[f"{pool}_pool"]["size"], "planner": doc[f"{pool}_pool"]["planner"],
                       "requests": [[t["name"], t["bytes"], *t["validity"], t["offset"]] for t in src]}
    return {"batch": doc["batch"], "optimizer": doc["optimizer"], "memory_optimization": doc["memory_optimization"],
            "end_order": doc["execution"]["end_order"], "pools": pools}


def main(src: pathlib.Path) -> None:
    import onnx

    OUT.mkdir(parents=True, exist_ok=True)
    for model_dir in sorted(p for p in src.iterdir() if p.is_dir()):
        name = model_dir.name
        m = onnx.load(str(model_dir / f"{name}.onnx"))
        for t in m.graph.initializer:
            if t.dims and t.data_type == onnx.TensorProto.FLOAT:  # weights: shapes only
                t.ClearField("raw_data")
                t.ClearField("float_data")
        onnx.save(m, str(OUT / f"{name}.onnx"))
        docs = [json.loads(p.read_text()) for p in sorted(model_dir.glob(f"{name}_b*.json"))]
        docs.sort(key=lambda d: (d["batch"], d["optimizer"], not d["memory_optimization"]))
        first = docs[0]
        out = {"model": name, "nntrainer": first["nntrainer"], "loss": first["loss"],
               "model_description": first["model_description"]["text"].replace(
                   f"batch_size = {first['batch']}", "batch_size = <batch>"),
               "configurations": [condense(d) for d in docs]}
        (OUT / f"{name}.json").write_text(_dump(out))


def _dump(doc: dict) -> str:
    """JSON with one request per line (readable diffs, small files)."""
    rows = {}

    def mark(x):
        if isinstance(x, dict):
            return {k: mark(v) for k, v in x.items()}
        if isinstance(x, list) and x and isinstance(x[0], list):
            keys = []
            for r in x:
                rows[key := f"@row{len(rows)}@"] = json.dumps(r)
                keys.append(key)
            return keys
        if isinstance(x, list):
            return [mark(v) for v in x]
        return x

    text = json.dumps(mark(doc), indent=1)
    for key, row in rows.items():
        text = text.replace(f'"{key}"', row, 1)
    return text + "\n"


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT.parent / "shared" / "fixtures" / "nntrainer")
