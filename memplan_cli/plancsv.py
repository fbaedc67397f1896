"""MiniMalloc's buffer CSV, read and written (no click, no planning: `memplan_cli.planrun` plans).

The format (google/minimalloc `src/converter.cc`): one header line, then one buffer per line.

- `id`: any non-empty text, unique (aliases `buffer`, `buffer_id`);
- `lower`: the first step the buffer is live (aliases `start`, `begin`);
- `upper`: the step after the last one, so the lifetime is half-open [lower, upper) and
  `upper > lower`; or instead `end`: the LAST live step (inclusive, `end >= lower`);
- `size`: bytes, an integer >= 0 (0 is legal: the buffer occupies nothing and gets offset 0).

Header names are matched after trimming spaces, ignoring case. Integers may be negative for
`lower`/`upper`/`end`; sizes may not. Blank lines are skipped. memplan's lifetimes are inclusive,
so a buffer becomes `first = lower`, `last = upper - 1` (or `last = end`).

Other columns:
- `alignment` (MiniMalloc: the offset must be a multiple of it): honoured. When any alignment is
  above 1, every size is rounded up, for planning only, to a multiple of the least common multiple
  L of the alignments; the planners place buffers at 0 or at another buffer's end, so every offset
  is then a multiple of L, and `memplan_cli.planrun` checks each offset against its alignment.
  Empty or missing means 1.
- `offset`: ignored on input (memplan does not pin buffers: a file memplan wrote can be planned
  again) and replaced in the output.
- `hint`, `gaps` and any other column: ignored, and copied unchanged to the output. Ignoring
  MiniMalloc's `gaps` (windows inside the lifetime where the buffer is not live) is safe: the
  buffer is treated as live over its whole lifetime.

Writing (`format_plan_csv`) gives back the same rows in the same order and spelling, with an
`offset` column added at the end (or the existing `offset` column replaced in place).
"""
from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field

from memplan_cli.errors import MemplanError, shell_path
from memplan_cli.inputs import require_regular_file, utf16_codec

ALIASES = {
    "id": "id", "buffer": "id", "buffer_id": "id",
    "lower": "lower", "start": "lower", "begin": "lower",
    "upper": "upper", "end": "end",
    "size": "size",
    "alignment": "alignment",
    "offset": "offset",
}


class CsvError(MemplanError):
    """The buffer CSV cannot be read; the message names the file and, when it can, the line."""


