"""Real exporter output (tests/corpus: torch.onnx dynamo / TorchScript, the TF Lite converter) through the CLI.

Each model either analyses with every op trainable and is right, or is refused cleanly:
- right: `analyze -b 2 -O adam` exits 0; the gradient bytes are the file's float parameters (every
  float constant of more than one element, counted here from the file: ONNX initializers, Constant
  values unless torch.onnx wrote them (its Constant nodes are traced values and buffers), TFLite
  float32 buffers) at 4 bytes each, each buffer aligned to 16 bytes as memplan's arena
  does, and not the file's float scalars; trainable bytes hold at least those; Adam state is 2 x the
  gradients; something trains; and
  `verify -b 2 -O sgd` passes.
- refused: exit 2 with one stderr line naming the file and an op, never a traceback or exit 70. Only
  the models in `MAY_REFUSE` may be refused (ops other helpers are adding); when one analyses, it must
  pass every check above, so remove it from `MAY_REFUSE` then. A model outside it must analyse.
The exports and their framework parameter counts are listed in tests/corpus/exports.json and README.md.
"""
from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest
from click.testing import CliRunner

from memplan_cli.cli import main

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
with open(os.path.join(HERE, "exports.json")) as _f:
    EXPORTS = {e["file"]: e for e in json.load(_f)}

# exports with a symbolic sequence length: analysed with it bound (--dim), as a user must
DIMS: dict[str, tuple[str, ...]] = {"gpt2_tiny_seq_dynamo.onnx": ("--dim", "seq=8"),
                                    "bert_tiny_seq_ts.onnx": ("--dim", "seq=8")}

# refused by design, in one line naming the dimension (tests/loaders/test_symbolic_dims.py): a TF Lite
# file whose sequence length is dynamic (memplan re-sizes only the batch inside a TF Lite graph)
DIM_REFUSED: dict[str, str] = {"keras_seq_dense_dynamic.tflite": "ids_dim1"}

# refused today for an op another change is adding; the value says which op (for the reader only)
MAY_REFUSE: dict[str, str] = {
}


