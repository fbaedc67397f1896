"""ONNX models: the protobuf without its weight bytes (see onnx_strip), ONNX shape inference, canonical ops.

Operands are numbered in order of first appearance: graph inputs, then each node's inputs and outputs;
initializers and Constant nodes become constant operands (a Constant node is not an op, as in tflite
where such values are plain tensors). Layout is NCHW (attrs["layout"]). A symbolic dim 0 of a graph
input is the batch (it takes the batch size); any other symbolic dim must be bound by name (--dim),
before shape inference, so every shape and shape value the graph computes follows it.
"""
from __future__ import annotations

import mmap
import os
import re
import signal
import stat
import struct

from memplan_cli import ops as registry  # `registry`: functions here have an `ops` of their own, the op list
from memplan_cli.errors import ModelError
from memplan_cli.inputs import not_regular
from memplan_cli.ir.dtypes import DTYPE_SIZE
from memplan_cli.ir.graph import COMPUTED_CONSTANTS, MAX_RANK, TORCH_EXPORT, Graph, Operand, Operation
from memplan_cli.loaders import data_sized
from memplan_cli.loaders.dims import DimsError, check_dims, symbolic_dim_name, unbound_dims
from memplan_cli.loaders.mapped import sigbus_named
from memplan_cli.loaders.onnx_strip import elements, MAX_KEEP_CONSTANT, ProtobufError, SubgraphBudgetError, strip_model
from memplan_cli.loaders.params import DYNAMO_RULE, _FX_ARG, _SIG_LINE, onnx_rule, peft_train_globs
from memplan_cli.opgraph.fold import PARAMETERS_LISTED, PARAMETERS_STORED
from memplan_cli.ops.shape_only import DATA_SIZED_ONNX, SHAPE_FROM_VALUES_ONNX, SHAPE_READERS_ONNX

_DTYPE_RENAME = {"float": "float32", "double": "float64"}
MAX_VALUE_ELEMENTS = 64
# Opset 7-9 models (the ONNX zoo's exports) are converted to UPGRADE_TO with onnx.version_converter
# before shape inference: its adapters move attributes to inputs (Slice, Pad, Clip), turn Upsample into
# Resize and give Dropout's mask output a shape, so the op converters see one modern spelling. Not 13:
# its Softmax adapter reshapes through a run-time Shape that shape inference does not follow. Not
# opsets < 7: broadcasting changed meaning there and the adapters keep the old operands (measured: a
# torch PRelu export's per-channel slope would broadcast over the last axis); the converters handle
# those opsets themselves.
UPGRADE_FROM = (7, 9)
UPGRADE_TO = 12


def _dtype(code: int) -> str:
    import onnx

    try:
        name = onnx.TensorProto.DataType.Name(code).lower()
    except ValueError:
        name = f"type {code}"
    return _DTYPE_RENAME.get(name, name)


# onnx's training operators (Gradient, Adagrad, Adam, Momentum): a training step inside the file
TRAINING_DOMAIN = "ai.onnx.preview.training"


# valid ONNX values that are not tensors (TypeProto's `value` cases)
_VALUE_KINDS = {"sequence_type": "a sequence of tensors", "optional_type": "an optional value",
                "map_type": "a map", "sparse_tensor_type": "a sparse tensor"}
# a valid file (onnx's checker passes a zero dim); memplan's plans hold tensors of at least one element
_EMPTY = ", which memplan does not plan; memplan needs tensors of at least one element"


class _Bad(Exception):
    pass


class _Unsized(_Bad):
    """A tensor memplan cannot size in a file that may well be valid (onnx's checker passes an Expand to a
    shape the data gives, a custom op's output, a string tensor): said as such, not as an invalid file."""


class _NoShape(_Unsized):
    """Shape inference left a tensor without a shape, or with a dim it could not size."""


class _CannotPlan(_Bad):
    """A valid file memplan cannot plan, said with the reason (never "invalid")."""


class _DataSized(_CannotPlan):
    """A tensor whose size the data decides: the file is valid, memplan cannot size it."""



def _read_stripped(path: str):
    import onnx
    from google.protobuf.message import DecodeError

    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        with sigbus_named(path):
            data, has_graph = strip_model(mm, size)
        if not has_graph:
            raise _Bad("a protobuf without a graph: not an ONNX model")
        try:
            model = onnx.load_from_string(data)
        except DecodeError as e:
            raise _Bad(f"not an ONNX model (protobuf decode failed: {e})") from None
        keep = _wanted_float_values(model)
        if keep:  # a second pass keeps those few bytes (Resize's scales: shape inference needs them)
            with sigbus_named(path):
                data = strip_model(mm, size, keep)[0]
            model = onnx.load_from_string(data)
        return model
    except ProtobufError as e:
        raise _Bad(f"not a valid protobuf ({e}): truncated or not an ONNX model") from None
    except SubgraphBudgetError as e:
        raise ModelError(str(e), path) from None
    finally:
        mm.close()


def _wanted_float_values(model) -> frozenset:
    """Names of the small float constants the stripped model lacks that shape inference needs."""
    names = {n.input[k] for n in model.graph.node if n.domain in ("", "ai.onnx")
             for k in registry.source_facts("onnx", n.op_type).get("shape_float_inputs", ())
             if k < len(n.input) and n.input[k]}
    if not names:
        return frozenset()
    stripped = {t.name for t in model.graph.initializer if t.name in names and t.data_type not in (6, 7)}
    stripped |= {n.output[0] for n in model.graph.node if n.op_type == "Constant" and n.output
                 and n.output[0] in names}
    return frozenset(stripped)


class _Refused(Exception):
    """An external-data location memplan will not open (see `_external_file`)."""


def _shown(text: str) -> str:
    """A string from the model (a location, a tensor name) quoted and cut for one line of output."""
    return repr(text[:200] + ("..." if len(text) > 200 else ""))


def _external_file(base_real: str, location: str) -> tuple[str, tuple[int, int]] | None:
    """The resolved path and (st_dev, st_ino) of the regular file `location` names inside `base_real`
    (a folder with its symlinks resolved), or None when there is no such file. Raises _Refused for a
    location outside that tree (absolute, `..` out of it, a symlink out of it) or one that is not a
    regular file. The rule onnx's own loader applies (onnx/checker.cc), except that a symlink staying
    inside the tree is followed. Resolving a link that leads out only lstat()s its path; the file
    there is never opened."""
    if not location or "\0" in location:
        raise _Refused("external data outside the model's folder")
    if os.path.isabs(location):
        raise _Refused("external data outside the model's folder (an absolute path)")
    real = os.path.realpath(os.path.join(base_real, location))
    if os.path.commonpath([base_real, real]) != base_real or real == base_real:
        raise _Refused("external data outside the model's folder")
    try:
        st = os.stat(real)
    except (OSError, ValueError):
        return None  # missing inside the folder: the values are unknown, as for stripped weights
    if not stat.S_ISREG(st.st_mode):
        raise _Refused(f"external data is {not_regular(real) or 'not a regular file'}, not a data file")
    return real, (st.st_dev, st.st_ino)


