"""Sizes computed from the data (loaders/data_sized.py): a Split by sizes the graph computes (a mixture
of experts' tokens per expert) is sized under the stated assumption (equal pieces summing to the
input's length) instead of refused; the names --dim binds, the report's line, the JSON, verify, the
torch profile's estimated ops, and the one-line refusals of sizes that cannot hold."""
import json

import jsonschema
import numpy as np
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

from memplan_cli.cli import main
from memplan_cli.loaders import load_model
from memplan_cli.schemas import load_schema
from tests.ops.gradcheck import check_verify, onnx_model, save


def _moe(tmp_path, rows=6, names=None):
    """x (rows, 4) + p, cut along rows by counts computed from x (per column, how many rows of x @ r
    are positive), each piece through its own weight, put back together: shape inference cannot size
    the pieces. `names`: the dim_param the file gives each piece (the dynamo exporter's u0, u1, ...)."""
    rng = np.random.default_rng(5)
    inits = {"p": rng.normal(size=(rows, 4)).astype(np.float32), "r": rng.normal(size=(4, 3)).astype(np.float32),
             "ax": np.array([0], np.int64), **{f"w{k}": rng.normal(size=(4, 4)).astype(np.float32) for k in range(3)}}
    nodes = [helper.make_node("Add", ["x", "p"], ["h"]),
             helper.make_node("MatMul", ["x", "r"], ["logits"]),
             helper.make_node("Greater", ["logits", "zero"], ["pos"]),
             helper.make_node("Cast", ["pos"], ["posi"], to=TensorProto.INT64),
             helper.make_node("ReduceSum", ["posi", "ax"], ["counts"], keepdims=0),
             helper.make_node("Split", ["h", "counts"], ["a0", "a1", "a2"], axis=0),
             *[helper.make_node("MatMul", [f"a{k}", f"w{k}"], [f"y{k}"]) for k in range(3)],
             helper.make_node("Concat", ["y0", "y1", "y2"], ["y"], axis=0)]
    inits["zero"] = np.array(0.0, np.float32)
    m = onnx_model(nodes, [("x", (rows, 4))], [("y", (rows, 4))], inits)
    if names:
        m.graph.value_info.extend(helper.make_tensor_value_info(f"a{k}", TensorProto.FLOAT, [n, 4])
                                  for k, n in enumerate(names))
    return save(tmp_path, m)


def _run(*args):
    return CliRunner().invoke(main, [*args], env={"NO_COLOR": "1", "COLUMNS": "80"})


def test_pieces_are_taken_equal_and_named_after_the_sizes_tensor(tmp_path):
    g = load_model(_moe(tmp_path, rows=7))
    ds = g.metadata["data_sized"]
    assert ds["rule"] == "equal pieces"
    # the remainder one row each on the first pieces
    assert [(d["name"], d["size"], d["set_by"]) for d in ds["dims"]] == [
        ("counts_0", 3, "assumed"), ("counts_1", 2, "assumed"), ("counts_2", 2, "assumed")]
    shapes = {o.name: o.shape for o in g.operands}
    assert shapes["a0"] == (3, 4) and shapes["y2"] == (2, 4) and shapes["y"] == (7, 4)
    assert set(ds["tensors"]) == {"a0", "a1", "a2", "y0", "y1", "y2", "y"}  # inference sized y from them


def test_the_files_own_names_are_used(tmp_path):
    g = load_model(_moe(tmp_path, names=["u0", "u1", "u2"]))
    assert [d["name"] for d in g.metadata["data_sized"]["dims"]] == ["u0", "u1", "u2"]
    g = load_model(_moe(tmp_path, names=["u0", "u1", "u2"]), dims={"u1": 4})
    assert [(d["size"], d["set_by"]) for d in g.metadata["data_sized"]["dims"]] == [
        (1, "assumed"), (4, "--dim"), (1, "assumed")]


