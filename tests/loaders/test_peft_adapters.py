"""What trains in an ONNX export of a peft LoRA model (loaders/params.py `peft_train_globs`), and
`--train params:GLOB`, which says the same by flag.

peft names its adapters `<module>.lora_A.<adapter>.weight` / `lora_B`; TorchScript transposes each
weight in a Transpose node (folded at load: `Operand.sources` keeps the parameter's name), and the
dynamo exporter folds the transpose into a `val_N` constant whose reader records the parameter."""
import json

import numpy as np
from click.testing import CliRunner
from onnx import helper

from memplan_cli.cli import main
from memplan_cli.loaders import load_model
from tests.ops.gradcheck import onnx_model, save

BASE, A, B = "m.base_model.model.q.base_layer.weight", "m.base_model.model.q.lora_A.default.weight", \
    "m.base_model.model.q.lora_B.default.weight"


def _torchscript_lora(names=(BASE, A, B)):
    """x[2,16] -> base Linear (16x16, transposed) + lora_B(lora_A(x)) (rank 4) -> y, as TorchScript
    exports peft's lora.Linear (each weight through a Transpose node)."""
    rng = np.random.default_rng(0)
    base, a, b = names
    inits = {base: rng.normal(size=(16, 16)).astype(np.float32), a: rng.normal(size=(4, 16)).astype(np.float32),
             b: rng.normal(size=(16, 4)).astype(np.float32)}
    nodes = [helper.make_node("Transpose", [base], ["wt"], perm=[1, 0]),
             helper.make_node("MatMul", ["x", "wt"], ["base_out"]),
             helper.make_node("Transpose", [a], ["at"], perm=[1, 0]),
             helper.make_node("MatMul", ["x", "at"], ["down"]),
             helper.make_node("Transpose", [b], ["bt"], perm=[1, 0]),
             helper.make_node("MatMul", ["down", "bt"], ["up"]),
             helper.make_node("Add", ["base_out", "up"], ["y"])]
    m = onnx_model(nodes, [("x", (2, 16))], [("y", (2, 16))], inits)
    m.producer_name = "pytorch"
    return m


def _run(path, *args):
    r = CliRunner().invoke(main, ["analyze", path, "-b", "2", "-O", "adam", *args], env={"NO_COLOR": "1"})
    assert r.exit_code == 0, r.output
    return r.output


def _grad_bytes(path, *args):
    return json.loads(_run(path, "-f", "json", *args))["categories"]["gradient"]["naive"]


def test_a_peft_export_trains_only_its_adapters_and_says_why(tmp_path):
    p = save(tmp_path, _torchscript_lora())
    g = load_model(p)
    assert g.metadata["training"] == {"train": ("params:*lora_A.*", "params:*lora_B.*")}
    adapters = 4 * (4 * 16 + 16 * 4)
    assert _grad_bytes(p) == adapters  # the base weight (1,024 B) gets no gradient
    doc = json.loads(_run(p, "-f", "json"))
    assert doc["config"]["sources"]["train"] == "metadata"
    assert doc["parameters"]["assumed_trainable"] == []  # peft's names tell; the frozen base is not listed
    out = _run(p)
    assert "the file holds peft LoRA adapters: only they train" in out and "--train overrides" in out


def test_a_train_flag_overrides_the_files_adapters(tmp_path):
    p = save(tmp_path, _torchscript_lora())
    everything = 4 * (16 * 16 + 4 * 16 + 16 * 4)
    assert _grad_bytes(p, "--train", "ops:*") == everything
    assert "peft" not in _run(p, "--train", "ops:*")
    # --lora adds memplan's own adapters and freezes every weight of the file, peft's among them
    assert json.loads(_run(p, "-f", "json", "--lora", "2", "--lora-targets", "MatMul"))["config"]["sources"].get("train") != "metadata"


def test_a_module_merely_called_lora_is_not_peft(tmp_path):
    p = save(tmp_path, _torchscript_lora(("m.q.weight", "m.lora_adapterA.weight", "m.lora_adapterB.weight")))
    assert "training" not in load_model(p).metadata
    assert _grad_bytes(p) == 4 * (16 * 16 + 4 * 16 + 16 * 4)


def test_train_params_glob_follows_a_folded_transpose_and_a_typo_is_an_error(tmp_path):
    p = save(tmp_path, _torchscript_lora(("m.q.weight", "m.q.down.weight", "m.q.up.weight")))
    # the MatMuls read the folded transposes (`wt`, `at`, `bt`); the globs find them by the parameter's name
    assert _grad_bytes(p, "--train", "params:*.down.*", "--train", "params:*.up.*") == 4 * (4 * 16 + 16 * 4)
    assert _grad_bytes(p, "--train", "params:m.q.weight") == 4 * 16 * 16
    assert _grad_bytes(p, "--freeze", "params:m.q.weight") == 4 * (4 * 16 + 16 * 4)
    r = CliRunner().invoke(main, ["analyze", p, "--train", "params:nothing*"])
    assert r.exit_code == 2 and "--train params:nothing* matches no weight" in r.output


def test_weight_level_runtimes_refuse_a_peft_export_with_the_reason(tmp_path):
    p = save(tmp_path, _torchscript_lora())
    r = CliRunner().invoke(main, ["analyze", p, "-p", "onert"])
    assert r.exit_code == 2 and "peft adapters" in r.output


def test_dynamo_folded_adapters_are_found_by_the_parameters_they_were_folded_from(tmp_path):
    """The dynamo exporter folds each transposed weight into `val_N`; the MatMul's fx record names the
    parameter, and the graph signature its target, peft's name."""
    rng = np.random.default_rng(2)
    inits = {"val_1": rng.normal(size=(16, 16)).astype(np.float32),
             "val_2": rng.normal(size=(16, 4)).astype(np.float32),
             "val_3": rng.normal(size=(4, 16)).astype(np.float32)}
    fx = "%{o} : = call_function[target=aten.linear](args = (%{i}, %{p}), kwargs = {{}})"
    nodes = []
    for (i, w, o, ph) in (("x", "val_1", "base_out", "p_base"), ("x", "val_2", "down", "p_a"),
                          ("down", "val_3", "up", "p_b")):
        n = helper.make_node("MatMul", [i, w], [o])
        n.metadata_props.add(key="pkg.torch.onnx.fx_node", value=fx.format(o=o, i=i, p=ph))
        nodes.append(n)
    nodes.append(helper.make_node("Add", ["base_out", "up"], ["y"]))
    m = onnx_model(nodes, [("x", (2, 16))], [("y", (2, 16))], inits)
    m.producer_name = "pytorch"
    m.graph.metadata_props.add(key="pkg.torch.export.ExportedProgram.graph_signature",
                               value=f"p_base: PARAMETER target='{BASE}'\np_a: PARAMETER target='{A}'\n"
                                     f"p_b: PARAMETER target='{B}'\nx: USER_INPUT\n")
    p = save(tmp_path, m)
    g = load_model(p)
    assert g.metadata["training"] == {"train": ("params:*lora_A.*", "params:*lora_B.*")}
    assert {o.name: o.sources for o in g.operands if o.is_const} == {"val_1": (BASE,), "val_2": (A,),
                                                                      "val_3": (B,)}
    assert _grad_bytes(p) == 4 * (4 * 16 + 16 * 4)