def _read_external(real: str, ident: tuple[int, int], offset: int, nbytes: int) -> bytes | None:
    """`nbytes` at `offset` of the file checked by `_external_file`, or None when they are not all there.
    O_NOFOLLOW and O_NONBLOCK with the identity check after opening: a file swapped for a link, a FIFO
    or a device between the check and the open is refused unread."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(real, flags)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != ident:
            raise _Refused("external data changed while memplan read it")
        if offset > st.st_size or nbytes > st.st_size - offset:
            return None
        raw = os.pread(fd, nbytes, offset)
        return raw if len(raw) == nbytes else None
    except OSError:
        return None
    finally:
        os.close(fd)


def _inline_small_external(model, base_dir: str) -> list[str]:
    """Read the few bytes of small int tensors stored in external files (shape inference needs them).

    Only regular files inside the model's folder are opened (`_external_file`); weights are never
    opened at all. Returns the problems with the locations refused, one line each: the caller goes on
    without those values when it can still size every tensor, and reports the first one otherwise."""
    refused = []
    base_real = os.path.realpath(base_dir)
    for t in model.graph.initializer:
        n = elements(t.dims, MAX_VALUE_ELEMENTS)
        if t.data_location != 1 or t.data_type not in (6, 7) or n > MAX_VALUE_ELEMENTS or n < 0:
            continue
        info = {e.key: e.value for e in t.external_data}
        loc = info.get("location", "")
        try:
            found = _external_file(base_real, loc)
        except _Refused as e:
            refused.append(f"{e}: {_shown(loc)} (tensor {_shown(t.name)})")
            continue
        if found is None:
            # a copy of the .onnx without its data file: the weights are never needed, but a small
            # integer (a ReduceMean's axes, a Reshape's target) may be; named if a shape is left unknown
            refused.append(f"external data file missing: {_shown(loc)} (tensor {_shown(t.name)}, a small "
                           "integer constant shape inference reads; keep the data file beside the model)")
            continue
        nbytes = n * (4 if t.data_type == 6 else 8)
        try:
            offset = int(info.get("offset", 0) or 0)
            length = int(info["length"]) if info.get("length") else nbytes
        except ValueError:
            continue
        if offset < 0 or length != nbytes:
            continue
        try:
            raw = _read_external(*found, offset, nbytes)
        except _Refused as e:
            refused.append(f"{e}: {_shown(loc)} (tensor {_shown(t.name)})")
            continue
        if raw is None:
            continue
        del t.external_data[:]
        t.data_location = 0
        t.raw_data = raw
    return refused


def _fix_inputs(model, init_names: set[str], batch_size: int | None, dims: dict | None = None,
                symbolic_default: int | None = None, found_out: list | None = None) -> tuple[bool | str, list]:
    """Give every graph input a static shape before shape inference: a symbolic dim 0 is the batch
    (`batch_size`), any other symbolic dim takes its value from `dims` (name -> value, ONNX Runtime's
    free-dimension override by name; an unnamed one is called `<input>_dim<position>`). An unbound
    one takes `symbolic_default` (for showing the file: `inspect`), else the file is refused. Returns
    whether the batch dim was symbolic (its name when the file gives one) and the other symbolic
    dims as (name, input, position, value, bound). `found_out`: a list that receives the dims found
    instead of checking `dims` against them here (the caller checks once the sizes computed from the
    data are named too: data_sized.py)."""
    dims = dict(dims or {})
    check = found_out is None
    found = [] if check else found_out  # (name, input, position, is_batch)
    for vi in model.graph.input:
        if vi.name in init_names:
            continue
        tt = vi.type.tensor_type
        if not vi.type.HasField("tensor_type"):
            kind = vi.type.WhichOneof("value")
            if kind is None:
                raise _Bad(f"graph input '{vi.name}' has no type")
            # a sequence, an optional, a map: valid ONNX values memplan does not read
            raise _CannotPlan(f"graph input '{vi.name}' is {_VALUE_KINDS.get(kind, kind)}, not a tensor; "
                              "memplan reads tensors only")
        if not tt.HasField("shape"):
            raise _Bad(f"graph input '{vi.name}' has no shape")
        for k, d in enumerate(tt.shape.dim):
            if d.HasField("dim_value"):
                if d.dim_value == 0:
                    raise _CannotPlan(f"graph input '{vi.name}' has a zero dimension at position {k} (an empty "
                                      f"tensor){_EMPTY}")
                if d.dim_value < 0:
                    raise _Bad(f"graph input '{vi.name}' has a negative dimension {d.dim_value} at position {k}")
                continue
            found.append((d.dim_param or symbolic_dim_name(vi.name, k), vi.name, k, k == 0))
    batch_names = {name for name, _, _, is_batch in found if is_batch}
    # a --dim naming the batch is refused here; one naming no input's dim may name a data-sized one
    check_dims(dims if check else {k: v for k, v in dims.items() if k in batch_names}, found)
    unbound = [f for f in found if f[0] not in batch_names and f[0] not in dims]
    if unbound and symbolic_default is None:
        raise DimsError(unbound_dims(unbound))
    dynamic = False
    symbolic = []
    for vi in model.graph.input:
        if vi.name in init_names:
            continue
        for k, d in enumerate(vi.type.tensor_type.shape.dim):
            if d.HasField("dim_value"):
                continue
            name = d.dim_param or symbolic_dim_name(vi.name, k)
            if name in batch_names:
                if batch_size is None and symbolic_default is None:
                    label = f"'{d.dim_param}'" if d.dim_param else "an unnamed dynamic dim"
                    # not a bad file: a setup to complete (the batch is the user's to choose)
                    raise DimsError(f"graph input '{vi.name}' has a symbolic batch dimension {label}: "
                                    "give the batch with -b N (--batch-size N)")
                dynamic = dynamic or d.dim_param or True  # the file's name for it, when it has one
                d.dim_value = batch_size if batch_size is not None else symbolic_default
            else:
                d.dim_value = dims.get(name, symbolic_default)
                symbolic.append((name, vi.name, k, d.dim_value, name in dims))
    # inferred shapes must come from the fixed inputs, not from stale symbolic annotations
    del model.graph.value_info[:]
    for vo in model.graph.output:
        if vo.type.HasField("tensor_type"):
            vo.type.tensor_type.ClearField("shape")
    return dynamic, symbolic


def _shape_of(vi, what: str) -> tuple[tuple[int, ...], str]:
    tt = vi.type.tensor_type
    if not vi.type.HasField("tensor_type") or not tt.HasField("shape"):
        raise _NoShape(f"no shape for {what} (shape inference could not infer it)")
    if len(tt.shape.dim) > MAX_RANK:
        raise _Bad(f"{what} has {len(tt.shape.dim):,d} dimensions, over the {MAX_RANK} memplan reads")
    shape = []
    for k, d in enumerate(tt.shape.dim):
        if not d.HasField("dim_value"):
            label = f"'{d.dim_param}'" if d.dim_param else "an unknown dim"
            raise _NoShape(f"{what} has {label} at position {k} after shape inference; memplan needs static shapes")
        if d.dim_value < 0:
            raise _Bad(f"{what} has a negative dimension {d.dim_value}")
        shape.append(d.dim_value)
    return tuple(shape), _dtype(tt.elem_type)


def _small_int_value(t) -> tuple | None:
    from onnx import numpy_helper

    n = elements(t.dims, MAX_VALUE_ELEMENTS)
    if t.data_type not in (6, 7) or n > MAX_VALUE_ELEMENTS or t.data_location == 1:
        return None
    try:
        return tuple(int(v) for v in numpy_helper.to_array(t).reshape(-1))
    except Exception:  # data stripped or malformed: the value is unknown, shapes still come from inference
        return None


def _small_float_value(t) -> tuple | None:
    """The values of a float constant whose bytes the stripper kept (a scalar: an epsilon, a scale; a
    small Constant node: a traced buffer), so that `memplan verify` runs the step with the file's own
    values: random ones turn NF-ResNet's signal-preserving scales into growth that overflows."""
    from onnx import numpy_helper

    n = elements(t.dims, MAX_KEEP_CONSTANT)

    if t.data_type not in (1, 10, 11) or t.data_location == 1 or n > MAX_KEEP_CONSTANT:
        return None
    try:
        arr = numpy_helper.to_array(t).reshape(-1)
    except Exception:  # data stripped (a weight): unknown
        return None
    return tuple(float(v) for v in arr) if arr.size == n else None


def _attr(node) -> dict:
    from onnx import helper

    out = {}
    for a in node.attribute:
        v = helper.get_attribute_value(a)
        out[a.name] = v.decode() if isinstance(v, bytes) else v
    return out


