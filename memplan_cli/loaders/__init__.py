"""Model loaders: a file goes in, a verified forward `Graph` comes out.

The format is sniffed from the content, never the extension. Loaders read shapes, dtypes and which
operands are constant; they never copy weight bytes (small integer constants that decide shapes,
such as a Reshape's target shape, are the exception). Every failure is a `ModelError` naming the file;
anything but a regular file (a FIFO would block forever, a device never end) is refused unopened.
"""
from __future__ import annotations

import contextlib

from memplan_cli.errors import ModelError
from memplan_cli.inputs import require_regular_file
from memplan_cli.loaders.dims import DimsError, check_dims, symbolic_dim_name, unbound_dims

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


def load_model(path: str, *, batch_size: int | None = None, dims=None, symbolic_default: int | None = None,
               sha256: bool = False, rebatchable: bool = False, opened=None):
    """Load `path` (any supported format) and return a verified Graph, re-batched if asked. An ONNX
    file's symbolic batch takes `batch_size`; its other symbolic dimensions take their values in
    `dims` (bound by name: {name: value} or (name, value) pairs); one left unbound takes
    `symbolic_default` (for showing the file: `inspect`; metadata `batch_symbol` names the batch,
    `symbolic_dims` the others), else the file is refused. `sha256`: also hash the file, in the
    same open as the format sniff (`Graph.metadata["sha256"]`; reports name the file by it), so
    that a command opens the file twice in all: the sniff and the loader's read. `rebatchable`:
    return a `Rebatchable` instead, for a command that analyses several batches (fit, sweep).
    `opened`: `path` already open in binary mode (`diff`, which read its first bytes to tell a report
    from a model): the sniff and hash read it from its start instead of opening the file again; the
    caller closes it."""
    from memplan_cli.ir.graph import GraphError, OpContractError

    require_regular_file(path, "model file", ModelError)
    digest = None
    try:
        with open(path, "rb") if opened is None else contextlib.nullcontext(opened) as f:
            f.seek(0)
            head = f.read(16)
            if sha256 and head:
                f.seek(0)
                digest = file_object_sha256(f)
    except OSError as e:
        raise ModelError(f"cannot read: {e.strerror or e}", path) from None
    if not head:
        raise ModelError("empty file", path)
    fmt = sniff(head)
    if fmt is None:
        raise ModelError("not a circle, tflite or ONNX model (unrecognised content)", path)
    graph = None
    try:
        if fmt == "onnx":
            from memplan_cli.loaders.onnx_loader import load_onnx as load
        else:
            from memplan_cli.loaders.flatbuffer_loader import load_flatbuffer as load
        dims = dict(dims or {})
        # ONNX takes the batch size and dims at load time: they resolve symbolic dims before shape inference
        graph = (load(path, fmt) if fmt != "onnx" else
                 load(path, batch_size=batch_size, dims=dims, symbolic_default=symbolic_default))
        graph.source_format = fmt
        if digest is not None:
            graph.metadata["sha256"] = digest
        if fmt != "onnx":
            _bind_flatbuffer_dims(graph, dims, showing=symbolic_default is not None)
        # the op registry loads with these (every op family): not for `memplan --help`
        from memplan_cli.opgraph import contract
        from memplan_cli.opgraph.fold import FoldConstants
        from memplan_cli.opgraph.rebatch import rebatch

        if _placeholder_shapes(graph):
            graph = rebatch(graph, _file_batch(graph), resolve=True)
        contract.verify(graph)
        if FoldConstants().run(graph):
            contract.verify(graph)
        from memplan_cli.loaders.params import settle

        settle(graph, graph.metadata.get("parameter_rule", ""))
        if rebatchable:
            return Rebatchable(path, graph, fmt, batch_size, dims)
        graph = batched(graph, batch_size, path)
    except ModelError:
        raise
    except DimsError as e:
        raise ModelError(str(e), path) from None
    except GraphError as e:
        # onnx's shape inference has read an ONNX graph by now: what memplan's own rules refuse there
        # (a run-time Pad width, a float Mod) is a graph memplan cannot plan, not an invalid file; so
        # is an op of a flatbuffer its rules refuse (onnx2tf's PADV2 fill behind a DEQUANTIZE was
        # "invalid"); a flatbuffer's broken structure (a dangling index, a cycle) is invalid
        why = (f"memplan cannot plan this {fmt} graph" if fmt == "onnx" or isinstance(e, OpContractError)
               else f"invalid {fmt} graph")
        # a size the loader took from no file (a NonZero's count at its bound) may be the cause
        from memplan_cli.loaders.data_sized import assumed_note

        note = assumed_note(graph.metadata) if graph is not None else ""
        raise ModelError(f"{why}: {e}{note}", path) from None
    except OSError as e:  # the file went away or became unreadable after its first bytes were read
        why = "it was removed while memplan read it" if isinstance(e, FileNotFoundError) else e.strerror or e
        raise ModelError(f"cannot read: {why}", path) from None
    except Exception as e:  # malformed bytes surface as many exception types inside the parsers
        raise ModelError(f"malformed {fmt} file ({type(e).__name__}: {e})", path) from None
    return graph


