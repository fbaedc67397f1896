"""Tensors of dtypes the NumPy reference run cannot execute: `verify` says so in one line, exit 2 (it
was an internal error, exit 70, for bfloat16, string and bool tensors that `analyze` accepts; bfloat16
now runs, as ml_dtypes' type).
Hypothesis over every ONNX dtype in a few small graphs: inspect / analyze / verify never exit 70."""
from __future__ import annotations

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto as T
from onnx import helper as h

from memplan_cli.cli import main
from tests.loaders import onnxmodels as om

vi = h.make_tensor_value_info


def run(args):
    r = CliRunner().invoke(main, args, catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


def _w(dtype, shape=(4, 3)):
    n = shape[0] * shape[1]
    vals = [b"a"] * n if dtype == T.STRING else [0] * n
    return h.make_tensor("W", dtype, list(shape), vals)


def matmul_relu(dtype):
    return om.model([h.make_node("MatMul", ["x", "W"], ["m"]), h.make_node("Relu", ["m"], ["y"])],
                    [vi("x", dtype, [2, 4])], [vi("y", dtype, [2, 3])], [_w(dtype)])


def through_cast(dtype):
    # float in and out, the middle tensor in `dtype`
    return om.model([h.make_node("Cast", ["x"], ["c"], to=dtype), h.make_node("Cast", ["c"], ["f"], to=T.FLOAT),
                     h.make_node("MatMul", ["f", "W"], ["y"])],
                    [vi("x", T.FLOAT, [2, 4])], [vi("y", T.FLOAT, [2, 3])], [_w(T.FLOAT)])


def output_of(dtype):
    # the model's output (where the loss goes) in `dtype`
    return om.model([h.make_node("MatMul", ["x", "W"], ["m"]), h.make_node("Cast", ["m"], ["y"], to=dtype)],
                    [vi("x", T.FLOAT, [2, 4])], [vi("y", dtype, [2, 3])], [_w(T.FLOAT)])


def relu_inside(dtype):
    # a Relu on a `dtype` tensor in the middle of a float model
    return om.model([h.make_node("Cast", ["x"], ["c"], to=dtype), h.make_node("Relu", ["c"], ["r"]),
                     h.make_node("Cast", ["r"], ["f"], to=T.FLOAT), h.make_node("MatMul", ["f", "W"], ["y"])],
                    [vi("x", T.FLOAT, [2, 4])], [vi("y", T.FLOAT, [2, 3])], [_w(T.FLOAT)])


def relu_of(dtype):
    return om.model([h.make_node("Relu", ["x"], ["y"])], [vi("x", dtype, [2, 4])], [vi("y", dtype, [2, 4])], [])


def assert_one_line(code, err, path):
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "internal error" not in err and path in lines[0], err


@pytest.mark.parametrize("build, dtype, words", [(relu_inside, T.BOOL, "bool")])
def test_verify_refuses_what_it_cannot_run_and_analyze_still_sizes_it(tmp_path, build, dtype, words):
    p = om.save(tmp_path, "m.onnx", build(dtype))
    assert run(["analyze", p])[0] == 0
    code, out, err = run(["verify", p])
    assert_one_line(code, err, p)
    assert words in err and "cannot" in err


@pytest.mark.parametrize("build", [matmul_relu, through_cast])
def test_bfloat16_tensors_run_in_ml_dtypes_bfloat16(tmp_path, build):
    # --precision made bfloat16 steps verifiable (execute/memory.py): a file's own bfloat16 tensors too
    p = om.save(tmp_path, "m.onnx", build(T.BFLOAT16))
    code, out, err = run(["verify", p])
    assert code == 0 and "PASS" in out, err


@pytest.mark.parametrize("build", [output_of, relu_of])
@pytest.mark.parametrize("dtype", [T.BOOL, T.INT64, T.UINT8])
def test_a_loss_on_an_int_or_bool_output_trains_nothing(tmp_path, build, dtype):
    # the loss sits on the only output, which carries no gradient: forward only (an int output as
    # an ArgMax's), and no op behind it runs backward (a Cast to bool was a KeyError, exit 70)
    from memplan_cli.loaders import load_model
    from memplan_cli.passes.pipeline import build_training_graph
    from memplan_cli.config import TrainConfig

    p = om.save(tmp_path, "m.onnx", build(dtype))
    assert not build_training_graph(load_model(p), TrainConfig()).backward_ops
    assert run(["analyze", p])[0] == 0
    code, out, err = run(["verify", p])
    assert code in (0, 2) and "internal error" not in err, err
    if code == 2:
        assert_one_line(code, err, p)


@pytest.mark.parametrize("build", [matmul_relu, through_cast, output_of])
def test_string_tensors_cannot_be_sized(tmp_path, build):
    # a string's bytes depend on its contents: no figure memplan could stand behind
    p = om.save(tmp_path, "m.onnx", build(T.STRING))
    for cmd in ("inspect", "analyze", "verify"):
        code, out, err = run([cmd, p])
        assert_one_line(code, err, p)
        assert "string" in err and "cannot size" in err


def test_bool_where_the_kernels_run_it_still_verifies(tmp_path):
    m = om.model([h.make_node("MatMul", ["x", "W"], ["m"]), h.make_node("Where", ["c", "m", "m"], ["y"])],
                 [vi("x", T.FLOAT, [2, 4])], [vi("y", T.FLOAT, [2, 3])],
                 [_w(T.FLOAT), h.make_tensor("c", T.BOOL, [2, 3], [1, 0, 1, 0, 1, 0])])
    code, out, err = run(["verify", om.save(tmp_path, "m.onnx", m)])
    assert code == 0 and "PASS" in out, err


DTYPES = [v for k, v in T.DataType.items() if k != "UNDEFINED"]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(dtype=st.sampled_from(DTYPES),
       build=st.sampled_from([matmul_relu, through_cast, output_of, relu_of, relu_inside]),
       cmd=st.sampled_from(["inspect", "analyze", "verify"]))
def test_any_onnx_dtype(tmp_path, dtype, build, cmd):
    try:
        m = build(dtype)
    except (ValueError, TypeError):  # onnx.helper cannot even build it (no values for this dtype)
        return
    p = om.save(tmp_path, "m.onnx", m)
    code, out, err = run([cmd, p])
    assert code in (0, 1, 2), err
    assert "internal error" not in err and "Traceback" not in err, err
    if code == 2:
        assert len(err.strip().splitlines()) == 1, err
