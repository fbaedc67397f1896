"""Where reports go: colour decisions, the console, and atomic writes to `--output`."""
from __future__ import annotations

import errno
import os
import re
import stat
import sys
from dataclasses import dataclass, field
from typing import Iterable

from memplan_cli.errors import MemplanError, OutputError, printable

# the narrowest view the tables are designed (and tested) for: a narrower terminal wraps lines, which
# keeps every figure whole, where rendering narrower would cut them
MIN_WIDTH = 80
# width when the output is not a terminal (files, pipes, CI logs) and COLUMNS is unset
PLAIN_WIDTH = 80


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
    # `memplan analyze` as the user ran it, with some flags changed (training flag name -> value):
    # the commands a note suggests, printed so that they run as printed; None: no command known
    command: object = None


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


def _columns_env() -> int | None:
    try:
        n = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        return None
    return n if n > 0 else None


def terminal_width(stream=None, *, to_file: bool = False) -> int:
    """The width a table view is laid out for: COLUMNS when set (as shells and `shutil` read it), else
    the terminal's width, else PLAIN_WIDTH for a pipe or a file; never below MIN_WIDTH. A file written
    with -o never takes the width of the terminal memplan happens to run in."""
    width = _columns_env()
    if width is None and not to_file and stream_is_terminal(stream):
        try:
            width = os.get_terminal_size((stream or sys.stdout).fileno()).columns
        except (OSError, ValueError, AttributeError):
            width = None
    return max(MIN_WIDTH, width or PLAIN_WIDTH)


# a listing line `  key      value`: its continuation lines go under the value
_KEYED = re.compile(r"^(\s*\S+(?: \S+)?\s{2,})(?=\S)")


def wrap_text(text: str, width: int = MIN_WIDTH) -> str:
    """Plain-text views (verify, plan, fit's notes, inspect) laid out for `width` columns: a longer
    line breaks at spaces and continues indented under its value (a `  key   value` line) or two
    columns deeper than it starts. Only a word longer than a whole line (a path) is ever split."""
    import textwrap  # lazy: `memplan analyze -p onert` does not load it

    out = []
    for line in text.split("\n"):
        if len(line) <= width:
            out.append(line)
            continue
        m = _KEYED.match(line)
        indent = len(m.group(1)) if m and len(m.group(1)) < width // 2 else len(line) - len(line.lstrip()) + 2
        out.extend(textwrap.wrap(line, width, subsequent_indent=" " * indent, break_on_hyphens=False,
                                 drop_whitespace=True) or [""])
    return "\n".join(out)


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


# errno values that say the path names no place a report can go (exit 2, like every other bad
# argument); any other failure is the system refusing a write to a good path (exit 74)
_NOT_A_PLACE = frozenset((errno.ENOTDIR, errno.ENOENT, errno.EISDIR, errno.ENAMETOOLONG, errno.ELOOP,
                          errno.EINVAL))


def output_failure(path: str, e: BaseException) -> MemplanError:
    """The error for an OSError met while checking or writing `path`, by cause, never by step:
    MemplanError (2) when the path cannot name a report file (a file used as a folder, a missing
    folder, a trailing slash, a name too long); OutputError (74) when a good path could not be
    written (no space, no inodes, quota, a file-size limit, a read-only disk, no permission, I/O)."""
    why = getattr(e, "strerror", None) or str(e)
    if isinstance(e, OSError) and e.errno in _NOT_A_PLACE:
        return MemplanError(f"cannot write {path}: {why}")
    if isinstance(e, OSError):
        return OutputError(f"cannot write {path}: {why}")
    return MemplanError(f"cannot write {path}: {why}")  # ValueError: a NUL byte in the path


def _absolute(path: str) -> str:
    """`os.path.abspath(path)`, or MemplanError (2) naming the cause when the working directory a
    relative path starts from was deleted (os.getcwd fails)."""
    try:
        return os.path.abspath(path)
    except FileNotFoundError:
        raise MemplanError(f"cannot write {path}: the working directory was deleted, so a relative path "
                           "names no folder (give an absolute path)") from None


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
        folder = os.path.dirname(_absolute(path))
        if not os.path.isdir(folder):
            raise MemplanError(f"cannot write {path}: no such folder {folder}") from None
        if path.endswith(os.sep):  # `r.json/`: a folder that does not exist, not a file
            raise MemplanError(f"cannot write {path}: {os.strerror(errno.ENOTDIR)} (a trailing '/')") from None
        return path
    except (OSError, ValueError) as e:
        raise output_failure(path, e) from None
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
            try:
                same = "" if os.path.abspath(inp) == os.path.abspath(path) else f" ({inp})"
            except OSError:
                same = f" ({inp})"
            raise MemplanError(f"cannot write {path}: it is the input file{same}; memplan never overwrites "
                               "what it reads")
    return target


def write_atomic(path: str, text: str, inputs: Iterable[str] = ()) -> None:
    """Write `text` to `path` through a temporary file in the same folder and a rename, so a
    reader never sees half a report and an error leaves any earlier file untouched. What may be
    written: `output_target`. The temporary file is removed on every failure, an interrupt or a
    SIGTERM included (the CLI turns SIGTERM / SIGHUP into an exit that unwinds through here)."""
    target = output_target(path, inputs)
    folder = os.path.dirname(_absolute(target))
    try:
        import tempfile  # only when writing a file: it imports random and shutil (~4 ms)

        fd, tmp = tempfile.mkstemp(prefix=".memplan-", suffix=".tmp", dir=folder)
    except OSError as e:
        raise output_failure(path, e) from None
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
            raise output_failure(path, e) from None
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
