"""Bad inputs: each one gets exactly one line on stderr naming the file and the problem, exit 2, no traceback.

Driven through the real CLI (click's CliRunner) for `inspect` and `analyze`, plus a denser sweep of
truncations straight through `load_model` (the CLI adds nothing per file but the error line).
"""
from __future__ import annotations

import os
import re
import random

import numpy as np
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from memplan_cli.cli import main
from memplan_cli.errors import ModelError
from memplan_cli.loaders import load_model
from tests.loaders import fbmodels as fb
from tests.loaders import onnxmodels as om

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLES = os.path.join(ROOT, "sample_models")


def run(args):
    r = CliRunner().invoke(main, args, catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


def assert_one_line_error(path, *extra, match=None, commands=("inspect", "analyze")):
    for cmd in commands:
        code, out, err = run([cmd, str(path), *extra])
        lines = err.strip().splitlines()
        assert code == 2, (cmd, code, out, err)
        assert len(lines) == 1, err
        assert "Traceback" not in err + out
        assert str(path) in lines[0]
        if match:
            assert match in lines[0], lines[0]


# ---- the corpus: name -> function(tmp_path) -> (path, expected words) -----------------------
def _missing(tmp):
    return tmp / "nope.circle", "no such file"


def _directory(tmp):
    d = tmp / "a_dir.tflite"
    d.mkdir()
    return d, "directory"


def _empty(tmp):
    p = tmp / "empty.circle"
    p.write_bytes(b"")
    return p, "empty"


def _wrong_identifier(tmp):
    data = bytearray(fb.tiny_cnn("circle"))
    data[4:8] = b"XYZ0"
    p = tmp / "wrong_ident.circle"
    p.write_bytes(bytes(data))
    return p, "unrecognised"


def _random_bytes(tmp):
    p = tmp / "random.bin"
    p.write_bytes(b"\x01" + random.Random(7).randbytes(4095))
    return p, "unrecognised"


def _random_after_onnx_tag(tmp):
    p = tmp / "random.onnx"
    p.write_bytes(b"\x08\x07" + random.Random(8).randbytes(4094))
    return p, "onnx"


def _protobuf_not_a_model(tmp):
    # a serialized TensorProto: starts with field 1 varint like a ModelProto, but has no graph
    t = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "t")
    p = tmp / "tensor.onnx"
    p.write_bytes(t.SerializeToString())
    return p, "not an ONNX model"


def _onnx_input_without_shape(tmp):
    m = om.tiny_cnn()
    m.graph.input[0].type.tensor_type.ClearField("shape")
    return om.save(tmp, "noshape.onnx", m), "has no shape"


def _onnx_uninferable_op(tmp):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    m = om.model([helper.make_node("Mystery", ["x"], ["y"], domain="com.example")], [x], [y], [])
    m.opset_import.append(helper.make_opsetid("com.example", 1))
    return om.save(tmp, "mystery.onnx", m), "op Mystery (domain com.example, not a standard ONNX op) has no rule in memplan"


def _onnx_symbolic_batch(tmp):
    m = om.tiny_cnn()
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    return om.save(tmp, "symbolic.onnx", m), "--batch-size"


def _onnx_symbolic_height(tmp):
    m = om.tiny_cnn()
    m.graph.input[0].type.tensor_type.shape.dim[2].dim_param = "H"
    return om.save(tmp, "symbolic_h.onnx", m), "symbolic dimension 'H'"


def _onnx_zero_dim(tmp):
    m = om.tiny_cnn()
    m.graph.input[0].type.tensor_type.shape.dim[1].dim_value = 0
    return om.save(tmp, "zero.onnx", m), "zero dimension"


def _onnx_negative_dim(tmp):
    m = om.tiny_cnn()
    m.graph.input[0].type.tensor_type.shape.dim[1].dim_value = -3
    return om.save(tmp, "negative.onnx", m), "negative dimension"


def _fb(tmp, name, tensors, ops, inputs, outputs, fmt="circle"):
    p = tmp / name
    p.write_bytes(fb.build(tensors, ops, inputs, outputs, fmt))
    return p


def _circle_zero_dim(tmp):
    t = [fb.tensor("x", [1, 0, 4]), fb.tensor("y", [1, 0, 4])]
    return _fb(tmp, "zero.circle", t, [fb.op(fb.OPS.RELU, [0], [1])], [0], [1]), "zero dimension"


