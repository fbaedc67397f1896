"""Dev-only check of the torch profile's composite rule (docs/torchprof.md, "The language part of a
composite model"): which transformers classes name a submodule `language_model` / `text_model` and what
sits beside it, and which ONNX files the loader reads as the language part of a composite model.

    python devtools/composite_parts.py --transformers    # needs transformers installed (source only)
    python devtools/composite_parts.py F.onnx ...         # or file names on stdin
    python devtools/composite_parts.py --traces F.onnx ... # where a dynamo file mentions what no op reads

The first reads the installed transformers' `modeling_*.py` with `ast` (nothing is imported or built)
and prints, per attribute name, the classes whose `__init__` assigns it, with the other submodules the
same `__init__` assigns; the second runs `loaders/onnx_loader.py`'s own rule on each file's names (no
weights read) and prints the files it fires on; the third prints, for each dynamo file, the outermost
modules no op reads (`_unread_modules`) with how often the file's bytes and its graph signature mention
each (by target and by placeholder name): equal counts mean nothing but the signature names them, so
the file holds no size for them."""
from __future__ import annotations

import argparse
import ast
import glob
import os
import sys

PARTS = ("language_model", "text_model")


def transformers_classes() -> dict[str, list[tuple[str, list[str]]]]:
    """{attribute: [(class, the other attributes its __init__ assigns a call or a conditional call)]}."""
    import importlib.util

    spec = importlib.util.find_spec("transformers")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("transformers is not installed in this interpreter")
    root = os.path.join(list(spec.submodule_search_locations)[0], "models")
    out: dict[str, list] = {p: [] for p in PARTS}
    for path in sorted(glob.glob(os.path.join(root, "*", "modeling_*.py"))):
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
            init = next((b for b in cls.body if isinstance(b, ast.FunctionDef) and b.name == "__init__"), None)
            if init is None:
                continue
            attrs: list[str] = []
            for node in ast.walk(init):
                if not isinstance(node, ast.Assign):
                    continue
                for t in node.targets:
                    # a submodule built here (a call, or one a config may leave out), or the part passed in
                    built = isinstance(node.value, (ast.Call, ast.IfExp)) or (
                        isinstance(node.value, ast.Name) and isinstance(t, ast.Attribute) and t.attr in PARTS)
                    if (built and isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)
                            and t.value.id == "self" and t.attr not in attrs):
                        attrs.append(t.attr)
            for p in PARTS:
                if p in attrs:
                    out[p].append((cls.name, [a for a in attrs if a not in PARTS]))
    return out


def files_read_as_composites(paths: list[str]) -> list[tuple[str, dict]]:
    import onnx

    from memplan_cli.loaders.onnx_loader import _composite, _export_rewrites

    hits = []
    for path in paths:
        m = onnx.load(path, load_external_data=False)
        found = _composite(m, _export_rewrites(m))
        if found:
            hits.append((path, found))
    return hits


def unread_traces(paths: list[str]) -> list[tuple[str, list[tuple[str, int, int]]]]:
    """[(file, [(outermost unread module, mentions in the file's bytes, mentions in the signature)])]."""
    import onnx

    from memplan_cli.loaders.onnx_loader import SIGNATURE_KEY, _export_rewrites

    out = []
    for path in paths:
        m = onnx.load(path, load_external_data=False)
        rewrites = _export_rewrites(m)
        if rewrites is None:
            continue
        sig = next(p.value for p in m.graph.metadata_props if p.key == SIGNATURE_KEY).encode()
        with open(path, "rb") as f:
            raw = f.read()
        rows = []
        for module in rewrites.get("unread_modules") or ():
            names = (module.encode(), module.replace(".", "_").lower().encode())
            rows.append((module, sum(raw.count(n) for n in names), sum(sig.count(n) for n in names)))
        out.append((path, rows))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*")
    ap.add_argument("--transformers", action="store_true", help="scan the installed transformers' classes")
    ap.add_argument("--traces", action="store_true", help="where each dynamo file mentions what no op reads")
    a = ap.parse_args(argv)
    if a.traces:
        for path, rows in unread_traces(a.files or sys.stdin.read().split()):
            shown = ", ".join(f"{mod}: {n} in the file, {k} in the signature" for mod, n, k in rows)
            print(f"{path}: {shown or 'no unread module'}")
        return 0
    if a.transformers:
        for part, rows in transformers_classes().items():
            alone = [c for c, others in rows if not others or others == ["config"]]
            print(f"{part}: {len(rows)} classes; with nothing beside it: {len(alone)} {alone}")
            for cls, others in rows:
                print(f"  {cls}: {', '.join(others)}")
        return 0
    paths = a.files or sys.stdin.read().split()
    hits = files_read_as_composites(paths)
    print(f"{len(paths)} files, {len(hits)} read as the language part of a composite model")
    for path, found in hits:
        print(f"  {path}: {found}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
