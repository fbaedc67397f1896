"""Deferred imports: a module that stands in `sys.modules` until one of its attributes is read.

Why: the libraries memplan reads models with import much more than a run uses. flatbuffers and
circle-schema import NumPy at module level (the circle / tflite loaders never use it), and
circle-schema's package imports its ~200 generated table modules (a model reads a dozen). Deferring
them takes about a third off `memplan analyze MODEL.circle -p onert` (benchmarks/start_bench.py).
importlib's LazyLoader cannot do this on Python 3.11: `import x` itself reads `x.__spec__`, which
loads it; a stand-in with its own `__spec__` passes `import x` untouched.
"""
from __future__ import annotations

import importlib
import importlib.machinery
import os
import sys
import types


class DeferredModule(types.ModuleType):
    """Imports the real module on the first attribute read, takes its namespace (so later reads are
    plain attribute hits) and leaves the real one in sys.modules."""

    def __init__(self, name: str):
        super().__init__(name)
        self.__spec__ = importlib.machinery.ModuleSpec(name, None)

    def __getattr__(self, attr):
        name = self.__name__
        if sys.modules.get(name) is self:
            del sys.modules[name]
        real = importlib.import_module(name)
        self.__dict__.update(real.__dict__)
        return getattr(real, attr)


def defer(name: str) -> None:
    """Stand `name` in sys.modules until first use (nothing when it is loaded already)."""
    if name not in sys.modules:
        sys.modules[name] = DeferredModule(name)


def defer_package_modules(package_dir: str, package: str) -> None:
    """Defer every plain module file of a package directory (its `__init__` still runs)."""
    try:
        names = os.listdir(package_dir)
    except OSError:
        return
    for f in names:
        if f.endswith(".py") and f != "__init__.py":
            defer(f"{package}.{f[:-3]}")