def test_analyze_says_it_in_one_line_and_the_json(tmp_path):
    p = _moe(tmp_path)
    r = _run("analyze", p, "-O", "adam")
    assert r.exit_code == 0, r.output
    line = next(x for x in r.output.splitlines() if "data-sized" in x)
    assert line == "note: 3 data-sized dims assumed equal pieces (7 tensors); --dim counts_0=N"
    assert len(line) <= 80
    r = _run("analyze", p, "-O", "adam", "-f", "json", "--dim", "counts_2=4")
    doc = json.loads(r.output)
    jsonschema.validate(doc, load_schema("analysis"))
    assert doc["data_sized"]["dims"][2] == {"name": "counts_2", "size": 4, "set_by": "--dim", "op": "a0",
                                            "tensor": "a2", "rule": "equal pieces"}
    assert [d["size"] for d in doc["data_sized"]["dims"]] == [1, 1, 4]
    assert "2 set by --dim" not in _run("analyze", p, "--dim", "counts_2=4").output  # one of three
    assert "1 set by --dim" in _run("analyze", p, "--dim", "counts_2=4").output


@pytest.mark.parametrize("dims,says", [
    (("counts_0=1", "counts_1=1", "counts_2=1"), "they sum to 3, not 6"),
    (("counts_0=7",), "they sum to 7, not 6"),
    (("count_0=2",), "the model has no symbolic dimension 'count_0'"),
])
def test_sizes_that_cannot_hold_are_refused_in_one_line(tmp_path, dims, says):
    r = _run("analyze", _moe(tmp_path), *[a for d in dims for a in ("--dim", d)])
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1 and says in r.output, r.output


def test_verify_runs_the_step_at_the_assumed_sizes(tmp_path):
    p = _moe(tmp_path)
    doc = check_verify(p, "-O", "adam")
    assert doc["data_sized"] == {"rule": "equal pieces", "dims": 3}
    jsonschema.validate(doc, load_schema("verify"))
    r = _run("verify", p)
    assert r.exit_code == 0 and "assumed   3 data-sized dims" in r.output, r.output


def _torch_estimated_types(path) -> set:
    """The op types `-p torch` names as estimated."""
    r = _run("analyze", path, "-O", "adam", "-p", "torch", "-f", "json")
    return {e["type"] for e in json.loads(r.output)["figures"]["torch"]["coverage"]["estimated"]}


def test_torch_profile_names_the_ops_it_sized(tmp_path):
    est = _torch_estimated_types(_moe(tmp_path))
    assert {"Split", "Concat"} <= est, est


def test_inspect_lists_the_names(tmp_path):
    r = _run("inspect", _moe(tmp_path))
    assert r.exit_code == 0, r.output
    assert "data-sized pieces of 'a0': counts_0=2, counts_1=2, counts_2=2 (assumed equal" in r.output
    doc = json.loads(_run("inspect", _moe(tmp_path), "-f", "json").output)
    jsonschema.validate(doc, load_schema("inspect"))
    assert [d["name"] for d in doc["data_sized"]["dims"]] == ["counts_0", "counts_1", "counts_2"]


def _where(tmp_path):
    """h = x + p (6, 4); the rows whose sum is positive (NonZero of a (6,) mask, Squeeze: `torch.where`)
    gathered, through a weight, summed over the rows: the count is the data's, at most 6."""
    rng = np.random.default_rng(6)
    inits = {"p": rng.normal(size=(6, 4)).astype(np.float32), "w": rng.normal(size=(4, 4)).astype(np.float32),
             "ax1": np.array([1], np.int64), "ax0": np.array([0], np.int64), "zero": np.array(0.0, np.float32)}
    nodes = [helper.make_node("Add", ["x", "p"], ["h"]),
             helper.make_node("ReduceSum", ["x", "ax1"], ["s"], keepdims=0),
             helper.make_node("Greater", ["s", "zero"], ["mask"]),
             helper.make_node("NonZero", ["mask"], ["nz"], name="where"),
             helper.make_node("Squeeze", ["nz", "ax0"], ["rows"]),
             helper.make_node("Gather", ["h", "rows"], ["g"], axis=0),
             helper.make_node("MatMul", ["g", "w"], ["m"]),
             helper.make_node("ReduceSum", ["m", "ax0"], ["y"], keepdims=1)]
    return save(tmp_path, onnx_model(nodes, [("x", (6, 4))], [("y", (1, 4))], inits), "where.onnx")


