"""Command-line entry point. Kept thin: each command lives in `memplan_cli/commands/<name>.py`,
parses its flags and calls the work; this module only wires commands and turns errors into exit codes.

Exit codes (memplan_cli/errors.py names 1 and 3): 0 ok; 1 a failed check (diff thresholds, verify);
2 bad input or usage (also --budget 0); 3 over budget (analyze / verify / sweep --budget, fit);
74 the report could not be written (a full disk, a closed or full stdout); 141 the reader of stdout
went away (as SIGPIPE); 70 internal error (a bug in memplan: please report it).
"""
from __future__ import annotations

import errno
import gc
import importlib
import io
import os
import sys
import warnings

import click

from memplan_cli.errors import MemplanError, one_line
from memplan_cli.version import __version__

# A 100,000-op graph holds millions of small objects: with the default thresholds the cyclic
# collector rescans them all again and again (45% of the CPU time, measured). Young cycles are still
# collected (every million allocations); the long-lived graph practically never reaches the older
# generations, whose collections cost another 3 s of 22 on a 100,000-op chain at 100,000 (measured,
# the same peak RSS: memplan makes few cycles). The CLI's choice only.
gc.set_threshold(1_000_000, 50, 10_000)

# OpenBLAS starts one thread per core when NumPy is imported, and when the system refuses one it
# prints four lines and raises SIGINT (memplan said "interrupted", exit 130, with no Ctrl-C).
# `verify` runs its kernels on 1 BLAS thread unless --threads asks for more (execute/blas.py), so
# the pool NumPy's import would start is never used: start none.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

COMMAND_MODULES = ("analyze", "inspect", "diff", "sweep", "verify", "plan", "compare", "fit")


def usage_line(e: click.UsageError) -> str:
    """click's usage error (three lines: usage, hint, error) as memplan's one line."""
    where = e.ctx.command_path if e.ctx is not None else "memplan"
    return f"memplan: error: {e.format_message()} (see '{where} --help')"


