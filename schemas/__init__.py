"""JSON Schemas of the documents memplan prints with `--format json`, one per `kind` and named after
it (`KIND.schema.json`). They live at the repository's top level (schemas/) and ship in the wheel as
the package `memplan_cli.schemas` (setup.py maps it), so scripts can validate against the installed
version. The members of the training setup (`config`) are defined once, in training.schema.json, and
each kind's schema refers to them ($ref): `load_schema` returns a kind's schema with that file
embedded, ready for `jsonschema.validate`; a validator of the bare files needs it in its registry."""
from __future__ import annotations

import json
import pathlib

HERE = pathlib.Path(__file__).parent


# analyze's schema was report.schema.json before it was named after its kind
_FORMER_NAMES = {"report": "analysis"}


def schema_path(kind: str) -> pathlib.Path:
    """The schema file of a document kind ('analysis', 'compare', 'fit', ...)."""
    return HERE / f"{_FORMER_NAMES.get(kind, kind)}.schema.json"


# schemas of definitions the kinds' schemas refer to, not of documents
SHARED = ("training",)


def load_schema(kind: str) -> dict:
    """A kind's schema, with the shared definitions it refers to embedded under its $defs (each keeps
    its $id, which the references resolve to): one self-contained document."""
    schema = json.loads(schema_path(kind).read_text(encoding="utf-8"))
    if kind not in SHARED:
        defs = schema.setdefault("$defs", {})
        for name in SHARED:
            defs[f"{name}.schema.json"] = json.loads((HERE / f"{name}.schema.json").read_text(encoding="utf-8"))
    return schema
