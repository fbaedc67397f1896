"""The planners' inner loops: the compiled library (`_kernels.c`, built by setup.py on install and
loaded with ctypes) when it is there, else the Python reference kernels (`_greedy_kernel`,
`_exact_kernel`), which compute the same results, only slower.

Rules:
- Both give identical offsets, arenas, statuses and node counts (tests/planners/test_native.py),
  and every budget counts work, not seconds, so a plan never depends on which one ran.
- `BACKEND` says which one is in use ("c" or "python"); `MEMPLAN_PURE_PYTHON=1` forces Python.
- ctypes releases the GIL during each call, so the planners' threads run the kernels in parallel.
- Nothing here compiles at run time: no JIT, no compiler needed after install.
"""
from __future__ import annotations

import ctypes
import os

import numpy as np

from memplan_cli.planners import _exact_kernel as _EK
from memplan_cli.planners import _greedy_kernel as _GK


# why the Python kernels run ("" when the C ones do): said by `-v` (`kernels_note`)
WHY_PYTHON = ""


def _load():
    global WHY_PYTHON
    if os.environ.get("MEMPLAN_PURE_PYTHON"):
        WHY_PYTHON = "bypassed"
        return None
    try:
        from importlib.util import find_spec

        spec = find_spec("memplan_cli.planners._kernels")
        if spec is None or not spec.origin:
            WHY_PYTHON = "not built"
            return None
        lib = ctypes.CDLL(spec.origin)
    except (ImportError, OSError) as e:
        WHY_PYTHON = f"did not load ({type(e).__name__})"
        return None
    i64, p = ctypes.c_int64, ctypes.c_void_p
    lib.mp_fill_index.argtypes = [i64, p, p, i64, p, p, p, p, i64]
    lib.mp_fill_index.restype = None
    lib.mp_place.argtypes = [i64, p, p, p, p, i64, i64, p, p, p, p, i64, p]
    lib.mp_place.restype = i64
    lib.mp_search.argtypes = [i64] + [p] * 8 + [i64] * 5 + [p] * 24
    lib.mp_search.restype = i64
    return lib


_LIB = _load()
BACKEND = "c" if _LIB is not None else "python"


def kernels_note() -> str:
    """What `-v` says about the planners' inner loops: which ran, and why Python when it is Python."""
    if BACKEND == "c":
        return "c (compiled at install)"
    if WHY_PYTHON == "bypassed":
        return "python (MEMPLAN_PURE_PYTHON is set: the C kernels were bypassed; the same plans, more slowly)"
    if WHY_PYTHON == "not built":
        return ("python (the C kernels were not built at install, e.g. no C compiler; `pip install -v .` shows "
                "why; the same plans, more slowly)")
    return f"python (the C kernels {WHY_PYTHON}; the same plans, more slowly)"


def _ptr(a: np.ndarray) -> int:
    return a.ctypes.data


def build_index(f: np.ndarray, l: np.ndarray, width: int):
    """CSR lists per block of `width` ranks, as `_greedy_kernel.build_index`: (start_ptr,
    start_ids, touch_ptr, touch_ids)."""
    if _LIB is None:
        return _GK.build_index(f, l, width)
    f = np.ascontiguousarray(f, np.int64)
    l = np.ascontiguousarray(l, np.int64)
    n = f.size
    b0, b1 = f // width, l // width
    nb = int(b1.max()) + 1 if n else 1
    start_ptr = np.zeros(nb + 1, np.int64)
    np.cumsum(np.bincount(b0, minlength=nb), out=start_ptr[1:])
    diff = np.zeros(nb + 1, np.int64)
    np.add.at(diff, b0, 1)
    np.add.at(diff, b1 + 1, -1)
    touch_ptr = np.zeros(nb + 1, np.int64)
    np.cumsum(np.cumsum(diff[:nb]), out=touch_ptr[1:])
    start_ids = np.empty(n, np.int64)
    touch_ids = np.empty(int(touch_ptr[-1]), np.int64)
    _LIB.mp_fill_index(n, _ptr(f), _ptr(l), int(width), _ptr(start_ptr), _ptr(start_ids),
                       _ptr(touch_ptr), _ptr(touch_ids), nb)
    return start_ptr, start_ids, touch_ptr, touch_ids


def place(sizes, f, l, order, best_fit, width, start_ptr, start_ids, touch_ptr, touch_ids, stop_above):
    """(offsets, arena) as `_greedy_kernel.place` (arena -1: stopped above `stop_above`)."""
    if _LIB is None:
        return _GK.place(sizes, f, l, order, best_fit, width, start_ptr, start_ids, touch_ptr, touch_ids,
                         stop_above)
    order = np.ascontiguousarray(order, np.int64)
    offsets = np.zeros(sizes.size, np.int64)
    arena = _LIB.mp_place(sizes.size, _ptr(sizes), _ptr(f), _ptr(l), _ptr(order), int(bool(best_fit)),
                          int(width), _ptr(start_ptr), _ptr(start_ids), _ptr(touch_ptr), _ptr(touch_ids),
                          int(stop_above), _ptr(offsets))
    return offsets, int(arena)


def search(s, a, b, adj_ptr, adj, width, area, pre, cap, budget, decompose, rerank, *state) -> int:
    """One turn of the exact search, as `_exact_kernel.search` (state from `new_state`)."""
    if _LIB is None:
        return _EK.search(s, a, b, adj_ptr, adj, width, area, pre, cap, budget, decompose, rerank, *state)
    return int(_LIB.mp_search(s.size, _ptr(s), _ptr(a), _ptr(b), _ptr(adj_ptr), _ptr(adj), _ptr(width),
                              _ptr(area), _ptr(pre), pre.size, int(cap), int(budget), int(bool(decompose)),
                              int(bool(rerank)), *(_ptr(x) for x in state)))