def _guard_std_fds() -> None:
    """Give a closed fd 0, 1 or 2 /dev/null, so that no file memplan opens later lands on it (and
    receives the report or an error line). A closed stdout stays closed for Python: sys.stdout is
    None and writing the report is then an error (74), not silence."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            try:
                got = os.open(os.devnull, os.O_RDWR)
            except OSError:
                return
            if got != fd:  # open() takes the lowest free fd: only if a lower one was also free
                os.dup2(got, fd)
                os.close(got)


class _ClosedStdout(io.TextIOBase):
    """sys.stdout when memplan started with fd 1 closed (`>&-`). Python leaves sys.stdout None, and
    click then prints --help and --version nowhere with exit 0; every write here fails instead, as a
    write to a closed descriptor does (exit 74)."""

    @property
    def closed(self) -> bool:
        return True

    def writable(self) -> bool:
        return True

    def write(self, text) -> int:
        raise OSError(errno.EBADF, "stdout is closed")


def _checked_stdout() -> None:
    """Give the process's stdout a buffered layer if it has none (PYTHONUNBUFFERED=1, as CI images
    often set): unbuffered, Python's text layer drops what a short write leaves (a file-size limit,
    a nearly full disk) and the run exits 0 with half a report. A BufferedWriter writes the rest
    and raises the error (EFBIG, ENOSPC), so the run ends in 74."""
    s = sys.stdout
    if s is None or s is not sys.__stdout__ or isinstance(getattr(s, "buffer", None), io.BufferedWriter):
        return
    try:
        fd = s.fileno()
        raw = io.FileIO(fd, "w", closefd=False)
    except (OSError, ValueError, AttributeError):
        return
    sys.stdout = io.TextIOWrapper(io.BufferedWriter(raw), encoding=s.encoding, errors=s.errors,
                                  line_buffering=s.line_buffering)


def _reader_gone() -> None:
    """The reader of stdout went away: end as SIGPIPE would (141), nothing on stderr."""
    _stdout_to_devnull()
    sys.exit(141)


def _on_signal(signum, frame):
    # unwind like an exception, so write_atomic removes its temporary file
    raise SystemExit(128 + signum)


class MemplanGroup(click.Group):
    """Turns MemplanError into one line on stderr and its exit status (2; 74 for output errors), and
    click's usage errors into one line too; never shows a traceback (set MEMPLAN_DEBUG=1 to see one
    for an internal error)."""

    def main(self, *args, **kwargs):
        import signal

        _guard_std_fds()
        closed_stdout = sys.stdout is None
        if closed_stdout:  # started with fd 1 closed: --help and --version must fail too, not print nowhere
            sys.stdout = _ClosedStdout()
        _checked_stdout()
        previous = {}
        for name in ("SIGTERM", "SIGHUP"):
            sig = getattr(signal, name, None)
            try:
                if sig is not None and signal.getsignal(sig) == signal.SIG_DFL:
                    previous[sig] = signal.signal(sig, _on_signal)
            except ValueError:  # not the main thread: leave signals alone
                pass
        try:
            with warnings.catch_warnings():
                # stderr carries one line per error: a library's warning (NumPy's "invalid value
                # encountered in cast" on a model's integer tensors) must not add a second
                if not os.environ.get("MEMPLAN_DEBUG"):
                    warnings.simplefilter("ignore")
                return super().main(*args, **kwargs)
        except SystemExit as e:
            # click answers EPIPE on its own output (--help, --version) with exit 1 and wrappers
            # that silence the last flush; memplan's rule for a reader that went away is 141
            if e.code == 1 and type(sys.stdout).__name__ == "_PacifyFlushWrapper":
                _reader_gone()
            raise
        except BrokenPipeError:
            _reader_gone()
        except OSError as e:  # click's own output (--help, --version, usage) to a failing stdout
            _stdout_to_devnull()
            _echo_error(f"memplan: error: cannot write to stdout: {e.strerror or e}")
            sys.exit(74)
        finally:
            if closed_stdout and isinstance(sys.stdout, _ClosedStdout):
                sys.stdout = None
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def make_context(self, info_name, args, parent=None, **extra):
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.UsageError as e:
            if type(e).__name__ == "NoArgsIsHelpError":  # bare `memplan`: the help, as click shows it
                raise
            _echo_error(one_line(usage_line(e)))
            sys.exit(e.exit_code)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except click.UsageError as e:
            _echo_error(one_line(usage_line(e)))
            ctx.exit(e.exit_code)
        except MemplanError as e:
            _echo_error(f"memplan: error: {one_line(e.cli_text())}")
            ctx.exit(e.exit_code)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except KeyboardInterrupt:
            _echo_error("memplan: interrupted")
            ctx.exit(130)
        except MemoryError:
            _echo_error("memplan: error: out of memory")
            ctx.exit(2)
        except RecursionError:
            _echo_error("memplan: error: the input is nested too deeply for memplan")
            ctx.exit(2)
        except RuntimeError as e:
            if "can't start new thread" not in str(e):
                _internal(ctx, e)
            _echo_error(f"memplan: error: {THREAD_REFUSED}")
            ctx.exit(2)
        except OSError as e:
            if not _from_echo(e):
                _internal(ctx, e)
            if isinstance(e, BrokenPipeError):
                _reader_gone()
            _stdout_to_devnull()  # a subcommand's --help to a full stdout
            _echo_error(f"memplan: error: cannot write to stdout: {e.strerror or e}")
            ctx.exit(74)
        except Exception as e:
            _internal(ctx, e)


THREAD_REFUSED = ("cannot start a thread: the system refused it (a limit on processes, ulimit -u, or on "
                  "memory, ulimit -v / -s)")


def _internal(ctx, e: Exception):
    """A bug: one line, no traceback, unless asked."""
    if os.environ.get("MEMPLAN_DEBUG"):
        raise e
    where = "".join(f"; {one_line(n)}" for n in getattr(e, "__notes__", ()))  # e.g. the pass that failed
    _echo_error(f"memplan: internal error: {type(e).__name__}: {one_line(e)}{where} "
                "(a bug in memplan; MEMPLAN_DEBUG=1 shows the traceback)")
    ctx.exit(70)


def _from_echo(e: BaseException) -> bool:
    """Whether `e` was raised inside click.echo: help or usage text going to a failing stdout (every
    report goes through report.output.write_stdout, which raises OutputError itself)."""
    tb = e.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_name == "echo" and tb.tb_frame.f_globals.get("__name__") == "click.utils":
            return True
        tb = tb.tb_next
    return False


def _stdout_to_devnull() -> None:
    """fd 1 onto /dev/null after a failed write, so the interpreter's last flush of what is still
    buffered succeeds instead of failing again with a second message."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
    except OSError:
        pass


def _echo_error(line: str) -> None:
    """One line to stderr; a closed or full stderr must not turn the exit status into a traceback."""
    try:
        click.echo(line, err=True)
    except (OSError, ValueError):
        pass


@click.group(cls=MemplanGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="memplan")
def main():
    """How much memory training a model takes, what it is made of, and how much less a better plan needs."""


def _register_commands():
    for name in COMMAND_MODULES:
        mod = importlib.import_module(f"memplan_cli.commands.{name}")
        main.add_command(mod.command)


_register_commands()


def run() -> None:
    """The `memplan` program (console script, `python -m memplan_cli`): `main`, then, after a
    successful run, leave without tearing the interpreter down. Freeing a large graph's millions of
    objects one by one at exit took 2.5 s of 20 on a 100,000-op chain (measured); the report is
    written and flushed by then, and nothing memplan opens is left to close. Errors exit the usual
    way."""
    try:
        main()
    except SystemExit as e:
        if e.code not in (0, None):
            raise
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except (OSError, ValueError):
        sys.exit(0)  # the interpreter's own last flush reports it, as before
    os._exit(0)


if __name__ == "__main__":  # pragma: no cover
    run()
