"""Fixtures for the report tests: stand-in profiles registered under the real names, and a tiny graph."""
from __future__ import annotations

import pytest

from memplan_cli.ir.graph import Graph, Operand, Operation

FAKE_MODULES = {"memplan": "tests.report.fake_profiles", "onert": "tests.report.fake_onert"}


@pytest.fixture
def fake_profiles(monkeypatch):
    """`memplan` and `onert` resolve to the fake profiles in tests/report/fake_profiles.py."""
    import memplan_cli.profiles as profiles

    monkeypatch.setattr(profiles, "PROFILE_MODULES", {**profiles.PROFILE_MODULES, **FAKE_MODULES})
    return FAKE_MODULES


def tiny_graph(batch: int = 2, concat: bool = False) -> Graph:
    """x -> FC -> Relu -> FC (-> Concat): three or four ops."""
    ops = [Operation(0, "FullyConnected", [0, 1], [2], name="fc1"), Operation(1, "Relu", [2], [3]),
           Operation(2, "FullyConnected", [3, 4], [5], name="fc2")]
    operands = [Operand(0, "x", (batch, 8), is_input=True), Operand(1, "w1", (16, 8), is_const=True),
                Operand(2, "h", (batch, 16)), Operand(3, "r", (batch, 16)), Operand(4, "w2", (4, 16), is_const=True),
                Operand(5, "y", (batch, 4), is_output=not concat)]
    if concat:
        ops.append(Operation(3, "Concat", [5, 5], [6], {"axis": 1}))
        operands.append(Operand(6, "z", (batch, 8), is_output=True))
    g = Graph(operands, ops, [0], [len(operands) - 1], name="tiny", source_format="circle")
    g.verify()
    return g


@pytest.fixture
def tiny():
    return tiny_graph()