def _outer_reads(node) -> list[str]:
    """The names `node`'s subgraphs (If branches, Loop and Scan bodies, nested at any depth) read from
    the scope around the node, in order of first read: inputs the node takes without listing them.
    Each subgraph is walked once; what it leaves unresolved goes up one level."""
    from onnx import AttributeProto

    def subgraphs(n):
        for a in n.attribute:
            if a.type == AttributeProto.GRAPH:
                yield a.g
            elif a.type == AttributeProto.GRAPHS:
                yield from a.graphs

    def unresolved(graph) -> dict:
        defined = {vi.name for vi in graph.input} | {t.name for t in graph.initializer}
        defined |= {t.values.name for t in graph.sparse_initializer}
        out: dict[str, None] = {}
        for n in graph.node:
            names = list(n.input)
            for sub in subgraphs(n):
                names += unresolved(sub)
            out.update((x, None) for x in names if x and x not in defined)
            defined.update(n.output)
        out.update((vo.name, None) for vo in graph.output if vo.name not in defined)
        return out

    found: dict[str, None] = {}
    for sub in subgraphs(node):
        found.update(unresolved(sub))
    return list(found)


class _Builder:
    def __init__(self, model, folded_from: dict | None = None, written: dict | None = None):
        self.model = model
        self.written = written or {}  # _as_written: attributes read off the file before the fold
        g = model.graph
        self.index: dict[str, int] = {}
        self.operands: list[Operand] = []
        self.value_info = {vi.name: vi for vi in list(g.input) + list(g.value_info) + list(g.output)}
        self.consts = {t.name: t for t in g.initializer}
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
        # torch.onnx writes every parameter as an initializer; its Constant nodes hold values traced
        # from the forward pass or non-persistent buffers (an anti-aliasing filter, SwinV2's
        # coordinate table, batch_norm's mean and variance in weight standardization): buffers
        self.traced: set[str] = set()
        self.constants_are_buffers = model.producer_name == "pytorch"

        self.param_rule, self.param_kind, self.param_sources = onnx_rule(model, folded_from)

    def operand(self, name: str) -> int:
        if name == "":
            return -1
        if name in self.index:
            return self.index[name]
        k = len(self.operands)
        if name in self.consts:
            t = self.consts[name]
            if len(t.dims) > MAX_RANK:
                raise _Bad(f"initializer '{name}' has {len(t.dims):,d} dimensions, over the {MAX_RANK} memplan reads")
            shape = tuple(int(d) for d in t.dims)
            if any(d < 0 for d in shape):
                raise _Bad(f"initializer '{name}' has a negative dimension in {list(shape)}")
            kind = self.param_kind.get(name)
            op = Operand(k, name, shape, _dtype(t.data_type), is_const=True,
                         value=_small_int_value(t) or _small_float_value(t),
                         computed=name in self.traced or kind == "buffer",
                         assumed=kind == "unknown" and name not in self.traced,
                         sources=self.param_sources.get(name, ()))
        elif name in self.value_info:
            try:
                shape, dtype = _shape_of(self.value_info[name], f"tensor '{name}'")
            except _NoShape:
                self._data_sized(name)
                raise
            op = Operand(k, name, shape, dtype)
        else:
            self._data_sized(name)
            raise _Unsized(f"no shape for tensor '{name}' (shape inference could not infer it)")
        if op.dtype == "string":
            raise _Unsized(f"tensor '{name}' has dtype string: its bytes are the text it holds, which no "
                           "file records, so memplan cannot size it")
        if op.dtype not in DTYPE_SIZE:
            raise _Unsized(f"tensor '{name}' has dtype {op.dtype}, which memplan cannot size")
        self.index[name] = k
        self.operands.append(op)
        return k

    def _data_sized(self, name: str) -> None:
        """Refuse a tensor left unsized because the data decides its size (a valid file), naming why;
        or a value that is a sequence of tensors (a Python list of the model: `nonzero(as_tuple=True)`),
        which memplan does not read."""
        node = next((n for n in self.model.graph.node if name in n.output), None)
        vi = self.value_info.get(name)
        if node is None:
            return
        what = f"{node.op_type} '{node.name}'" if node.name else node.op_type
        if vi is not None and vi.type.HasField("sequence_type"):
            raise _DataSized(f"'{name}' ({what}) is a sequence of tensors (a list in the source model), which "
                             "memplan does not read; memplan needs tensors of static shapes")
        if node.op_type in DATA_SIZED_ONNX:
            # a mixture of experts' Split by tokens per expert, a NonZero of a mask
            raise _DataSized(f"tensor '{name}' ({what}) has a size computed from the data, which no file "
                             "records; memplan needs static shapes")
        if node.domain == TRAINING_DOMAIN:
            # onnx's Gradient / optimizer ops: the file holds its own training step
            raise _CannotPlan(f"tensor '{name}' ({what}, domain {TRAINING_DOMAIN}) comes from a training "
                              "step written into the file, which memplan does not read; memplan plans "
                              "training from the forward model alone")
        source = self._data_source(node)
        if source is not None:
            raise _DataSized(f"tensor '{name}' ({what}) has a shape computed from the data (the values of "
                             f"input '{source}'), which no file records; memplan needs static shapes")
        if node.domain not in ("", "ai.onnx") or (registry.onnx_converter(node.op_type) is None
                                                  and registry.get(node.op_type) is None):
            # the op is the problem, not its shape: a custom op (com.microsoft's fused ops), or a
            # standard one onnx sizes only through a function body it does not infer (GroupNormalization)
            local = any((f.domain, f.name) == (node.domain, node.op_type) for f in self.model.functions)
            kind = ("" if node.domain in ("", "ai.onnx") else
                    f" (a function the file defines, domain {node.domain})" if local else
                    f" (domain {node.domain}, not a standard ONNX op)")
            raise _CannotPlan(f"op {what}{kind} has no rule in memplan, and onnx's shape inference cannot "
                              f"size its output '{name}'")
        why = self._rejected(node)
        if why is not None:
            raise _Bad(why)

    def _rejected(self, node) -> str | None:
        """Why onnx's own shape inference, run strictly on this one node with the shapes its inputs take
        (after the batch and dims are set), rejects it (a MatMul of (4, 4, 32, 16) by (4, 16, 32, 4)):
        the graph cannot run with those shapes. None when an input has no shape or onnx accepts it."""
        import onnx
        from onnx import helper, shape_inference

        if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
            return None  # a subgraph reads values of the outer graph, which one node alone does not hold
        ins, shapes = [], []
        for i in (x for x in node.input if x):
            if i in self.consts:
                t = self.consts[i]
                shape, dtype = tuple(int(d) for d in t.dims), t.data_type
            elif i in self.value_info:
                try:
                    shape = _shape_of(self.value_info[i], i)[0]
                except _NoShape:
                    return None
                dtype = self.value_info[i].type.tensor_type.elem_type
            else:
                return None
            ins.append(helper.make_tensor_value_info(i, dtype, list(shape)))
            shapes.append(shape)
        outs = [helper.make_tensor_value_info(o, 0, None) for o in node.output if o]
        one = helper.make_model(helper.make_graph([node], "node", ins, outs),
                                opset_imports=list(self.model.opset_import))
        try:
            shape_inference.infer_shapes(one, check_type=False, strict_mode=True)
        except (onnx.shape_inference.InferenceError, RuntimeError, ValueError) as e:
            said = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            said = said.rsplit("[ShapeInferenceError]", 1)[-1].strip() or said
            what = f"{node.op_type} '{node.name}'" if node.name else node.op_type
            given = ", ".join(str(s) for s in shapes)
            return (f"{what} cannot run on the shapes its inputs take here ({given}): onnx's shape "
                    f"inference says \"{said}\"; the graph does not compute with these shapes, so memplan "
                    "cannot plan it")
        return None

    def _data_source(self, node) -> str | None:
        """The graph input whose values (not only its shape) set `node`'s output shape, if any."""
        if node.domain not in ("", "ai.onnx"):
            return None
        g = self.model.graph
        inputs = {vi.name for vi in g.input} - set(self.consts)
        producer = {o: n for n in g.node for o in n.output}
        # the first value input is named first (popped last-in first-out)
        todo = [node.input[i] for i in SHAPE_FROM_VALUES_ONNX.get(node.op_type, ()) if i < len(node.input)][::-1]
        seen: set[str] = set()
        while todo:
            v = todo.pop()
            if not v or v in seen:
                continue
            seen.add(v)
            if v in inputs:
                return v
            p = producer.get(v)
            if p is not None and p.op_type not in SHAPE_READERS_ONNX:
                todo.extend(p.input)
        return None

    def empty_const(self, name: str) -> bool:
        """An empty 1-d constant: an optional input not given (Resize's roi). An empty constant of
        more dimensions is a value with no element (the indices of a mask nothing selected)."""
        t = self.consts.get(name)
        return t is not None and len(t.dims) == 1 and int(t.dims[0]) == 0

    def not_given(self, node, k: int) -> bool:
        """Input k of `node` is an empty 1-d constant standing for an optional input not given. Where
        ONNX's schema makes the input required, the empty vector is a value: ConstantOfShape's or
        Expand's shape `[]` (a scalar; dynamo's `new_zeros(x, [])`)."""
        if not self.empty_const(node.input[k]):
            return False
        if node.domain not in ("", "ai.onnx"):
            return True
        import onnx.defs

        try:
            formal = onnx.defs.get_schema(node.op_type, self.opset, "").inputs
        except Exception:  # no schema at this opset: keep the optional-input reading
            return True
        if k >= len(formal):
            return formal[-1].option != onnx.defs.OpSchema.FormalParameterOption.Variadic if formal else True
        return formal[k].option == onnx.defs.OpSchema.FormalParameterOption.Optional

    def build(self) -> Graph:
        g = self.model.graph
        inputs = [self.operand(vi.name) for vi in g.input if vi.name not in self.consts]
        for i in inputs:
            self.operands[i].is_input = True
        ops: list[Operation] = []
        read = {n for node in g.node for n in node.input} | {vo.name for vo in g.output}
        for node in g.node:
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
                self.constant_node(node)
                continue
            # an empty constant (a dim of 0) stands for an optional input not given: Resize's roi,
            # or its scales when sizes are given, as torch.onnx writes them
            ins = [-1 if n and self.not_given(node, k) else self.operand(n) for k, n in enumerate(node.input)]
            outs = [self.operand(n) for n in self.shaped_outputs(node, read)]
            canon = self.registry_canonical(node, ins, outs)
            if canon is not None:
                typ, attrs = canon.type, canon.attrs
                if node.output and node.output[0] in self.written:
                    attrs = {**attrs, **self.written[node.output[0]]}
                ins = ins if canon.inputs is None else canon.inputs
                outs = outs if canon.outputs is None else canon.outputs
            else:
                typ, attrs = self.canonical(node)
                # what an If / Loop / Scan body reads from around it is an input too: it lives until
                # the node runs, and a gradient through it meets an op memplan cannot train
                ins += [self.operand(n) for n in _outer_reads(node) if n not in node.input]
            # an absent output no converter filled (ONNX Attention's ("Y", "", "", "qk_matmul_output")
            # in an op memplan does not know) is left out, as before
            outs = [o for o in outs if o >= 0]
            ops.append(Operation(len(ops), typ, ins, outs, attrs, source_type=node.op_type, name=node.name,
                                 scope=_name_scope(node), call=_fx_call(node)))

        for fuse in registry.onnx_fusions():
            ops = fuse(ops, self.operands)
        outputs = [self.operand(vo.name) for vo in g.output]
        for o in outputs:
            self.operands[o].is_output = True
        unused = [t.name for t in g.initializer if t.name not in self.index]
        graph = Graph(self.operands, ops, inputs, outputs, name=g.name, source_format="onnx")
        graph.metadata["parameter_rule"] = self.param_rule
        if self.param_rule == DYNAMO_RULE:
            graph.metadata[PARAMETERS_LISTED] = True
        if self.model.producer_name == "pytorch":
            graph.metadata[PARAMETERS_STORED] = True
            # torch.onnx (TorchScript) writes the initializers in the module's state_dict order, the
            # registration order eager's optimizer steps in (profiles/torch/replay.py); the names it
            # made itself (`onnx::MatMul_12`: a folded transpose) say nothing of it
            graph.metadata["state_dict_order"] = [t.name for t in g.initializer if not t.name.startswith("onnx::")]

        peft = peft_train_globs([t.name for t in g.initializer] + [s for v in self.param_sources.values() for s in v])
        if peft:  # what trains, as the file's peft adapters say (flags win, as over circle metadata)
            graph.metadata["training"] = {"train": peft}
        if unused:
            graph.warnings.append(f"{len(unused)} initializer(s) no node uses were left out "
                                  f"(first: '{unused[0]}')")
        return graph

    def shaped_outputs(self, node, read: set) -> list[str]:
        """The node's outputs, without trailing ones nothing reads that shape inference left without
        a shape (opset <= 11 Dropout's mask, whose shape opset 9 does not infer): an optional output
        nobody uses is absent, not an error. An output something reads still needs its shape. An
        output left out before a later one (an LSTM without Y but with Y_h) stays in its place as
        absent (-1) for the op's converter, so positions keep their meaning."""
        names = list(node.output)
        while names and not names[-1]:
            names.pop()
        while len(names) > 1 and names[-1] not in read and names[-1] not in self.consts:
            vi = self.value_info.get(names[-1])
            if vi is not None and vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
                break
            names.pop()
        return names

    def registry_canonical(self, node, ins, outs):
        """The op registry's converter for this node (memplan_cli/ops/), or None."""
        if node.domain not in ("", "ai.onnx"):
            return None
        fn = registry.onnx_converter(node.op_type)
        if fn is None:
            return None
        names = list(node.input)

        def values(k):
            return self.small_values(names[k]) if k < len(names) and names[k] else None

        view = registry.OnnxNode(node.op_type, node.domain, node.name, _attr(node), list(ins), list(outs),
                                 self.operands, self.opset, values)
        return fn(view)

    def small_values(self, name: str) -> tuple | None:
        """The values of a small constant (<= MAX_VALUE_ELEMENTS, any numeric dtype), or None."""
        from onnx import numpy_helper

        t = self.consts.get(name)
        if t is None or t.data_location == 1:
            return None
        n = elements(t.dims, MAX_VALUE_ELEMENTS)
        if n > MAX_VALUE_ELEMENTS:
            return None
        try:
            arr = numpy_helper.to_array(t).reshape(-1)
        except Exception:  # stripped or malformed data: unknown
            return None
        if arr.size != n:
            return None
        return tuple(v.item() for v in arr)

    def constant_node(self, node) -> None:
        a = {x.name: x for x in node.attribute}
        if "value" not in a and node.output:
            # value_int(s) / value_float(s): torch.onnx's dynamo export without its optimizer writes them
            from onnx import TensorProto, helper

            for key, dtype in (("value_int", TensorProto.INT64), ("value_ints", TensorProto.INT64),
                               ("value_float", TensorProto.FLOAT), ("value_floats", TensorProto.FLOAT)):
                if key in a:
                    v = helper.get_attribute_value(a[key])
                    scalar = not key.endswith("s")
                    t = helper.make_tensor(node.output[0], dtype, [] if scalar else [len(v)], [v] if scalar else v)
                    a["value"] = helper.make_attribute("value", t)
                    break
        if "value" not in a or not node.output:
            raise _Bad(f"Constant node '{node.name or node.output[0]}' without a tensor value is not supported")
        t = a["value"].t
        t.name = node.output[0]
        self.consts[t.name] = t
        if self.constants_are_buffers:
            self.traced.add(t.name)

    def canonical(self, node) -> tuple[str, dict]:
        """An op no registry family converts keeps its ONNX type and its plain attributes."""
        a = _attr(node)
        return node.op_type, a if all(isinstance(v, (int, float, str)) or _int_list(v) for v in a.values()) else {}


