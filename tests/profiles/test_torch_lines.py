"""Ops a dynamo export records under one source line (the exporter's stack trace): a called function
whose own lines the file does not record (transformers' hub-kernel fallbacks, such as the chunked
gated delta rule) holds its Python locals until it returns, which the figure cannot count. The
profile names such calls and gives beside the figure the peak with every tensor they make held to
their last op (docs/torchprof.md, "Chunked linear attention")."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import helper  # noqa: E402

from memplan_cli.analysis import analyze  # noqa: E402
from memplan_cli.config import TrainConfig  # noqa: E402
from tests.ops.gradcheck import onnx_model, save  # noqa: E402

SIG = "pkg.torch.export.ExportedProgram.graph_signature"
TRACE = "pkg.torch.onnx.stack_trace"
N, D = 4, 64
OUTER = 'File "m.py", line 10, in forward\n    h = self.proj(x)'
CALL = 'File "m.py", line 11, in forward\n    y, state = chunked_rule('


def _model(tmp_path, dynamo=True):
    """x @ w, then three adds of constants recorded under one call line (the call's body), then a
    product with a weight: the call's first sum is freed in eager once the second is made."""
    rng = np.random.default_rng(0)
    inits = {"w": rng.normal(size=(D, D)).astype(np.float32), "v": rng.normal(size=(D, D)).astype(np.float32),
             **{f"c{k}": np.full((D,), k, np.float32) for k in range(3)}}
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="proj"),
             helper.make_node("Add", ["h", "c0"], ["t0"], name="in_call0"),
             helper.make_node("Add", ["t0", "c1"], ["t1"], name="in_call1"),
             helper.make_node("Add", ["t1", "c2"], ["t2"], name="in_call2"),
             helper.make_node("MatMul", ["t2", "v"], ["y"], name="out")]
    if dynamo:
        for n in nodes:
            n.metadata_props.add(key=TRACE, value=CALL if n.name.startswith("in_call") else OUTER)
    m = onnx_model(nodes, [("x", (N, D))], [("y", (N, D))], inits)
    if dynamo:
        m.graph.metadata_props.add(key=SIG, value="\n# inputs\np_w: PARAMETER target='w'\n"
                                                  "p_v: PARAMETER target='v'\nx: USER_INPUT\n")
    return save(tmp_path, m)


def test_a_call_recorded_under_one_line_is_named_with_its_locals_held(tmp_path):
    cfg = TrainConfig(batch_size=N, optimizer="adam", loss="mse")
    a = analyze(_model(tmp_path), cfg, profile="torch")
    t = a.extras["torch"]
    held = t["coverage"]["as_held"]
    assert (held["calls"], held["ops"], held["lines"]) == (1, 3, ["y, state = chunked_rule("])
    # the figure frees t0 once t1 is made; beside it, t0 held to the call's last op: one more
    # (N, D) tensor where the call's last sum is made, never less
    assert held["peak"] >= t["peak"]
    # the profile writes the sentence once (JSON); the table's header and compare's line print it
    assert held["note"].startswith("not counted: the Python locals of 1 call(s) the file records under one "
                                   "source line each (3 ops; `y, state = chunked_rule(`)")
    from memplan_cli.profiles.torch import coverage_line
    from memplan_cli.report.table import torch_held_note

    said = {**t, "coverage": {**t["coverage"], "as_held": {**held, "says_so": True}}}
    assert torch_held_note({"figures": {"torch": said}}) == held["note"] + " (JSON figures.torch.coverage.as_held)"
    assert "; " + held["note"] + " (devtools" in coverage_line(said["coverage"])
    from memplan_cli.profiles.torch import PROFILE
    from memplan_cli.profiles.torch.replay import replay

    tg = PROFILE.training_graph(a.graph, cfg)
    for as_held, last in ((False, "in_call1"), (True, "in_call2")):
        sim = replay(tg, cfg, as_solve=True, as_held_lines=as_held)[0]
        t0 = next(s for s in sim.store if s["name"] == "t0")
        assert last in sim.steps[t0["last"]].label, (as_held, sim.steps[t0["last"]].label)


def test_a_torchscript_file_records_no_lines(tmp_path):
    a = analyze(_model(tmp_path, dynamo=False), TrainConfig(batch_size=N, optimizer="adam", loss="mse"),
                profile="torch")
    assert "as_held" not in a.extras["torch"]["coverage"]
