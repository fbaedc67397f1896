"""Where reports go: colour decisions, the console, and atomic writes to `--output`."""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field

from memplan_cli.errors import MemplanError

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


def write_atomic(path: str, text: str) -> None:
    """Write `text` to `path` through a temporary file in the same folder and a rename, so a
    reader never sees half a report and an error leaves any earlier file untouched."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise MemplanError(f"cannot write {path}: no such folder {folder}")
    try:
        import tempfile  # only when writing a file: it imports random and shutil (~4 ms)

        fd, tmp = tempfile.mkstemp(prefix=".memplan-", suffix=".tmp", dir=folder)
    except OSError as e:
        raise MemplanError(f"cannot write {path}: {e.strerror or e}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        os.chmod(tmp, _file_mode(path))  # mkstemp makes 0600; a report is an ordinary file
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError):
            raise MemplanError(f"cannot write {path}: {e.strerror or e}") from None
        raise


def emit(text: str, output: str | None) -> None:
    """The report to `output` (atomically) or to stdout."""
    if output and output != "-":
        write_atomic(output, text)
    else:
        try:
            sys.stdout.write(text)
            sys.stdout.flush()
        except BrokenPipeError:
            # the reader went away (`memplan ... | head`): not an error; silence the final flush
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            raise SystemExit(141) from None
