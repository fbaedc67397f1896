"""External data of an untrusted ONNX model: only regular files inside the model's folder are opened.

Every case records each path the process opens while loading (builtins.open and os.open patched; the
loader opens files through nothing else), so "never opened" is checked without strace. The secret's
values (8, 8) would show in `inspect` as `= [8, 8]` if they were ever read.
"""
from __future__ import annotations

import builtins
import os

import numpy as np
import pytest
from click.testing import CliRunner

from memplan_cli.cli import main
from memplan_cli.errors import ModelError
from memplan_cli.loaders import load_model
from tests.loaders import onnxmodels as om

SECRET = np.array([8, 8], np.int64).tobytes()


@pytest.fixture
def opened(monkeypatch):
    """The real paths of every file opened while the test runs."""
    seen = []
    real_open, real_os_open = builtins.open, os.open

    def rec(p):
        if isinstance(p, (str, bytes, os.PathLike)):
            seen.append(os.path.realpath(os.fsdecode(p)))

    def fake_open(file, *a, **kw):
        rec(file)
        return real_open(file, *a, **kw)

    def fake_os_open(path, *a, **kw):
        rec(path)
        return real_os_open(path, *a, **kw)

    monkeypatch.setattr(builtins, "open", fake_open)
    monkeypatch.setattr(os, "open", fake_os_open)
    return seen


def layout(tmp_path):
    """tmp/model/ (the model's folder) and tmp/secret/secret.bin holding int64 (8, 8)."""
    (tmp_path / "model").mkdir()
    (tmp_path / "secret").mkdir()
    secret = tmp_path / "secret" / "secret.bin"
    secret.write_bytes(SECRET)
    return tmp_path / "model", secret


def tiny_cnn_with_unused_external(location: str):
    """tiny_cnn plus an int64 [2] initializer no node reads, stored externally at `location`."""
    m = om.tiny_cnn()
    t = m.graph.initializer.add()
    t.name, t.data_type, t.data_location = "unused", 7, 1
    t.dims.append(2)
    e = t.external_data.add()
    e.key, e.value = "location", location
    return m


def model_with_external_shape(folder, location: str) -> str:
    """tiny_cnn whose Reshape target (int64 [2]) is stored externally at `location`."""
    m = om.tiny_cnn()
    t = next(t for t in m.graph.initializer if t.name == "shape")
    t.ClearField("raw_data")
    t.ClearField("int64_data")
    t.data_location = 1
    for k, v in (("location", location), ("offset", "0"), ("length", "16")):
        e = t.external_data.add()
        e.key, e.value = k, v
    return om.save(folder, "m.onnx", m)


