"""Deferred imports: a module object that imports the real module on its first attribute read.

Why: the libraries memplan reads circle / tflite files with import much more than a run uses.
flatbuffers and circle-schema import NumPy at module level (the loader never uses it), and
circle-schema's package imports its ~200 generated table modules (a model reads a dozen).
Deferring them takes about a third off `memplan analyze MODEL.circle -p onert`
(benchmarks/start_bench.py).

A stand-in must never be what other code gets from `import numpy`: a package's stand-in in
`sys.modules` breaks the import of its submodules (`numpy._core._multiarray_umath` loads twice and
`numpy.testing` fails). So NumPy's stand-in sits in `sys.modules` only while memplan itself imports
flatbuffers-based modules (`numpy_deferred`), and leaves before anything else can import; the modules
imported in that window keep a private stand-in, which imports the real NumPy cleanly when read.
memplan's own modules take theirs from `deferred("numpy")`, which is never in sys.modules.
Leaf modules (circle-schema's tables, which have no submodules) may stay deferred in sys.modules.
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.machinery
import os
import sys
import types


class DeferredModule(types.ModuleType):
    """Imports the real module on the first attribute read, takes its namespace (so later reads are
    plain attribute hits) and leaves the real one in sys.modules. `during`: a context manager the
    real import runs inside (NumPy's window for flatbuffers-based modules)."""

    def __init__(self, name: str, during=None):
        super().__init__(name)
        self.__spec__ = importlib.machinery.ModuleSpec(name, None)
        self.__dict__["_deferred_during"] = during

    def __getattr__(self, attr):
        name = self.__name__
        if sys.modules.get(name) is self:
            del sys.modules[name]
        during = self.__dict__.get("_deferred_during")
        with during() if during is not None else contextlib.nullcontext():
            real = importlib.import_module(name)
        self.__dict__.update(real.__dict__)
        return getattr(real, attr)


def defer(name: str, during=None) -> None:
    """Stand leaf module `name` in sys.modules until first use (nothing when it is loaded already).
    Only for modules without submodules: see the module docstring."""
    if name not in sys.modules:
        sys.modules[name] = DeferredModule(name, during)


@contextlib.contextmanager
def deferred_while(name: str):
    """`import name` inside the block gives a private stand-in; sys.modules holds it only for the
    block (nothing when `name` is loaded already)."""
    if name in sys.modules:
        yield
        return
    stand = DeferredModule(name)
    sys.modules[name] = stand
    try:
        yield
    finally:
        if sys.modules.get(name) is stand:
            del sys.modules[name]


_PRIVATE: dict[str, DeferredModule] = {}


def deferred(name: str):
    """The real module when it is loaded already, else a private stand-in (never in sys.modules)
    that imports it on the first attribute read."""
    if name in sys.modules:
        return sys.modules[name]
    return _PRIVATE.setdefault(name, DeferredModule(name))


def numpy_deferred():
    """The window in which flatbuffers-based modules import (and do not load) NumPy."""
    return deferred_while("numpy")


def defer_package_modules(package_dir: str, package: str, during=None) -> None:
    """Defer every plain module file of a package directory (its `__init__` still runs)."""
    try:
        names = os.listdir(package_dir)
    except OSError:
        return
    for f in names:
        if f.endswith(".py") and f != "__init__.py":
            defer(f"{package}.{f[:-3]}", during)