def _name_scope(node) -> str:
    """The module path torch.onnx's dynamo exporter records for a node (`pkg.torch.onnx.name_scopes`),
    e.g. "model.layers.0.self_attn.q_proj"; "" when absent. Used to match ops by module name."""
    for p in node.metadata_props:
        if p.key == "pkg.torch.onnx.name_scopes":
            v = p.value.strip("[]").replace("'", "").replace('"', "")
            parts = [x.strip() for x in v.split(",") if x.strip()]
            if not parts:
                return ""
            # one entry per nesting level: either full paths (the last is the innermost) or local names
            if all(b.startswith(a) for a, b in zip(parts, parts[1:])):
                return parts[-1]
            return ".".join(parts)
    return ""


def _fx_call(node) -> str:
    """The aten call torch.onnx's dynamo exporter recorded for a node (`pkg.torch.onnx.fx_node`, e.g.
    "%y : [num_users=1] = call_function[target=torch.ops.aten.x.default](args = (...), kwargs = {})"),
    as "y = aten.x.default(args = (...), kwargs = {})"; "" when absent."""
    for p in node.metadata_props:
        if p.key == "pkg.torch.onnx.fx_node":
            head, found, rest = p.value.partition("call_function[target=")
            if not found:
                return ""
            target, _, args = rest.partition("]")
            return f"{head.split(' : ')[0].lstrip('%')} = {target.removeprefix('torch.ops.')}{args}"
    return ""


