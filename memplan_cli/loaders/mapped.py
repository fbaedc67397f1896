"""A SIGBUS while memplan reads a memory-mapped model file, as one line and exit 2.

The loaders read models through mmap, so that weight bytes are never read (only the pages holding
the tables memplan parses are touched). When the file shrinks while it is mapped (another process
truncates or rewrites it), touching a page past its new end raises SIGBUS, which killed memplan
(exit 135, no message). Python cannot catch it: its own handler returns, the faulting load runs
again, and the process spins. Here a C-level handler (through ctypes) writes the one line naming
the file and ends the process at once.
"""
from __future__ import annotations

import contextlib
import os
import signal

from memplan_cli.errors import printable

_state: dict = {}


def _message(path: str) -> bytes:
    line = (f"memplan: error: {printable(path)}: the file changed while memplan read it (truncated or "
            "rewritten by another process)\n")
    return line.encode("utf-8", "backslashreplace")


@contextlib.contextmanager
def sigbus_named(path: str):
    """While the body reads `path` through a mapping, a SIGBUS ends the process with one line naming
    `path` and exit 2. Best effort: without ctypes or SIGBUS, the body runs unguarded."""
    sig = getattr(signal, "SIGBUS", None)
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        install = libc.signal
    except (ImportError, OSError, AttributeError):
        install = None
    if sig is None or install is None or "handler" in _state:  # nested: the outer guard holds
        yield
        return
    message = _message(path)

    def on_sigbus(signum):  # runs inside the fault: write and leave, nothing else
        os.write(2, message)
        os._exit(2)

    handler = ctypes.CFUNCTYPE(None, ctypes.c_int)(on_sigbus)
    install.restype = ctypes.c_void_p
    install.argtypes = [ctypes.c_int, ctypes.c_void_p]
    previous = install(sig, ctypes.cast(handler, ctypes.c_void_p))
    _state["handler"] = handler  # the callback must outlive its installation
    try:
        yield
    finally:
        install(sig, previous)
        _state.pop("handler", None)
