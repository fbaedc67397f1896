"""Custom torch.autograd.Functions in the torch profile (profiles/torch/functions.py): one the dynamo
exporter's recorded stack names is read as one autograd node (forward under no_grad, saving its input);
a written-out formula a TorchScript export may have run inside one stays op by op, named as estimated,
with the figure as a Function beside it. devtools/torch_family_zoo.py's fam_hf_bloom (BLOOM's
GeLUFunction) checks them against torch."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from memplan_cli.analysis import analyze  # noqa: E402
from memplan_cli.config import TrainConfig  # noqa: E402

TRACE = '''File "model.py", line 30, in forward
    hidden = self.gelu_impl(self.fc(hidden))
  File "model.py", line 12, in forward
    return GeLUFunction.apply(x)
  File "model.py", line 5, in forward
    return x * 0.5 * (1.0 + torch.tanh(x))'''

H = 4 * 64 * 32 * 4  # bytes of one (4, 64, 32) float tensor


def _formula(scope="/m/act", extra=(), param=False):
    """x (4, 64, 16) -> MatMul -> h; y1 = (h * 0.5) * (Tanh(h * 0.8) + 1), five elementwise ops in `scope`;
    y1 -> MatMul -> y. Node names as TorchScript writes them (the module path, then the op)."""
    h = "/m/fc/MatMul_output_0"
    nodes = [helper.make_node("MatMul", ["x", "w1"], [h], name="/m/fc/MatMul"),
             helper.make_node("Mul", [h, "pw" if param else "c05"], ["a"], name=f"{scope}/Mul"),
             helper.make_node("Mul", [h, "c08"], ["b"], name=f"{scope}/Mul_1"),
             helper.make_node("Tanh", ["b"], ["t"], name=f"{scope}/Tanh"),
             helper.make_node("Add", ["t", "c1"], ["e"], name=f"{scope}/Add"),
             helper.make_node("Mul", ["a", "e"], ["y1"], name=f"{scope}/Mul_2"), *extra,
             helper.make_node("MatMul", ["y2" if extra else "y1", "w2"], ["y"], name="/m/fc2/MatMul")]
    inits = {"w1": np.ones((16, 32), np.float32), "w2": np.ones((32, 128), np.float32),
             "c05": np.array(0.5, np.float32), "c08": np.array(0.8, np.float32), "c1": np.array(1.0, np.float32),
             "pw": np.ones(32, np.float32)}
    return nodes, inits


def _save(tmp_path, nodes, inits, name="m.onnx"):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 64, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 64, 128])],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    path = tmp_path / name
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return str(path)


def _analyze(path):
    return analyze(path, TrainConfig(batch_size=4, loss="mse", optimizer="adam"), profile="torch")


def _traced(nodes):
    """The same ops as the dynamo exporter writes them inside GeLUFunction.apply (a recorded stack)."""
    for n in nodes:
        if n.op_type != "MatMul":
            p = n.metadata_props.add()
            p.key, p.value = "pkg.torch.onnx.stack_trace", TRACE
        n.name = n.name.strip("/").replace("/", "_")
    return nodes


def test_a_recorded_function_is_one_node_saving_its_input(tmp_path):
    # the dynamo exporter's recorded stack passes through `GeLUFunction.apply` into its forward: the five
    # ops are one autograd node. Its forward runs under no_grad: each intermediate is freed once the
    # forward no longer reads it (at most a, b, t at once, then a, e and the result: 3 tensors), none
    # is saved; it saves its input h; its backward's temporaries are taken as the forward's peak
    nodes, inits = _formula()
    a = _analyze(_save(tmp_path, _traced(nodes), inits))
    cov = a.extras["torch"]["coverage"]
    (est,) = cov["estimated"]
    assert est["type"] == "GeLUFunction.apply" and cov["ops"] == 4  # MatMul, the Function, MatMul, loss
    bufs = a.buffers.buffers
    steps = a.buffers.steps
    assert not {"a", "b", "t", "e"} & {b.name for b in bufs}
    fn_fwd = next(s.index for s in steps if s.kind == "forward" and "GeLUFunction" in s.label)
    fn_bwd = next(s.index for s in steps if s.kind != "forward" and "GeLUFunction" in s.label)
    tmps = sorted((b.first, b.size) for b in bufs if b.name.endswith(":tmp") and "GeLUFunction" in b.name)
    assert tmps == [(fn_fwd, 3 * H - H), (fn_bwd, 3 * H)]
    h = next(b for b in bufs if b.name == "/m/fc/MatMul_output_0")
    assert h.last == fn_bwd  # saved by the Function, freed after its backward
    assert next(b for b in bufs if b.name == "y1").last >= fn_bwd - 1  # saved by the MatMul after it


@pytest.mark.parametrize("scope", ["/m/act", "/act"])
def test_a_torchscript_formula_module_stays_op_by_op_named_with_the_function_figure(tmp_path, scope):
    # TorchScript records no stack: a parameter-free leaf module of >= 3 elementwise ops reading one tensor
    # may have been a Function. The op-by-op figure stays (equal to the same ops outside any module); the
    # ops are named as estimated and the figure as a Function is the recorded Function's
    from memplan_cli.report.table import torch_functions_note

    nodes, inits = _formula(scope)
    a = _analyze(_save(tmp_path, nodes, inits))
    plain = _analyze(_save(tmp_path, _formula(scope="/m")[0], inits, "plain.onnx"))
    recorded = _analyze(_save(tmp_path, _traced(_formula()[0]), inits, "rec.onnx"))
    t = a.extras["torch"]
    assert t["peak"] == plain.extras["torch"]["peak"] and "as_functions" not in plain.extras["torch"]["coverage"]
    cov = t["coverage"]
    assert sorted(e["type"] for e in cov["estimated"]) == ["Add", "Mul", "Mul", "Mul", "Tanh"]
    fn = cov["as_functions"]
    assert fn["modules"] == [{"module": scope, "ops": 5}]
    assert fn["peak"] == recorded.extras["torch"]["peak"] < t["peak"]
    note = torch_functions_note({"figures": {"torch": t}})
    assert note.startswith("estimated: act may have run as custom autograd Functions") == fn["says_so"]
    assert not fn["says_so"] or f"{fn['peak']:,d} B" in note
    # the profile writes the sentence once (JSON); the table's header and compare's line print it
    from memplan_cli.profiles.torch import coverage_line

    assert fn["note"].startswith("estimated: act may have run as custom autograd Functions")
    assert note == (fn["note"] if fn["says_so"] else "")
    assert ("; " + fn["note"] + " (devtools" in coverage_line(cov)) == fn["says_so"]


def test_the_function_figure_is_in_the_json_report(tmp_path):
    import json

    import jsonschema
    from click.testing import CliRunner

    from memplan_cli.cli import main
    from memplan_cli.schemas import load_schema

    nodes, inits = _formula()
    path = _save(tmp_path, nodes, inits)
    out = CliRunner().invoke(main, ["analyze", path, "-p", "torch", "-b", "4", "-O", "adam", "-l", "mse", "-f", "json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    jsonschema.validate(doc, load_schema("analysis"))
    assert doc["figures"]["torch"]["coverage"]["as_functions"]["modules"] == [{"module": "/m/act", "ops": 5}]


@pytest.mark.parametrize("case", ["parameter", "submodule", "two_ops", "silu"])
def test_what_is_not_a_possible_function(tmp_path, case):
    # a module reading a parameter (a non-scalar constant), one with a module below it, and formulas of
    # fewer than three eager ops (x * Sigmoid(x) is silu, one eager op: an exporter's split of one
    # aten op) are not named
    if case == "parameter":
        nodes, inits = _formula(param=True)
    elif case == "submodule":
        nodes, inits = _formula(extra=[helper.make_node("Relu", ["y1"], ["y2"], name="/m/act/inner/Relu")])
    else:
        nodes, inits = _formula()
        h = "/m/fc/MatMul_output_0"
        body = [helper.make_node("Tanh", [h], ["t"], name="/m/act/Tanh"),
                helper.make_node("Mul", [h, "t"], ["y1"], name="/m/act/Mul")] if case == "two_ops" else \
               [helper.make_node("Sigmoid", [h], ["s"], name="/m/act/Sigmoid"),
                helper.make_node("Mul", [h, "s"], ["u"], name="/m/act/Mul"),
                helper.make_node("Mul", ["u", "c05"], ["y1"], name="/m/act/Mul_1")]
        nodes = [nodes[0], *body, nodes[-1]]
    cov = _analyze(_save(tmp_path, nodes, inits)).extras["torch"]["coverage"]
    assert "as_functions" not in cov and cov["estimated"] == []


def test_a_recorded_function_whose_ops_are_not_consecutive_stays_op_by_op_named(tmp_path):
    # an op of the file between the Function's ops (not from its forward): the order eager ran them
    # in is not known, so they stay op by op, each named as estimated
    nodes, inits = _formula()
    nodes = _traced(nodes)
    h = "/m/fc/MatMul_output_0"
    other = helper.make_node("Relu", [h], ["r"], name="other")
    nodes.insert(3, other)  # after the Function's second op
    nodes[-1] = helper.make_node("Add", ["y1", "r"], ["y1r"], name="add")
    nodes.append(helper.make_node("MatMul", ["y1r", "w2"], ["y"], name="fc2"))
    a = _analyze(_save(tmp_path, nodes, inits))
    est = a.extras["torch"]["coverage"]["estimated"]
    assert sorted(e["type"] for e in est) == ["Add", "Mul", "Mul", "Mul", "Tanh"]
    assert {"a", "b", "t", "e"} <= {b.name for b in a.buffers.buffers}


def _score_formula(case=""):
    """x (4, 64, 16); q, k, v projections in /m/att/{q,k,v}; s = q @ k^T (4, 64, 64) in /m/att;
    YOSO's expectation written out in /m/att (a module with modules below it): (1 - acos(s) / pi) ** 8
    times a mask cast from integer ids (as TorchScript writes a folded attention mask: a constant
    that does not train); then e @ v and a head. `case`: "softmax" puts a Softmax after the mask,
    "read_twice" lets the head read the formula's result too."""
    nodes = [helper.make_node("MatMul", ["x", f"w{n}"], [n], name=f"/m/att/{n}/MatMul") for n in "qkv"]
    nodes += [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1], name="/m/att/Transpose"),
              helper.make_node("MatMul", ["q", "kt"], ["s"], name="/m/att/MatMul"),
              helper.make_node("Acos", ["s"], ["a"], name="/m/att/Acos"),
              helper.make_node("Div", ["a", "pi"], ["d"], name="/m/att/Div"),
              helper.make_node("Sub", ["c1", "d"], ["u"], name="/m/att/Sub"),
              helper.make_node("Pow", ["u", "c8"], ["p"], name="/m/att/Pow"),
              helper.make_node("Constant", [], ["ids"], name="/m/att/Constant",
                               value=numpy_helper.from_array(np.ones((4, 64, 1), np.int64))),
              helper.make_node("Cast", ["ids"], ["mask"], to=TensorProto.FLOAT, name="/m/att/Cast"),
              helper.make_node("Mul", ["p", "mask"], ["e0"], name="/m/att/Mul")]
    if case == "softmax":
        nodes.append(helper.make_node("Softmax", ["e0"], ["e"], axis=-1, name="/m/att/Softmax"))
    nodes += [helper.make_node("MatMul", ["e" if case == "softmax" else "e0", "v"], ["o"], name="/m/att/MatMul_1"),
              helper.make_node("MatMul", ["o", "wh"], ["y0"], name="/m/head/MatMul")]
    if case == "read_twice":
        nodes += [helper.make_node("ReduceSum", ["e0", "ax"], ["r"], keepdims=1, name="/m/ReduceSum"),
                  helper.make_node("Mul", ["y0", "r"], ["y"], name="/m/Mul")]
    else:
        nodes[-1].output[0] = "y"
    inits = {"wq": np.ones((16, 32), np.float32), "wk": np.ones((16, 32), np.float32),
             "wv": np.ones((16, 32), np.float32), "wh": np.ones((32, 128), np.float32),
             "pi": np.array(np.pi, np.float32), "c1": np.array(1.0, np.float32), "c8": np.array(8.0, np.float32),
             "ax": np.array([-1], np.int64)}
    return nodes, inits