def test_a_count_is_taken_at_its_bound_and_set_by_dim(tmp_path):
    p = _where(tmp_path)
    g = load_model(p)
    d = g.metadata["data_sized"]
    assert d["rule"] == "at the bound"
    assert d["dims"] == [{"name": "nz_count", "size": 6, "set_by": "assumed", "op": "where", "tensor": "nz",
                          "rule": "at the bound", "bound": 6}]
    assert next(o.shape for o in g.operands if o.name == "g") == (6, 4)
    g = load_model(p, dims={"nz_count": 2})
    assert next(o.shape for o in g.operands if o.name == "g") == (2, 4)
    g = load_model(p, dims={"nz_count": 0})  # nothing selected: empty tensors, as eager's
    assert next(o.shape for o in g.operands if o.name == "g") == (0, 4)
    r = _run("analyze", p, "--dim", "nz_count=7")
    assert r.exit_code == 2 and "NonZero 'where' selects at most 6 elements" in r.output, r.output
    assert len(r.output.strip().splitlines()) == 1
    r = _run("analyze", p, "-O", "adam")
    assert "note: 1 data-sized dims assumed at the bound (4 tensors); --dim nz_count=N" in r.output, r.output
    doc = json.loads(_run("analyze", p, "-f", "json").output)
    jsonschema.validate(doc, load_schema("analysis"))
    assert "data-sized count (at most 6) of 'where': nz_count=6" in _run("inspect", p).output


def test_verify_and_the_torch_profile_with_a_count(tmp_path):
    p = _where(tmp_path)
    doc = check_verify(p, "-O", "adam")
    assert doc["data_sized"] == {"rule": "at the bound", "dims": 1}
    est = _torch_estimated_types(p)
    assert "Gather" in est, est


def test_a_fixed_batch_file_is_not_rebatched_past_its_assumed_sizes(tmp_path):
    # the pieces were taken for the file's batch: another -b would leave them summing to the old length
    r = _run("analyze", _moe(tmp_path), "-b", "3")
    assert r.exit_code == 2 and "sizes computed from the data were taken at the file's batch 6" in r.output
    assert len(r.output.strip().splitlines()) == 1
    assert _run("analyze", _moe(tmp_path), "-b", "6").exit_code == 0


def _one_hot_where(tmp_path, kind):
    """Mixtral's expert loop for one expert: the tokens of expert 1's slice of a one-hot of the
    routing (6 tokens, top-2, 4 experts), `torch.where(one_hot(ids, 4).permute(2, 1, 0)[1])`, as
    TorchScript writes one_hot (`onehot`: OneHot) or the dynamo exporter (`equal`: Equal with an
    arange); `other`: an Equal with a constant that is no arange (no one-hot: the bound)."""
    rng = np.random.default_rng(8)
    inits = {"p": rng.normal(size=(6, 4)).astype(np.float32), "w": rng.normal(size=(4, 4)).astype(np.float32),
             "e": np.array(1, np.int64), "one": np.array(1, np.int64), "ax0": np.array([0], np.int64),
             "axl": np.array([-1], np.int64)}
    if kind == "onehot":
        inits.update(depth=np.array(4, np.int64), values=np.array([0, 1], np.int64))
        hot = [helper.make_node("OneHot", ["ids", "depth", "values"], ["hot"], axis=-1)]
    else:
        inits["r"] = np.arange(4, dtype=np.int64) if kind == "equal" else np.array([0, 2, 2, 3], np.int64)
        hot = [helper.make_node("Unsqueeze", ["ids", "axl"], ["idu"]),
               helper.make_node("Equal", ["idu", "r"], ["hot"])]
    nodes = [helper.make_node("Add", ["x", "p"], ["h"]), *hot,
             helper.make_node("Transpose", ["hot"], ["perm"], perm=[2, 1, 0]),
             helper.make_node("Gather", ["perm", "e"], ["slice"], axis=0),
             helper.make_node("Cast", ["slice"], ["mask"], to=TensorProto.BOOL),
             helper.make_node("NonZero", ["mask"], ["nz"], name="where"),
             helper.make_node("Gather", ["nz", "one"], ["tok"], axis=0),
             helper.make_node("Gather", ["h", "tok"], ["g"], axis=0),
             helper.make_node("MatMul", ["g", "w"], ["m"]),
             helper.make_node("ReduceSum", ["m", "ax0"], ["y"], keepdims=1)]
    m = onnx_model(nodes, [("x", (6, 4)), ("ids", (6, 2), TensorProto.INT64)], [("y", (1, 4))], inits)
    return save(tmp_path, m, f"{kind}.onnx")


