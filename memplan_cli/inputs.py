"""Input files are regular files, checked before anything opens them.

Rules:
- A path is stat'ed (following symlinks) before it is opened: opening a FIFO for reading blocks
  until a writer appears, so `mkfifo m.onnx; memplan analyze m.onnx` would wait forever; a
  character device (/dev/zero, /dev/urandom) would be read without end.
- Anything but a regular file (directory, FIFO, socket, device) is one error naming the file and
  what it is, raised as the caller's error class (exit 2).
- The text inputs (a report, a buffer CSV) are UTF-8; a UTF-16 one (`utf16_codec`: its byte order
  mark) is named as such by its reader.
"""
from __future__ import annotations

import os
import stat

from memplan_cli.errors import MemplanError

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


def not_regular(path: str) -> str | None:
    """What `path` is when it exists but is not a regular file ("a FIFO (named pipe)"), else None."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None  # missing or unreadable: the caller's open() reports it as such
    if stat.S_ISREG(mode):
        return None
    return next((what for test, what in _KINDS if test(mode)), "a special file")


def require_regular_file(path: str, what: str = "file", error: type[MemplanError] = MemplanError) -> None:
    """Raise `error` naming `path` when it is missing or not a regular file; `what` says what was
    expected ("model file", "CSV file", "report")."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise error("no such file", path) from None
    except NotADirectoryError:
        raise error("no such file (a parent is not a directory)", path) from None
    except PermissionError:
        raise error("cannot read: permission denied", path) from None
    except (OSError, ValueError) as e:
        raise error(f"cannot read: {getattr(e, 'strerror', None) or e}", path) from None
    if not stat.S_ISREG(mode):
        kind = next((k for test, k in _KINDS if test(mode)), "a special file")
        raise error(f"is {kind}, not a {what} (memplan reads regular files only)", path)


def utf16_codec(head: bytes) -> str | None:
    """The codec of text that starts with a UTF-16 byte order mark ("utf-16-le" or "utf-16-be"; a
    shell's redirection, a spreadsheet's "Unicode text"), else None."""
    return {b"\xff\xfe": "utf-16-le", b"\xfe\xff": "utf-16-be"}.get(bytes(head[:2]))