def test_a_formula_between_two_products_may_have_been_a_function(tmp_path):
    # YOSO's YosoCumulation: the TorchScript file writes the Function's forward out op by op, in the
    # attention module's own scope beside its projections; a chain of elementwise ops from one product
    # to the next, reading a constant mask, is named (the op-by-op figure stays, the Function's beside)
    nodes, inits = _score_formula()
    a = _analyze(_save(tmp_path, nodes, inits))
    cov = a.extras["torch"]["coverage"]
    assert cov["as_functions"]["modules"] == [{"module": "/m/att", "ops": 5}]
    assert sorted(e["type"] for e in cov["estimated"]) == ["Acos", "Div", "Mul", "Pow", "Sub"]
    assert cov["as_functions"]["peak"] < a.extras["torch"]["peak"]


@pytest.mark.parametrize("case", ["softmax", "read_twice"])
def test_what_is_not_a_formula_between_products(tmp_path, case):
    # an attention's softmax is no elementwise op (a plain attention is never named); a result read by
    # more than the next product is no Function's single output
    nodes, inits = _score_formula(case)
    cov = _analyze(_save(tmp_path, nodes, inits)).extras["torch"]["coverage"]
    assert "as_functions" not in cov


def test_a_recorded_function_gives_the_figure_had_it_saved_its_ops_intermediates(tmp_path):
    # the recorded Function is counted as saving its input only (its backward is Python code the file
    # lacks); the figure beside is the same ops run one by one, each saving what its own backward
    # needs: the peak a plain formula module gives, which is the other end of what the file allows
    import json

    import jsonschema
    from click.testing import CliRunner

    from memplan_cli.cli import main
    from memplan_cli.schemas import load_schema

    nodes, inits = _formula()
    fn = _analyze(_save(tmp_path, _traced(nodes), inits, "fn.onnx")).extras["torch"]["coverage"]
    nodes, inits = _formula()
    plain = _analyze(_save(tmp_path, nodes, inits, "plain.onnx")).extras["torch"]
    assert fn["functions_as_ops"]["functions"] == 1
    assert "functions_as_ops" not in plain["coverage"]
    nodes, inits = _formula()
    path = _save(tmp_path, _traced(nodes), inits, "fn2.onnx")
    out = CliRunner().invoke(main, ["analyze", path, "-p", "torch", "-b", "4", "-O", "adam", "-l", "mse", "-f", "json"])
    doc = json.loads(out.output)
    jsonschema.validate(doc, load_schema("analysis"))
    torch_fig = doc["figures"]["torch"]
    fo = torch_fig["coverage"]["functions_as_ops"]
    assert fo["peak"] == plain["peak"] and fo["peak"] > torch_fig["peak"] and fo["says_so"]
    table = CliRunner().invoke(main, ["analyze", path, "-p", "torch", "-b", "4", "-O", "adam", "-l", "mse"],
                               env={"NO_COLOR": "1", "COLUMNS": "200"}).output
    said = f"had they saved what their ops save run one by one, the peak is {fo['peak']:,d} B"
    assert said in " ".join(table.split())