def run(args):
    r = CliRunner().invoke(main, args, catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


def assert_refused(path, secret, opened, match="outside the model's folder"):
    opened.clear()
    for cmd in ("inspect", "analyze"):
        code, out, err = run([cmd, path])
        assert code == 2, (cmd, code, out, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and match in lines[0] and path in lines[0], err
        assert "[8, 8]" not in out + err
    assert str(secret) not in opened


def test_a_location_with_dotdot_out_of_the_folder_is_refused_unopened(tmp_path, opened):
    folder, secret = layout(tmp_path)
    p = model_with_external_shape(folder, "../secret/secret.bin")
    assert_refused(p, secret, opened)


def test_an_absolute_location_is_refused_unopened(tmp_path, opened):
    folder, secret = layout(tmp_path)
    p = model_with_external_shape(folder, str(secret))
    assert_refused(p, secret, opened, match="absolute path")


def test_a_symlink_out_of_the_folder_is_refused_unopened(tmp_path, opened):
    folder, secret = layout(tmp_path)
    os.symlink(secret, folder / "link.bin")
    p = model_with_external_shape(folder, "link.bin")
    assert_refused(p, secret, opened)


def test_a_symlinked_folder_out_of_the_tree_is_refused_unopened(tmp_path, opened):
    folder, secret = layout(tmp_path)
    os.symlink(secret.parent, folder / "data")
    p = model_with_external_shape(folder, "data/secret.bin")
    assert_refused(p, secret, opened)


def test_dotdot_that_stays_inside_and_a_symlink_inside_are_followed(tmp_path, opened):
    folder, _ = layout(tmp_path)
    (folder / "sub").mkdir()
    (folder / "w.bin").write_bytes(np.array([1, -1], np.int64).tobytes())
    os.symlink("../w.bin", folder / "sub" / "link.bin")
    for loc in ("sub/../w.bin", "sub/link.bin"):
        g = load_model(model_with_external_shape(folder, loc), batch_size=4)
        assert g.operands[g.operations[3].inputs[1]].value == (1, -1)
        assert g.warnings == []


@pytest.mark.parametrize("what", ["fifo", "directory", "empty"])
def test_a_location_that_is_not_a_regular_file_is_refused_unopened(tmp_path, opened, what):
    folder, _ = layout(tmp_path)
    target = folder / "d"
    if what == "fifo":
        os.mkfifo(target)  # opening it for reading would block: the test would hang
    elif what == "directory":
        target.mkdir()
    p = model_with_external_shape(folder, "" if what == "empty" else "d")
    opened.clear()
    with pytest.raises(ModelError) as e:
        load_model(p, batch_size=4)
    assert str(target) not in opened
    assert p in str(e.value) and ("outside" in str(e.value) if what == "empty" else "not a data file" in str(e.value))


def test_a_device_reached_through_a_link_is_refused_unopened(tmp_path, opened):
    folder, _ = layout(tmp_path)
    os.symlink("/dev/zero", folder / "zero.bin")
    p = model_with_external_shape(folder, "zero.bin")
    opened.clear()
    with pytest.raises(ModelError, match="outside the model's folder"):
        load_model(p, batch_size=4)
    assert "/dev/zero" not in opened


def test_bad_offsets_and_lengths_leave_the_value_unknown(tmp_path):
    folder, _ = layout(tmp_path)
    (folder / "w.bin").write_bytes(np.array([1, -1], np.int64).tobytes())
    p = model_with_external_shape(folder, "w.bin")
    import onnx

    for offset, length in (("-8", "16"), ("9", "16"), ("0", "8"), ("x", "16"), ("99999999999999999999", "16")):
        m = onnx.load(p, load_external_data=False)
        t = next(t for t in m.graph.initializer if t.name == "shape")
        for e in t.external_data:
            e.value = {"offset": offset, "length": length}.get(e.key, e.value)
        q = om.save(folder, "bad.onnx", m, save_as_external_data=False)
        with pytest.raises(ModelError, match="shape"):  # unread: shape inference cannot size the Reshape
            load_model(q, batch_size=4)


def test_a_refused_value_no_tensor_needs_is_left_unread_and_noted(tmp_path, opened):
    # an unused int64 initializer pointing out of the folder: every tensor is sized without it
    folder, secret = layout(tmp_path)
    m = tiny_cnn_with_unused_external("../secret/secret.bin")
    p = om.save(folder, "m.onnx", m)
    opened.clear()
    g = load_model(p, batch_size=4)
    assert str(secret) not in opened
    assert any("outside the model's folder" in w and "not read" in w for w in g.warnings)
    code, out, err = run(["analyze", p, "-b", "4"])
    assert code == 0, err


def test_weights_pointing_anywhere_are_never_opened(tmp_path, opened):
    folder, secret = layout(tmp_path)
    m = om.tiny_cnn()
    for t in m.graph.initializer:
        if t.data_type == 1:
            t.ClearField("raw_data")
            t.ClearField("float_data")
            t.data_location = 1
            e = t.external_data.add()
            e.key, e.value = "location", str(secret)
    p = om.save(folder, "m.onnx", m)
    opened.clear()
    g = load_model(p)
    assert g.parameter_count() == 4 * 27 + 4 + 640 + 10
    assert str(secret) not in opened


def test_a_hostile_location_string_stays_on_one_line(tmp_path):
    folder, _ = layout(tmp_path)
    p = model_with_external_shape(folder, "../x\n\x1b[31mred\r")
    code, out, err = run(["inspect", p])
    assert code == 2 and len(err.strip().splitlines()) == 1 and "\x1b" not in err, err


def test_a_missing_data_file_that_holds_a_shape_is_named(tmp_path):
    # the .onnx copied without its .onnx.data: the weights are never needed, but a small integer
    # there (here the Reshape's target) is; it read "no shape for tensor ..." without saying why
    folder, _ = layout(tmp_path)
    p = model_with_external_shape(folder, "m.onnx.data")
    code, out, err = run(["analyze", p, "-b", "4"])
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert "external data file missing: 'm.onnx.data' (tensor 'shape'" in lines[0] and p in lines[0], err
    # the data file present: it loads
    (folder / "m.onnx.data").write_bytes(np.array([1, -1], np.int64).tobytes())
    assert run(["analyze", p, "-b", "4"])[0] == 0


def test_a_missing_data_file_no_tensor_needs_is_noted(tmp_path):
    folder, _ = layout(tmp_path)
    m = tiny_cnn_with_unused_external("gone.data")
    g = load_model(om.save(folder, "m.onnx", m), batch_size=4)
    assert any("external data file missing: 'gone.data'" in w and "not read" in w for w in g.warnings), g.warnings