def _tflite_negative_dim(tmp):
    t = [fb.tensor("x", [1, -1, 4]), fb.tensor("y", [1, 4])]
    return _fb(tmp, "neg.tflite", t, [fb.op(fb.OPS.RELU, [0], [1])], [0], [1], "tflite"), "negative dimension"


def _tensor_index_out_of_range(tmp):
    t = [fb.tensor("x", [1, 4]), fb.tensor("y", [1, 4])]
    return _fb(tmp, "tidx.circle", t, [fb.op(fb.OPS.RELU, [0], [9])], [0], [1]), "operand 9"


def _graph_output_out_of_range(tmp):
    t = [fb.tensor("x", [1, 4]), fb.tensor("y", [1, 4])]
    return _fb(tmp, "gout.circle", t, [fb.op(fb.OPS.RELU, [0], [1])], [0], [5]), "out of range"


def _opcode_index_out_of_range(tmp):
    data = bytearray(fb.tiny_cnn("circle"))
    from circle_schema.v0_10.circle.Model import Model, ModelT

    m = ModelT.InitFromObj(Model.GetRootAs(bytes(data), 0))
    m.subgraphs[0].operators[1].opcodeIndex = 40
    import flatbuffers

    b = flatbuffers.Builder(1024)
    b.Finish(m.Pack(b), file_identifier=b"CIR0")
    p = tmp / "opcode.circle"
    p.write_bytes(bytes(b.Output()))
    return p, "operator code 40"


def _buffer_index_out_of_range(tmp):
    from circle_schema.v0_10.circle.Model import Model, ModelT
    import flatbuffers

    m = ModelT.InitFromObj(Model.GetRootAs(fb.tiny_cnn("circle"), 0))
    m.subgraphs[0].tensors[1].buffer = 500
    b = flatbuffers.Builder(1024)
    b.Finish(m.Pack(b), file_identifier=b"CIR0")
    p = tmp / "buffer.circle"
    p.write_bytes(bytes(b.Output()))
    return p, "buffer 500"


def _cycle(tmp):
    t = [fb.tensor("x", [1, 4]), fb.tensor("a", [1, 4]), fb.tensor("b", [1, 4])]
    ops = [fb.op(fb.OPS.ADD, [0, 2], [1]), fb.op(fb.OPS.RELU, [1], [2])]
    return _fb(tmp, "cycle.circle", t, ops, [0], [2]), "cycle"


def _no_subgraph(tmp):
    from circle_schema.v0_10.circle.Model import ModelT
    import flatbuffers

    m = ModelT()
    m.version = 3
    b = flatbuffers.Builder(64)
    b.Finish(m.Pack(b), file_identifier=b"TFL3")
    p = tmp / "nosub.tflite"
    p.write_bytes(bytes(b.Output()))
    return p, "no subgraph"


def _tiny_file(tmp):
    p = tmp / "short.circle"
    p.write_bytes(b"\x0c\x00\x00\x00CIR0")
    return p, "truncated"


def _byte_size_overflows(tmp):
    m = 2**31 - 1
    t = [fb.tensor("x", [m, m, m, m]), fb.tensor("y", [m, m, m, m])]
    return _fb(tmp, "overflow.circle", t, [fb.op(fb.OPS.RELU, [0], [1])], [0], [1]), "bytes, over the"


CORPUS = [_missing, _directory, _empty, _wrong_identifier, _random_bytes, _random_after_onnx_tag,
          _protobuf_not_a_model, _onnx_input_without_shape, _onnx_uninferable_op,
          _onnx_symbolic_height, _onnx_zero_dim, _onnx_negative_dim, _circle_zero_dim, _tflite_negative_dim,
          _tensor_index_out_of_range, _graph_output_out_of_range, _opcode_index_out_of_range,
          _buffer_index_out_of_range, _cycle, _no_subgraph, _tiny_file, _byte_size_overflows]


@pytest.mark.parametrize("case", CORPUS, ids=[c.__name__.strip("_") for c in CORPUS])
def test_bad_input_is_one_line_exit_2(tmp_path, case):
    path, words = case(tmp_path)
    assert_one_line_error(path, match=words)


def test_a_symbolic_batch_is_refused_by_analyze_and_shown_by_inspect(tmp_path):
    path, words = _onnx_symbolic_batch(tmp_path)
    assert_one_line_error(path, match=words, commands=("analyze", "verify"))
    code, out, err = run(["inspect", str(path)])
    assert code == 0 and "batch (symbolic: batch): shapes shown at batch 1" in out, err
    code, out, err = run(["inspect", str(path), "-b", "1"])  # its Reshape fixes batch 1 inside the graph
    assert code == 0 and "batch size 1 (symbolic: batch)" in out and "the file has" not in out, err