STACK_KEY = "pkg.torch.onnx.stack_trace"
# a stack frame's source line calling a custom autograd Function (`GeLUFunction.apply(x)`)
_APPLY = re.compile(r"\b([A-Za-z_]\w*)\.apply\(")


def _autograd_functions(model) -> dict[str, str]:
    """{node name: the custom torch.autograd.Function whose forward wrote it}: the Python stack the
    dynamo exporter records for a node (`pkg.torch.onnx.stack_trace`) calls `Fn.apply(...)`, and the
    next frame is that Function's `forward`. Such a node's backward is the Function's own code, which
    the file does not describe (`--profile torch` names it as estimated)."""
    out = {}
    for node in model.graph.node:
        trace = next((p.value for p in node.metadata_props if p.key == STACK_KEY), "")
        lines = [ln.strip() for ln in trace.splitlines() if ln.strip()]
        for k, line in enumerate(lines):
            m = _APPLY.search(line) if not line.startswith("File ") else None
            if m and k + 1 < len(lines) and lines[k + 1].startswith("File ") and lines[k + 1].endswith(" in forward"):
                out[node.name] = m.group(1)
                break
    return out


REWRITE_TAG = "pkg.onnxscript.rewriter.rule_name"
SIGNATURE_KEY = "pkg.torch.export.ExportedProgram.graph_signature"


# a node whose recorded stack starts in code torch.fx generated: the body of a higher-order op that
# torch.export made of a `with torch.no_grad()` / `torch.enable_grad()` / `torch.autocast(...)` block
# (wrap_with_set_grad_enabled, wrap_with_autocast) and the exporter inlined; the file does not say which
_INLINED_REGION = re.compile(r'File "(<eval_with_key>[^"]*)"')


def _export_rewrites(model) -> dict | None:
    """What torch.onnx's dynamo exporter recorded about its optimizer's rewrites, for `--profile torch`
    (profiles/torch/export.py reads it back): the graph signature (placeholder -> (PARAMETER |
    BUFFER | CONSTANT_TENSOR, target)); each node the optimizer rewrote: its name, the rule names and
    the fx node it came from; the parameters each node's fx node takes (by placeholder); what each
    folded constant was computed from. None for a file without a graph signature."""
    sig = next((p.value for p in model.graph.metadata_props if p.key == SIGNATURE_KEY), None)
    if sig is None:
        return None

    placeholders = {ph: (kind, target) for ph, kind, target in _SIG_LINE.findall(sig)}
    params = {ph for ph, (kind, _) in placeholders.items() if kind == "PARAMETER"}
    nodes, reads, inlined = [], {}, {}
    stacks: dict[str, int] = {}  # each distinct recorded stack -> its number
    lines: dict[str, int] = {}  # node -> the number of the stack it records (the source line it ran)
    line_text: list[str] = []  # per stack number: its last code line
    for node in model.graph.node:
        md = {p.key: p.value for p in node.metadata_props}
        fx = md.get("pkg.torch.onnx.fx_node", "")
        trace = md.get("pkg.torch.onnx.stack_trace", "")
        if trace and node.name:
            if trace not in stacks:
                stacks[trace] = len(stacks)
                line_text.append(trace.strip().splitlines()[-1].strip()[:80])
            lines[node.name] = stacks[trace]
        region = _INLINED_REGION.match(trace)
        if region and node.name:
            inlined[node.name] = region.group(1)
        if REWRITE_TAG in md:
            nodes.append({"node": node.name, "op_type": node.op_type,
                          "rules": tuple(r.strip() for r in md[REWRITE_TAG].split(",") if r.strip()),
                          "fx_node": fx})
        ph = tuple(a for a in _FX_ARG.findall(fx.split("](", 1)[-1]) if a in params)
        if ph and node.name:
            reads[node.name] = ph
    # what each folded constant was computed from (the optimizer's constant folding records it)
    folded = {}
    for vi in model.graph.value_info:
        for p in vi.metadata_props:
            if p.key == "pkg.onnxscript.optimizer.folded_from":
                folded[vi.name] = tuple(re.findall(r"'([^']*)'", p.value))
    unread = _unread_parameters(model, placeholders, folded)
    tied = _maybe_tied(model, placeholders, unread, folded)
    certain = [t for t in unread if t not in tied]
    return {"signature": placeholders, "rewritten": nodes, "param_args": reads, "folded_from": folded,
            "unread": unread, "unread_modules": _unread_modules(placeholders, certain), "tied": tied,
            "inlined": inlined, "lines": lines, "line_text": line_text}


def _unread_parameters(model, placeholders: dict, folded: dict) -> list[str]:
    """The signature's parameters (targets) of the modules the traced forward never entered: no
    parameter of the module is held under its name, named by a node's fx call or by a folded
    constant's record, and no node was recorded inside the module (`pkg.torch.onnx.name_scopes`).
    Eager holds them all the same (Fuyu's vision embedding under a text-only forward, a decoder's
    cross-attention without an encoder); the file says nothing of their sizes. A parameter read under
    another name (a module shared by several parents: torch.export lists every name) or whose op the
    exporter's optimizer merged with an equal one looks the same."""
    held = {t.name for t in model.graph.initializer} | {o for n in model.graph.node if n.op_type == "Constant"
                                                        for o in n.output}
    named, scopes = set(), set()
    for node in model.graph.node:
        for p in node.metadata_props:
            if p.key == "pkg.torch.onnx.fx_node":
                named.update(_FX_ARG.findall(p.value))
            elif p.key == "pkg.torch.onnx.name_scopes":
                scopes.update(x.strip().strip("'\"") for x in p.value.strip("[]").split(","))
    named.update(src for srcs in folded.values() for src in srcs)
    modules: dict[str, list] = {}
    for ph, (kind, target) in placeholders.items():
        if kind == "PARAMETER":
            modules.setdefault(target.rpartition(".")[0], []).append((ph, target))
    out = []
    for module, params in modules.items():
        if any(t in held or ph in held or ph in named or t in named for ph, t in params):
            continue
        if module and any(s == module or s.startswith(module + ".") for s in scopes):
            continue
        out.extend(t for _, t in params)
    return out


def _scopes(node) -> list[str]:
    """The module paths a node was recorded inside (`pkg.torch.onnx.name_scopes`, outermost first; the
    list's last entry is the fx node's own name, not a module)."""
    for p in node.metadata_props:
        if p.key == "pkg.torch.onnx.name_scopes":
            return [x.strip().strip("'\"") for x in p.value.strip("[]").split(",")][:-1]
    return []


