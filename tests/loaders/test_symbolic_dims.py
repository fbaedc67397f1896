"""--dim NAME=N: symbolic dimensions other than the batch, bound by name before shape inference.

The model is built here the way exporters write a transformer with `dynamic_axes` / `dynamic_shapes`:
token ids [batch, seq], an embedding, position ids computed from the sequence length
(`Shape -> Gather -> Range`), a Reshape whose target is computed from the input's shape, a
projection and an attention-like [seq, seq] product. Bound at N, it must give exactly the figures
of the same model written with seq fixed at N."""
import json

import jsonschema
import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from memplan_cli import api
from memplan_cli.cli import main
from memplan_cli.errors import ModelError
from memplan_cli.loaders import load_model
from memplan_cli.schemas import load_schema

D, V, P = 8, 50, 512  # hidden size, vocabulary, position table


def _init(name, arr):
    return numpy_helper.from_array(arr, name)


def seq_model(seq="seq", batch="batch", unnamed=False) -> onnx.ModelProto:
    """ids[batch, seq] -> logits[batch, seq, V]; `seq` an int fixes it, `unnamed` leaves it without a name."""
    rng = np.random.default_rng(0)
    sdim = "" if unnamed else seq
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, [batch, sdim] if isinstance(seq, str) else [batch, seq])
    if unnamed:
        ids.type.tensor_type.shape.dim[1].ClearField("dim_param")
    out = helper.make_tensor_value_info("logits", TensorProto.FLOAT, None)
    inits = [_init("wte", rng.standard_normal((V, D)).astype(np.float32)),
             _init("wpe", rng.standard_normal((P, D)).astype(np.float32)),
             _init("wq", rng.standard_normal((D, D)).astype(np.float32)),
             _init("head", rng.standard_normal((D, V)).astype(np.float32)),
             _init("one", np.array(1, np.int64)), _init("zero", np.array(0, np.int64)),
             _init("idx1", np.array(1, np.int64)), _init("tail", np.array([D], np.int64)),
             _init("perm_axes", np.array([0], np.int64))]
    nodes = [
        helper.make_node("Gather", ["wte", "ids"], ["tok"]),
        # position ids from the sequence length, as exporters write them
        helper.make_node("Shape", ["ids"], ["ids_shape"]),
        helper.make_node("Gather", ["ids_shape", "idx1"], ["seq_len"], axis=0),
        helper.make_node("Range", ["zero", "seq_len", "one"], ["pos_ids"]),
        helper.make_node("Gather", ["wpe", "pos_ids"], ["pos"]),
        helper.make_node("Add", ["tok", "pos"], ["h"]),
        # a Reshape whose target is computed from the input's shape: [batch * seq, D] and back
        helper.make_node("Gather", ["ids_shape", "zero"], ["b_len"], axis=0),
        helper.make_node("Mul", ["b_len", "seq_len"], ["rows"]),
        helper.make_node("Unsqueeze", ["rows", "perm_axes"], ["rows1"]),
        helper.make_node("Concat", ["rows1", "tail"], ["flat_shape"], axis=0),
        helper.make_node("Reshape", ["h", "flat_shape"], ["h2"]),
        helper.make_node("MatMul", ["h2", "wq"], ["q2"]),
        helper.make_node("Reshape", ["q2", "ids_shape_d"], ["q"]),
        helper.make_node("Transpose", ["q"], ["qt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "qt"], ["scores"]),  # [batch, seq, seq]
        helper.make_node("Softmax", ["scores"], ["att"], axis=-1),
        helper.make_node("MatMul", ["att", "h"], ["ctx"]),
        helper.make_node("MatMul", ["ctx", "head"], ["logits"]),
        helper.make_node("Concat", ["ids_shape", "tail"], ["ids_shape_d"], axis=0),
    ]
    # topological order: the shape Concat before the Reshape that reads it
    nodes.insert(12, nodes.pop())
    g = helper.make_graph(nodes, "seqlm", [ids], [out], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dims")
    out = {"sym": str(tmp / "lm_sym.onnx"), "unnamed": str(tmp / "lm_unnamed.onnx")}
    onnx.save(seq_model(), out["sym"])
    onnx.save(seq_model(unnamed=True), out["unnamed"])
    for n in (16, 64):
        out[n] = str(tmp / f"lm_s{n}.onnx")
        onnx.save(seq_model(seq=n), out[n])
    return out


def run(*args):
    return CliRunner().invoke(main, list(args))


def test_an_unbound_symbolic_dimension_is_refused_naming_it_and_the_flag(files):
    r = run("analyze", files["sym"], "-b", "2")
    assert r.exit_code == 2
    line = r.stderr.strip()
    assert "\n" not in line and "'seq'" in line and "--dim seq=N" in line and "Traceback" not in r.output


def test_an_unnamed_dimension_gets_a_stable_name(files):
    with pytest.raises(ModelError, match=r"'ids_dim1'.*--dim ids_dim1=N"):
        load_model(files["unnamed"], batch_size=2)
    g = load_model(files["unnamed"], batch_size=2, dims={"ids_dim1": 16})
    assert g.operands[g.inputs[0]].shape == (2, 16)


def test_a_dim_the_model_does_not_have_and_the_batch_are_refused(files):
    r = run("analyze", files["sym"], "-b", "2", "--dim", "seq=16", "--dim", "sqe=4")
    assert r.exit_code == 2 and "no symbolic dimension 'sqe'" in r.stderr and "seq" in r.stderr
    r = run("analyze", files["sym"], "--dim", "batch=8", "--dim", "seq=16")
    assert r.exit_code == 2 and "-b 8" in r.stderr and "batch dimension" in r.stderr
    for bad in ("seq", "seq=0", "seq=x", "=4"):
        r = run("analyze", files["sym"], "-b", "2", "--dim", bad)
        assert r.exit_code == 2 and "--dim" in r.stderr, bad
    r = run("analyze", files[16], "-b", "2", "--dim", "seq=16")
    assert r.exit_code == 2 and "no symbolic dimension 'seq' (it has none besides the batch)" in r.stderr


@pytest.mark.parametrize("n", [16, 64])
@pytest.mark.parametrize("profile", ["memplan", "torch"])
def test_bound_at_n_the_figures_are_those_of_the_model_fixed_at_n(files, n, profile):
    bound = api.analyze(files["sym"], batch_size=2, dim={"seq": n}, optimizer="adam", profile=profile,
                        compare_onert=False).report
    fixed = api.analyze(files[n], batch_size=2, optimizer="adam", profile=profile, compare_onert=False).report
    assert bound["totals"] == fixed["totals"] and bound["categories"] == fixed["categories"]
    assert bound["config"]["dims"] == {"seq": n} and fixed["config"]["dims"] == {}
    jsonschema.validate(bound, load_schema("report"))


def test_the_binding_is_in_the_header_the_json_and_inspect(files):
    r = run("analyze", files["sym"], "-b", "2", "--dim", "seq=16")
    assert r.exit_code == 0, r.output
    assert "batch 2 · seq=16 ·" in r.stdout.splitlines()[0]
    doc = json.loads(run("analyze", files["sym"], "-b", "2", "--dim", "seq=16", "-f", "json").stdout)
    assert doc["config"]["dims"] == {"seq": 16} and doc["config"]["sources"]["dims"] == "flag"
    # inspect lists the symbolic dimensions: bound, or shown at 1 (as a symbolic batch is) and said so
    r = run("inspect", files["sym"], "-b", "2", "--dim", "seq=16", "-f", "json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    jsonschema.validate(doc, load_schema("inspect"))
    assert doc["dims"] == [{"name": "seq", "input": "ids", "position": 1, "size": 16, "bound": True}]
    r = run("inspect", files["sym"], "-f", "json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["dims"] == [{"name": "seq", "input": "ids", "position": 1, "size": 1, "bound": False}]
    r = CliRunner().invoke(main, ["inspect", files["sym"]], env={"COLUMNS": "200"})
    assert "seq (symbolic: dim 1 of graph input 'ids'): shapes shown at 1; --dim seq=N binds it" in r.stdout


def test_verify_compare_and_diff_take_the_binding(files, tmp_path):
    r = run("verify", files["sym"], "-b", "2", "--dim", "seq=16", "-f", "json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["passed"] and doc["config"]["dims"] == {"seq": 16}
    r = run("compare", files["sym"], "-b", "2", "--dim", "seq=16", "-f", "json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["config"]["dims"] == {"seq": 16}
    base = tmp_path / "base.json"
    assert run("analyze", files["sym"], "-b", "2", "--dim", "seq=16", "-f", "json", "-o", str(base)).exit_code == 0
    # the baseline's binding is taken for TARGET; a flag overrides it, and the notes say it differs
    same = json.loads(run("diff", "--baseline", str(base), files["sym"], "-f", "json").stdout)
    assert all(r["delta"] == 0 for r in same["rows"])
    other = run("diff", "--baseline", str(base), files["sym"], "--dim", "seq=64", "-f", "json")
    doc = json.loads(other.stdout)
    assert any("dims differs" in n for n in doc["notes"]) and any(r["delta"] for r in doc["rows"])


def test_sweep_sweeps_a_dimension_like_batch_sizes(files):
    r = run("sweep", files["sym"], "-b", "2", "--dim", "seq=16,64", "-p", "memplan", "-f", "json", "-O", "adam")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    jsonschema.validate(doc, load_schema("sweep"))
    assert doc["config"]["swept_dim"] == "seq" and doc["config"]["dim_sizes"] == [16, 64]
    for row in doc["rows"]:
        n = row["dims"]["seq"]
        fixed = api.analyze(files[n], batch_size=2, optimizer="adam", compare_onert=False).report
        assert row["batch_size"] == 2 and row["planned"] == fixed["totals"]["planned"]
    budget = doc["rows"][0]["planned"]
    r = run("sweep", files["sym"], "-b", "2", "--dim", "seq=16,64", "-p", "memplan", "-O", "adam",
            "--budget", str(budget), "-q")
    assert r.exit_code == 0 and r.stdout == f"memplan: largest seq under {budget} B: 16\n"
    r = run("sweep", files["sym"], "-b", "2,4", "--dim", "seq=16,64")
    assert r.exit_code == 2 and "one batch size" in r.stderr


def test_fit_finds_the_longest_sequence_that_fits(files):
    at = {n: api.analyze(files["sym"], batch_size=2, dim={"seq": n}, optimizer="adam",
                         compare_onert=False).planned for n in (40, 41)}
    budget = at[40]  # memory grows with seq: 40 fits, 41 does not
    assert at[41] > budget
    r = run("fit", files["sym"], "-b", "2", "--dim", "seq=16", "--max-dim", "seq", "-O", "adam",
            "--budget", str(budget), "-f", "json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    jsonschema.validate(doc, load_schema("fit"))
    row = next(o for o in doc["options"] if o["option"] == "longest dim")
    assert row["dims"] == {"seq": 40} and row["planned"] == budget and row["fits"] and not row["pareto"]
    # its command applies it: run as printed, it plans the option's figure
    assert "--dim seq=40" in row["command"] and "--max-dim" not in row["command"]
    words = [w.strip("'") for w in row["command"].split()[2:]]
    q = run("analyze", *words, "-f", "json")
    assert q.exit_code == 0 and json.loads(q.stdout)["totals"]["planned"] == budget
    assert doc["config"]["dims"] == {"seq": 16}
    r = run("fit", files["sym"], "-b", "2", "--dim", "seq=16", "--max-dim", "len", "--budget", "1MiB")
    assert r.exit_code == 2 and "--dim len=N" in r.stderr


def test_a_tflite_dynamic_dimension_beyond_the_batch_is_named_and_refused(tmp_path):
    from tests.loaders import fbmodels as fb

    t = [fb.tensor("tokens", [1, 1, 4], signature=[-1, -1, 4]), fb.tensor("act", [1, 1, 4], signature=[-1, -1, 4])]
    p = fb.write(tmp_path, "m.tflite", fb.build(t, [fb.op(fb.OPS.RELU, [0], [1])], [0], [1], fmt="tflite"))
    # never analysed at the converter's placeholder size (1): the dim is named, as --dim would bind it
    r = run("analyze", p, "-b", "2")
    assert r.exit_code == 2 and "'tokens_dim1'" in r.stderr and "position 1" in r.stderr
    # binding it is refused too (memplan re-sizes only the batch inside a TF Lite graph), naming the flag
    r = run("analyze", p, "-b", "2", "--dim", "tokens_dim1=16")
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and "convert the model with it fixed" in r.stderr
    r = run("analyze", p, "-b", "2", "--dim", "tokens_dim0=16")
    assert r.exit_code == 2 and "-b 16" in r.stderr
    # inspect shows the file at the converter's placeholder size, and says the dimension is unbound
    r = run("inspect", p, "-f", "json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["dims"] == [{"name": "tokens_dim1", "input": "tokens", "position": 1, "size": 1,
                                             "bound": False}]
    # a file whose only dynamic dim is the batch loads as before
    t = [fb.tensor("x", [1, 4], signature=[-1, 4]), fb.tensor("y", [1, 4], signature=[-1, 4])]
    p = fb.write(tmp_path, "b.tflite", fb.build(t, [fb.op(fb.OPS.RELU, [0], [1])], [0], [1], fmt="tflite"))
    assert load_model(p, batch_size=3).operands[1].shape == (3, 4)


CORPUS = "tests/corpus"


def _categories(*args):
    r = run("analyze", *args, "-O", "adam", "-l", "cce", "-f", "json")
    assert r.exit_code == 0, r.output
    return {k: v["planned"] for k, v in json.loads(r.stdout)["categories"].items()}


def test_a_real_dynamo_export_with_a_symbolic_sequence_matches_the_fixed_export():
    """gpt2_tiny_seq_dynamo.onnx is gpt2_tiny_dynamo.onnx's model exported with dynamic_shapes. At
    seq 8 every category is the fixed export's, but for the Adam state of the position table: the
    fixed export folds `wpe[0:8]` into a [1, 8, 32] constant, so it trains 8 positions, the
    symbolic one all 16 (as PyTorch does): 2 states x 8 x 32 x 4 B more."""
    bound = _categories(f"{CORPUS}/gpt2_tiny_seq_dynamo.onnx", "-b", "1", "--dim", "seq=8")
    fixed = _categories(f"{CORPUS}/gpt2_tiny_dynamo.onnx", "-b", "1")
    assert bound["opt-variable"] - fixed["opt-variable"] == 2 * 8 * 32 * 4
    assert {k: v for k, v in bound.items() if k not in ("opt-variable", "trainable")} == \
        {k: v for k, v in fixed.items() if k not in ("opt-variable", "trainable")}


def test_a_real_torchscript_export_refuses_a_size_beyond_its_position_table():
    r = run("analyze", f"{CORPUS}/bert_tiny_seq_ts.onnx", "-b", "2", "--dim", "seq=16", "-q")
    assert r.exit_code == 0, r.output
    r = run("analyze", f"{CORPUS}/bert_tiny_seq_ts.onnx", "-b", "2", "--dim", "seq=17")
    assert r.exit_code == 2 and "with --dim seq=17" in r.stderr and "may not take this size" in r.stderr
    r = run("fit", f"{CORPUS}/bert_tiny_seq_ts.onnx", "-b", "2", "--dim", "seq=8", "--max-dim", "seq",
            "--budget", "64MiB", "-f", "json")
    assert r.exit_code == 0, r.output
    row = next(o for o in json.loads(r.stdout)["options"] if o["option"] == "longest dim")
    assert row["dims"] == {"seq": 16} and "seq 17" in row["change"] and "at seq 17" in row["note"]


def test_one_name_binds_every_input_that_carries_it(tmp_path):
    """ids and attention_mask both [batch, seq]: one --dim seq=N sizes both (ONNX Runtime's override
    by name); a third input's unnamed dim is named after it, and both must be bound."""
    ids = helper.make_tensor_value_info("ids", TensorProto.FLOAT, ["batch", "seq", 4])
    mask = helper.make_tensor_value_info("attention_mask", TensorProto.FLOAT, ["batch", "seq", 4])
    extra = helper.make_tensor_value_info("extra", TensorProto.FLOAT, ["batch", "", 4])
    extra.type.tensor_type.shape.dim[1].ClearField("dim_param")
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    nodes = [helper.make_node("Mul", ["ids", "attention_mask"], ["m"]),
             helper.make_node("Concat", ["m", "extra"], ["y"], axis=1)]
    m = helper.make_model(helper.make_graph(nodes, "two", [ids, mask, extra], [out]),
                          opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    p = str(tmp_path / "two.onnx")
    onnx.save(m, p)
    with pytest.raises(ModelError, match=r"'seq' \(graph input 'ids', position 1\); 'extra_dim1' .*"
                                         r"--dim seq=N --dim extra_dim1=N"):
        load_model(p, batch_size=2)
    g = load_model(p, batch_size=2, dims={"seq": 6, "extra_dim1": 3})
    assert [g.operands[i].shape for i in g.inputs] == [(2, 6, 4), (2, 6, 4), (2, 3, 4)]
    assert g.operands[g.outputs[0]].shape == (2, 9, 4)


@pytest.mark.parametrize("dims", [{"seq": 0}, {"seq": "16"}, {3: 16}, "seq=16", {"seq": True}])
def test_the_api_checks_its_dims_argument(files, dims):
    from memplan_cli.errors import ConfigError

    with pytest.raises(ConfigError, match="dim"):
        api.analyze(files["sym"], batch_size=2, dim=dims)


def test_a_real_tflite_with_a_dynamic_sequence_is_named_and_refused():
    """keras_seq_dense_dynamic.tflite: the TF Lite converter's output for Input((None,), name='ids')
    (scripts/build_corpus.py). memplan's op rules re-size only dim 0 (opgraph/rebatch.py), so the sequence is
    named and refused, never analysed at the converter's placeholder size 1."""
    p = f"{CORPUS}/keras_seq_dense_dynamic.tflite"
    for extra in ((), ("--dim", "ids_dim1=8")):
        r = run("analyze", p, "-b", "2", *extra)
        assert r.exit_code == 2 and r.stderr.count("\n") == 1, r.output
        assert "'ids_dim1'" in r.stderr and "graph input 'ids'" in r.stderr and "position 1" in r.stderr
    r = run("inspect", p, "-f", "json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["dims"] == [{"name": "ids_dim1", "input": "ids", "position": 1, "size": 1,
                                             "bound": False}]
