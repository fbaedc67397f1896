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


def _len_field(num: int, payload: bytes) -> bytes:
    return _encode_varint((num << 3) | 2) + _encode_varint(len(payload)) + payload


def _tensor(buf, start, end, keep=frozenset(), small=False) -> bytes:
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
    keep_data = (dtype in _INT_TYPES and n <= MAX_KEEP) or n <= 1 or (name in keep and n <= MAX_KEEP) or \
        (small and n <= MAX_KEEP_CONSTANT)
    out = bytearray()
    for num, _wt, fs, _vs, ve in fields(buf, start, end):
        if num in _DATA_FIELDS and not keep_data:
            continue
        out += buf[fs:ve]
    return bytes(out)


def _attribute(buf, start, end) -> bytes:
    out = bytearray()
    for num, _wt, fs, vs, ve in fields(buf, start, end):
        if num in (5, 10):  # t, tensors: a Constant node's small value is kept (verify runs with it)
            out += _len_field(num, _tensor(buf, vs, ve, small=True))
        elif num in (6, 11):  # g, graphs
            out += _len_field(num, _graph(buf, vs, ve))
        else:
            out += buf[fs:ve]
    return bytes(out)


def _node(buf, start, end, keep=frozenset()) -> bytes:
    if keep and any(num == 2 and bytes(buf[vs:ve]).decode("utf-8", "replace") in keep
                    for num, _wt, _fs, vs, ve in fields(buf, start, end)):
        return bytes(buf[start:end])  # a Constant whose small value is wanted (its output is in keep)
    out = bytearray()
    for num, _wt, fs, vs, ve in fields(buf, start, end):
        if num == 5:  # attribute
            out += _len_field(num, _attribute(buf, vs, ve))
        else:
            out += buf[fs:ve]
    return bytes(out)


def _graph(buf, start, end, keep=frozenset()) -> bytes:
    out = bytearray()
    for num, _wt, fs, vs, ve in fields(buf, start, end):
        if num == 5:  # initializer
            out += _len_field(num, _tensor(buf, vs, ve, keep))
        elif num == 1:  # node
            out += _len_field(num, _node(buf, vs, ve, keep))
        elif num == 15:  # sparse_initializer: values (1) and indices (2) are TensorProtos
            out += _len_field(num, _sparse(buf, vs, ve))
        else:
            out += buf[fs:ve]
    return bytes(out)


def _sparse(buf, start, end) -> bytes:
    out = bytearray()
    for num, _wt, fs, vs, ve in fields(buf, start, end):
        if num in (1, 2):
            out += _len_field(num, _tensor(buf, vs, ve))
        else:
            out += buf[fs:ve]
    return bytes(out)


def strip_model(buf, size: int, keep=frozenset()) -> tuple[bytes, bool]:
    """(ModelProto bytes without weight data, whether the message had a graph field). The top-level
    graph's tensors named in `keep` keep their data when small (<= MAX_KEEP elements)."""
    out = bytearray()
    has_graph = False
    for num, wt, fs, vs, ve in fields(buf, 0, size):
        if num == 7 and wt == 2:
            has_graph = True
            out += _len_field(7, _graph(buf, vs, ve, keep))
        else:
            out += buf[fs:ve]
    return bytes(out), has_graph
