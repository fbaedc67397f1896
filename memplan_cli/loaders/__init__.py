"""Model loaders: a file goes in, a verified forward `Graph` comes out.

The format is sniffed from the content, never the extension. Loaders read shapes, dtypes and which
operands are constant; they never copy weight bytes (small integer constants that decide shapes,
such as a Reshape's target shape, are the exception). Every failure is a `ModelError` naming the file;
anything but a regular file (a FIFO would block forever, a device never end) is refused unopened.
"""
from __future__ import annotations

from memplan_cli.errors import ModelError
from memplan_cli.inputs import require_regular_file

FORMATS = ("circle", "tflite", "onnx")


def sniff(head: bytes) -> str | None:
    """Format from the first bytes of a file: flatbuffer file identifier at offset 4, else ONNX protobuf."""
    if len(head) >= 8 and head[4:8] == b"CIR0":
        return "circle"
    if len(head) >= 8 and head[4:8] == b"TFL3":
        return "tflite"
    # An ONNX ModelProto starts with a field tag; ir_version (field 1, varint) is written first by
    # every exporter we know, so the first byte is 0x08.
    if head[:1] == b"\x08":
        return "onnx"
    return None


def load_model(path: str, *, batch_size: int | None = None, symbolic_default: int | None = None,
               sha256: bool = False):
    """Load `path` (any supported format) and return a verified Graph, re-batched if asked. An ONNX
    file's symbolic batch takes `batch_size`, else `symbolic_default` (metadata `batch_symbol` names
    it), else the file is refused. `sha256`: also hash the file, in the same open as the format
    sniff (`Graph.metadata["sha256"]`; reports name the file by it), so that a command opens the
    file twice in all: the sniff and the loader's read."""
    from memplan_cli.ir.graph import GraphError

    require_regular_file(path, "model file", ModelError)
    digest = None
    try:
        with open(path, "rb") as f:
            head = f.read(16)
            if sha256 and head:
                f.seek(0)
                digest = _sha256(f)
    except OSError as e:
        raise ModelError(f"cannot read: {e.strerror or e}", path) from None
    if not head:
        raise ModelError("empty file", path)
    fmt = sniff(head)
    if fmt is None:
        raise ModelError("not a circle, tflite or ONNX model (unrecognised content)", path)
    try:
        if fmt == "onnx":
            from memplan_cli.loaders.onnx_loader import load_onnx as load
        else:
            from memplan_cli.loaders.flatbuffer_loader import load_flatbuffer as load
        # ONNX takes the batch size at load time: it resolves a symbolic batch dim before shape inference
        graph = (load(path, fmt) if fmt != "onnx" else
                 load(path, batch_size=batch_size, symbolic_default=symbolic_default))
        graph.source_format = fmt
        if digest is not None:
            graph.metadata["sha256"] = digest
        if _placeholder_shapes(graph):
            from memplan_cli.ir.batch import rebatch

            graph = rebatch(graph, _file_batch(graph), resolve=True)
        graph.verify()
        from memplan_cli.ir.fold import FoldConstants

        if FoldConstants().run(graph):
            graph.verify()
        from memplan_cli.loaders.params import settle

        settle(graph, graph.metadata.get("parameter_rule", ""))
        graph = batched(graph, batch_size, path)
    except ModelError:
        raise
    except GraphError as e:
        raise ModelError(f"invalid {fmt} graph: {e}", path) from None
    except OSError as e:  # the file went away or became unreadable after its first bytes were read
        why = "it was removed while memplan read it" if isinstance(e, FileNotFoundError) else e.strerror or e
        raise ModelError(f"cannot read: {why}", path) from None
    except Exception as e:  # malformed bytes surface as many exception types inside the parsers
        raise ModelError(f"malformed {fmt} file ({type(e).__name__}: {e})", path) from None
    return graph


def _sha256(f) -> str:
    import hashlib

    if hasattr(hashlib, "file_digest"):  # Python 3.11: no copy per chunk (a 2 GB model: -20%)
        return hashlib.file_digest(f, "sha256").hexdigest()
    h = hashlib.sha256()
    for chunk in iter(lambda: f.read(1 << 20), b""):
        h.update(chunk)
    return h.hexdigest()


def batched(graph, batch_size: int | None, path: str):
    """A loaded graph at `batch_size` (None: as loaded), its merged parameters noted: the end of
    `load_model`, also for a setup whose batch the training metadata names after the load."""
    from memplan_cli.ir.graph import GraphError

    if batch_size is not None:
        from memplan_cli.ir.batch import rebatch

        old = graph
        try:  # a failure here is memplan not following the batch, not a bad file: say what helps
            graph = rebatch(graph, batch_size)
            graph.verify()
        except GraphError as e:
            raise ModelError(f"cannot re-batch to batch {batch_size}: {e} (the file fixes batch "
                             f"{_file_batch(old)} inside the graph; export it with a dynamic batch axis, or "
                             "analyse it at its own batch)", path) from None
    from memplan_cli import ops

    folds = ops.parameter_folds(graph)  # a converter's merge of a norm's scale/shift: said in reports
    if folds:
        graph.metadata["merged_parameters"] = folds
    return graph


def _placeholder_shapes(graph) -> bool:
    """A TF Lite file marks dims beyond the batch dynamic (-1 in shape_signature) where the graph
    computes a shape; the converter then writes placeholder shapes that must be resolved."""
    dyn = graph.metadata.get("dynamic_dims") or {}
    if _file_batch(graph) == "?" or not dyn:
        return False
    if any(k > 0 for dims in dyn.values() for k in dims):
        return True
    from memplan_cli import ops

    # an op that moves data into the batch dim (SpaceToBatchND): its output's dim 0 is a placeholder too
    return any(getattr(ops.get(op.type), "changes_batch", False) for op in graph.operations)


def _file_batch(graph) -> int | str:
    data = [i for i in graph.inputs if not graph.operands[i].is_const and graph.operands[i].shape]
    return graph.operands[data[0]].shape[0] if data else "?"
