"""The reporter interface: one class per output format, one method per kind of document."""
from __future__ import annotations

from memplan_cli.report.output import RenderOptions


class Reporter:
    """Turns a report document (plain data) into text. Subclasses set `name` and implement the four
    methods; none of them prints or writes: the command decides where the text goes."""

    name = ""

    def analysis(self, doc: dict, opts: RenderOptions) -> str:
        raise NotImplementedError

    def diff(self, doc: dict, opts: RenderOptions) -> str:
        raise NotImplementedError

    def sweep(self, doc: dict, opts: RenderOptions) -> str:
        raise NotImplementedError

    def compare(self, doc: dict, opts: RenderOptions) -> str:
        """`memplan compare`: one column per system (report/compare.py)."""
        raise NotImplementedError
