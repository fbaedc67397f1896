"""The ONNX reductions (ReduceMean, ReduceSum, ReduceMax, ReduceMin, ReduceProd, ReduceL1, ReduceL2,
ReduceSumSquare, ReduceLogSum, ReduceLogSumExp) and GlobalAveragePool: axes as attribute and as input
across opsets, keepdims, noop_with_empty_axes, what backward keeps, finite differences, verify, the
forward kernels against the onnx package's backend test cases, TFLite MEAN / SUM / REDUCE_MAX,
refusals."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from devtools.modelgen import ModelBuilder
from memplan_cli import ops
from memplan_cli.errors import ModelError
from memplan_cli.loaders import load_model
from tests.ops.gradcheck import check_gradients, check_verify, onnx_model, save, training_graph

SHAPE = (2, 3, 4)
ONNX_TYPE = {"Mean": "ReduceMean", "ReduceSum": "ReduceSum", "ReduceMax": "ReduceMax", "ReduceMin": "ReduceMin",
             "ReduceProd": "ReduceProd", "ReduceL1": "ReduceL1", "ReduceL2": "ReduceL2",
             "ReduceSumSquare": "ReduceSumSquare", "ReduceLogSum": "ReduceLogSum", "ReduceLogSumExp": "ReduceLogSumExp"}
# the opset from which the axes are an input
AXES_INPUT = {"ReduceMean": 18, "ReduceSum": 13, "ReduceMax": 18, "ReduceMin": 18, "ReduceProd": 18, "ReduceL1": 18,
              "ReduceL2": 18, "ReduceSumSquare": 18, "ReduceLogSum": 18, "ReduceLogSumExp": 18}
ALL = list(ONNX_TYPE)


def _model(op, axes, keepdims=1, opset=None, noop=None, out_shape=None):
    """x + p -> op(axes) -> * q: the reduction sits between two trained parameters."""
    onnx_op = ONNX_TYPE[op]
    opset = opset or AXES_INPUT[onnx_op]
    attrs = {"keepdims": keepdims}
    if noop is not None:
        attrs["noop_with_empty_axes"] = noop
    inits = {"p": np.zeros(SHAPE[1:], np.float32)}
    ins = ["a"]
    if axes is not None:
        if opset >= AXES_INPUT[onnx_op]:
            inits["ax"] = np.array(axes, np.int64)
            ins.append("ax")
        else:
            attrs["axes"] = list(axes)
    nodes = [helper.make_node("Add", ["x", "p"], ["a"]), helper.make_node(onnx_op, ins, ["r"], **attrs),
             helper.make_node("Mul", ["r", "q"], ["y"])]
    if op == "ReduceLogSum":  # of exp(x + p): positive sums, for verify's random inputs too
        nodes[1].input[0] = "e"
        nodes.insert(1, helper.make_node("Exp", ["a"], ["e"]))
    rs = out_shape
    if rs is None:
        ax = range(len(SHAPE)) if not axes else [a % len(SHAPE) for a in axes]
        rs = tuple(1 if k in ax else n for k, n in enumerate(SHAPE)) if keepdims else \
            tuple(n for k, n in enumerate(SHAPE) if k not in ax)
    inits["q"] = np.ones(rs[1:] if rs else (), np.float32)
    return onnx_model(nodes, [("x", SHAPE)], [("y", rs)], inits, opset=opset)


CASES = [((1,), 1), ((-1,), 0), ((1, 2), 1), ((2,), 0)]


@pytest.mark.parametrize("axes,keep", CASES)
@pytest.mark.parametrize("op", ALL)
def test_gradients_and_verify(tmp_path, op, axes, keep):
    p = save(tmp_path, _model(op, axes, keep))
    g = load_model(p)
    r = next(o for o in g.operations if o.type == op)
    assert r.attrs["axes"] == tuple(sorted(a % 3 for a in axes)) and r.attrs["keep_dims"] == bool(keep)
    # distinct values: no ties for Max / Min; none zero (L1's sign); positive sums (LogSum)
    x = (1 + np.random.default_rng(7).permutation(np.prod(SHAPE)).reshape(SHAPE)) / 10.0
    if op != "ReduceLogSum":
        x[0, 1] *= -1  # negative elements too (L1's sign, L2, SumSquare)
    assert check_gradients(p, feeds={"x": x}) >= 12
    check_verify(p, "-b", "2")


@pytest.mark.parametrize("op", ALL)
def test_axes_as_attribute_before_the_opset_that_made_them_an_input(tmp_path, op):
    old = AXES_INPUT[ONNX_TYPE[op]] - 1
    g = load_model(save(tmp_path, _model(op, (1,), 1, opset=old)))
    r = next(o for o in g.operations if o.type == op)
    assert r.attrs["axes"] == (1,) and len(r.inputs) == 1
    g = load_model(save(tmp_path, _model(op, (1,), 1), "new.onnx"))
    r = next(o for o in g.operations if o.type == op)
    assert r.attrs["axes"] == (1,) and len(r.inputs) == 2  # the axes operand stays, without a gradient


@pytest.mark.parametrize("op", ALL)
def test_no_axes_reduces_everything_unless_noop(tmp_path, op):
    p = save(tmp_path, _model(op, None, 0, out_shape=()))
    r = next(o for o in load_model(p).operations if o.type == op)
    assert "axes" not in r.attrs and not r.attrs.get("noop")
    assert check_gradients(p) >= 12
    p = save(tmp_path, _model(op, None, 1, noop=1, out_shape=SHAPE), "noop.onnx")
    r = next(o for o in load_model(p).operations if o.type == op)
    assert r.attrs["noop"]
    assert check_gradients(p) >= 12
    check_verify(p, "-b", "2")


KEPT = {"Mean": [], "ReduceSum": [], "ReduceMax": ["a", "r"], "ReduceMin": ["a", "r"], "ReduceProd": ["a"],
        "ReduceL1": ["a"], "ReduceL2": ["a", "r"], "ReduceSumSquare": ["a"], "ReduceLogSum": ["r"],
        "ReduceLogSumExp": ["a", "r"]}


@pytest.mark.parametrize("op", ALL)
def test_what_backward_keeps(tmp_path, op):
    tg = training_graph(save(tmp_path, _model(op, (1,), 1), f"{op}.onnx"))
    k = next(o.index for o in tg.graph.operations if o.type == op)
    assert sorted(tg.graph.operands[i].name for i in tg.rules[k].kept_forward()) == sorted(KEPT[op] + ["ax"])


@pytest.mark.parametrize("op", ALL)
def test_noop_is_the_elementwise_step(tmp_path, op):
    """noop_with_empty_axes with no axes: the identity, or |x|, x², log x (ONNX's reference); a noop that
    is the identity keeps nothing for its backward."""
    from tests.ops.gradcheck import run_forward

    p = save(tmp_path, _model(op, None, 1, noop=1, out_shape=SHAPE))
    g = load_model(p)
    r = next(o for o in g.operations if o.type == op)
    x = np.random.default_rng(2).uniform(0.5, 1.5, SHAPE) * np.where(np.arange(4) % 2, 1, -1)
    want = {"ReduceL1": np.abs, "ReduceL2": np.abs, "ReduceSumSquare": np.square}.get(op, lambda v: v)(x)
    if op == "ReduceLogSum":
        x = np.abs(x)
        want = np.log(x)
    np.testing.assert_allclose(run_forward(r, [x], [SHAPE])[0], want)
    tg = training_graph(p)
    kept = [tg.graph.operands[i].name for i in tg.rules[r.index].kept_forward()]
    identity = op in ("Mean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceLogSumExp")
    assert sorted(kept) == ([] if identity else sorted(KEPT[op]))


def test_max_splits_ties_evenly(tmp_path):
    p = save(tmp_path, _model("ReduceMax", (2,), 1))
    x = np.zeros(SHAPE)
    x[..., 1] = x[..., 3] = 1.0  # two maxima per row
    from tests.execute.helpers import run_backward

    tg = training_graph(p)
    ids = {t.name: t.id for t in tg.tensors}
    mem = run_backward(tg, {ids["x"]: x, ids["p"]: np.zeros(SHAPE[1:])})
    da = np.asarray(mem.view(tg.bp[next(o.index for o in tg.graph.operands if o.name == "a")]))
    dr = np.asarray(mem.view(tg.bp[next(o.index for o in tg.graph.operands if o.name == "r")]))
    np.testing.assert_allclose(da[..., 1], dr[..., 0] / 2)
    np.testing.assert_allclose(da[..., 0], 0)


def test_global_average_pool(tmp_path):
    nodes = [helper.make_node("Add", ["x", "p"], ["a"]), helper.make_node("GlobalAveragePool", ["a"], ["g"]),
             helper.make_node("Mul", ["g", "q"], ["y"])]
    inits = {"p": np.zeros((3, 4, 5), np.float32), "q": np.ones((3, 1, 1), np.float32)}
    p = save(tmp_path, onnx_model(nodes, [("x", (2, 3, 4, 5))], [("y", (2, 3, 1, 1))], inits))
    r = next(o for o in load_model(p).operations if o.type == "Mean")
    assert r.attrs["axes"] == (2, 3) and r.attrs["keep_dims"]
    assert check_gradients(p) >= 12
    check_verify(p, "-b", "2")


def test_run_time_axes_are_refused(tmp_path):
    nodes = [helper.make_node("Add", ["x", "p"], ["a"]), helper.make_node("ReduceSum", ["a", "ax"], ["y"])]
    m = onnx_model(nodes, [("x", SHAPE), ("ax", (1,), TensorProto.INT64)], [("y", (2, 1, 4))],
                   {"p": np.zeros(SHAPE[1:], np.float32)})
    with pytest.raises(ModelError):  # ONNX shape inference stops this one first
        load_model(save(tmp_path, m))
    # when shapes are known but the axes are not (values() is None), the converter marks it and the
    # contract refuses it
    from memplan_cli.opgraph.contract import problems
    from memplan_cli.ir.graph import Operand, Operation
    from memplan_cli.ops.base import OnnxNode

    operands = [Operand(0, "a", SHAPE), Operand(1, "ax", (1,), "int64"), Operand(2, "y", (2, 1, 4))]
    c = ops.onnx_converter("ReduceSum")(OnnxNode("ReduceSum", "", "r", {}, [0, 1], [2], operands, 13))
    assert c.attrs["axes_unknown"]
    assert "axes computed at run time" in problems(Operation(0, "ReduceSum", [0, 1], [2], c.attrs), operands)
    c = ops.onnx_converter("ReduceSum")(OnnxNode("ReduceSum", "", "r", {}, [0, 1], [2], operands, 13,
                                                 lambda k: (1,)))
    assert c.attrs["axes"] == (1,) and problems(Operation(0, "ReduceSum", [0, 1], [2], c.attrs), operands) is None


def test_prod_gradient_with_zeros(tmp_path):
    """prod_backward: the product of the other elements, also where the group holds a zero (or two)."""
    p = save(tmp_path, _model("ReduceProd", (2,), 1))
    x = np.random.default_rng(3).uniform(0.5, 1.5, SHAPE)
    x[0, 0, 1] = 0.0
    x[1, 2, 0] = x[1, 2, 3] = 0.0
    assert check_gradients(p, feeds={"x": x}) >= 12
    tg = training_graph(p)
    k = next(o.index for o in tg.graph.operations if o.type == "ReduceProd")
    assert sorted(tg.graph.operands[i].name for i in tg.rules[k].kept_forward()) == ["a", "ax"]


@pytest.mark.parametrize("code,op", [(40, "Mean"), (74, "ReduceSum"), (82, "ReduceMax"), (89, "ReduceMin"),
                                     (81, "ReduceProd")])
def test_tflite_reducers(tmp_path, code, op):
    from circle_schema.v0_10.circle.BuiltinOptions import BuiltinOptions
    from circle_schema.v0_10.circle.ReducerOptions import ReducerOptionsT

    m = ModelBuilder(seed=6)
    x = m.input([2, 3, 4])
    h = m.add(x, m.const([4], value=np.linspace(-1, 1, 4, dtype=np.float32)))
    o = ReducerOptionsT()
    o.keepDims = False
    ax = m.const([1], "int32", np.array([-1], np.int32))
    r = m._op(code, [h, ax], [2, 3], BuiltinOptions.ReducerOptions, o)
    m.output(m.fully_connected(r, 2))
    p = m.save(str(tmp_path / "m.tflite"))
    g = load_model(p)
    red = next(o for o in g.operations if o.source_type == {40: "MEAN", 74: "SUM", 82: "REDUCE_MAX",
                                                              89: "REDUCE_MIN", 81: "REDUCE_PROD"}[code])
    assert red.type == op and red.attrs["axes"] == (2,) and not red.attrs["keep_dims"]
    assert check_gradients(p) >= 8
    check_verify(p, "-b", "2")


def test_flops():
    from memplan_cli.ir.graph import Operand, Operation

    operands = [Operand(0, "x", (2, 3, 4)), Operand(1, "y", (2, 1, 4))]
    op = lambda t: Operation(0, t, [0], [1], {"axes": (1,), "keep_dims": True})
    assert ops.get("Mean").flops(op("Mean"), operands) == (24 + 8, 24)
    assert ops.get("ReduceSum").flops(op("ReduceSum"), operands) == (24, 0)
    assert ops.get("ReduceMax").flops(op("ReduceMax"), operands) == (24, 48)
    assert ops.get("ReduceProd").flops(op("ReduceProd"), operands) == (24, 72)
    assert ops.get("ReduceL2").flops(op("ReduceL2"), operands) == (48 + 8, 48)
    assert ops.get("ReduceL1").flops(op("ReduceL1"), operands) == (48, 48)
    assert ops.get("ReduceSumSquare").flops(op("ReduceSumSquare"), operands) == (48, 48)
    assert ops.get("ReduceLogSum").flops(op("ReduceLogSum"), operands) == (24 + 8, 24)
    assert ops.get("ReduceLogSumExp").flops(op("ReduceLogSumExp"), operands) == (96 + 16, 72)
    noop = Operation(0, "ReduceLogSumExp", [0], [1], {"noop": True})
    assert ops.get("ReduceLogSumExp").flops(noop, operands) == (0, 0)


def _batch1_mean(tmp_path, axes=(0, 2)):
    """x [1, 6, 8] -> Add(p) -> MEAN(axes) -> Reshape [1, 6, 1] -> Sub from the input -> FC: litert-torch's
    LayerNorm mean at batch 1 (axes (0, 2): dim 0 of size 1 reduced with the channels)."""
    from devtools.modelgen import ModelBuilder

    m = ModelBuilder(seed=7)
    a = m.add(m.input([1, 6, 8]), m.const([1, 6, 8]))
    c = m.sub(a, m.reshape(m.mean(a, list(axes)), [1, 6, 1]))
    m.output(m.fully_connected(m.reshape(c, [1, 48]), 4))
    return m.save(str(tmp_path / "mean.tflite"))


def test_batch1_reduction_over_dim0_with_kept_axes_is_not_rebatched(tmp_path):
    from click.testing import CliRunner

    from memplan_cli.cli import main

    p = _batch1_mean(tmp_path)
    check_verify(p)  # at the file's own batch it is what it is
    r = CliRunner().invoke(main, ["analyze", p, "-b", "4"], env={"NO_COLOR": "1"})
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "op #1 Mean reduces over axes (0, 2) of an input whose dim 0 is 1" in r.stderr and "Traceback" not in r.output


# ---- the onnx package's backend test cases (onnx/backend/test/case/node: the node tests' models) --------
_CASE_MODULES = ("reducemean", "reducesum", "reducemax", "reducemin", "reduceprod", "reducel1", "reducel2",
                 "reducesumsquare", "reduce_log_sum", "reduce_log_sum_exp", "argmax", "argmin")


def _backend_cases():
    """The onnx package's node test cases of the reductions and ArgMax / ArgMin (made by importing
    their case modules; the package does not ship the node tests' files); `_expanded`: the reduction
    written out as its ONNX function body."""
    import importlib
    import warnings

    import onnx.backend.test.case.node as cases

    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for m in _CASE_MODULES:
            importlib.import_module(f"onnx.backend.test.case.node.{m}")
    return [c for c in cases._NodeTestCases if c.name.startswith(("test_reduce_", "test_arg"))]


BACKEND = {c.name: c for c in _backend_cases()}


def _bound(case):
    """The case's model with its axes input bound to the case's own axes (an initializer: shapes known
    at load) and a trained parameter added to its data (so that the reduction's backward runs); the
    data of ReduceLogSum goes through Exp first (its log needs a positive sum on verify's inputs too)."""
    import onnx

    m = onnx.ModelProto()
    m.CopyFrom(case.model)
    g = m.graph
    feeds = dict(zip([i.name for i in g.input], case.data_sets[0][0]))
    data_name = g.input[0].name
    data = feeds[data_name]
    for i in list(g.input[1:]):
        g.initializer.append(numpy_helper.from_array(feeds[i.name], i.name))
        g.input.remove(i)
    g.initializer.append(numpy_helper.from_array(np.zeros(data.shape, data.dtype), "p"))
    pre = [helper.make_node("Add", [data_name, "p"], ["trained"])]
    if "log_sum" in case.name and "log_sum_exp" not in case.name:
        pre.append(helper.make_node("Exp", ["trained"], ["positive"]))
    for n in g.node:
        n.input[:] = [pre[-1].output[0] if i == data_name else i for i in n.input]
    for k, n in enumerate(pre):
        g.node.insert(k, n)
    return m


FLOAT_CASES = sorted(n for n, c in BACKEND.items() if n.startswith("test_reduce_")
                     and c.data_sets[0][0][0].dtype.kind == "f" and c.data_sets[0][0][0].size)


@pytest.mark.parametrize("name", FLOAT_CASES)
def test_backend_cases_forward_gradients_and_verify(tmp_path, name):
    """Each float case, its axes bound and a parameter added: the forward kernel gives the case's
    expected output on the case's input, the gradients match finite differences, verify passes."""
    from tests.ops.gradcheck import run_forward

    case = BACKEND[name]
    m = _bound(case)
    p = save(tmp_path, m)
    if not name.endswith("_expanded"):
        g = load_model(p)
        op = next(o for o in g.operations if o.source_type.startswith("Reduce"))
        want = case.data_sets[0][1][0]
        # the kernel on the case's own input (the bound model's Add and Exp are not the op's)
        got = run_forward(op, [case.data_sets[0][0][0].astype(np.float64)], [g.operands[op.outputs[0]].shape])[0]
        np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-5, atol=1e-6)
    if "_example" in name:  # the same graph as its `_random` twin: the forward check is what differs
        return
    assert check_gradients(p) >= 4
    check_verify(p, "-O", "sgd")


@pytest.mark.parametrize("name", sorted(BACKEND))
def test_backend_cases_as_shipped(tmp_path, name):
    """As the package writes them (axes a graph input, whose values a file does not hold): analysed and
    verified (ArgMax / ArgMin, ReduceMax / Min / Prod over all axes: no axes input, and nothing trains),
    or refused in one line naming the file (an output shape that needs the axes' values, an empty
    tensor)."""
    from click.testing import CliRunner

    from memplan_cli.cli import main

    p = save(tmp_path, BACKEND[name].model, f"{name}.onnx")
    r = CliRunner().invoke(main, ["analyze", p, "-q"], env={"NO_COLOR": "1"})
    if r.exit_code == 0:
        check_verify(p)
        return
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1, r.output
    assert f"{name}.onnx" in r.stderr and "Traceback" not in r.output
    assert "has a shape computed from the data (the values of input 'axes')" in r.stderr \
        or "has a zero dimension" in r.stderr, r.stderr
