"""Passes as declared units, and the pipeline that runs them in named stages.

A pass (`Pass`) states its contract: its `name`, the `TrainingGraph` fields it `reads` and the
fields it `writes` (a field it changes in place, appends to or replaces), and `run(tg)`, which
returns whether it changed anything. Passes tell each other things only through those fields, never
through a free dictionary, so what a pass needs is visible where it is declared.

A `Pipeline` is an ordered list of named stages (`Stage`), each a list of passes. A caller runs all
of it or some stages (the remat problem builds the step once up to the memory stage, then runs that
stage once per plan). When a pass raises, the exception keeps its type and message (a refusal the
user reads stays one line) and gets a note naming the pass and its stage.

With the environment variable MEMPLAN_CHECK_PASSES set, each pass runs under a contract check: it
may touch only the fields it declares (reads or writes) and change only those it writes; anything
else is a `PassContractError` naming the pass and the field. `access` (what tests/conftest.py sets
for the whole suite: free) hides every field the pass does not declare behind a property that
refuses access while it runs; `full` (tests/passes/test_pass_infra.py, on real models) also
fingerprints its read-only fields (a `repr`) before and after, several times slower.
(The idea of a pass that declares what it changes and a manager that checks it is onnx-ir's pass
infrastructure and torch.fx's pass manager; the code is memplan's.)
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass, fields
from typing import ClassVar

from memplan_cli.passes.training_graph import TrainingGraph

CHECK_ENV = "MEMPLAN_CHECK_PASSES"
FIELDS = frozenset(f.name for f in fields(TrainingGraph))


class PassContractError(AssertionError):
    """A pass touched or changed a TrainingGraph field it does not declare (a bug in the pass)."""


class Pass:
    """One pass: `name`, the TrainingGraph fields it `reads` and `writes`, and `run(tg) -> changed`."""

    name: ClassVar[str] = ""
    reads: ClassVar[frozenset[str]] = frozenset()
    writes: ClassVar[frozenset[str]] = frozenset()

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        unknown = (set(cls.reads) | set(cls.writes)) - FIELDS
        if unknown:
            raise TypeError(f"pass {cls.__name__} declares fields TrainingGraph does not have: {sorted(unknown)}")

    def run(self, tg: TrainingGraph) -> bool:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<pass {self.name}>"


@dataclass(frozen=True)
class Stage:
    name: str
    passes: tuple[Pass, ...]


def checking() -> str:
    """"" (no check), "access" (fields a pass does not declare refuse access: nearly free) or "full"
    (also fingerprints of the read-only fields: several times slower)."""
    v = os.environ.get(CHECK_ENV, "")
    return "" if v in ("", "0") else "full" if v == "full" else "access"


class Pipeline:
    """Named stages of passes, run in order; `run(tg, stages=...)` runs the named ones only."""

    def __init__(self, stages: list[tuple[str, list[Pass]]]):
        self.stages = [Stage(name, tuple(ps)) for name, ps in stages]
        names = [s.name for s in self.stages]
        if len(set(names)) != len(names):
            raise ValueError(f"two stages share a name: {names}")

    @property
    def passes(self) -> list[Pass]:
        return [p for s in self.stages for p in s.passes]

    def stage(self, name: str) -> Stage:
        for s in self.stages:
            if s.name == name:
                return s
        raise KeyError(f"no stage {name!r} (stages: {', '.join(s.name for s in self.stages)})")

    def run(self, tg: TrainingGraph, stages=None) -> list[tuple[str, bool]]:
        """Run the passes of `stages` (names, in pipeline order; default every stage) on `tg`:
        [(pass name, changed)]."""
        chosen = self.stages if stages is None else [self.stage(n) for n in stages]
        check = checking()
        ran = []
        for st in chosen:
            for p in st.passes:
                try:
                    changed = run_checked(p, tg, full=check == "full") if check else p.run(tg)
                except Exception as e:
                    e.add_note(f"in memplan pass '{p.name}' (stage '{st.name}')")
                    raise
                ran.append((p.name, changed))
        return ran


def _fingerprint(value) -> str:
    return repr(value)


def run_checked(p: Pass, tg: TrainingGraph, full: bool = True) -> bool:
    """`p.run(tg)` under the contract check: a field it does not declare cannot be read or set while
    it runs, and (`full`) the fields it only reads must be the same afterwards."""
    hidden = FIELDS - set(p.reads) - set(p.writes)
    # a field the pass never touches cannot change, and one it writes may: only its read-only fields
    # need a fingerprint
    kept = sorted(set(p.reads) - set(p.writes)) if full else []
    before = {f: _fingerprint(getattr(tg, f)) for f in kept}
    cls = type(tg)
    tg.__class__ = _guarded(cls, p.name, frozenset(hidden))
    try:
        changed = p.run(tg)
    finally:
        tg.__class__ = cls
    unwritable = [f for f in kept if _fingerprint(getattr(tg, f)) != before[f]]
    if unwritable:
        raise PassContractError(f"pass {p.name} changes fields it declares read-only: {unwritable}")
    return changed


@functools.cache
def _guarded(cls, pass_name: str, hidden: frozenset) -> type:
    """`cls` with the fields `hidden` refusing access (one class per pass, made once)."""
    return type(f"{cls.__name__}For_{pass_name.replace('-', '_')}", (cls,),
                {f: _undeclared(pass_name, f) for f in hidden})


def _undeclared(pass_name: str, field: str) -> property:
    """A field the pass does not declare: reading or setting it while the pass runs is an error (a
    property on the class wins over the instance's own attribute)."""
    def refuse(*_):
        raise PassContractError(f"pass {pass_name} touches the field {field!r}, which it does not declare")
    return property(refuse, refuse, refuse)
