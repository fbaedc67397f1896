"""Copy an ONNX ModelProto without its weight bytes, reading the file through mmap.

ONNX stores weights inside TensorProto data fields (raw_data, float_data, ...). Parsing the whole
protobuf would pull every weight byte into memory, so this walks the wire format and copies every
field except the data of tensors, which it skips by length. Kept: the data of small integer tensors
(<= MAX_KEEP elements of int32/int64), because shape inference needs a Reshape's shape or a Pad's pads,
of scalars (Clip's bounds) and of small tensors in node attributes (a Constant's value: an
exporter's traced constants, which `memplan verify` runs with); and, for tensors named in `keep` (initializers, or the values of
`Constant` nodes), of any small tensor: a Resize's float scales decide its output shape.
The result is a valid, small ModelProto for `onnx.load_from_string` and shape inference.
"""
from __future__ import annotations

MAX_KEEP = 64
# a Constant node's value: an exporter's traced buffer (a filter, a mask, weight standardization's
# zero bias), read so that `memplan verify` runs with it; 16 KB at most
MAX_KEEP_CONSTANT = 4096
# TensorProto: data_type values of int32 / int64
_INT_TYPES = {6, 7}
# TensorProto fields that hold data
_DATA_FIELDS = {4, 5, 6, 7, 9, 10, 11}


# nodes inside subgraphs (If / Loop / Scan bodies, at any depth) memplan reads at most: it analyses
# none of them (they only feed shape inference), and branches nested in branches double the file per
# level; a 100,000-op main graph is the largest memplan is built for (docs/scale.md)
MAX_SUBGRAPH_NODES = 100_000


def elements(dims, cap: int) -> int:
    """The product of `dims`, or cap + 1 once it passes `cap`: a file may give a tensor 100,000 huge
    dims, whose exact product is a bigint that took minutes to compute. 0 with a 0 dim, -1 with a
    negative one."""
    if any(d == 0 for d in dims):
        return 0
    if any(d < 0 for d in dims):
        return -1
    n = 1
    for d in dims:
        n *= d
        if n > cap:
            return cap + 1
    return n


class ProtobufError(ValueError):
    """The bytes are not a well-formed protobuf message."""


class SubgraphBudgetError(ValueError):
    """The subgraphs hold more nodes than MAX_SUBGRAPH_NODES."""


