"""Builds the planners' compiled kernels (memplan_cli/planners/_kernels.c); everything else is in
pyproject.toml."""
from setuptools import Extension, setup

setup(ext_modules=[Extension("memplan_cli.planners._kernels", sources=["memplan_cli/planners/_kernels.c"])])
