"""Reports: the same figures for a person at a terminal (table), a CI script (json, csv) and a
picture (timeline SVG). Reporters know nothing of models: they render report documents.

`REPORTER_BY_NAME` is the registry behind `--format`; the option's choices come from it. A
reporter's module is imported when it is first asked for, so `--format json` never loads rich.
"""
from __future__ import annotations

import importlib
from collections.abc import Mapping

from memplan_cli.report.base import Reporter

# name -> (module, class)
_REPORTERS = {
    "table": ("memplan_cli.report.table", "TableReporter"),
    "json": ("memplan_cli.report.jsonfmt", "JsonReporter"),
    "csv": ("memplan_cli.report.csvfmt", "CsvReporter"),
}


class _Registry(Mapping):
    """name -> Reporter class, importing the class's module on first access."""

    def __getitem__(self, name: str) -> type[Reporter]:
        mod, cls = _REPORTERS[name]
        return getattr(importlib.import_module(mod), cls)

    def __iter__(self):
        return iter(_REPORTERS)

    def __len__(self) -> int:
        return len(_REPORTERS)


REPORTER_BY_NAME: Mapping[str, type[Reporter]] = _Registry()

__all__ = ["REPORTER_BY_NAME", "Reporter", "get_reporter"]


def get_reporter(name: str) -> Reporter:
    return REPORTER_BY_NAME[name]()
