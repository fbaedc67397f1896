"""`--profile torch` where a TorchScript file may have dropped a `.contiguous()` (profiles/torch/replay.py
`dropped_contiguous`): a transposed tensor a reshape then reads as a view is named, with its bytes, as
a copy eager made if the code called `.contiguous()` between them; the figure does not count it.
Tiny hand-built ONNX graphs as TorchScript writes them (no torch needed)."""
import json

import jsonschema
import numpy as np
from click.testing import CliRunner
from onnx import helper

from memplan_cli.cli import main
from memplan_cli.config import TrainConfig
from memplan_cli.loaders import load_model
from memplan_cli.profiles.torch.figures import coverage_line
from memplan_cli.schemas import load_schema
from tests.profiles.test_torch_export import _save, _signature, _w
from tests.profiles.test_torch_export import _torch as _torch_and_analysis


def _heads(tmp_path, name: str, merged: bool, big: bool = False, dynamo: bool = False) -> str:
    """x (2, n, 8) -> a linear d wide -> view(2, n, 2, d / 2).transpose(1, 2) (ProphetNet's `_shape`),
    then a reshape to its own shape (a view of the transposed tensor) and the first half of the
    sequence (ProphetNet's main stream of `chunk`) into a batched matmul with a (2, 2, d / 2, 4)
    weight (bmm: its operand a view where the transposed tensor was copied whole, a copy of the half
    otherwise), or, `merged`, a reshape to
    (2, 2, n d / 2) (the permuted dims merged: a copy with `.contiguous()` or without) into a matmul.
    `big`: d = 64 over 64 positions, else 8 over 4. `dynamo`: the graph signature the dynamo exporter writes (its files record
    `.contiguous()` as `clone`)."""
    d, n = (64, 64) if big else (8, 4)
    hd = d // 2
    nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"], name="/m/attn/q/MatMul"),
             helper.make_node("Reshape", ["mm", "split"], ["heads"], name="/m/attn/Reshape"),
             helper.make_node("Transpose", ["heads"], ["t"], perm=[0, 2, 1, 3], name="/m/attn/Transpose"),
             helper.make_node("Reshape", ["t", "proj"], ["r"], name="/m/attn/Reshape_1")]
    inits = [("w", _w(8, d)), ("split", np.array([2, n, 2, hd], np.int64))]
    if merged:
        nodes.append(helper.make_node("MatMul", ["r", "v"], ["y"], name="/m/attn/MatMul"))
        inits += [("proj", np.array([2, 2, n * hd], np.int64)), ("v", _w(n * hd, 4))]
        out = [2, 2, 4]
    else:
        nodes += [helper.make_node("Slice", ["r", "starts", "ends", "axes"], ["main"], name="/m/attn/Slice"),
                  helper.make_node("MatMul", ["main", "v"], ["y"], name="/m/attn/MatMul")]
        inits += [("proj", np.array([2, 2, n, hd], np.int64)), ("starts", np.array([0], np.int64)),
                  ("ends", np.array([n // 2], np.int64)), ("axes", np.array([2], np.int64)), ("v", _w(2, 2, hd, 4))]
        out = [2, 2, n // 2, 4]
    return _save(tmp_path, name, nodes, inits, [2, n, 8], out, sig=_signature(("w", "v")) if dynamo else None)


def _torch(path):
    return _torch_and_analysis(path)[0]


def test_a_transposed_tensor_reshaped_as_a_view_is_named_not_counted(tmp_path):
    path = _heads(tmp_path, "viewed", merged=False)
    t = _torch(path)
    cont = t["coverage"]["contiguous"]
    # the transposed (2, 2, 4, 4) float tensor: what `.contiguous()` would have copied
    assert [(c["op"].split(" ", 1)[1], c["bytes"]) for c in cont["views"]] == [
        ("Transpose (/m/attn/Transpose)", 2 * 2 * 4 * 4 * 4)]
    assert cont["bytes"] == 256
    assert "estimated: 1 transposed tensor(s) a reshape reads as a view" in cont["note"]
    doc = json.loads(CliRunner().invoke(main, ["analyze", path, "-p", "torch", "-l", "cce", "-f", "json"]).output)
    jsonschema.validate(doc, load_schema("analysis"))


def test_the_figure_beside_copies_each_named_view(tmp_path):
    from memplan_cli.profiles.torch import PROFILE
    from memplan_cli.profiles.torch.replay import replay

    path = _heads(tmp_path, "big", merged=False, big=True)
    t = _torch(path)
    cont = t["coverage"]["contiguous"]
    assert cont["bytes"] == 2 * 2 * 64 * 32 * 4
    cfg = TrainConfig(loss="cce", optimizer="adam")
    tg = PROFILE.training_graph(load_model(path), cfg)
    stores = {a: {s["name"]: (s["bytes"], s["first"], s["last"]) for s in replay(tg, cfg, as_solve=True,
                                                                                  as_contiguous=a)[0].store}
              for a in (frozenset(), frozenset({"t"}))}
    # as written: bmm's operand is a copy of the half the slice keeps; with `.contiguous()`, a view of
    # the copied whole, which the bmm's backward keeps alive instead
    plain, copied = stores[frozenset()], stores[frozenset({"t"})]
    assert "t:clone" not in plain and plain["#5 MatMul (/m/attn/MatMul):contiguous0"][0] == 16384
    assert copied["t:clone"][0] == 32768 and "#5 MatMul (/m/attn/MatMul):contiguous0" not in copied
    assert copied["t:clone"][2] > copied["y"][1]  # held past the matmul, into its backward
    assert cont["peak"] >= t["peak"]


def test_the_header_says_so_when_the_figure_beside_differs(tmp_path):
    from memplan_cli.report.table import torch_contiguous_note

    t = _torch(_heads(tmp_path, "viewed", merged=False))
    cont = dict(t["coverage"]["contiguous"])
    doc = {"figures": {"torch": {"coverage": {"contiguous": cont}}}}
    assert torch_contiguous_note(doc) == ("" if not cont["says_so"] else cont["note"] +
                                          " (JSON figures.torch.coverage.contiguous)")
    cont["says_so"] = True
    assert torch_contiguous_note(doc).startswith("estimated: 1 transposed tensor(s) a reshape reads as a view")
    assert torch_contiguous_note(doc).endswith("(JSON figures.torch.coverage.contiguous)")
    cov = dict(t["coverage"], contiguous=cont)
    assert cont["note"] in coverage_line(cov)


def test_a_reshape_merging_the_permuted_dims_copies_anyway_and_names_nothing(tmp_path):
    # `.contiguous()` before it or not, eager copies once: the replay's reshape copy is that copy
    t = _torch(_heads(tmp_path, "merged", merged=True))
    assert "contiguous" not in t["coverage"]


def test_a_dynamo_file_names_nothing(tmp_path):
    # its exporter records the call (`%clone`), read back by rewrites.lost_clones
    t = _torch(_heads(tmp_path, "dyn", merged=False, dynamo=True))
    assert "contiguous" not in t["coverage"]