def file_object_sha256(f) -> str:
    """The sha256 of an open binary file, read from where it stands to its end."""
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
        from memplan_cli.opgraph import contract
        from memplan_cli.opgraph.rebatch import rebatch

        old = graph
        sized = graph.metadata.get("data_sized")
        if sized and batch_size != graph.input_batch():
            # the sizes were taken for the file's own batch (loaders/data_sized.py): re-batching would
            # leave them summing to the old length
            raise ModelError(f"cannot re-batch to batch {batch_size}: {len(sized['dims'])} sizes computed from "
                             f"the data were taken at the file's batch {_file_batch(old)} (export it with a "
                             "dynamic batch axis, or analyse it at its own batch)", path)
        try:  # a failure here is memplan not following the batch, not a bad file: say what helps
            graph = rebatch(graph, batch_size)
            contract.verify(graph)
        except GraphError as e:
            raise ModelError(f"cannot re-batch to batch {batch_size}: {e} (the file fixes batch "
                             f"{_file_batch(old)} inside the graph; export it with a dynamic batch axis, or "
                             "analyse it at its own batch)", path) from None
    from memplan_cli import ops

    folds = ops.parameter_folds(graph)  # a converter's merge of a norm's scale/shift: said in reports
    if folds:
        graph.metadata["merged_parameters"] = folds
    else:  # a graph re-batched from one batched(graph, None) noted: the note is this batch's own
        graph.metadata.pop("merged_parameters", None)
    return graph


class Rebatchable:
    """A model loaded once for a command that analyses it at several batches (fit, sweep). `load_model`
    at batch B reads and checks the file at its own batch, then re-batches with `batched(graph, B)`;
    so re-batching this one load gives each batch the very graph a load at that batch gives, without
    reading the file again. Not so for an ONNX file with a symbolic batch, which is bound before onnx's
    shape inference (loaders/onnx_loader.py), nor at other `dims`: these load again."""

    def __init__(self, path: str, base, fmt: str, batch_size: int | None, dims: dict):
        self.path, self.fmt, self.dims, self.batch_size = path, fmt, dict(dims), batch_size
        self._base = base  # checked, before `batched`
        self._bound = fmt == "onnx" and bool(base.metadata.get("dynamic_batch"))  # at batch_size
        self.graph = self._batched(batch_size)

    def at(self, batch_size: int | None, dims=None):
        """The verified graph at `batch_size` (None: the file's own) with `dims` (None: the load's)."""
        dims = self.dims if dims is None else dict(dims)
        if dims == self.dims and batch_size == self.batch_size:
            return self.graph
        if dims != self.dims or self._bound:
            g = load_model(self.path, batch_size=batch_size, dims=dims)
            if "sha256" in self.graph.metadata:
                g.metadata["sha256"] = self.graph.metadata["sha256"]
            return g
        return self._batched(batch_size)

    def _batched(self, batch_size):
        try:
            return batched(self._base, batch_size, self.path)
        except ModelError:
            raise
        except Exception as e:  # worded as load_model words it
            raise ModelError(f"malformed {self.fmt} file ({type(e).__name__}: {e})", self.path) from None


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


def _flatbuffer_dims(graph) -> list:
    """A TF Lite / circle file's dynamic input dims (-1 in shape_signature) as (name, input, position,
    is_batch); a dim beyond the batch is named after the input's signature name (else its tensor's)."""
    dyn = graph.metadata.get("dynamic_dims") or {}
    return [(symbolic_dim_name(label, k), label, k, k == 0) for i, label in _input_labels(graph).items()
            for k in dyn.get(i, ())]


def _input_labels(graph) -> dict[int, str]:
    """Each non-constant graph input -> its signature name, else its tensor name."""
    names = graph.metadata.get("input_names") or {}
    return {i: names.get(i, graph.operands[i].name) for i in graph.inputs if not graph.operands[i].is_const}


def _bind_flatbuffer_dims(graph, dims: dict, showing: bool = False) -> None:
    """A dynamic dimension beyond the batch in a TF Lite / circle file: the converter wrote a
    placeholder size (usually 1) there and in every tensor it reaches, and memplan re-propagates
    only the batch through such a graph (opgraph/rebatch.py). Rather than analyse the placeholder size, it
    names the dimension (what --dim would bind) and refuses, bound or not; `showing` (`inspect`)
    only records it, at the placeholder size, in metadata `symbolic_dims`."""
    found = _flatbuffer_dims(graph)
    check_dims(dims, found)
    others = [f for f in found if not f[3]]
    if not others:
        return
    name, inp, k, _ = others[0]
    if showing and name not in dims:
        shape_of = {label: graph.operands[i].shape for i, label in _input_labels(graph).items()}
        graph.metadata["symbolic_dims"] = [(n, i, pos, shape_of[i][pos], False) for n, i, pos, _ in others]
        return
    bound = f"--dim {name}={dims[name]}: " if name in dims else ""
    raise DimsError(f"{bound}graph input '{inp}' has a dynamic dimension at position {k} (-1 in its "
                    f"shape_signature; memplan calls it '{name}'): memplan re-sizes only the batch inside a "
                    "TF Lite / circle graph, whose converter wrote a placeholder size for that dimension in "
                    "every tensor it reaches; convert the model with it fixed")