@pytest.mark.parametrize("kind,size,rule", [("onehot", 3, "equal pieces"), ("equal", 3, "equal pieces"),
                                            ("other", 12, "at the bound")])
def test_a_one_hot_class_slice_takes_an_equal_share(tmp_path, kind, size, rule):
    # each row of a one-hot has at most one nonzero: the 4 experts' counts sum to at most the 12
    # rows (6 tokens x top-2), taken as equal pieces; any other mask is taken at its bound
    g = load_model(_one_hot_where(tmp_path, kind))
    (d,) = g.metadata["data_sized"]["dims"]
    assert (d["size"], d["rule"], d["bound"]) == (size, rule, 12)
    assert next(o.shape for o in g.operands if o.name == "g") == (size, 4)
    check_verify(_one_hot_where(tmp_path, kind), "-O", "adam")


def _global_range(tmp_path):
    """Longformer's `arange(num_global.max())` when the attention mask is the model's input: the
    largest count of global tokens per row (ReduceMax of ReduceSum of `mask > 1`) is a Range's
    length, decided by the data; it is at most a row's length."""
    i64 = lambda v: np.array(v, np.int64)  # noqa: E731
    inits = {"one": np.array(1.0, np.float32), "ax1": i64([1]), "zero": i64(0), "step": i64(1), "ax0": i64([0]),
             "b": i64([2]), "w": i64([4])}
    f0 = helper.make_tensor("f0", TensorProto.FLOAT, [1], [0.0])
    nodes = [helper.make_node("Greater", ["m", "one"], ["is_glob"]),
             helper.make_node("Cast", ["is_glob"], ["is_glob_i"], to=TensorProto.INT64),
             helper.make_node("ReduceSum", ["is_glob_i", "ax1"], ["count"], keepdims=0),
             helper.make_node("ReduceMax", ["count"], ["most"], keepdims=0),
             helper.make_node("Range", ["zero", "most", "step"], ["r"], name="slots"),
             helper.make_node("Gather", ["x", "r"], ["g"], axis=1),
             # the largest count read as a size too (`x.new_zeros(b, count.max(), w)`)
             helper.make_node("Unsqueeze", ["most", "ax0"], ["most1"]),
             helper.make_node("Concat", ["b", "most1", "w"], ["zshape"], axis=0),
             helper.make_node("ConstantOfShape", ["zshape"], ["zeros"], value=f0),
             helper.make_node("Add", ["g", "zeros"], ["gz"]),
             helper.make_node("ReduceSum", ["gz", "ax1"], ["y"], keepdims=1)]
    m = onnx_model(nodes, [("x", (2, 8, 4)), ("m", (2, 8))], [("y", (2, 1, 4))], inits)
    return save(tmp_path, m, "global_range.onnx")


