"""circle and tflite models through circle-schema's v0.10 bindings (tflite's field ids are the same).

The file is memory-mapped and read in place: tensor shapes, dtypes and whether a buffer holds data,
never the weight bytes. The only data read are small integer constants (a Reshape's shape, a Pad's
paddings, a Mean's axes) that decide shapes when the model is re-batched. Every vector is
bounds-checked against the file before it is walked, so a corrupt length fails fast instead of hanging.
"""
from __future__ import annotations

import importlib
import importlib.util
import mmap
import os
import re
import struct
import sys

from memplan_cli import ops
from memplan_cli.errors import ModelError
from memplan_cli.ir.dtypes import DTYPE_SIZE
from memplan_cli.ir.graph import MAX_RANK, Graph, Operand, Operation
from memplan_cli.lazyimport import defer_package_modules, numpy_deferred
from memplan_cli.loaders.mapped import sigbus_named
from memplan_cli.opgraph.shape_values import follows
from memplan_cli.loaders.params import is_variable_read
from memplan_cli.traininfo import METADATA_NAME, TrainInfoError, read_training_metadata

MAX_VALUE_ELEMENTS = 64  # an int constant bigger than this is data, not a shape
EXTENDED_CODE = 127  # deprecated_builtin_code when the real code is only in builtin_code


def _shape_const_input(typ: str) -> int | None:
    """The input holding a small int constant that decides the op's output shape (a Reshape's shape,
    a Mean's axes: `OpDef.shape_const_input`; a builtin kept unconverted: its family's facts)."""
    d = ops.get(typ)
    return d.shape_const_input if d is not None else ops.source_facts("tflite", typ).get("shape_const_input")


def _casts_values(builtin: str) -> bool:
    """A builtin whose output holds its input's values as float32 (ops/quantize.py's DEQUANTIZE)."""
    return bool(ops.source_facts("tflite", builtin).get("casts_values"))


def _enum_names(cls) -> dict[int, str]:
    return {v: k for k, v in vars(cls).items() if not k.startswith("_") and isinstance(v, int)}


def _defer_schema_tables() -> None:
    """circle-schema's package imports all ~200 generated table modules; a model reads a dozen.
    Stand the rest in until first use (memplan_cli/lazyimport.py); nothing when already loaded."""
    if "circle_schema.v0_10.circle" in sys.modules:
        return

    spec = importlib.util.find_spec("circle_schema")
    if spec is None or not spec.submodule_search_locations:
        return
    root = list(spec.submodule_search_locations)[0]
    defer_package_modules(os.path.join(root, "v0_10", "circle"), "circle_schema.v0_10.circle", numpy_deferred)


def _tables():
    _defer_schema_tables()
    from circle_schema.v0_10.circle.BuiltinOperator import BuiltinOperator
    from circle_schema.v0_10.circle.TensorType import TensorType

    dtypes = {code: name.lower() for code, name in _enum_names(TensorType).items()}
    return _enum_names(BuiltinOperator), dtypes


class _Malformed(Exception):
    pass


class _NotAForwardModel(Exception):
    """A well-formed file memplan does not plan: its text is the whole reason."""


