"""Helpers for the dev-only exporting scripts (scripts/build_*.py): what a committed export keeps."""
from __future__ import annotations

TRACE_KEY = "pkg.torch.onnx.stack_trace"


def strip_stack_traces(model) -> int:
    """Drop torch.onnx's per-node stack traces from an `onnx.ModelProto` in place: they hold the
    exporting machine's file paths. The module scopes and fx_node records (what --lora-targets,
    `ops:` globs and the parameter rules read) stay. Returns how many were dropped."""
    dropped = 0
    for node in model.graph.node:
        keep = [p for p in node.metadata_props if p.key != TRACE_KEY]
        dropped += len(node.metadata_props) - len(keep)
        del node.metadata_props[:]
        node.metadata_props.extend(keep)
    return dropped


def strip_file(path: str) -> int:
    """`strip_stack_traces` on a file, rewritten only when something was dropped."""
    import onnx

    m = onnx.load(path)
    n = strip_stack_traces(m)
    if n:
        onnx.save(m, path)
    return n


if __name__ == "__main__":
    import sys

    for p in sys.argv[1:]:
        print(f"{p}: {strip_file(p)} stack traces dropped")
