"""Limit the BLAS thread pool numpy uses while a verification runs.

Measured on the 2-core development machine under load: OpenBLAS with 2 threads took 0.25 s for an
8x3136 by 3136x128 product that takes 0.25 ms with 1 thread (threads spin against other processes).
One thread is also deterministic. Best effort: an unknown BLAS is left alone.
"""
from __future__ import annotations

import contextlib
import ctypes
import glob
import os
import threading

_SETTERS = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads", "openblas_set_num_threads64_",
            "openblas_set_num_threads")
_GETTERS = ("scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads", "openblas_get_num_threads64_",
            "openblas_get_num_threads")


def _openblas():
    import numpy as np

    here = os.path.dirname(np.__file__)
    for pat in (here + ".libs/*openblas*", os.path.join(here, ".dylibs", "*openblas*")):
        for path in glob.glob(pat):
            try:
                return ctypes.CDLL(path)
            except OSError:
                continue
    return None


def _fn(lib, names):
    for n in names:
        f = getattr(lib, n, None) if lib is not None else None
        if f is not None:
            return f
    return None


def get_threads() -> int | None:
    g = _fn(_openblas(), _GETTERS)
    return int(g()) if g else None


def _can_start_threads(k: int) -> None:
    """Start and end `k` threads, so that a refusal is a RuntimeError here: OpenBLAS, refused a
    thread, prints four lines and raises SIGINT (which read as a Ctrl-C)."""
    release = threading.Event()
    started = []
    try:
        for _ in range(k):
            t = threading.Thread(target=release.wait, daemon=True)
            t.start()
            started.append(t)
    finally:
        release.set()
        for t in started:
            t.join()


@contextlib.contextmanager
def blas_threads(n: int | None):
    """Run the body with `n` BLAS threads (None: leave as is), restoring the previous count."""
    lib = _openblas() if n else None
    setter, getter = _fn(lib, _SETTERS), _fn(lib, _GETTERS)
    if not (setter and getter):
        yield
        return
    before = int(getter())
    if n > before:
        _can_start_threads(n - 1)
    setter(int(n))
    try:
        yield
    finally:
        setter(before)
