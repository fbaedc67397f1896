"""Builds the planners' compiled kernels (memplan_cli/planners/_kernels.c) when a C compiler is
there; everything else is in pyproject.toml.

It also names the packages: memplan_cli's, and memplan_cli.schemas from the top-level schemas/.

The extension is optional: without a compiler (slim images, Windows or macOS without build tools)
the build says so and goes on, and memplan runs its NumPy kernels, which give the same plans
(memplan_cli/planners/_native.py; `memplan analyze -v` says which ran).

An in-place build (`pip install -e .`, the README's) also compiles the package's bytecode: pip does so
for a wheel, not for an editable install, and where PYTHONDONTWRITEBYTECODE is set (CI images, some
shells) Python would otherwise compile every module's source again on every start."""
import compileall
import os
import sys

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """A failed compile is a warning, not a failed install."""

    def run(self):
        try:
            super().run()
        except Exception as e:  # noqa: BLE001: any compiler or toolchain failure
            self._skip(e)
        if self.inplace:
            package = os.path.join(os.path.dirname(os.path.abspath(__file__)), "memplan_cli")
            compileall.compile_dir(package, quiet=1)

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as e:  # noqa: BLE001
            self._skip(e)

    @staticmethod
    def _skip(e):
        print(f"memplan: the C planner kernels were not built ({type(e).__name__}: {e}); "
              "memplan uses its pure-Python kernels (the same plans, more slowly)", file=sys.stderr)


# the JSON Schemas live at the top level (schemas/, one per document kind, as the design card lays
# out) and ship in the wheel as the package memplan_cli.schemas
PACKAGE_DIR = {"memplan_cli.schemas": "schemas"}
PACKAGES = find_packages(os.path.dirname(os.path.abspath(__file__)), include=["memplan_cli", "memplan_cli.*"]) + list(PACKAGE_DIR)

if __name__ == "__main__":  # setuptools runs it so; tests/test_packaging.py reads PACKAGES
    setup(packages=PACKAGES, package_dir=PACKAGE_DIR,
          ext_modules=[Extension("memplan_cli.planners._kernels", sources=["memplan_cli/planners/_kernels.c"],
                                 optional=True)],
          cmdclass={"build_ext": OptionalBuildExt})