def test_bad_input_with_a_batch_size_too(tmp_path):
    path, _ = _cycle(tmp_path)
    assert_one_line_error(path, "--batch-size", "4", match="cycle")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a chmod 000 file anyway")
def test_unreadable_file(tmp_path):
    p = tmp_path / "locked.circle"
    p.write_bytes(fb.tiny_cnn("circle"))
    p.chmod(0)
    assert_one_line_error(p, match="cannot read")


# ---- truncations --------------------------------------------------------------------------
def _truncations(data: bytes, count: int, seed: int):
    rng = random.Random(seed)
    n = len(data)
    offsets = set(range(0, min(n, 64))) | {n - k for k in range(1, 33)} | {rng.randrange(1, n) for _ in range(count)}
    return sorted(o for o in offsets if 0 <= o < n)


@pytest.mark.parametrize("fmt", ["circle", "tflite"])
def test_flatbuffer_truncated_anywhere_is_a_model_error(tmp_path, fmt):
    data = fb.tiny_cnn(fmt)
    p = tmp_path / f"cut.{fmt}"
    for cut in _truncations(data, 300, seed=1):
        p.write_bytes(data[:cut])
        with pytest.raises(ModelError) as e:
            load_model(str(p))
        assert str(p) in str(e.value), cut


def test_onnx_truncated_anywhere_is_a_model_error(tmp_path):
    data = om.tiny_cnn().SerializeToString()
    p = tmp_path / "cut.onnx"
    for cut in _truncations(data, 300, seed=2):
        p.write_bytes(data[:cut])
        try:
            load_model(str(p))
        except ModelError as e:
            assert str(p) in str(e)
        else:  # a protobuf cut exactly between two fields is still well-formed: then it must be a full model
            pytest.fail(f"a cut at {cut} of {len(data)} bytes loaded")


@pytest.mark.parametrize("name", ["mnist.circle", "mnist.tflite", "mnist.onnx"])
def test_truncated_samples_through_the_cli(tmp_path, name):
    src = os.path.join(SAMPLES, name)
    if not os.path.exists(src):
        pytest.skip("sample not generated")
    data = open(src, "rb").read()
    p = tmp_path / name
    for cut in (9, 100, len(data) // 3, len(data) // 2, len(data) - 1):
        p.write_bytes(data[:cut])
        assert_one_line_error(p, commands=("inspect",))


@pytest.mark.parametrize("case", [_empty, _cycle, _onnx_symbolic_batch, _wrong_identifier],
                         ids=lambda c: c.__name__.strip("_"))
def test_nothing_is_written_to_output_on_bad_input(tmp_path, case):
    path, words = case(tmp_path)
    out = tmp_path / "report.json"
    code, _, err = run(["analyze", str(path), "-o", str(out), "--format", "json"])
    assert code == 2 and words in err and len(err.strip().splitlines()) == 1
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("report")) == []


# ---- problems found while training a model that loads: named with the file, exit 2 ------------------
def _fc_rfft_fc(tmp):
    """x -> FullyConnected -> RFFT2D (no backward rule, no onert kernel) -> FullyConnected -> y."""
    from circle_schema.v0_10.circle.BuiltinOptions import BuiltinOptions as BO

    t = [fb.tensor("x", [1, 4]), fb.tensor("w1", [4, 4], data="fill"), fb.tensor("h", [1, 4]),
         fb.tensor("e", [1, 4]), fb.tensor("w2", [3, 4], data="fill"), fb.tensor("y", [1, 3])]
    fc = lambda i, w, o: fb.op(fb.OPS.FULLY_CONNECTED, [i, w, -1], [o], fb.fc_opts(), BO.FullyConnectedOptions)
    ops = [fc(0, 1, 2), fb.op(fb.OPS.RFFT2D, [2], [3]), fc(3, 4, 5)]
    return _fb(tmp, "fc_rfft_fc.circle", t, ops, [0], [5])


def test_op_without_backward_rule_inside_the_backward_region(tmp_path):
    p = _fc_rfft_fc(tmp_path)
    assert_one_line_error(p, commands=("analyze",), match="op #1 RFFT2D is inside the backward region")
    assert_one_line_error(p, "--profile", "onert", commands=("analyze",), match="onert cannot train op #1 RFFT2D")
    # training only the last op keeps RFFT2D out of the backward region: then it is fine
    code, out, err = run(["analyze", str(p), "--trainable-ops", "1", "-q"])
    assert code == 0 and "planned" in out, err