def _varint(buf, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end:
            raise ProtobufError(f"varint runs past the end at byte {pos}")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ProtobufError(f"varint too long at byte {pos}")


def _encode_varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def fields(buf, start: int, end: int):
    """Yield (field number, wire type, field start, value start, value end) for one message."""
    pos = start
    while pos < end:
        fstart = pos
        tag, pos = _varint(buf, pos, end)
        num, wt = tag >> 3, tag & 7
        if num == 0:
            raise ProtobufError(f"field number 0 at byte {fstart}")
        if wt == 0:
            _, vend = _varint(buf, pos, end)
            vstart = pos
        elif wt == 1:
            vstart, vend = pos, pos + 8
        elif wt == 2:
            n, vstart = _varint(buf, pos, end)
            vend = vstart + n
        elif wt == 5:
            vstart, vend = pos, pos + 4
        else:
            raise ProtobufError(f"unsupported wire type {wt} at byte {fstart}")
        if vend > end:
            raise ProtobufError(f"field {num} at byte {fstart} runs past the end of its message")
        yield num, wt, fstart, vstart, vend
        pos = vend


class _Out:
    """The stripped message as a list of pieces joined once at the end: runs of the input copied
    unchanged (contiguous ones merged into one slice) and new length prefixes. Building each nested
    message as its own bytes and copying it into its parent would copy a subgraph once per level
    it is nested in (quadratic for If / Loop branches nested in branches)."""

    __slots__ = ("buf", "parts", "size", "run_start", "run_end", "depth", "subgraph_nodes")

    def __init__(self, buf):
        self.buf = buf
        self.parts: list = []
        self.size = 0  # bytes in `parts` plus the pending run
        self.run_start = self.run_end = 0
        self.depth = 0  # subgraphs the walk is inside
        self.subgraph_nodes = 0

    def copy(self, start: int, end: int) -> None:
        """Append buf[start:end] unchanged."""
        if start != self.run_end:
            self._flush()
            self.run_start = start
        self.run_end = end
        self.size += end - start

    def _flush(self) -> None:
        if self.run_end > self.run_start:
            self.parts.append(self.buf[self.run_start:self.run_end])
        self.run_start = self.run_end = 0

    def nested(self, num: int, emit, *args) -> None:
        """A length-delimited field `num` whose payload `emit(self, *args)` appends."""
        self._flush()
        at = len(self.parts)
        self.parts.append(b"")
        before = self.size
        emit(self, *args)
        self._flush()
        head = _encode_varint((num << 3) | 2) + _encode_varint(self.size - before)
        self.parts[at] = head
        self.size += len(head)

    def data(self) -> bytes:
        self._flush()
        return b"".join(self.parts)


def _keeps_data(buf, start, end, keep, small) -> bool:
    """Whether a TensorProto keeps its data: small int tensors, scalars, small tensors named in
    `keep`, and (`small`) a Constant node's value of up to MAX_KEEP_CONSTANT elements."""
    dims: list[int] = []
    dtype = 0
    name = None
    for num, wt, _fs, vs, ve in fields(buf, start, end):
        if num == 8 and keep:
            name = bytes(buf[vs:ve]).decode("utf-8", "replace")
        if num == 1:
            if wt == 2:  # packed
                p = vs
                while p < ve:
                    d, p = _varint(buf, p, ve)
                    dims.append(d)
            else:
                dims.append(_varint(buf, vs, ve)[0])
        elif num == 2:
            dtype = _varint(buf, vs, ve)[0]
    n = elements(dims, MAX_KEEP_CONSTANT)
    # scalars too: Clip's bounds decide whether it is a Relu6
    return (dtype in _INT_TYPES and n <= MAX_KEEP) or n <= 1 or (name in keep and n <= MAX_KEEP) or \
        (small and n <= MAX_KEEP_CONSTANT)


def _tensor_field(out: _Out, num, fs, vs, ve, keep=frozenset(), small=False) -> None:
    if _keeps_data(out.buf, vs, ve, keep, small):
        out.copy(fs, ve)
    else:
        out.nested(num, _tensor_without_data, vs, ve)


def _tensor_without_data(out: _Out, start, end) -> None:
    for num, _wt, fs, _vs, ve in fields(out.buf, start, end):
        if num not in _DATA_FIELDS:
            out.copy(fs, ve)


def _rewrites(buf, start, end) -> bool:
    """Whether an AttributeProto holds a tensor or a graph (which stripping rewrites)."""
    return any(num in (5, 6, 10, 11) for num, _wt, _fs, _vs, _ve in fields(buf, start, end))


def _attribute(out: _Out, start, end) -> None:
    for num, _wt, fs, vs, ve in fields(out.buf, start, end):
        if num in (5, 10):  # t, tensors: a Constant node's small value is kept (verify runs with it)
            _tensor_field(out, num, fs, vs, ve, small=True)
        elif num in (6, 11):  # g, graphs
            out.depth += 1
            out.nested(num, _graph, vs, ve)
            out.depth -= 1
        else:
            out.copy(fs, ve)


def _node_field(out: _Out, num, fs, vs, ve, keep=frozenset()) -> None:
    buf = out.buf
    fl = list(fields(buf, vs, ve))
    if keep and any(n == 2 and bytes(buf[a:b]).decode("utf-8", "replace") in keep for n, _wt, _fs, a, b in fl):
        out.copy(fs, ve)  # a Constant whose small value is wanted (its output is in keep)
        return
    if not any(n == 5 and _rewrites(buf, a, b) for n, _wt, _fs, a, b in fl):
        out.copy(fs, ve)
        return
    out.nested(num, _node, fl)


def _node(out: _Out, fl) -> None:
    for num, _wt, fs, vs, ve in fl:
        if num == 5 and _rewrites(out.buf, vs, ve):  # attribute
            out.nested(num, _attribute, vs, ve)
        else:
            out.copy(fs, ve)


def _graph(out: _Out, start, end, keep=frozenset()) -> None:
    for num, _wt, fs, vs, ve in fields(out.buf, start, end):
        if num == 5:  # initializer
            _tensor_field(out, num, fs, vs, ve, keep)
        elif num == 1:  # node
            if out.depth:
                out.subgraph_nodes += 1
                if out.subgraph_nodes > MAX_SUBGRAPH_NODES:
                    raise SubgraphBudgetError(
                        f"the model's subgraphs (If / Loop / Scan bodies) hold more than {MAX_SUBGRAPH_NODES:,} nodes: "
                        f"over memplan's work budget (memplan analyses no op inside a subgraph)")
            _node_field(out, num, fs, vs, ve, keep)
        elif num == 15:  # sparse_initializer: values (1) and indices (2) are TensorProtos
            out.nested(num, _sparse, vs, ve)
        else:
            out.copy(fs, ve)


def _sparse(out: _Out, start, end) -> None:
    for num, _wt, fs, vs, ve in fields(out.buf, start, end):
        if num in (1, 2):
            _tensor_field(out, num, fs, vs, ve)
        else:
            out.copy(fs, ve)


def strip_model(buf, size: int, keep=frozenset()) -> tuple[bytes, bool]:
    """(ModelProto bytes without weight data, whether the message had a graph field). The top-level
    graph's tensors named in `keep` keep their data when small (<= MAX_KEEP elements). Linear in
    the file's size, however deeply subgraphs nest."""
    out = _Out(buf)
    has_graph = False
    for num, wt, fs, vs, ve in fields(buf, 0, size):
        if num == 7 and wt == 2:
            has_graph = True
            out.nested(7, _graph, vs, ve, keep)
        else:
            out.copy(fs, ve)
    return out.data(), has_graph
