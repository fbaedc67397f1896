"""`--format json`: the document itself, indented, keys in a fixed order, one trailing newline."""
from __future__ import annotations

import json

from memplan_cli.report.base import Reporter


def dumps(doc: dict) -> str:
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


class JsonReporter(Reporter):
    name = "json"

    def analysis(self, doc, opts):
        return dumps(doc)

    def diff(self, doc, opts):
        return dumps(doc)

    def sweep(self, doc, opts):
        return dumps(doc)

    def compare(self, doc, opts):
        return dumps(doc)