def test_the_trainable_ops_advice_is_accepted_as_given(tmp_path):
    """Two ops without a backward rule: the advice skips past both (the first one's bound alone, -t 3,
    would be refused again for the second), and the N it names is accepted."""
    from circle_schema.v0_10.circle.BuiltinOptions import BuiltinOptions as BO

    t = [fb.tensor("x", [1, 4]), fb.tensor("w1", [4, 4], data="fill"), fb.tensor("h", [1, 4]),
         fb.tensor("e", [1, 4]), fb.tensor("w2", [4, 4], data="fill"), fb.tensor("h2", [1, 4]),
         fb.tensor("e2", [1, 4]), fb.tensor("w3", [3, 4], data="fill"), fb.tensor("y", [1, 3])]
    fc = lambda i, w, o: fb.op(fb.OPS.FULLY_CONNECTED, [i, w, -1], [o], fb.fc_opts(), BO.FullyConnectedOptions)
    ops = [fc(0, 1, 2), fb.op(fb.OPS.RFFT2D, [2], [3]), fc(3, 4, 5), fb.op(fb.OPS.RFFT2D, [5], [6]), fc(6, 7, 8)]
    p = _fb(tmp_path, "two_rfft.circle", t, ops, [0], [8])
    for command in ("analyze", "verify", "sweep"):
        extra = []
        code, _, err = run([command, str(p), *extra])
        assert code == 2 and "op #1 RFFT2D is inside the backward region" in err, err
        n = re.search(r"--trainable-ops (\d+), the last \1 ops, is accepted", err)
        assert n, err
        code, out, err = run([command, str(p), "--trainable-ops", n.group(1), *extra])
        assert code == 0, err
    code, _, err = run(["analyze", str(p), "--trainable-ops", "3"])  # the first op's bound alone
    assert code == 2 and "op #3 RFFT2D" in err


@pytest.mark.parametrize("flags,words", [
    (["--trainable-ops", "50"], "more than the model's 10 ops"),
    (["--trainable-ops", "3,99"], "op index 99 is out of range"),
])
def test_trainable_ops_out_of_range_names_the_model(flags, words):
    assert_one_line_error(os.path.join(SAMPLES, "mnist.circle"), *flags, commands=("analyze",), match=words)


def test_negative_trainable_count_is_a_usage_error():
    code, _, err = run(["analyze", os.path.join(SAMPLES, "mnist.circle"), "--trainable-ops", "-2"])
    assert code == 2 and "N must be >= 0" in err and len(err.strip().splitlines()) == 1


def test_over_onerts_32_bit_limit(tmp_path):
    """64 GiB of activations: memplan plans it; onert's 32-bit capacity cannot hold it."""
    t = [fb.tensor("x", [1, 65536, 65536, 4]), fb.tensor("y", [1, 65536, 65536, 4])]
    p = _fb(tmp_path, "big.circle", t, [fb.op(fb.OPS.RELU, [0], [1])], [0], [1])
    assert_one_line_error(p, "--profile", "onert", commands=("analyze",), match="over onert's 32-bit allocation limit")
    code, out, err = run(["analyze", str(p), "--format", "json"])
    assert code == 0, err
    import json

    doc = json.loads(out)
    assert doc["totals"]["planned"] >= 2 * 65536 * 65536 * 4 * 4
    assert doc["onert"]["available"] is False and "32-bit" in doc["onert"]["reason"]


@pytest.mark.parametrize("args,words", [
    (["analyze", "{mnist}", "--profile", "onert", "--planner", "greedy"], "onert has no planner 'greedy'"),
    (["sweep", "{mnist}", "--budget", "lots"], "--budget"),
    (["sweep", "{mnist}", "--budget", "5.5"], "not a whole number of bytes"),
    (["analyze", "{mnist}", "-q", "-v"], "-q/--quiet and -v/--verbose together"),
    (["analyze", "{mnist}", "--no-such-flag"], "No such option '--no-such-flag'"),
    (["analyze", "{mnist}", "-O", "adagrad"], "'adagrad' is not one of"),
    (["nosuchcommand"], "No such command 'nosuchcommand'"),
])
def test_conflicting_or_malformed_flags_are_one_line(args, words):
    args = [a.format(mnist=os.path.join(SAMPLES, "mnist.circle")) for a in args]
    code, out, err = run(args)
    assert code == 2 and words in err and len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in out + err