@dataclass
class BufferTable:
    """A buffer CSV as read: the parsed buffers (inclusive lifetimes) plus the raw rows to write back."""

    path: str
    header: list[str]                 # as spelled in the file
    rows: list[list[str]]             # raw fields, one list per buffer, in file order
    lines: list[int]                  # the line number of each row (1 = the header)
    ids: list[str]
    sizes: list[int]
    firsts: list[int]
    lasts: list[int]
    alignments: list[int] = field(default_factory=list)  # empty when the file has no alignment column
    offset_column: int | None = None  # the index of an existing `offset` column

    @property
    def alignment(self) -> int:
        """The least common multiple of the alignments (1 without an alignment column)."""
        a = 1
        for x in self.alignments:
            a = a * x // math.gcd(a, x)
        return a

    def planning_sizes(self) -> list[int]:
        """Sizes rounded up to a multiple of `alignment` (the sizes themselves when it is 1)."""
        a = self.alignment
        if a == 1:
            return list(self.sizes)
        return [-(-s // a) * a for s in self.sizes]


def _model_format(data: bytes) -> str:
    """The model format `data` looks like (the loaders' sniff: a flatbuffer identifier, or an ONNX
    ModelProto's first field tag followed by bytes that are not text), else ""."""
    if data[4:8] in (b"CIR0", b"TFL3"):
        return "circle" if data[4:8] == b"CIR0" else "TF Lite"
    if data[:1] == b"\x08":
        try:
            data[:4096].decode("utf-8")
        except UnicodeDecodeError:
            return "ONNX"
    return ""


def _open_text(path: str) -> str:
    require_regular_file(path, "CSV file", CsvError)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise CsvError("no such file", path) from None
    except OSError as e:
        raise CsvError(f"cannot read: {e.strerror or e}", path) from None
    if not data.strip():
        raise CsvError("empty file (expected a header `id,lower,upper,size` and one buffer per line)", path)
    model = _model_format(data)
    if model:
        raise CsvError(f"{'an' if model == 'ONNX' else 'a'} {model} model, not a buffer list: `memplan plan` takes "
                       f"a CSV of buffers (a header `id,lower,upper,size`, one buffer per line); "
                       f"`memplan analyze {shell_path(path)}` analyses a model", path)
    if utf16_codec(data):  # a spreadsheet's "Unicode text"
        raise CsvError("a UTF-16 text file: memplan reads the CSV as UTF-8 (save it as UTF-8 or plain CSV)", path)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise CsvError(f"not a text CSV file (byte {e.start} is not UTF-8)", path) from None


# The planners do int64 arithmetic: a size or alignment above 2^48 bytes (MAX_OPERAND_BYTES, what
# memplan plans for one tensor) or a step beyond +-2^62 is refused, and so is a set of buffers whose
# sizes (rounded up to the alignment) add up to more than 2^62.
MAX_SIZE = 2**48
MAX_STEP = 2**62
MAX_TOTAL = 2**62


def _int(text: str, what: str, path: str, line: int, limit: int = MAX_STEP) -> int:
    t = text.strip()
    bound = f"at most {limit:,d} bytes" if limit == MAX_SIZE else f"steps lie within +-{limit:,d}"
    if len(t) > 24 and t.lstrip("+-").isdigit():  # before int(): Python refuses 4300+ digits itself
        raise CsvError(f"line {line}: {what} {t[:20]!r}... ({len(t)} digits) is out of range ({bound})", path)
    try:
        v = int(t, 10)
    except ValueError:
        shown = repr(text) if len(text) <= 30 else repr(text[:27]) + "..."
        raise CsvError(f"line {line}: {what} {shown} is not an integer", path) from None
    if abs(v) > limit:
        raise CsvError(f"line {line}: {what} {v:,d} is out of range ({bound})", path)
    return v


def read_buffers_csv(path: str) -> BufferTable:
    """Parse `path`; raises CsvError (one line, with the line number) on any problem."""
    text = _open_text(path)
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader)
        while not any(h.strip() for h in header):
            header = next(reader)
    except StopIteration:
        raise CsvError("empty file", path) from None
    except csv.Error as e:
        raise CsvError(f"line {reader.line_num}: {e}", path) from None
    header_line = reader.line_num

    cols: dict[str, int] = {}
    for k, name in enumerate(header):
        canon = ALIASES.get(name.strip().lower())
        if canon is None:
            continue
        if canon in cols:
            raise CsvError(f"line {header_line}: columns {header[cols[canon]].strip()!r} and {name.strip()!r} "
                           f"both give the buffer's {canon}", path)
        cols[canon] = k
    if "upper" in cols and "end" in cols:
        raise CsvError(f"line {header_line}: columns 'upper' (exclusive) and 'end' (inclusive) both give the "
                       "buffer's last step; keep one", path)
    have = set(cols) | ({"upper"} if "end" in cols else set())
    missing = [c for c in ("id", "lower", "upper", "size") if c not in have]
    if missing:
        raise CsvError(f"line {header_line}: missing column{'s' if len(missing) > 1 else ''} "
                       f"{', '.join(missing)} (header: {','.join(h.strip() for h in header)}; "
                       "expected id,lower,upper,size)", path)

    i_id, i_lo, i_sz = cols["id"], cols["lower"], cols["size"]
    i_up = cols.get("upper", cols.get("end"))
    inclusive_end = "end" in cols
    i_al = cols.get("alignment")
    width = len(header)

    rows, lines, ids, sizes, firsts, lasts, aligns = [], [], [], [], [], [], []
    seen: dict[str, int] = {}
    try:
        for row in reader:
            line = reader.line_num
            if not any(f.strip() for f in row):
                continue
            if len(row) != width:
                raise CsvError(f"line {line}: {len(row)} fields, the header has {width}", path)
            bid = row[i_id].strip()
            if not bid:
                raise CsvError(f"line {line}: empty id", path)
            if bid in seen:
                raise CsvError(f"line {line}: duplicate id {bid!r} (first on line {seen[bid]})", path)
            seen[bid] = line
            size = _int(row[i_sz], "size", path, line, MAX_SIZE)
            if size < 0:
                raise CsvError(f"line {line}: negative size {size}", path)
            lo = _int(row[i_lo], header[i_lo].strip(), path, line)
            up = _int(row[i_up], header[i_up].strip(), path, line)
            if inclusive_end:
                if up < lo:
                    raise CsvError(f"line {line}: end {up} is before lower {lo} (end is the last live step)", path)
                last = up
            else:
                if up <= lo:
                    raise CsvError(f"line {line}: upper {up} <= lower {lo} (the lifetime [lower, upper) is "
                                   "empty; upper is the step after the last one)", path)
                last = up - 1
            if i_al is not None:
                a = row[i_al].strip()
                al = 1 if a == "" else _int(a, "alignment", path, line, MAX_SIZE)
                if al < 1:
                    raise CsvError(f"line {line}: alignment {al} is not a positive integer", path)
                aligns.append(al)
            rows.append(row)
            lines.append(line)
            ids.append(bid)
            sizes.append(size)
            firsts.append(lo)
            lasts.append(last)
    except csv.Error as e:
        raise CsvError(f"line {reader.line_num}: {e}", path) from None
    if not rows:
        raise CsvError("no buffers: the file has a header and nothing else", path)
    table = BufferTable(path, header, rows, lines, ids, sizes, firsts, lasts, aligns, cols.get("offset"))
    a = 1
    for x in set(aligns):
        a = a * x // math.gcd(a, x)
        if a > MAX_SIZE:
            raise CsvError(f"the alignments' least common multiple is over {MAX_SIZE:,d} bytes", path)
    total = sum(table.planning_sizes())
    if total > MAX_TOTAL:
        raise CsvError(f"the buffers need {total:,d} bytes in all, over the {MAX_TOTAL:,d} (2^62) memplan "
                       "plans", path)
    return table


def format_plan_csv(table: BufferTable, offsets) -> str:
    """The table's rows in file order with their offsets: an `offset` column added at the end, or
    the existing one replaced. Header spelling and every other field are kept as read."""
    if len(offsets) != len(table.rows):
        raise ValueError(f"{len(offsets)} offsets for {len(table.rows)} buffers")
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    k = table.offset_column
    if k is None:
        w.writerow([*table.header, "offset"])
        for row, o in zip(table.rows, offsets):
            w.writerow([*row, int(o)])
    else:
        w.writerow(table.header)
        for row, o in zip(table.rows, offsets):
            r = list(row)
            r[k] = int(o)
            w.writerow(r)
    return out.getvalue()
