"""JSON Schemas of the documents memplan prints with `--format json`, one per `kind`, shipped in
the wheel so scripts can validate against the installed version (`memplan_cli/schemas/KIND.schema.json`)."""
from __future__ import annotations

import json
import pathlib

HERE = pathlib.Path(__file__).parent


def schema_path(name: str) -> pathlib.Path:
    """The schema file of a document kind or schema name ('report', 'compare', 'fit', ...)."""
    return HERE / f"{name}.schema.json"


def load_schema(name: str) -> dict:
    return json.loads(schema_path(name).read_text(encoding="utf-8"))