def test_a_range_up_to_a_mask_s_largest_count_is_taken_at_its_bound(tmp_path):
    p = _global_range(tmp_path)
    g = load_model(p)
    d = g.metadata["data_sized"]
    assert d["dims"] == [{"name": "r_count", "size": 8, "set_by": "assumed", "op": "slots", "tensor": "r",
                          "rule": "at the bound", "bound": 8}]
    assert next(o.shape for o in g.operands if o.name == "gz") == (2, 8, 4)
    assert next(o.shape for o in load_model(p, dims={"r_count": 3}).operands if o.name == "gz") == (2, 3, 4)
    r = _run("analyze", p, "--dim", "r_count=9")
    assert r.exit_code == 2 and "Range 'slots' selects at most 8 elements of 'is_glob'" in r.output, r.output
    doc = check_verify(p, "-O", "adam", "--dim", "r_count=3")
    assert doc["data_sized"] == {"rule": "at the bound", "dims": 1}


def test_a_range_of_another_data_sized_limit_is_still_refused(tmp_path):
    # the largest value of the data itself (not of a mask's count) has no bound: one line, exit 2
    p = _global_range(tmp_path)
    import onnx
    m = onnx.load(p)
    m.graph.node[0].op_type = "Add"  # m + 1: a float, not a comparison's 0 / 1
    for n in list(m.graph.node):
        if n.op_type == "Cast":
            n.attribute[0].i = TensorProto.INT64
    r = _run("analyze", save(tmp_path, m, "no_bound.onnx"))
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1 and "computed from the data" in r.output, \
        r.output


def test_nonzero_as_a_tuple_of_a_data_mask_is_read_as_pieces(tmp_path):
    """`rows, cols = mask.nonzero(as_tuple=True)` as TorchScript writes it (NonZero, Transpose,
    SplitToSequence with a scalar split of 1 and keepdims 0, SequenceAt 0 and 1): the sequence is read
    as two Gathers of the indices, 1-d as eager's (ONNX Runtime drops the axis), so the count sizes
    them like any tensor: at the bound."""
    i64 = lambda v: np.array(v, np.int64)  # noqa: E731
    inits = {"one": np.array(1.0, np.float32), "split": i64(1), "p0": i64(0), "p1": i64(1)}
    nodes = [helper.make_node("Greater", ["m", "one"], ["mask"]),
             helper.make_node("NonZero", ["mask"], ["nz"], name="where"),
             helper.make_node("Transpose", ["nz"], ["nzt"], perm=[1, 0]),
             helper.make_node("SplitToSequence", ["nzt", "split"], ["seq"], axis=1, keepdims=0),
             helper.make_node("SequenceAt", ["seq", "p0"], ["rows"]),
             helper.make_node("SequenceAt", ["seq", "p1"], ["cols"]),
             helper.make_node("Unsqueeze", ["rows", "ax"], ["rows1"]),
             helper.make_node("Unsqueeze", ["cols", "ax"], ["cols1"]),
             helper.make_node("Concat", ["rows1", "cols1"], ["idx"], axis=1),
             helper.make_node("GatherND", ["x", "idx"], ["picked"]),
             helper.make_node("ReduceSum", ["picked", "ax0"], ["y"], keepdims=1)]
    inits.update({"ax": i64([1]), "ax0": i64([0])})
    p = save(tmp_path, onnx_model(nodes, [("x", (2, 8, 4)), ("m", (2, 8))], [("y", (1, 4))], inits), "tuple.onnx")
    g = load_model(p)
    shapes = {o.name: o.shape for o in g.operands}
    assert shapes["rows"] == (16,) and shapes["picked"] == (16, 4)
    assert g.metadata["data_sized"]["dims"][0]["bound"] == 16
    check_verify(p, "-O", "adam", "--dim", "nz_count=5")