def run(args):
    r = CliRunner().invoke(main, args, catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


def _align(n: int) -> int:
    return (n + 15) // 16 * 16


def float_param_buffers(path: str, scalars: bool = False) -> list[int]:
    """Bytes of each float constant of more than one element that an op reads (with `scalars`: of one)."""
    if path.endswith(".onnx"):
        import onnx

        m = onnx.load(path, load_external_data=False)
        sizes = {t.name: (int(np.prod(t.dims)), t.data_type) for t in m.graph.initializer}
        for n in m.graph.node:
            if n.op_type == "Constant" and m.producer_name != "pytorch":
                for a in n.attribute:
                    if a.name == "value":
                        sizes[n.output[0]] = (int(np.prod(a.t.dims)), a.t.data_type)
        used = {i for n in m.graph.node for i in n.input}
        return [4 * k for name, (k, dt) in sizes.items() if name in used and dt == 1 and (k > 1) != scalars]
    import tflite

    with open(path, "rb") as f:
        model = tflite.Model.GetRootAsModel(f.read(), 0)
    sg = model.Subgraphs(0)
    out = []
    for ti in range(sg.TensorsLength()):
        t = sg.Tensors(ti)
        if t.Type() != 0 or model.Buffers(t.Buffer()).DataLength() == 0:
            continue
        k = int(np.prod(t.ShapeAsNumpy())) if t.ShapeLength() else 1
        if (k > 1) != scalars:
            out.append(4 * k)
    return out


def _has_graph_signature(path: str) -> bool:
    if not path.endswith(".onnx"):
        return False
    import onnx

    m = onnx.load(path, load_external_data=False)
    return any(p.key == "pkg.torch.export.ExportedProgram.graph_signature" for p in m.graph.metadata_props)


def named_parameters(path: str) -> list[int]:
    """Bytes of each float initializer the exporter named after a PARAMETER of its graph signature."""
    import onnx

    m = onnx.load(path, load_external_data=False)
    sig = next(p.value for p in m.graph.metadata_props if p.key == "pkg.torch.export.ExportedProgram.graph_signature")
    targets = set(re.findall(r": PARAMETER target='([^']*)'", sig))
    used = {i for n in m.graph.node for i in n.input}
    return [4 * int(np.prod(t.dims)) for t in m.graph.initializer
            if t.name in targets and t.name in used and t.data_type == 1 and int(np.prod(t.dims)) > 1]


def test_exports_are_listed_and_small():
    files = sorted(f for f in os.listdir(HERE) if f.endswith((".onnx", ".tflite")))
    assert files == sorted(EXPORTS)
    assert 5 <= len(files) <= 21  # a small corpus: tiny exports, each for an exporter or op family
    for f in files:
        assert os.path.getsize(os.path.join(HERE, f)) < 300_000, f
        assert EXPORTS[f]["exporter"] and EXPORTS[f]["params"] > 0
    assert set(MAY_REFUSE) <= set(files)
    assert len(set(files) - set(MAY_REFUSE)) >= 3  # the test checks figures on real exports, not only refusals


@pytest.mark.parametrize("name", sorted(EXPORTS))
def test_analyze_is_right_or_refuses_cleanly(name):
    path = os.path.join(HERE, name)
    code, out, err = run(["analyze", path, "-b", "2", "-O", "adam", "-t", "all", "-f", "json", *DIMS.get(name, ())])
    if name in DIM_REFUSED:
        assert code == 2 and f"'{DIM_REFUSED[name]}'" in err and len(err.strip().splitlines()) == 1, err
        return
    if code == 2:
        assert name in MAY_REFUSE, f"{name} analysed before and is refused now: {err}"
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in err, err
        assert path in lines[0]
        assert re.search(r"\b(op|ops?) \S*\s*[A-Z][A-Za-z]+", lines[0]), lines[0]  # names the op
        return
    assert code == 0, f"exit {code}: {err}"
    d = json.loads(out)
    cat = {k: v["naive"] for k, v in d["categories"].items()}
    params = float_param_buffers(path)
    assert params, "the counter found no float parameters"
    # exporters' scalar constants (an attention scale 0.5, Where's fill 0.0, an epsilon) are not
    # parameters, and memplan does not train them (RuleContext.is_param): exactly the parameters
    if _has_graph_signature(path):
        # torch.onnx dynamo: only the source model's parameters train (loaders/params.py); the
        # truth is torch's own count (exports.json), each gradient aligned to 16 bytes at most
        grads = [b for b in params]
        assert sum(_align(b) for b in named_parameters(path)) <= cat["gradient"], cat
        assert cat["gradient"] <= 4 * EXPORTS[name]["params"] + 15 * len(grads), (cat, EXPORTS[name])
        assert cat["gradient"] <= sum(_align(b) for b in params)
    else:
        assert cat["gradient"] == sum(_align(b) for b in params), (cat, params)
    assert cat["trainable"] >= cat["gradient"]
    assert cat["opt-variable"] == 2 * cat["gradient"]
    code, out, err = run(["verify", path, "-b", "2", "-O", "sgd", *DIMS.get(name, ())])
    assert code == 0, out + err


def test_shared_initializers_are_one_weight(tmp_path):
    """TorchScript dedups equal initializers into `Identity` nodes (convnext: zero biases, unit LayerNorm
    scales): the file holds one tensor read by several ops. It trains as a shared weight (gradients
    accumulate); memplan used to stop with exit 70 (a back-prop read before any step wrote it)."""
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    path = os.path.join(HERE, "convnext_tiny_ts.onnx")
    m = onnx.load(path, load_external_data=False)
    inits = {t.name for t in m.graph.initializer}
    assert any(n.op_type == "Identity" and n.input[0] in inits for n in m.graph.node)
    code, out, err = run(["inspect", path])
    assert code == 0, err
    assert not re.search(r"^\s+\d+ Identity ", out, re.M) and "Identity op(s) of a constant" in out
    # the exporter's pattern on two convolutions: the second reads the first's bias through Identity
    rng = np.random.default_rng(0)
    inits = [nh.from_array(rng.random((4, 3, 3, 3), dtype=np.float32), "W"), nh.from_array(np.zeros(4, np.float32), "B"),
             nh.from_array(rng.random((4, 4, 1, 1), dtype=np.float32), "W2")]
    nodes = [h.make_node("Conv", ["x", "W", "B"], ["y"], pads=[1, 1, 1, 1]), h.make_node("Identity", ["B"], ["B2"]),
             h.make_node("Identity", ["B2"], ["B3"]), h.make_node("Conv", ["y", "W2", "B3"], ["z"])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [1, 3, 8, 8])],
                     [h.make_tensor_value_info("z", T.FLOAT, [1, 4, 8, 8])], inits)
    f = str(tmp_path / "dedup.onnx")
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]), f)
    code, out, err = run(["analyze", f, "-O", "adam", "-f", "json"])
    assert code == 0, err
    cat = {k: v["naive"] for k, v in json.loads(out)["categories"].items()}
    assert cat["gradient"] == 4 * (4 * 3 * 3 * 3 + 4 + 4 * 4)  # B once, not twice
    assert cat["opt-variable"] == 2 * cat["gradient"]
    code, out, err = run(["verify", f, "-b", "2", "-O", "sgd"])
    assert code == 0, out + err


def test_litert_exports_carry_the_converter_ops():
    """The litert-torch exports hold what the converter writes and memplan now trains: the padded
    max-pool's PADV2 with -inf, EMBEDDING_LOOKUP, and a LayerNorm merged into the next layer (noted)."""
    from memplan_cli.loaders import load_model

    g = load_model(os.path.join(HERE, "litert_maxpool_tiny.tflite"))
    pad = next(op for op in g.operations if op.source_type == "PADV2")
    assert pad.type == "Pad" and pad.attrs["value"] == float("-inf")
    g = load_model(os.path.join(HERE, "litert_embed_ln_tiny.tflite"))
    assert any(op.source_type == "EMBEDDING_LOOKUP" and op.type == "Gather" for op in g.operations)
    code, out, _ = run(["analyze", os.path.join(HERE, "litert_embed_ln_tiny.tflite"), "-f", "json"])
    (m,) = json.loads(out)["parameters"]["merged_normalizations"]
    assert code == 0 and m["norm"] == "LayerNorm" and "LayerNorm" in m["weights"][0] and "Linear" in m["weights"][0]


def test_the_manifest_records_each_files_size():
    # the manifest describes the committed files; a file rewritten without it (a stripped export) is caught
    for name, e in EXPORTS.items():
        assert os.path.getsize(os.path.join(HERE, name)) == e["bytes"], name
