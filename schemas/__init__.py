"""JSON Schemas of the documents memplan prints with `--format json`, one per `kind` and named after
it (`KIND.schema.json`). They live at the repository's top level (schemas/) and ship in the wheel as
the package `memplan_cli.schemas` (setup.py maps it), so scripts can validate against the installed
version."""
from __future__ import annotations

import json
import pathlib

HERE = pathlib.Path(__file__).parent


# analyze's schema was report.schema.json before it was named after its kind
_FORMER_NAMES = {"report": "analysis"}


def schema_path(kind: str) -> pathlib.Path:
    """The schema file of a document kind ('analysis', 'compare', 'fit', ...)."""
    return HERE / f"{_FORMER_NAMES.get(kind, kind)}.schema.json"


def load_schema(kind: str) -> dict:
    return json.loads(schema_path(kind).read_text(encoding="utf-8"))