def _masked_write(tmp_path):
    """`emb[ids == 15] = eoi` (T5Gemma2's end-of-image embedding) as the dynamo exporter writes an
    index_put with a boolean mask: NonZero of the mask broadcast over the width for the indices, and
    the value expanded to (mask.sum(), width), flattened, for ScatterND. mask.sum() is the data's, at
    most the mask's 16 elements."""
    i64 = lambda v: np.array(v, np.int64)  # noqa: E731
    rng = np.random.default_rng(7)
    inits = {"table": rng.normal(size=(16, 4)).astype(np.float32), "eoi": rng.normal(size=(4,)).astype(np.float32),
             "w": rng.normal(size=(4, 4)).astype(np.float32), "k": i64(15), "last": i64([-1]),
             "full": i64([2, 8, 4]), "flat": i64([-1]), "width": i64([4])}
    nodes = [helper.make_node("Gather", ["table", "ids"], ["emb"]),
             helper.make_node("Equal", ["ids", "k"], ["eq"]),
             helper.make_node("Unsqueeze", ["eq", "last"], ["eq1"]),
             helper.make_node("Expand", ["eq1", "full"], ["eqw"]),
             helper.make_node("NonZero", ["eqw"], ["nz"]),
             helper.make_node("Transpose", ["nz"], ["nzt"], perm=[1, 0]),
             helper.make_node("Reshape", ["eq", "flat"], ["eqf"]),
             helper.make_node("Cast", ["eqf"], ["eqi"], to=TensorProto.INT64),
             helper.make_node("ReduceSum", ["eqi"], ["count"], keepdims=1),
             helper.make_node("Concat", ["count", "width"], ["vshape"], axis=0),
             helper.make_node("Expand", ["eoi", "vshape"], ["vals"], name="eoi_rows"),
             helper.make_node("Reshape", ["vals", "flat"], ["valsf"]),
             helper.make_node("ScatterND", ["emb", "nzt", "valsf"], ["put"]),
             helper.make_node("MatMul", ["put", "w"], ["y"])]
    m = onnx_model(nodes, [("ids", (2, 8), TensorProto.INT64)], [("y", (2, 8, 4))], inits)
    return save(tmp_path, m, "masked_write.onnx")


def test_an_expand_to_a_mask_s_count_is_taken_at_its_bound(tmp_path):
    p = _masked_write(tmp_path)
    g = load_model(p)
    d = {r["name"]: r for r in g.metadata["data_sized"]["dims"]}
    assert d["vals_count"] == {"name": "vals_count", "size": 16, "set_by": "assumed", "op": "eoi_rows",
                               "tensor": "vals", "rule": "at the bound", "bound": 16}
    assert d["nz_count"]["size"] == 64  # the mask broadcast over the width: every element selected
    assert next(o.shape for o in g.operands if o.name == "vals") == (16, 4)
    doc = check_verify(p, "-O", "adam")
    assert doc["data_sized"] == {"rule": "at the bound", "dims": 2}
    est = _torch_estimated_types(p)
    assert "Expand" in est, est


def test_an_expand_to_a_count_of_no_mask_is_still_refused(tmp_path):
    import onnx
    m = onnx.load(_masked_write(tmp_path))
    next(n for n in m.graph.node if n.op_type == "Equal").op_type = "Add"  # the sum of ids + 15: no bound
    r = _run("analyze", save(tmp_path, m, "no_mask.onnx"))
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1 and "computed from the data" in r.output, \
        r.output


