"""Never hang on input: a FIFO, a directory or a device given where memplan reads a file is refused
by name (one line, exit 2) before anything opens it.

The FIFO tests watch the FIFO from a thread that keeps trying a non-blocking open for writing;
that open succeeds only while a reader has it open, so the watcher sees whether memplan opened
it (which, with no writer, would block the real command forever). A watcher that did see a reader
writes nothing and closes, so a regression fails here instead of hanging the suite.
"""
from __future__ import annotations

import errno
import os
import threading

import pytest
from click.testing import CliRunner

from memplan_cli.cli import main
from memplan_cli.errors import MemplanError, ModelError
from memplan_cli.inputs import not_regular, require_regular_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MNIST = os.path.join(ROOT, "sample_models", "mnist.circle")

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")


class FifoWatcher:
    """Records whether anyone opened `path` for reading while the watcher ran."""

    def __init__(self, path):
        self.path, self.opened, self._stop = path, False, threading.Event()
        self._t = threading.Thread(target=self._watch, daemon=True)

    def _watch(self):
        while not self._stop.is_set():
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as e:
                if e.errno != errno.ENXIO:  # ENXIO: no reader yet
                    raise
            else:
                self.opened = True
                os.close(fd)  # the reader sees end of file and goes on
            self._stop.wait(0.002)

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()


def run(args):
    r = CliRunner().invoke(main, args, catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


def assert_refused(args, path, kind):
    code, out, err = run(args)
    lines = err.strip().splitlines()
    assert code == 2, (args, code, out, err)
    assert len(lines) == 1 and "Traceback" not in err + out, err
    assert lines[0].startswith(f"memplan: error: {path}: is {kind}"), lines[0]


@pytest.fixture
def fifo(tmp_path):
    p = tmp_path / "m.onnx"
    os.mkfifo(p)
    return str(p)


@pytest.mark.parametrize("cmd", ["analyze", "inspect", "compare", "sweep", "verify"])
def test_a_fifo_model_is_refused_unopened(fifo, cmd):
    with FifoWatcher(fifo) as w:
        assert_refused([cmd, fifo], fifo, "a FIFO")
    assert not w.opened


def test_plan_refuses_a_fifo_csv(tmp_path):
    p = str(tmp_path / "BUFFERS.csv")
    os.mkfifo(p)
    with FifoWatcher(p) as w:
        assert_refused(["plan", p], p, "a FIFO")
    assert not w.opened


def test_diff_refuses_a_fifo_baseline_and_target(tmp_path, fifo):
    base = str(tmp_path / "base.json")
    code, _, err = run(["analyze", MNIST, "-b", "2", "-f", "json", "-o", base])
    assert code == 0, err
    with FifoWatcher(fifo) as w:
        assert_refused(["diff", "--baseline", fifo, MNIST], fifo, "a FIFO")
        assert_refused(["diff", "--baseline", base, fifo], fifo, "a FIFO")
    assert not w.opened


@pytest.mark.skipif(not os.path.exists("/dev/null"), reason="no /dev/null")
def test_a_device_is_refused():
    assert_refused(["analyze", "/dev/null"], "/dev/null", "a character device")
    assert_refused(["plan", "/dev/null"], "/dev/null", "a character device")
    assert_refused(["diff", "--baseline", "/dev/null", MNIST], "/dev/null", "a character device")


def test_a_directory_is_refused(tmp_path):
    d = str(tmp_path / "a_dir.circle")
    os.mkdir(d)
    assert_refused(["analyze", d], d, "a directory")
    assert_refused(["plan", d], d, "a directory")


def test_the_check_itself(tmp_path, fifo):
    f = tmp_path / "f.bin"
    f.write_bytes(b"x")
    link = tmp_path / "link.bin"
    link.symlink_to(f)
    require_regular_file(str(f))
    require_regular_file(str(link))  # a symlink to a regular file is one
    assert not_regular(str(f)) is None and not_regular(str(tmp_path / "missing")) is None
    assert not_regular(fifo) == "a FIFO (named pipe)"
    with pytest.raises(ModelError, match="no such file"):
        require_regular_file(str(tmp_path / "missing"), "model file", ModelError)
    with pytest.raises(MemplanError, match="is a FIFO"):
        require_regular_file(fifo)


def test_an_onnx_external_data_fifo_is_not_opened(tmp_path):
    # the loader reads small external int tensors (a Reshape's shape); one stored in a FIFO is
    # left unread, and shape inference then says what it could not find
    from memplan_cli.loaders import load_model
    from tests.loaders import onnxmodels as om

    p = om.save(tmp_path, "m.onnx", om.tiny_cnn(), save_as_external_data=True, all_tensors_to_one_file=True,
                location="m.bin", size_threshold=0)
    os.remove(tmp_path / "m.bin")
    os.mkfifo(tmp_path / "m.bin")
    with FifoWatcher(str(tmp_path / "m.bin")) as w:
        with pytest.raises(ModelError) as e:
            load_model(p, batch_size=4)
    assert not w.opened
    assert str(p) in str(e.value)
