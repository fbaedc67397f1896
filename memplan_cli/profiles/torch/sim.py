"""The replay's record: storages with their birth and death steps."""
from __future__ import annotations

from memplan_cli.buffers import Step


class Sim:
    """The replay: storages with their birth and death steps."""

    def __init__(self):
        self.steps: list[Step] = []
        self.store: list[dict] = []  # name, category, bytes, first, last, owner, kind
        self.coverage: dict = {"ops": 0, "estimated": {}}  # eager ops replayed; estimated label -> type

    def step(self, kind: str, op: int, label: str) -> int:
        self.steps.append(Step(len(self.steps), kind, op, label))
        return len(self.steps) - 1

    def new(self, name, category, nbytes, first, owner="", kind="") -> int:
        self.store.append({"name": name, "category": category, "bytes": int(nbytes), "first": first,
                           "last": first, "owner": owner, "kind": kind})
        return len(self.store) - 1

    def touch(self, s: int, step: int) -> None:
        if s is not None and step > self.store[s]["last"]:
            self.store[s]["last"] = step