def test_a_nonzero_whose_scatter_updates_are_sliced_from_a_row_is_bound_by_the_row(tmp_path):
    """The same write as the TorchScript exporter writes it: NonZero of the mask broadcast to the
    embeddings' shape, and the row flattened and sliced to the indices' count for ScatterND. The file
    runs only while the count is at most the row's 4 elements (one id matched): that is the bound,
    not the mask's 64 elements."""
    i64 = lambda v: np.array(v, np.int64)  # noqa: E731
    rng = np.random.default_rng(8)
    inits = {"table": rng.normal(size=(16, 4)).astype(np.float32), "eoi": rng.normal(size=(4,)).astype(np.float32),
             "w": rng.normal(size=(4, 4)).astype(np.float32), "k": i64(15), "last": i64([-1]), "flat": i64([-1]),
             "zero": i64(0), "z1": i64([0])}
    nodes = [helper.make_node("Gather", ["table", "ids"], ["emb"]),
             helper.make_node("Equal", ["ids", "k"], ["eq"]),
             helper.make_node("Unsqueeze", ["eq", "last"], ["eq1"]),
             helper.make_node("Shape", ["emb"], ["full"]),
             helper.make_node("Expand", ["eq1", "full"], ["eqw"]),
             helper.make_node("NonZero", ["eqw"], ["nz"], name="matches"),
             helper.make_node("Transpose", ["nz"], ["nzt"], perm=[1, 0]),
             helper.make_node("Reshape", ["eoi", "flat"], ["row"]),
             helper.make_node("Shape", ["nzt"], ["nshape"]),
             helper.make_node("Gather", ["nshape", "zero"], ["n"], axis=0),
             helper.make_node("Unsqueeze", ["n", "z1"], ["n1"]),
             helper.make_node("Slice", ["row", "z1", "n1", "z1"], ["vals"]),
             helper.make_node("ScatterND", ["emb", "nzt", "vals"], ["put"]),
             helper.make_node("MatMul", ["put", "w"], ["y"])]
    p = save(tmp_path, onnx_model(nodes, [("ids", (2, 8), TensorProto.INT64)], [("y", (2, 8, 4))], inits), "ts.onnx")
    g = load_model(p)
    assert g.metadata["data_sized"]["dims"] == [{"name": "nz_count", "size": 4, "set_by": "assumed", "op": "matches",
                                                 "tensor": "nz", "rule": "at the bound", "bound": 4}]
    assert next(o.shape for o in g.operands if o.name == "vals") == (4,)
    r = _run("analyze", p, "--dim", "nz_count=5")
    assert r.exit_code == 2 and "NonZero 'matches' selects at most 4 elements" in r.output, r.output
    doc = check_verify(p, "-O", "adam")
    assert doc["data_sized"] == {"rule": "at the bound", "dims": 1}


def _fixed_value_write(tmp_path):
    """`h[mask] = v` with a value vector of its own length (4): NonZero of the mask, Transpose,
    ScatterND whose updates are v itself. At the bound (every element of the (2, 4) mask selected)
    the updates (4,) cannot match the 8 indices: the count the data gives is what makes the graph hold."""
    inits = {"zero": np.array(0.0, np.float32), "v": np.ones(4, np.float32), "w": np.ones((4, 4), np.float32)}
    nodes = [helper.make_node("Greater", ["x", "zero"], ["mask"]),
             helper.make_node("NonZero", ["mask"], ["nz"], name="where"),
             helper.make_node("Transpose", ["nz"], ["idx"], perm=[1, 0]),
             helper.make_node("ScatterND", ["x", "idx", "v"], ["h"], name="write"),
             helper.make_node("MatMul", ["h", "w"], ["y"])]
    return save(tmp_path, onnx_model(nodes, [("x", (2, 4))], [("y", (2, 4))], inits), "fixed_value_write.onnx")


def test_a_graph_that_does_not_hold_at_an_assumed_count_names_it_and_its_flag(tmp_path):
    # the shapes disagree only because the count was assumed: the refusal says so and how to set it
    p = _fixed_value_write(tmp_path)
    r = _run("analyze", p)
    assert r.exit_code == 2, r.output
    (line,) = r.output.strip().splitlines()
    assert "fixed_value_write.onnx" in line and "ScatterND" in line, line
    assert "nz_count=8 assumed (at the bound" in line and "--dim nz_count=N" in line, line
    assert _run("analyze", p, "--dim", "nz_count=4", "-q").exit_code == 0