class _Reader:
    def __init__(self, buf, size: int, path: str, fmt: str):
        self.buf, self.size, self.path, self.fmt = buf, size, path, fmt
        self.opnames, self.dtypes = _tables()
        self.dynamic: dict[int, tuple[int, ...]] = {}  # operand -> dims marked -1 in shape_signature

    # ---- bounds --------------------------------------------------------------------------
    def vec_len(self, obj, field_id: int, elem: int) -> int:
        """Length of vector field `field_id` of a generated table, checked to lie inside the file."""
        tab = obj._tab
        o = tab.Offset(4 + 2 * field_id)
        if o == 0:
            return 0
        n = tab.VectorLen(o)
        start = tab.Vector(o)
        if start + n * elem > self.size:
            raise _Malformed(f"a vector of {n} entries at byte {start} runs past the end of the file "
                             f"({self.size} bytes): truncated or corrupt")
        return n

    def ints(self, obj, field_id: int, fmt: str = "<i") -> list[int]:
        n = self.vec_len(obj, field_id, struct.calcsize(fmt))
        if not n:
            return []
        start = obj._tab.Vector(obj._tab.Offset(4 + 2 * field_id))
        return list(struct.unpack_from(f"<{n}{fmt[-1]}", self.buf, start))

    # ---- model ---------------------------------------------------------------------------
    def graph(self) -> Graph:
        from circle_schema.v0_10.circle.Model import Model

        if self.size < 8:
            raise _Malformed(f"only {self.size} bytes: truncated")
        root = struct.unpack_from("<I", self.buf, 0)[0]
        if root + 4 > self.size:
            raise _Malformed(f"root table offset {root} is past the end of the file ({self.size} bytes): truncated")
        model = Model.GetRootAs(self.buf, 0)
        warnings: list[str] = []
        nsub = self.vec_len(model, 2, 4)
        if nsub == 0:
            raise _Malformed("the model has no subgraph")
        if nsub > 1:
            warnings.append(f"the model has {nsub} subgraphs; memplan reads subgraph 0 only")
        nbuf = self.vec_len(model, 4, 4)
        buffers = [model.Buffers(j) for j in range(nbuf)]
        sub = model.Subgraphs(0)

        opcodes = self.operator_codes(model)
        operands = self.tensors(sub, buffers)
        inputs = self.ints(sub, 1)
        outputs = self.ints(sub, 2)
        for i in inputs:
            if 0 <= i < len(operands):
                operands[i].is_input = True
                operands[i].is_const = False
        for i in outputs:
            if 0 <= i < len(operands):
                operands[i].is_output = True
        operations = self.operators(sub, opcodes, operands, buffers)
        name = (sub.Name() or b"").decode("utf-8", "replace")
        g = Graph(operands, operations, inputs, outputs, name=name, source_format=self.fmt, warnings=warnings)
        g.metadata["parameter_rule"] = "TensorFlow variable reads"
        if self.dynamic:
            g.metadata["dynamic_dims"] = dict(self.dynamic)
        names = self.signature_outputs(model, set(outputs))
        if names:
            g.metadata["output_names"] = names
        if self.dynamic:  # a dynamic input dim is named after its input's signature name (loaders.symbolic_dim_name)
            names = self.signature_outputs(model, set(inputs), side="Inputs")
            if names:
                g.metadata["input_names"] = names
        self.training_metadata(model, buffers, g)
        return g

    def signature_outputs(self, model, outputs: set[int], side: str = "Outputs") -> dict[int, str]:
        """Output (`side` "Inputs": input) operand -> its name in subgraph 0's signature (what a TF Lite signature runner calls
        it, e.g. `output_0` for `StatefulPartitionedCall_1:0`); {} when there is none or it is
        unreadable (names are labels only: a bad signature never stops the load)."""
        out: dict[int, str] = {}
        try:
            for j in range(self.vec_len(model, 7, 4)):
                sd = model.SignatureDefs(j)
                if sd.SubgraphIndex() != 0:
                    continue
                for k in range(getattr(sd, side + "Length")()):
                    tm = getattr(sd, side)(k)
                    name = (tm.Name() or b"").decode("utf-8")
                    if tm.TensorIndex() in outputs and name:
                        out.setdefault(tm.TensorIndex(), name)
        except (IndexError, struct.error, UnicodeDecodeError, ValueError, _Malformed):
            return {}
        return out

    def operator_codes(self, model) -> list[str]:
        n = self.vec_len(model, 1, 4)
        out = []
        for j in range(n):
            oc = model.OperatorCodes(j)
            dep = oc.DeprecatedBuiltinCode()
            code = oc.BuiltinCode() if dep == EXTENDED_CODE else max(dep, oc.BuiltinCode()) if dep >= 0 else dep
            name = self.opnames.get(code)
            if name == "CUSTOM":
                name = (oc.CustomCode() or b"CUSTOM").decode("utf-8", "replace")
            out.append(name or f"BUILTIN_{code}")
        return out

    def tensors(self, sub, buffers) -> list[Operand]:
        n = self.vec_len(sub, 0, 4)
        out = []
        for j in range(n):
            t = sub.Tensors(j)
            name = (t.Name() or b"").decode("utf-8", "replace") or f"t{j}"
            if self.vec_len(t, 0, 4) > MAX_RANK:  # before the product of its dims is ever taken
                raise _Malformed(f"tensor {j} ({name}) has {self.vec_len(t, 0, 4):,d} dimensions, over the "
                                 f"{MAX_RANK} memplan reads")
            shape = tuple(self.ints(t, 0))
            sig = self.ints(t, 7)  # shape_signature: -1 marks a dynamic dim
            dtype = self.dtypes.get(t.Type())
            if dtype in ("resource", "variant"):  # TF Lite's resource variables: on-device training signatures
                raise _NotAForwardModel(
                    f"tensor {j} ({name}) is a {dtype} variable: the file is a TF Lite on-device training model "
                    f"(its weights live in variables its signatures read and assign); memplan plans a model whose "
                    f"weights are constants: convert the inference model (TFLiteConverter.from_keras_model)")
            if dtype is None or dtype not in DTYPE_SIZE:
                raise _Malformed(f"tensor {j} ({name}) has type {dtype or t.Type()}, which memplan cannot size")
            bad = [d for d in shape if d <= 0]
            if bad:
                raise _Malformed(f"tensor {j} ({name}) has a {'zero' if bad[0] == 0 else 'negative'} "
                                 f"dimension in shape {list(shape)}")
            b = t.Buffer()
            if b >= len(buffers):
                raise _Malformed(f"tensor {j} ({name}) uses buffer {b}, but the model has {len(buffers)}")
            is_const = b > 0 and self.buffer_has_data(buffers[b]) and not t.IsVariable()
            if sig and len(sig) == len(shape) and any(d < 0 for d in sig):
                self.dynamic[j] = tuple(k for k, d in enumerate(sig) if d < 0)
            # a TF Lite file stores every weight as a plain constant, as it stores a folded mask:
            # a variable's read in the name or a weight slot tells (loaders/params.py)
            # a variable tensor without data (an LSTM's output and cell state, UNIDIRECTIONAL_SEQUENCE_LSTM's
            # inputs 18 and 19): state the runtime zeroes and the op updates, a buffer, never a parameter
            state = t.IsVariable() and not (b > 0 and self.buffer_has_data(buffers[b]))
            out.append(Operand(j, name, shape, dtype, is_const=is_const or state, computed=state,
                               assumed=is_const and dtype.startswith(("float", "bfloat"))
                               and not is_variable_read(name)))
        return out

    def buffer_has_data(self, buf) -> bool:
        if self.vec_len(buf, 0, 1) > 0:
            return True
        return buf.Offset() > 1  # large-model layout: data outside the flatbuffer at `offset`

    def buffer_ints(self, buf, dtype: str, count: int) -> tuple[int, ...] | None:
        """The values of a small int32/int64 constant (count elements), read in place."""
        code = {"int32": "i", "int64": "q", "float32": "f", "float16": "e", "bool": "?"}.get(dtype)
        if code is None or count > MAX_VALUE_ELEMENTS:
            return None
        width = struct.calcsize(code)
        n = self.vec_len(buf, 0, 1)
        if n:
            start = buf._tab.Vector(buf._tab.Offset(4))
        elif buf.Offset() > 1:
            start, n = buf.Offset(), buf.Size()
            if start + n > self.size:
                raise _Malformed(f"a buffer at byte {start} of {n} bytes runs past the end of the file")
        else:
            return None
        if n < count * width:
            raise _Malformed(f"a constant of {count} {dtype} holds only {n} bytes")
        return tuple(struct.unpack_from(f"<{count}{code}", self.buf, start))

    def operators(self, sub, opcodes, operands, buffers) -> list[Operation]:
        from circle_schema.v0_10.circle.Tensor import Tensor  # noqa: F401  (bindings loaded once)

        n = self.vec_len(sub, 3, 4)
        ops = []
        casts: dict[int, int] = {}  # a cast's output -> the float16 constant it casts (see registry_canonical)
        for j in range(n):
            o = sub.Operators(j)
            k = o.OpcodeIndex()
            if k >= len(opcodes):
                raise _Malformed(f"operator {j} uses operator code {k}, but the model has {len(opcodes)}")
            src = opcodes[k]
            typ, attrs = src, {}  # a builtin no registry family converts keeps its name
            ins, outs = self.ints(o, 1), self.ints(o, 2)
            canon = self.registry_canonical(o, src, sub, ins, outs, operands, buffers, casts)
            if canon is not None:
                typ, attrs = canon.type, canon.attrs
                ins = ins if canon.inputs is None else canon.inputs
                outs = outs if canon.outputs is None else canon.outputs
            op = Operation(j, typ, ins, outs, attrs, source_type=src)
            ops.append(op)
            if _casts_values(src) and len(ins) == 1 and len(outs) == 1 and 0 <= ins[0] < len(operands) \
                    and operands[ins[0]].is_const and operands[ins[0]].dtype == "float16":
                casts[outs[0]] = ins[0]
            pos = _shape_const_input(typ)
            want = [ins[pos]] if pos is not None and len(ins) > pos else []
            if follows(typ) and any(0 <= i < len(operands) and operands[i].dtype.startswith("int")
                                       for i in outs):
                want += list(ins)  # an integer op that may compute a shape: its small constants' values
            for i in want:
                if 0 <= i < len(operands):
                    t = operands[i]
                    if t.is_const and t.value is None:
                        tb = sub.Tensors(i).Buffer()
                        t.value = self.buffer_ints(buffers[tb], t.dtype, t.num_elements)
        return ops

    def registry_canonical(self, o, builtin: str, sub, ins, outs, operands, buffers, casts=None):
        """The op registry's converter for this builtin (memplan_cli/ops/), or None. `casts`: the
        outputs of the casts seen so far (a float16 constant's DEQUANTIZE) -> the constant they cast,
        whose values a converter reads in their place."""
        fn = ops.tflite_converter(builtin)
        if fn is None:
            return None

        def values(k):
            i = ins[k]
            i = (casts or {}).get(i, i)
            if not 0 <= i < len(operands) or not operands[i].is_const:
                return None
            t = operands[i]
            if t.value is None:
                tb = sub.Tensors(i).Buffer()
                t.value = self.buffer_ints(buffers[tb], t.dtype, t.num_elements)
            return t.value

        opts = self.generic_options(o)
        if o.CustomOptionsLength() > 0:  # a custom op's own bytes (mediapipe's: a C struct)
            opts["custom_options"] = o.CustomOptionsAsNumpy().tobytes()
        node = ops.TfliteNode(builtin, opts, list(ins), list(outs), operands, values)
        return fn(node)

    def generic_options(self, o) -> dict:
        """The builtin options table's fields by snake_case name: scalars, and short int vectors as
        tuples. Read through circle-schema's generated class for the table's type."""
        from circle_schema.v0_10.circle.BuiltinOptions import BuiltinOptions as BO

        table, kind = o.BuiltinOptions(), o.BuiltinOptionsType()
        if table is None or kind == 0:
            return {}
        name = _enum_names(BO).get(kind)
        if name is None:
            return {}
        try:
            cls = getattr(importlib.import_module(f"circle_schema.v0_10.circle.{name}"), name)
        except (ImportError, AttributeError):
            return {}
        x = cls()
        x.Init(table.Bytes, table.Pos)
        out = {}
        for attr in sorted(vars(cls)):
            if not attr[:1].isupper() or attr in ("Init", "GetRootAs") or attr.startswith("GetRootAs") or \
                    attr.endswith(("AsNumpy", "Length", "IsNone", "BufferHasIdentifier")):
                continue
            key = re.sub(r"(?<!^)(?=[A-Z])", "_", attr).lower()
            getter = getattr(x, attr)
            if hasattr(x, attr + "Length"):
                n = getattr(x, attr + "Length")()
                if 0 <= n <= MAX_VALUE_ELEMENTS:
                    out[key] = tuple(getter(j) for j in range(n))
                continue
            try:
                v = getter()
            except TypeError:
                continue
            if isinstance(v, (bool, int, float)):
                out[key] = v
        return out

    # ---- training metadata ---------------------------------------------------------------
    def training_metadata(self, model, buffers, g: Graph) -> None:
        n = self.vec_len(model, 6, 4)
        for j in range(n):
            md = model.Metadata(j)
            if (md.Name() or b"") != METADATA_NAME.encode():
                continue
            b = md.Buffer()
            if b >= len(buffers):
                raise _Malformed(f"metadata {METADATA_NAME} uses buffer {b}, but the model has {len(buffers)}")
            buf = buffers[b]
            size = self.vec_len(buf, 0, 1)
            if size:
                start = buf._tab.Vector(buf._tab.Offset(4))
            else:
                start, size = buf.Offset(), buf.Size()
                if start + size > self.size:
                    raise _Malformed(f"metadata {METADATA_NAME} runs past the end of the file")
            try:
                fields, notes = read_training_metadata(self.buf[start:start + size])
            except TrainInfoError as e:
                raise _Malformed(str(e)) from None
            g.metadata["training"] = fields
            g.warnings.extend(notes)


def load_flatbuffer(path: str, fmt: str) -> Graph:
    """Read subgraph 0 of a circle or tflite file into a Graph (not yet verified)."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < 8:
            raise ModelError(f"truncated {fmt} file ({size} bytes)", path)
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)

    try:
        with numpy_deferred(), sigbus_named(path):  # flatbuffers imports NumPy; reading a model never uses it
            return _Reader(mm, size, path, fmt).graph()
    except _Malformed as e:
        raise ModelError(f"malformed {fmt} file: {e}", path) from None
    except _NotAForwardModel as e:
        raise ModelError(str(e), path) from None
    except struct.error:
        raise ModelError(f"malformed {fmt} file: truncated or corrupt (an offset points past the end of "
                         f"the file)", path) from None
    except (IndexError, TypeError, ValueError, OverflowError, UnicodeDecodeError) as e:
        raise ModelError(f"malformed {fmt} file (truncated or corrupt: {type(e).__name__}: {e})", path) from None
    finally:
        try:
            mm.close()
        except BufferError:  # a view is still alive somewhere; the GC closes it later
            pass
