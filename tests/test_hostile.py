"""Hostile input, second round: each test is one class of input that ended in exit 70, a crash of
the process, a hang, an out-of-memory kill or a second stderr line before, and is one line with
exit 2 (or a report) now. Built small in tmp_path; the ones that need a real process (stderr as the
terminal sees it, a memory limit, a closed stdout) run `python -m memplan_cli`."""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys

import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto as T
from onnx import helper as h

from memplan_cli.cli import main
from tests.loaders import onnxmodels as om

vi = h.make_tensor_value_info
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(args):
    r = CliRunner().invoke(main, args, catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


def one_error(code, err, path):
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and path in err, err
    assert "internal error" not in err and "Traceback" not in err, err


def memplan(args, **kw):
    return subprocess.run([sys.executable, "-m", "memplan_cli", *args], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, **kw)


# ---- models ------------------------------------------------------------------------------------
def test_an_abort_inside_onnx_shape_inference_is_one_line(tmp_path):
    # a Split with three outputs and num_outputs=2: onnx's C++ inference failed an assertion and
    # aborted the whole process (SIGABRT, exit 134, the assertion text on stderr)
    m = om.model([h.make_node("Split", ["x"], ["a", "b", "c"], axis=1, num_outputs=2)],
                 [vi("x", T.FLOAT, [2, 4])], [vi("a", T.FLOAT, None)], [], opset=18)
    p = om.save(tmp_path, "m.onnx", m)
    r = memplan(["analyze", p])
    one_error(r.returncode, r.stderr, p)


def test_a_crash_in_the_child_becomes_a_model_error():
    from memplan_cli.loaders import onnx_loader

    def boom(model):
        os.abort()

    with pytest.raises(onnx_loader._Bad, match="crashed \\(SIGABRT\\)"):
        onnx_loader._contained(boom, onnx.ModelProto(), "shape inference")
    with pytest.raises(RuntimeError, match="^no luck$"):
        onnx_loader._contained(lambda m: (_ for _ in ()).throw(ValueError("no luck\nsecond line")),
                               onnx.ModelProto(), "shape inference")


def _huge_rank(name, used):
    t = onnx.TensorProto(name=name, data_type=T.FLOAT)
    t.dims.extend([2**62] * 100_000)
    node = h.make_node("Add", ["x", name], ["y"]) if used else h.make_node("Relu", ["x"], ["y"])
    return om.model([node], [vi("x", T.FLOAT, [2, 4])], [vi("y", T.FLOAT, None)], [t])


@pytest.mark.parametrize("used", [True, False])
def test_a_tensor_of_100000_huge_dims_does_not_hang(tmp_path, used):
    # the product of its dims (a 6-million-bit integer, built one multiplication at a time) took minutes
    p = om.save(tmp_path, "m.onnx", _huge_rank("W", used))
    code, out, err = run(["analyze", p, "-q"])
    if used:
        one_error(code, err, p)
        assert "100,000 dimensions" in err
    else:
        assert code == 0, err


def test_a_flatbuffer_tensor_of_100000_dims_is_refused(tmp_path):
    from tests.loaders import fbmodels as fb
    from tests.loaders.fbmodels import OPS, op, tensor

    data = fb.build([tensor("x", [2**31 - 1] * 100_000), tensor("y", [2, 4])], [op(OPS.RELU, [0], [1])], [0], [1])
    p = fb.write(tmp_path, "m.circle", data)
    code, out, err = run(["inspect", p])
    one_error(code, err, p)


def test_a_graph_output_nothing_computes_is_refused(tmp_path):
    # a flipped byte in an operator's output index left the graph output without a producer: the
    # loss read it and the schedule check failed inside (exit 70)
    from tests.loaders import fbmodels as fb
    from tests.loaders.fbmodels import OPS, op, tensor

    data = fb.build([tensor("x", [2, 4]), tensor("y", [2, 4]), tensor("z", [2, 4])], [op(OPS.RELU, [0], [1])],
                    [0], [2])
    p = fb.write(tmp_path, "m.circle", data)
    for cmd in (["analyze"], ["verify"], ["inspect"]):
        code, out, err = run([*cmd, p])
        one_error(code, err, p)
        assert "graph output" in err


def test_a_fully_connected_weight_that_is_not_2d_is_refused(tmp_path):
    # a flipped byte made the weight a scalar: counting FLOPs indexed its shape (IndexError, exit 70)
    from tests.loaders import fbmodels as fb
    from tests.loaders.fbmodels import BO, OPS, op, tensor

    data = fb.build([tensor("x", [1, 4]), tensor("w", [], data=[1.0]), tensor("y", [1, 10])],
                    [op(OPS.FULLY_CONNECTED, [0, 1], [2], fb.fc_opts(), BO.FullyConnectedOptions)], [0], [2])
    p = fb.write(tmp_path, "m.circle", data)
    code, out, err = run(["analyze", p])
    one_error(code, err, p)
    assert "2-D" in err


@pytest.mark.parametrize("lr", [float("nan"), float("inf"), -1e30])
def test_training_metadata_with_a_learning_rate_no_flag_accepts_names_the_file(tmp_path, lr):
    # was "--learning-rate must be a finite number", about a flag nobody gave, without the file
    from devtools.traininfo_write import add_training_metadata
    from tests.loaders import fbmodels as fb

    p = fb.write(tmp_path, "m.circle", add_training_metadata(fb.tiny_cnn(), learning_rate=lr))
    code, out, err = run(["analyze", p])
    one_error(code, err, p)
    assert "CIRCLE_TRAINING learning rate" in err


def test_numpy_warnings_never_reach_stderr(tmp_path):
    # verify of the tiny CNN with its activations retyped int8: NumPy's "RuntimeWarning: invalid
    # value encountered in cast" and its source line came before the error, three lines on stderr
    import flatbuffers
    from circle_schema.v0_10.circle.Model import ModelT
    from circle_schema.v0_10.circle.TensorType import TensorType

    from tests.loaders import fbmodels as fb

    m = ModelT.InitFromPackedBuf(fb.tiny_cnn(), 0)
    for t in m.subgraphs[0].tensors:
        if t.buffer == 0:
            t.type = TensorType.INT8
    b = flatbuffers.Builder(1024)
    b.Finish(m.Pack(b), file_identifier=b"CIR0")
    p = fb.write(tmp_path, "m.circle", bytes(b.Output()))
    r = memplan(["verify", p])
    assert r.returncode in (0, 1, 2), r.stderr
    assert "Warning" not in r.stderr, r.stderr
    if r.returncode == 2:
        one_error(r.returncode, r.stderr, p)


def _needs_1gib():
    return om.model([h.make_node("Relu", ["x"], ["y"])], [vi("x", T.FLOAT, [2**28])], [vi("y", T.FLOAT, None)], [])


def test_verify_refuses_what_ulimit_v_does_not_leave(tmp_path):
    # the check counted the machine's memory only: under `ulimit -v` NumPy filled arrays for a
    # minute before a MemoryError
    p = om.save(tmp_path, "m.onnx", _needs_1gib())

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, resource.getrlimit(resource.RLIMIT_AS)[1]))

    r = memplan(["verify", p], preexec_fn=limit)
    one_error(r.returncode, r.stderr, p)
    assert "ulimit -v" in r.stderr


