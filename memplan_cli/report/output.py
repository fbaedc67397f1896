"""Where reports go: colour decisions, the console, and atomic writes to `--output`."""
from __future__ import annotations

import os
import stat
import sys
from dataclasses import dataclass, field
from typing import Iterable

from memplan_cli.errors import MemplanError, OutputError, printable

# width used when the output is not a terminal (files, pipes, CI logs): wide enough for the tables
PLAIN_WIDTH = 120


@dataclass
class RenderOptions:
    color: bool = False
    width: int = PLAIN_WIDTH
    verbosity: int = 1  # 0 with -q, 2 with -v; -qq prints nothing for a table
    # bytes live at each step (all categories), for the terminal sparkline; empty: no sparkline
    live_total: list[int] = field(default_factory=list)
    # (time domain, bytes live at each of its steps) when the profile has several (report.live)
    live_by_domain: list[tuple[str, list[int]]] = field(default_factory=list)
    timings: dict = field(default_factory=dict)
    # which planner kernels ran ("c" or "python"), for -v; never in JSON, which must not depend on
    # the machine it was made on
    kernels: str = ""


def stream_is_terminal(stream=None) -> bool:
    stream = stream or sys.stdout
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def use_color(choice: str, *, to_file: bool = False, stream=None) -> bool:
    """`--color always|never|auto`. auto: a terminal, NO_COLOR unset or empty, TERM not dumb.
    An explicit `always` wins over NO_COLOR (the flag is the more specific request)."""
    if to_file or choice == "never":
        return False
    if choice == "always":
        return True
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("TERM") == "dumb":
        return False
    return stream_is_terminal(stream)


def terminal_width(stream=None) -> int:
    if stream_is_terminal(stream):
        try:
            return max(60, os.get_terminal_size().columns)
        except OSError:
            pass
    return PLAIN_WIDTH


def _file_mode(path: str) -> int:
    """The mode of the file being replaced, else what the umask gives a new file."""
    try:
        return os.stat(path).st_mode & 0o7777
    except OSError:
        mask = os.umask(0)
        os.umask(mask)
        return 0o666 & ~mask


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _identity(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


def output_target(path: str, inputs: Iterable[str] = ()) -> str:
    """The file `write_atomic(path, ...)` replaces, or MemplanError (exit 2) when it must not write.

    Rules:
    - a new path (its folder exists) or an existing regular file is written;
    - a symlink is followed to its target, which must itself be an existing regular file (a
      dangling link is refused): the target is replaced atomically and the link is kept;
    - a directory, FIFO, socket or device is refused (replacing /dev/null with a report, or
      blocking on a FIFO, is never what was meant);
    - a file that is one of `inputs` (the files the command read) is refused, by identity
      (st_dev, st_ino): a symlink or a hard link to the input model is the input model.
    """
    if not path:
        raise MemplanError("cannot write to an empty path")
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            raise MemplanError(f"cannot write {path}: no such folder {folder}") from None
        return path
    except (OSError, ValueError) as e:
        raise MemplanError(f"cannot write {path}: {getattr(e, 'strerror', None) or e}") from None
    target = path
    if stat.S_ISLNK(st.st_mode):
        target = os.path.realpath(path)
        try:
            st = os.stat(target)
        except (OSError, ValueError):
            raise MemplanError(f"cannot write {path}: a symlink to a missing file ({target}); memplan "
                               "writes through a link only to an existing file") from None
    if not stat.S_ISREG(st.st_mode):
        what = next((k for test, k in _KINDS if test(st.st_mode)), "not a regular file")
        raise MemplanError(f"cannot write {path}: it is {what}; memplan writes reports to regular files only")
    ident = (st.st_dev, st.st_ino)
    for inp in inputs:
        if inp and _identity(inp) == ident:
            same = "" if os.path.abspath(inp) == os.path.abspath(path) else f" ({inp})"
            raise MemplanError(f"cannot write {path}: it is the input file{same}; memplan never overwrites "
                               "what it reads")
    return target


def write_atomic(path: str, text: str, inputs: Iterable[str] = ()) -> None:
    """Write `text` to `path` through a temporary file in the same folder and a rename, so a
    reader never sees half a report and an error leaves any earlier file untouched. What may be
    written: `output_target`. The temporary file is removed on every failure, an interrupt or a
    SIGTERM included (the CLI turns SIGTERM / SIGHUP into an exit that unwinds through here)."""
    target = output_target(path, inputs)
    folder = os.path.dirname(os.path.abspath(target))
    try:
        import tempfile  # only when writing a file: it imports random and shutil (~4 ms)

        fd, tmp = tempfile.mkstemp(prefix=".memplan-", suffix=".tmp", dir=folder)
    except OSError as e:
        raise MemplanError(f"cannot write {path}: {e.strerror or e}") from None
    try:
        # backslashreplace: a name that is not UTF-8 (a file name's undecodable bytes, kept by Python
        # as lone surrogates) is written as \udcff, which is still valid UTF-8 (and valid JSON)
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace", newline="") as f:
            f.write(text)
        os.chmod(tmp, _file_mode(target))  # mkstemp makes 0600; a report is an ordinary file
        os.replace(tmp, target)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError):
            raise OutputError(f"cannot write {path}: {e.strerror or e}") from None
        raise


def emit(text: str, output: str | None, inputs: Iterable[str] = (), data: str = "") -> None:
    """The report to `output` (atomically; never onto one of `inputs`) or to stdout. `data`: "csv"
    or "json", which keep a file's strings exactly, escaped only when stdout is a terminal."""
    if output is not None and output != "-":
        write_atomic(output, text, inputs)
    else:
        write_stdout(text, data)


def _stdout_to_devnull() -> None:
    """Point fd 1 at /dev/null, so the interpreter's last flush of what is still buffered succeeds
    silently instead of failing a second time."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


def for_terminal(text: str, data: str) -> str:
    """`text` in format `data` ("csv", "json"), which holds a file's strings exactly, with each
    string made `errors.printable`, for a terminal (a CSV field's newline too)."""
    if data == "csv":
        import csv
        import io

        out = io.StringIO()
        w = csv.writer(out, lineterminator="\n")
        for row in csv.reader(io.StringIO(text, newline="")):
            w.writerow([printable(f) for f in row])
        return out.getvalue()
    return "\n".join(printable(line) for line in text.split("\n"))


def write_stdout(text: str, data: str = "") -> None:
    """`text` to stdout. A reader that went away (`memplan ... | head`) ends the run quietly with
    141, as for SIGPIPE; a closed (`>&-`) or failing (`> /dev/full`) stdout is an OutputError (74).
    `data` (CSV, JSON: exact strings) is escaped line by line when stdout is a terminal; a table is
    made printable where it is built."""
    stream = sys.stdout
    if data and stream is not None and stream_is_terminal(stream):
        text = for_terminal(text, data)
    if stream is None or getattr(stream, "closed", False):
        raise OutputError("cannot write the report: stdout is closed")
    try:
        try:
            stream.write(text)
        except UnicodeEncodeError:  # nothing was written: a stdout encoding without these characters
            enc = getattr(stream, "encoding", None) or "utf-8"
            stream.write(text.encode(enc, "backslashreplace").decode(enc))
        stream.flush()
    except BrokenPipeError:
        _stdout_to_devnull()
        raise SystemExit(141) from None
    except OSError as e:
        _stdout_to_devnull()
        raise OutputError(f"cannot write the report to stdout: {e.strerror or e}") from None
    except ValueError:  # "I/O operation on closed file"
        raise OutputError("cannot write the report: stdout is closed") from None
