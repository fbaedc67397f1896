"""Hostile models and flags, as a user downloading models for CI would meet them: every command ends
with exit 0, 1, 2 or 3 and, on 2, one line naming the problem; never an internal error (70), a
traceback, or a control character from the file on the terminal."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

from memplan_cli.cli import main
from tests.loaders import onnxmodels as om

vi = h.make_tensor_value_info


def run(args):
    r = CliRunner().invoke(main, args, catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


def _relu(shape, name="x"):
    return om.model([h.make_node("Relu", [name], ["y"])], [vi(name, T.FLOAT, list(shape))], [vi("y", T.FLOAT, None)], [])


def _const(name, values):
    return numpy_helper.from_array(np.array(values, np.int64), name)


def _init(dims):
    t = onnx.TensorProto()
    t.name, t.data_type = "W", T.FLOAT
    t.dims.extend(dims)
    return t


def _conv(**kw):
    return om.model([h.make_node("Conv", ["x", "W"], ["y"], **kw)], [vi("x", T.FLOAT, [1, 3, 8, 8])],
                    [vi("y", T.FLOAT, None)], [numpy_helper.from_array(np.zeros((4, 3, 3, 3), np.float32), "W")])


def _reshape(values):
    return om.model([h.make_node("Reshape", ["x", "s"], ["y"])], [vi("x", T.FLOAT, [2, 4])], [vi("y", T.FLOAT, None)],
                    [_const("s", values)])


def _opset(v):
    m = _relu([2, 4])
    m.opset_import[0].version = v
    return m


CASES = {
    "huge dims": lambda: _relu([2**62, 4]),
    "huge 2-d": lambda: _relu([2**40, 2**40]),
    "negative dim": lambda: _relu([-2, 4]),
    "zero dim": lambda: _relu([0, 4]),
    "rank 300": lambda: _relu([1] * 300),
    "huge initializer": lambda: om.model([h.make_node("MatMul", ["x", "W"], ["y"])], [vi("x", T.FLOAT, [2, 2**40])],
                                         [vi("y", T.FLOAT, None)], [_init([2**40, 2**40])]),
    "negative initializer dim": lambda: om.model([h.make_node("MatMul", ["x", "W"], ["y"])],
                                                 [vi("x", T.FLOAT, [2, 4])], [vi("y", T.FLOAT, None)], [_init([-4, 3])]),
    "int64-max initializer": lambda: om.model([h.make_node("Relu", ["W"], ["y"])], [], [vi("y", T.FLOAT, None)],
                                              [_init([2**63 - 1, 2])]),
    "cycle": lambda: om.model([h.make_node("Add", ["x", "b"], ["a"]), h.make_node("Relu", ["a"], ["b"])],
                              [vi("x", T.FLOAT, [2, 4])], [vi("b", T.FLOAT, [2, 4])], []),
    "self loop": lambda: om.model([h.make_node("Add", ["x", "a"], ["a"])], [vi("x", T.FLOAT, [2, 4])],
                                  [vi("a", T.FLOAT, [2, 4])], []),
    "two producers": lambda: om.model([h.make_node("Relu", ["x"], ["y"]), h.make_node("Sigmoid", ["x"], ["y"])],
                                      [vi("x", T.FLOAT, [2, 4])], [vi("y", T.FLOAT, [2, 4])], []),
    "undefined input": lambda: om.model([h.make_node("Add", ["x", "nope"], ["y"])], [vi("x", T.FLOAT, [2, 4])],
                                        [vi("y", T.FLOAT, [2, 4])], []),
    "no outputs": lambda: om.model([h.make_node("Relu", ["x"], ["y"])], [vi("x", T.FLOAT, [2, 4])], [], []),
    "opset 0": lambda: _opset(0),
    "opset 2^62": lambda: _opset(2**62),
    "unknown op": lambda: om.model([h.make_node("Frobnicate", ["x"], ["y"])], [vi("x", T.FLOAT, [2, 4])],
                                   [vi("y", T.FLOAT, [2, 4])], []),
    "conv stride 0": lambda: _conv(strides=[0, 0]),
    "conv pads 2^40": lambda: _conv(pads=[2**40] * 4),
    "conv 7 groups": lambda: _conv(group=7),
    "reshape two -1": lambda: _reshape([-1, -1]),
    "reshape 2^62": lambda: _reshape([2**62, 1]),
    "expand to 2^40 rows": lambda: om.model([h.make_node("Expand", ["x", "s"], ["y"])], [vi("x", T.FLOAT, [1, 4])],
                                            [vi("y", T.FLOAT, None)], [_const("s", [2**40, 4])]),
    "slice int64 extremes": lambda: om.model([h.make_node("Slice", ["x", "s", "e"], ["y"])],
                                             [vi("x", T.FLOAT, [2, 4])], [vi("y", T.FLOAT, None)],
                                             [_const("s", [-2**63]), _const("e", [2**63 - 1])]),
    "dropout ratio NaN": lambda: om.model([h.make_node("Dropout", ["x", "r"], ["y"])], [vi("x", T.FLOAT, [2, 4])],
                                          [vi("y", T.FLOAT, None)],
                                          [numpy_helper.from_array(np.array(np.nan, np.float32), "r")]),
    "sequence input": lambda: om.model([h.make_node("SequenceLength", ["x"], ["y"])],
                                       [h.make_tensor_sequence_value_info("x", T.FLOAT, [2, 4])],
                                       [vi("y", T.INT64, None)], []),
}


@pytest.mark.parametrize("name", list(CASES))
def test_hostile_model(tmp_path, name):
    p = om.save(tmp_path, "m.onnx", CASES[name]())
    for cmd in (["analyze"], ["verify"], ["inspect"], ["compare"], ["analyze", "-p", "nntrainer"]):
        code, out, err = run([*cmd, p])
        assert code in (0, 1, 2), (cmd, code, err)
        assert "internal error" not in err and "Traceback" not in err, err
        if code == 2:
            assert len(err.strip().splitlines()) == 1 and p in err, err


def test_control_characters_in_names_never_reach_the_terminal(tmp_path):
    m = om.model([h.make_node("Relu", ["x\n\x1b[2J"], ["y\r"], name="\x07op")], [vi("x\n\x1b[2J", T.FLOAT, [2, 4])],
                 [vi("y\r", T.FLOAT, [2, 4])], [])
    p = om.save(tmp_path, "m.onnx", m)
    for cmd in (["inspect"], ["analyze"], ["analyze", "-f", "csv"], ["analyze", "--by-layer"], ["verify"]):
        code, out, err = run([*cmd, p])
        assert code == 0, err
        assert not any(c in out + err for c in "\x1b\r\x07"), cmd
    code, out, _ = run(["inspect", p])
    assert "x\\n\\x1b[2J" in out and "control characters" in out


def test_rich_s_brackets_in_names_are_printed_as_written(tmp_path):
    # the tables print through rich: a name holding its markup ('[/]' closing nothing raised MarkupError,
    # an internal error; '[bold]' was eaten) is the file's text, not markup
    name = "blk[/][bold]w[/bold]"
    m = om.model([h.make_node("Relu", ["x"], ["y"], name=name)], [vi("x", T.FLOAT, [2, 4])],
                 [vi("y", T.FLOAT, [2, 4])], [])
    p = om.save(tmp_path, "m.onnx", m)
    for cmd in (["analyze"], ["analyze", "-p", "torch"], ["analyze", "--by-layer"], ["inspect"], ["compare"],
                ["sweep", "-b", "1,2"], ["fit", "--budget", "1KiB"], ["verify"]):
        code, out, err = run([*cmd, p])
        assert code in (0, 3) and not err, (cmd, err)
        if cmd == ["analyze", "--by-layer"]:  # a row per op, named
            assert name in out, cmd


@pytest.mark.parametrize("args, words", [
    (["verify", "{m}", "--seed", "-1"], "--seed"),
    (["verify", "{m}", "--learning-rate", "nan"], "finite"),
    (["verify", "{m}", "--learning-rate", "inf"], "finite"),  # analyze no longer takes it (issue 42)
    (["sweep", "{m}", "--batch-sizes", "1-99999999999"], "more than 1024"),
    (["diff", "--baseline", "{b}", "{m}", "--fail-on", "planned:+" + "9" * 400], "too large"),
    (["analyze", "{m}", "--budget", "9" * 400 + "TiB"], "too large"),
    (["analyze", "{m}", "--time-limit", "nan"], "time_limit"),
])
def test_hostile_flags_are_one_clear_error(tmp_path, args, words):
    m = om.save(tmp_path, "m.onnx", om.tiny_cnn())
    b = tmp_path / "b.json"
    assert run(["analyze", m, "-f", "json", "-o", str(b)])[0] == 0
    code, out, err = run([a.format(m=m, b=b) for a in args])
    assert code == 2 and words in err and "internal error" not in err, err


def _fb_cases():
    from tests.loaders import fbmodels as fb
    from tests.loaders.fbmodels import BO, OPS, op, tensor

    def three():
        return [tensor("x", [2, 4]), tensor("y", [2, 4]), tensor("z", [2, 4])]

    def conv(opts, otype=BO.Conv2DOptions):
        return fb.build([tensor("x", [1, 8, 8, 3]), tensor("w", [4, 3, 3, 3], data="fill"), tensor("y", [1, 8, 8, 4])],
                        [op(OPS.CONV_2D, [0, 1], [2], opts, otype)], [0], [2])

    big = 2**31 - 1
    return {
        "cycle": lambda: fb.build(three(), [op(OPS.RELU, [2], [1]), op(OPS.RELU, [1], [2])], [0], [2]),
        "tensor index out of range": lambda: fb.build(three(), [op(OPS.RELU, [99], [1])], [0], [1]),
        "negative tensor index": lambda: fb.build(three(), [op(OPS.RELU, [-5], [1])], [0], [1]),
        "graph output out of range": lambda: fb.build(three(), [op(OPS.RELU, [0], [1])], [0], [77]),
        "two producers": lambda: fb.build(three(), [op(OPS.RELU, [0], [1]), op(OPS.TANH, [0], [1])], [0], [1]),
        "no ops": lambda: fb.build(three(), [], [0], [0]),
        "huge shape": lambda: fb.build([tensor("x", [big, big]), tensor("y", [big, big])],
                                       [op(OPS.RELU, [0], [1])], [0], [1]),
        "negative shape": lambda: fb.build([tensor("x", [-3, 4]), tensor("y", [-3, 4])],
                                           [op(OPS.RELU, [0], [1])], [0], [1]),
        "rank 200": lambda: fb.build([tensor("x", [1] * 200), tensor("y", [1] * 200)],
                                     [op(OPS.RELU, [0], [1])], [0], [1]),
        "unknown opcode": lambda: fb.build(three(), [op(999, [0], [1])], [0], [1]),
        "conv stride 0": lambda: conv(fb.conv_opts(stride=0)),
        "conv with softmax options": lambda: conv(fb.softmax_opts(), BO.SoftmaxOptions),
        "pool 0x0": lambda: fb.build([tensor("x", [1, 8, 8, 3]), tensor("y", [1, 4, 4, 3])],
                                     [op(OPS.MAX_POOL_2D, [0], [1], fb.pool_opts(k=0, stride=0), BO.Pool2DOptions)],
                                     [0], [1]),
    }


@pytest.mark.parametrize("fmt", ["circle", "tflite"])
@pytest.mark.parametrize("name", list(_fb_cases()))
def test_hostile_flatbuffer(tmp_path, name, fmt):
    data = _fb_cases()[name]()
    if fmt == "tflite":
        data = data[:4] + b"TFL3" + data[8:]
    p = tmp_path / f"m.{fmt}"
    p.write_bytes(data)
    for cmd in (["analyze"], ["analyze", "-p", "onert"], ["verify"], ["inspect"]):
        code, out, err = run([*cmd, str(p)])
        assert code in (0, 1, 2), (cmd, code, err)
        assert "internal error" not in err and "Traceback" not in err, err
        if code == 2:
            assert len(err.strip().splitlines()) == 1 and str(p) in err, err
