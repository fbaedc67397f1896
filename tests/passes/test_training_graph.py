"""The training-graph data model: lifetimes from accesses, alias folding, the schedule checker."""
import pytest

from memplan_cli.check.schedule import ScheduleError, check_schedule
from memplan_cli.ir.graph import Graph, Operand, Operation
from memplan_cli.passes.training_graph import TrainingGraph


def _tg():
    g = Graph([Operand(0, "x", (2, 4)), Operand(1, "y", (2, 4)), Operand(2, "z", (8,))],
              [Operation(0, "Relu", [0], [1]), Operation(1, "Reshape", [1], [2])], [0], [2])
    tg = TrainingGraph(g, None)
    x = tg.add_tensor("x", "non-const", (2, 4), "float32", "input", None, 0)
    y = tg.add_tensor("y", "non-const", (2, 4), "float32", "activation", 0, 1)
    z = tg.add_tensor("z", "non-const", (8,), "float32", "activation", 1, 2)
    w = tg.add_tensor("w", "trainable", (3,), "float32", "weight")
    tg.fed.add(x)
    tg.persistent.add(w)
    tg.add_step("forward", 0, [x, w], [y])
    tg.add_step("forward", 1, [y], [z])
    tg.add_step("calcDerivative", 1, [z], [])
    return tg, (x, y, z, w)


def test_lifetimes_come_from_accesses_and_persistent_tensors_span_all_steps():
    tg, (x, y, z, w) = _tg()
    assert tg.lifetimes() == {x: (0, 0), y: (0, 1), z: (1, 2), w: (0, 2)}


def test_an_alias_is_folded_into_its_root():
    tg, (x, y, z, w) = _tg()
    tg.aliases[z] = y
    bl = tg.to_buffer_list(align=16)
    got = {b.name: (b.size, b.first, b.last, b.owner) for b in bl.buffers}
    assert got == {"x": (32, 0, 0, ""), "y": (32, 0, 2, "#0 Relu"), "w": (16, 0, 2, "")}
    assert tg.buffer_name(z) == "y"
    assert check_schedule(tg, bl) == 6


def test_the_checker_names_the_step_and_tensor_outside_its_interval():
    tg, (x, y, z, w) = _tg()
    with pytest.raises(ScheduleError, match=r"step 2 \(calcDerivative of #1 Reshape\) reads z outside its interval \[1, 1\]"):
        check_schedule(tg, {x: (0, 0), y: (0, 1), z: (1, 1), w: (0, 2)})


def test_the_checker_catches_a_read_before_any_write():
    tg, (x, y, z, w) = _tg()
    tg.steps[0].writes = []
    with pytest.raises(ScheduleError, match="reads y before any step writes it"):
        check_schedule(tg, tg.lifetimes())