def _maybe_tied(model, placeholders: dict, unread: list[str], folded: dict) -> dict[str, str]:
    """Unread parameters that may be a tied parameter listed under another name: {unread target: the
    target the file reads}. torch.export lists a tensor held by several modules under every name
    (BART's `model.shared`, `model.encoder.embed_tokens`, `model.decoder.embed_tokens` and `lm_head`
    hold one table) and its graph reads it under one of them; a module the forward never enters
    (`model.shared`) then looks unread. The file shows a tie where an op recorded inside module S
    reads another module's parameter `M.leaf` while S's own `S.leaf`, listed, is read by no op under
    its name (the encoder's lookup reading `lm_head.weight`). An unread module that holds nothing but
    such leaves and whose parent holds read parameters (a module of its own beside them, not part of
    a tower none of whose parameters is read) may be that tensor under another name: the file cannot
    tell (it gives no size), so it is named apart, not as unread."""
    if not unread:
        return {}
    params = {ph: t for ph, (kind, t) in placeholders.items() if kind == "PARAMETER"}
    targets = set(params.values())
    # read under its own name: held as an initializer, named by a node's call or by a folded constant
    by_name: set[str] = {t.name for t in model.graph.initializer} | {x for srcs in folded.values() for x in srcs}
    calls: list[tuple[list, tuple]] = []
    for node in model.graph.node:
        fx = next((p.value for p in node.metadata_props if p.key == "pkg.torch.onnx.fx_node"), "")
        read = tuple(params[a] for a in _FX_ARG.findall(fx.split("](", 1)[-1]) if a in params)
        by_name.update(read)
        if read:
            calls.append((_scopes(node), read))
    shared: dict[str, str] = {}  # leaf name -> the target read in another module's place
    for scopes, read in calls:
        inner = scopes[-1] if scopes else ""
        for t in read:
            module, _, leaf = t.rpartition(".")
            own = f"{inner}.{leaf}"
            if (inner and module != inner and not module.startswith(inner + ".") and own in targets
                    and own not in by_name):
                shared.setdefault(leaf, t)
    if not shared:
        return {}
    gone = set(unread)
    modules: dict[str, list] = {}
    for t in unread:
        modules.setdefault(t.rpartition(".")[0], []).append(t.rpartition(".")[2])
    out = {}
    for module, leaves in modules.items():
        parent = module.rpartition(".")[0]
        beside_read = any(t.startswith(parent + ".") if parent else True for t in targets - gone)
        if module and beside_read and all(leaf in shared for leaf in leaves):
            # every parameter the signature lists under this module is one of those leaves
            if all(t.rpartition(".")[0] != module or t.rpartition(".")[2] in shared for t in targets):
                out.update({f"{module}.{leaf}": shared[leaf] for leaf in leaves})
    return out


def _unread_modules(placeholders: dict, unread: list[str]) -> list[str]:
    """The outermost modules whose every parameter the graph signature lists is unread (git's
    `m.git.image_encoder` and `m.git.visual_projection` beside its read `m.git.encoder`): what the
    report names instead of the first modules of a long list. A parameter held directly by a module
    whose other parameters are read is not unread (`_unread_parameters`), so every unread one has one."""
    if not unread:
        return []
    targets = [t for kind, t in placeholders.values() if kind == "PARAMETER"]
    gone = set(unread)
    read_under: set[str] = set()  # every module that holds a read parameter, at any depth
    for t in targets:
        if t not in gone:
            parts = t.split(".")
            read_under.update(".".join(parts[:k]) for k in range(1, len(parts)))
    out = []
    for t in unread:
        parts = t.split(".")
        # the outermost ancestor holding no read parameter (the module itself at the least)
        outer = next((".".join(parts[:k]) for k in range(1, len(parts))
                      if ".".join(parts[:k]) not in read_under), t)
        if outer not in out:
            out.append(outer)
    return sorted(out)


# the attribute names transformers gives the language part of a composite (multimodal) model: every
# class of transformers 5.24 that names a submodule `language_model` holds vision or audio towers or
# projectors beside it (or, in Gemma 4's three, may by its config); `text_model` is also the text
# tower held at the top of six text-only classes (CLIPTextModelWithProjection, OwlViTTextModel, ...),
# none of which a task class holds as `model`, where the composites' `text_model` sits (ModernVBERT,
# Idefics3, SmolVLM: `model.text_model`)
_LANGUAGE_PART = "language_model"
_TEXT_PART = "text_model"


def _part_of(name: str) -> str | None:
    """The composite's language part a parameter's module path sits under, if any."""
    parts = name.split(".")
    for i, p in enumerate(parts[:-1]):
        if p == _LANGUAGE_PART or (p == _TEXT_PART and i > 0 and parts[i - 1] == "model"):
            return ".".join(parts[:i + 1])
    return None


def _composite(model, rewrites: dict | None) -> dict | None:
    """The language part of a composite model, when it is all of the composite the file holds: the
    parameters the file reads sit under one `language_model` (or `model.text_model`) and none under
    another part of its parent (a head outside the parent, the task class's `lm_head` or `classifier`,
    may be there). Eager holds the other parts' parameters all step (a text-only forward never enters
    a vision or audio tower); the file gives no size. A dynamo file's graph signature lists them
    (`other_parts`: the parent's other children the unread parameters sit under; none listed: the model
    has no other part, so None); a TorchScript file keeps no trace of them."""
    if rewrites is not None:
        unread = set(rewrites.get("unread") or ())
        targets = [t for kind, t in rewrites["signature"].values() if kind == "PARAMETER"]
        read = [t for t in targets if t not in unread]
    else:
        # module paths only: the exporter's own names (`onnx::MatMul_12`, `/m/Constant_output_0`) say
        # nothing of where a tensor sits
        unread, read = set(), [t.name for t in model.graph.initializer
                               if "." in t.name and "/" not in t.name and "::" not in t.name]
    found = {_part_of(t) for t in read}
    if len(found - {None}) != 1:
        return None
    part = next(p for p in found if p is not None)
    parent = part.rpartition(".")[0]
    under = parent + "." if parent else ""
    if any(t.startswith(under) and not t.startswith(part + ".") for t in read):
        return None  # the file reads another part of the composite too
    out = {"language_part": part}
    if rewrites is not None:
        others = sorted({under + t[len(under):].split(".")[0] for t in unread
                         if t.startswith(under) and not t.startswith(part + ".")})
        if not others:
            return None
        out["other_parts"] = others
    return out


def _int_list(v) -> bool:
    return isinstance(v, list) and all(isinstance(x, (int, float)) for x in v)


def _drop_unused_operands(g: Graph) -> Graph:
    """Renumber operands after a fusion left some unreferenced (never a graph input or output)."""
    used = set(g.inputs) | set(g.outputs)
    for op in g.operations:
        used.update(i for i in op.inputs + op.outputs if i >= 0)
    if len(used) == len(g.operands):
        return g
    remap = {}
    kept = []
    for o in g.operands:
        if o.index in used:
            remap[o.index] = len(kept)
            o.index = len(kept)
            kept.append(o)
    for op in g.operations:
        op.inputs = [remap[i] if i >= 0 else -1 for i in op.inputs]
        op.outputs = [remap[i] for i in op.outputs]
    g.operands = kept
    g.inputs = [remap[i] for i in g.inputs]
    g.outputs = [remap[i] for i in g.outputs]
    return g


def _as_written(model) -> dict[str, dict]:
    """Attributes an op family reads off how the file computes a node's inputs (its "as_written"
    fact: TorchScript's `chunk` written as Slices whose ends are computed from the input's shape),
    read before the shape fold turns those computations into constants: {the node's first output:
    attributes its canonical op gets}."""
    g = model.graph
    producer = {o: n for n in g.node for o in n.output}
    inits = {t.name: t for t in g.initializer}

    def value(name):
        t = inits.get(name)
        p = producer.get(name) if t is None else None
        if p is not None and p.op_type == "Constant":
            t = next((a.t for a in p.attribute if a.name == "value"), None)
        return _small_int_value(t) if t is not None else None

    out = {}
    for n in g.node:
        fn = registry.source_facts("onnx", n.op_type).get("as_written")
        extra = fn(n, producer.get, value) if fn is not None and n.output and n.domain in ("", "ai.onnx") else None
        if extra:
            out[n.output[0]] = extra
    return out


