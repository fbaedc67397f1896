"""Reports: the same figures for a person at a terminal (table), a CI script (json, csv) and a
picture (timeline SVG). Reporters know nothing of models: they render report documents.

`REPORTER_BY_NAME` is the registry behind `--format`; the option's choices come from it.
"""
from __future__ import annotations

from memplan_cli.report.base import Reporter
from memplan_cli.report.csvfmt import CsvReporter
from memplan_cli.report.jsonfmt import JsonReporter
from memplan_cli.report.table import TableReporter

REPORTER_BY_NAME: dict[str, type[Reporter]] = {
    "table": TableReporter,
    "json": JsonReporter,
    "csv": CsvReporter,
}

__all__ = ["REPORTER_BY_NAME", "Reporter", "get_reporter"]


def get_reporter(name: str) -> Reporter:
    return REPORTER_BY_NAME[name]()