def _expert_hit(tmp_path, hit=3):
    """transformers' expert loop as TorchScript traces it (6 tokens, top-2, 4 experts): the experts
    some token chose, `(one_hot.sum((-1, -2)) > 0).nonzero()` (NonZero, Transpose), cut by a Split of
    constant sizes, one piece per expert visited at export time (`hit` of them); each piece squeezed
    to a computed class index that slices the one-hot for `torch.where` (NonZero of a Gather at a
    computed scalar index), the tokens through their expert's weight."""
    rng = np.random.default_rng(9)
    inits = {"p": rng.normal(size=(6, 4)).astype(np.float32), "w": rng.normal(size=(4, 4)).astype(np.float32),
             "one": np.array(1, np.int64), "zero": np.array(0, np.int64), "ax0": np.array([0], np.int64),
             "ax12": np.array([1, 2], np.int64), "sizes": np.ones(hit, np.int64),
             "depth": np.array(4, np.int64), "values": np.array([0, 1], np.int64)}
    nodes = [helper.make_node("Add", ["x", "p"], ["h"]),
             helper.make_node("OneHot", ["ids", "depth", "values"], ["hot"], axis=-1),
             helper.make_node("Transpose", ["hot"], ["perm"], perm=[2, 1, 0]),
             helper.make_node("ReduceSum", ["perm", "ax12"], ["per_expert"], keepdims=0),
             helper.make_node("Greater", ["per_expert", "zero"], ["is_hit"]),
             helper.make_node("NonZero", ["is_hit"], ["hit_nz"], name="hit"),
             helper.make_node("Transpose", ["hit_nz"], ["hit_t"], perm=[1, 0]),
             helper.make_node("Split", ["hit_t", "sizes"], [f"e{k}" for k in range(hit)], axis=0)]
    for k in range(hit):
        nodes += [helper.make_node("Squeeze", [f"e{k}", "ax0"], [f"s{k}"]),
                  helper.make_node("Gather", [f"s{k}", "zero"], [f"i{k}"], axis=0),
                  helper.make_node("Gather", ["perm", f"i{k}"], [f"slice{k}"], axis=0),
                  helper.make_node("Cast", [f"slice{k}"], [f"mask{k}"], to=TensorProto.BOOL),
                  helper.make_node("NonZero", [f"mask{k}"], [f"nz{k}"], name=f"where{k}"),
                  helper.make_node("Gather", [f"nz{k}", "one"], [f"tok{k}"], axis=0),
                  helper.make_node("Gather", ["h", f"tok{k}"], [f"g{k}"], axis=0),
                  helper.make_node("MatMul", [f"g{k}", "w"], [f"m{k}"]),
                  helper.make_node("ReduceSum", [f"m{k}", "ax0"], [f"y{k}"], keepdims=1)]
    nodes.append(helper.make_node("Sum", [f"y{k}" for k in range(hit)], ["y"]))
    m = onnx_model(nodes, [("x", (6, 4)), ("ids", (6, 2), TensorProto.INT64)], [("y", (1, 4))], inits)
    return save(tmp_path, m, "hit.onnx")


def test_a_traced_loop_over_the_experts_hit_takes_the_files_count(tmp_path):
    # the Split's constant sizes record how many experts the loop visited (3 of 4): that count is the
    # file's own, not assumed; each visited expert's tokens (a one-hot slice at a computed index)
    # take an equal share of the 12 rows, named as assumed
    g = load_model(_expert_hit(tmp_path))
    shapes = {o.name: o.shape for o in g.operands}
    assert shapes["hit_t"] == (3, 1) and shapes["i0"] == ()
    dims = g.metadata["data_sized"]["dims"]
    assert all(d["rule"] == "equal pieces" and d["bound"] == 12 and d["size"] == 3 for d in dims), dims
    assert "hit" not in {d["op"] for d in dims}
    assert shapes["g0"] == (3, 4)
    check_verify(_expert_hit(tmp_path), "-O", "adam")