def _attrs_as_meant(model) -> list[str]:
    """Integer attributes an exporter wrote outside ONNX's rule but with one meaning (an op family's
    "attrs_as_meant" fact: TorchScript's Transpose perm counted from the end), rewritten in place
    before shape inference; one note per node rewritten."""
    import onnx

    notes = []
    for n in model.graph.node:
        fn = registry.source_facts("onnx", n.op_type).get("attrs_as_meant")
        if fn is None:
            continue
        ints = {a.name: (list(a.ints) if a.type == onnx.AttributeProto.INTS else a.i) for a in n.attribute
                if a.type in (onnx.AttributeProto.INTS, onnx.AttributeProto.INT)}
        new = fn(ints)
        if not new:
            continue
        for a in n.attribute:
            if a.name in new:
                shown = tuple(a.ints) if a.type == onnx.AttributeProto.INTS else a.i
                a.CopyFrom(onnx.helper.make_attribute(a.name, new[a.name]))
                notes.append(f"{n.op_type} {_shown(n.name or (n.output[0] if n.output else ''))}: {a.name} "
                             f"{shown} read as {tuple(new[a.name]) if isinstance(new[a.name], list) else new[a.name]}"
                             " (axes counted from the end, as torch counts them; ONNX allows none)")
    return notes


def _sequences_as_pieces(model) -> None:
    """A sequence an op family cuts into pieces of one (its "sequence_pieces" fact: SplitToSequence
    without sizes, TorchScript's `nonzero(as_tuple=True)`) read only at constant positions (the
    readers' "sequence_position_input" fact: SequenceAt) is read as one op per reader taking that
    piece from the sequence's input (a Gather), so the sizes the data decides follow as tensors' do
    (loaders/data_sized.py). Rewritten in place before shape inference."""
    import numpy as np
    from onnx import helper, numpy_helper

    values = {t.name: t for t in model.graph.initializer}
    for n in model.graph.node:
        if n.op_type == "Constant" and n.output:
            for a in n.attribute:
                if a.name == "value":
                    values[n.output[0]] = a.t
    readers: dict[str, list] = {}
    for n in model.graph.node:
        for i in n.input:
            readers.setdefault(i, []).append(n)
    outputs = {o.name for o in model.graph.output}
    changed = False
    for n in list(model.graph.node):
        fact = registry.source_facts("onnx", n.op_type).get("sequence_pieces")
        if fact is None or n.domain not in ("", "ai.onnx") or len(n.output) != 1 or n.output[0] in outputs:
            continue
        split = n.input[1] if len(n.input) > 1 and n.input[1] else None
        if split is not None and split not in values:
            continue
        how = fact({a.name: helper.get_attribute_value(a) for a in n.attribute},
                   None if split is None else numpy_helper.to_array(values[split]))
        rs = readers.get(n.output[0], [])
        if how is None or not rs:
            continue
        places = []
        for r in rs:
            k = registry.source_facts("onnx", r.op_type).get("sequence_position_input")
            t = values.get(r.input[k]) if k is not None and k < len(r.input) and r.input[0] == n.output[0] else None
            if t is None or int(np.prod(t.dims)) != 1 or len(r.output) != 1:
                break
            places.append((r, int(numpy_helper.to_array(t).reshape(-1)[0])))
        else:
            for r, pos in places:
                idx = f"{r.output[0]}:piece"
                model.graph.initializer.append(numpy_helper.from_array(
                    np.array([pos] if how["keep"] else pos, dtype=np.int64), idx))
                g = helper.make_node(how["type"], [n.input[0], idx], [r.output[0]], name=r.name, axis=how["axis"])
                r.CopyFrom(g)
            model.graph.node.remove(n)
            changed = True
    if changed:  # a sequence's stale value_info would shadow the pieces' inferred shapes
        keep = [v for v in model.graph.value_info if not v.type.HasField("sequence_type")]
        del model.graph.value_info[:]
        model.graph.value_info.extend(keep)


def _default_opset(model) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)


def _upgrade_opset(model):
    """An opset 7-9 model converted to UPGRADE_TO (see UPGRADE_FROM); others unchanged."""
    v = _default_opset(model)
    if not UPGRADE_FROM[0] <= v <= UPGRADE_FROM[1]:
        return model
    from onnx import version_converter

    try:
        return _contained(lambda m: version_converter.convert_version(m, UPGRADE_TO), model, "version converter")
    except ProcessLimitError:
        raise
    except Exception as e:  # the converter raises RuntimeError / ValueError / its own errors
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise _Bad(f"opset {v} model: onnx.version_converter could not convert it to opset {UPGRADE_TO} "
                   f"({first[:200]})") from None


class ProcessLimitError(Exception):
    """The system refused a process (fork) or a pipe: a limit of this machine, not a fault of the
    model (not "malformed"). One line, exit 2."""


# What onnx's shape inference and version converter may allocate beyond what the process already
# maps: 1 GiB plus 16 times the graph (they work on the graph without its weights, so real models
# need megabytes). A 200-byte model with Range(0, 2**40, 1) made data propagation grow to 15-21 GB
# until the kernel killed memplan.
CHILD_MEMORY = 1 << 30
CHILD_MEMORY_PER_GRAPH_BYTE = 16
OUT_OF_MEMORY = "out of memory"


def _limit_address_space(extra: int) -> None:
    """In the child: an address-space limit (RLIMIT_AS) of what it maps now plus `extra`, never above
    a limit already set. Best effort: without /proc or `resource` the child runs unlimited."""
    try:
        import resource

        with open("/proc/self/statm", "rb") as f:
            mapped = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        want = mapped + extra
        for cap in (soft, hard):
            if cap != resource.RLIM_INFINITY:
                want = min(want, cap)
        resource.setrlimit(resource.RLIMIT_AS, (want, hard))
    except (OSError, ValueError, ImportError, AttributeError):
        pass


def _memory_hog(model) -> str:
    """`: op 'NAME' (Range) makes N elements`, naming the op whose constant inputs ask onnx's data
    propagation for a huge tensor (Range's count, ConstantOfShape's shape), when one does."""
    from onnx import numpy_helper

    consts = {}
    for t in model.graph.initializer:
        if t.data_type in (6, 7) and len(t.dims) <= 1 and sum(t.dims or [1]) <= 64:
            try:
                consts[t.name] = [int(v) for v in numpy_helper.to_array(t).reshape(-1)]
            except Exception:  # noqa: BLE001 - stripped or odd data: not the one
                pass
    for n in model.graph.node:
        if n.op_type == "Constant" and n.output:
            for a in n.attribute:
                if a.name == "value" and a.t.data_type in (6, 7) and sum(a.t.dims or [1]) <= 64:
                    try:
                        consts[n.output[0]] = [int(v) for v in numpy_helper.to_array(a.t).reshape(-1)]
                    except Exception:  # noqa: BLE001
                        pass

    for n in model.graph.node:
        elements = registry.source_facts("onnx", n.op_type).get("elements")
        ins = [consts.get(i) for i in n.input]
        count = elements(*ins) if elements is not None and ins else None
        if count is not None and count > 1 << 24:
            return f": op {_shown(n.name or n.output[0] if n.output else n.name)} ({n.op_type}) makes {count:,} elements"
    return ""


_STOP_SIGNALS = {getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n)}


