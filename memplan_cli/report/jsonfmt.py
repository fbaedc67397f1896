"""`--format json`: the document itself, indented, keys in a fixed order, one trailing newline."""
from __future__ import annotations

import json

from memplan_cli.errors import printable
from memplan_cli.report.base import Reporter


def dumps(doc: dict) -> str:
    """UTF-8 kept as it is (names stay readable), except what a terminal would act on (C1 controls,
    bidi overrides, line separators: errors.printable's characters), written as JSON \\u escapes:
    the same string for a parser, inert on a terminal."""
    return _inert(json.dumps(doc, indent=2, ensure_ascii=False)) + "\n"


def _inert(text: str) -> str:
    if text.replace("\n", "").isprintable():  # the common case, in C
        return text
    # outside its strings a JSON text holds only ASCII, so every such character is inside one
    return "".join(c if c == "\n" or printable(c) == c else json.dumps(c)[1:-1] for c in text)


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
