"""numba's `njit` when numba is installed, else a no-op decorator (same code, interpreted: correct
but slow). Kernels are written in the subset both accept."""
from __future__ import annotations

try:  # pragma: no cover - exercised by whichever environment runs the tests
    from numba import njit as _njit

    HAVE_NUMBA = True

    def njit(*args, **kw):
        kw.setdefault("cache", True)
        kw.setdefault("nogil", True)
        return _njit(*args, **kw)
except ImportError:  # pragma: no cover
    HAVE_NUMBA = False

    def njit(*args, **kw):
        if len(args) == 1 and callable(args[0]) and not kw:
            return args[0]
        return lambda fn: fn