def _contained(fn, model, what: str):
    """`fn(model)` (a ModelProto in, a ModelProto out) run in a forked child. onnx's shape inference
    and version converter are C++: on some malformed graphs (a Split with more outputs than its
    num_outputs) an assertion aborts the whole process, which no `except` can catch. In a child, a
    crash becomes one line naming what crashed. An exception inside `fn` comes back as RuntimeError
    with its first line. Without fork (not POSIX), `fn` runs here."""
    if not hasattr(os, "fork"):
        return fn(model)
    import onnx

    budget = CHILD_MEMORY + CHILD_MEMORY_PER_GRAPH_BYTE * model.ByteSize()
    try:
        r, w = os.pipe()
    except OSError as e:
        raise ProcessLimitError(f"cannot start a process to run onnx's {what}: {e.strerror or e} "
                                "(too many open files)") from None
    # A signal that lands while fork runs its at-fork callbacks (logging's lock) would raise inside
    # a callback, where Python ignores the exception, and the run would go on: hold the signals
    # over the fork and take them once the child is in the try below that stops it.
    held = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    try:
        pid = os.fork()
    except OSError as e:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
        os.close(r)
        os.close(w)
        raise ProcessLimitError(f"cannot start a process to run onnx's {what}: {e.strerror or e} (a limit on "
                                "processes, ulimit -u, or on memory)") from None
    if pid == 0:  # the child: never returns, never runs the parent's cleanup (os._exit)
        code = 0
        try:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
            os.close(r)
            _limit_address_space(budget)
            quiet = os.open(os.devnull, os.O_WRONLY)  # the assertion's own message would be a second line
            os.dup2(quiet, 1)
            os.dup2(quiet, 2)
            import faulthandler  # enabled on another fd (pytest's, PYTHONFAULTHANDLER), it would dump there

            faulthandler.disable()
            try:
                payload = b"M" + fn(model).SerializeToString()
            except BaseException as e:  # noqa: BLE001 - everything goes back to the parent as text
                first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                if isinstance(e, MemoryError) or "bad_alloc" in first:
                    first = OUT_OF_MEMORY
                payload = b"E" + first.encode("utf-8", "replace")
            with os.fdopen(w, "wb") as f:
                f.write(struct.pack("<Q", len(payload)) + payload)
        except BaseException:  # noqa: BLE001
            code = 1
        finally:
            os._exit(code)
    os.close(w)
    status = None
    try:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
        with os.fdopen(r, "rb") as f:
            data = f.read()
        status = os.waitpid(pid, 0)[1]
    finally:
        if status is None:  # interrupted while the child ran: stop it
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except OSError:
                pass
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        raise _Bad(f"onnx's {what} crashed ({name}) on this graph: a malformed node or attribute")
    if len(data) < 9 or struct.unpack_from("<Q", data)[0] != len(data) - 8:
        raise _Bad(f"onnx's {what} ended without an answer (exit status {os.waitstatus_to_exitcode(status)})")
    if data[8:9] == b"E":
        text = data[9:].decode("utf-8", "replace")
        if text == OUT_OF_MEMORY:
            raise _Bad(f"onnx's {what} went over its memory limit ({budget >> 20:,} MiB) on this graph"
                       f"{_memory_hog(model)}")
        raise RuntimeError(text)
    out = onnx.ModelProto()
    out.ParseFromString(data[9:])
    return out


def _unknown_shapes(model) -> int:
    """How many node outputs shape inference left without a static shape, or with no elements (a
    TorchScript `x.shape[:0]`: an empty slice of a shape vector, concatenated into a Reshape target;
    folding removes it)."""
    shaped = {}
    for vi in list(model.graph.value_info) + list(model.graph.output):
        t = vi.type.tensor_type
        shaped[vi.name] = t.HasField("shape") and all(d.HasField("dim_value") and d.dim_value > 0
                                                      for d in t.shape.dim)
    return sum(1 for n in model.graph.node for o in n.output if o and not shaped.get(o, False))


def load_onnx(path: str, batch_size: int | None = None, dims: dict | None = None,
              symbolic_default: int | None = None) -> Graph:
    """Read an ONNX model into a Graph (not yet verified). A symbolic batch dim takes `batch_size`, any
    other symbolic dim its value in `dims` (name -> value); one left unbound takes `symbolic_default`
    (for showing the file: `inspect`), else the file is refused."""
    import onnx
    from onnx import shape_inference

    refused: list[str] = []
    symbolic: list = []
    try:
        model = _read_stripped(path)
        if not model.graph.node and not model.graph.input:
            raise _Bad("the graph is empty (no input and no node): not an ONNX model")
        init_names = {t.name for t in model.graph.initializer}
        rewrites = _export_rewrites(model)  # before shape inference rewrites value_info
        composite = _composite(model, rewrites)
        functions = _autograd_functions(model)
        refused = _inline_small_external(model, os.path.dirname(os.path.abspath(path)))
        old_opset = _default_opset(model)
        model = _upgrade_opset(model)
        given = data_sized.file_names(model)  # before _fix_inputs clears value_info
        found: list = []
        dynamic, symbolic = _fix_inputs(model, init_names, batch_size, dims, symbolic_default, found)
        as_meant = _attrs_as_meant(model)
        written = _as_written(model)
        stored = init_names | {o for n in model.graph.node if n.op_type == "Constant" for o in n.output}
        made_by = {o: n.op_type for n in model.graph.node for o in n.output}
        _sequences_as_pieces(model)

        def infer(m):
            try:
                return _contained(lambda x: shape_inference.infer_shapes(x, check_type=False, strict_mode=False,
                                                                       data_prop=True), m, "shape inference")
            except (onnx.shape_inference.InferenceError, RuntimeError, ValueError) as e:
                raise _Bad(f"shape inference failed: {str(e).splitlines()[0] if str(e) else type(e).__name__}") \
                    from None

        def infer_folded(m):
            m = infer(m)
            if _unknown_shapes(m):
                # shapes computed at run time (TorchScript's Expand / Reshape targets): fold them, then infer again
                from memplan_cli.loaders.onnx_fold import fold_shape_computations

                m, _ = fold_shape_computations(m, _default_opset(m), infer)
            return m

        model = infer_folded(model)
        sized, taken = None, {}
        left = _unknown_shapes(model)
        while left:
            more = data_sized.assume(model, dict(dims or {}), given, taken)
            if more is None:
                break
            # the sizes taken: every tensor they decide is sized by inference again (a second layer
            # of experts, whose input the first one's pieces sized, is found on the next turn)
            sized = more if sized is None else {"dims": sized["dims"] + more["dims"],
                                                "unsized": sized["unsized"] + more["unsized"]}
            sized["rule"] = data_sized.rule_of(sized["dims"])
            model = infer_folded(model)
            now = _unknown_shapes(model)
            if now >= left:  # nothing more sized this turn: what is left stays unsized (refused below)
                break
            left = now
        check_dims(dict(dims or {}), found + data_sized.found_dims(sized))
        g = _drop_unused_operands(_Builder(model, (rewrites or {}).get("folded_from"), written).build())
        made = {o.name: made_by.get(o.name, "") for o in g.operands if o.is_const and o.name not in stored}
        if made:  # the shape fold computed them from the file's ops
            g.metadata[COMPUTED_CONSTANTS] = made
        if rewrites is not None:
            g.metadata[TORCH_EXPORT] = rewrites
        if composite is not None:
            g.metadata["composite"] = composite
        if functions:
            g.metadata["autograd_functions"] = functions
        if dynamic:
            g.metadata["dynamic_batch"] = True
            if isinstance(dynamic, str):
                g.metadata["batch_symbol"] = dynamic
        if symbolic:
            g.metadata["symbolic_dims"] = symbolic
        if sized is not None:
            names = {o.name for o in g.operands}
            g.metadata["data_sized"] = {"rule": sized["rule"], "dims": sized["dims"],
                                        "tensors": [t for t in sized["unsized"] if t in names]}
        if _default_opset(model) != old_opset:
            g.metadata["onnx_opset"] = {"file": old_opset, "converted_to": _default_opset(model)}
        g.warnings.extend(f"{r}: not read; every tensor was sized without it" for r in refused)
        g.warnings.extend(as_meant)
        return g
    except DimsError as e:
        raise ModelError(str(e), path) from None
    except _CannotPlan as e:
        raise ModelError(str(e), path) from None
    except _Bad as e:
        if refused:  # the values left unread may be what shape inference missed: that is the cause
            raise ModelError(refused[0], path) from None
        unbound = [(name, inp, k, False) for name, inp, k, _, given in symbolic if not given]
        if unbound:  # shown at symbolic_default (inspect), the model did not take that size: ask for it
            raise ModelError(unbound_dims(unbound), path) from None
        bound = " ".join(f"--dim {name}={value}" for name, _, _, value, given in symbolic if given)
        if bound:  # the sizes bound may be ones the model cannot take (beyond a position table)
            raise ModelError(f"with {bound}: the model's shapes do not agree ({e}); it may not take "
                             "this size", path) from None
        raise ModelError(str(e) if isinstance(e, _Unsized) else f"invalid onnx file: {e}", path) from None
    except ProcessLimitError as e:
        raise ModelError(str(e), path) from None