# ---- flags -------------------------------------------------------------------------------------
@pytest.mark.parametrize("spec, words", [
    ("9" * 5000, "at most 24 digits"),  # int() refused 4,300+ digits: exit 70
    ("1," + "9" * 5000, "expected all, none"),
    ("0-999999999", "more than 1,000,000 ops"),  # the range was built in memory: OOM-killed
    ("0-600000,700000-1200000", "more than 1,000,000 ops"),
    ("1,\u00b2", "expected all, none"),  # str.isdigit() takes a superscript two, int() does not
])
def test_trainable_ops_that_no_model_has_are_one_line(tmp_path, spec, words):
    p = om.save(tmp_path, "m.onnx", om.tiny_cnn())
    code, out, err = run(["analyze", p, "-t", spec])
    assert code == 2 and words in err and len(err.strip().splitlines()) == 1, err
    assert len(err) < 400, err  # the flag is quoted cut, not 5,000 digits


def test_trainable_ops_ranges_still_work(tmp_path):
    p = om.save(tmp_path, "m.onnx", om.tiny_cnn())
    a = run(["analyze", p, "-t", "3-5", "-f", "json"])
    b = run(["analyze", p, "-t", " 3 - 4 ,5", "-f", "json"])
    assert a[0] == 0 and a[1] == b[1]


def test_a_size_of_5000_digits_is_too_large(tmp_path):
    p = om.save(tmp_path, "m.onnx", om.tiny_cnn())
    code, out, err = run(["analyze", p, "--budget", "9" * 5000 + "MiB"])
    assert code == 2 and "too large" in err and len(err) < 400, err


# ---- output ------------------------------------------------------------------------------------
@pytest.mark.skipif(sys.platform != "linux", reason="a file name that is not UTF-8 needs a byte file system")
def test_a_file_name_that_is_not_utf8_is_written_escaped(tmp_path):
    # Python keeps the undecodable byte as a lone surrogate, which the UTF-8 encoder of the report
    # file refused: exit 70 for -o and --timeline
    p = os.path.join(str(tmp_path), os.fsdecode(b"bad\xff.onnx"))
    onnx.save(om.tiny_cnn(), p)
    out = os.path.join(str(tmp_path), os.fsdecode(b"out\xff.json"))
    svg = os.path.join(str(tmp_path), os.fsdecode(b"t\xff.svg"))
    code, _, err = run(["analyze", p, "-q", "-o", out, "--timeline", svg])
    assert code == 0, err
    assert "bad\\udcff.onnx" in open(out, encoding="utf-8").read()
    assert open(svg, encoding="utf-8").read().startswith("<")
    code, _, err = run(["analyze", p, "-f", "json", "-o", out])
    assert code == 0 and "bad\udcff.onnx" in json.dumps(json.load(open(out, encoding="utf-8"))["model"],
                                                         ensure_ascii=False)


def test_a_stdout_whose_encoding_lacks_the_table_characters_still_gets_the_report(tmp_path):
    # a UnicodeEncodeError is a ValueError: it was reported as "stdout is closed", exit 74
    p = om.save(tmp_path, "m.onnx", om.tiny_cnn())
    r = memplan(["analyze", p], env={**os.environ, "PYTHONIOENCODING": "ascii"})
    assert r.returncode == 0, r.stderr
    assert "planned" in r.stdout and r.stdout.isascii()

