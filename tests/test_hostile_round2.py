"""Hostile input, round 2 (issue 40): one test class per defect class. Each class failed before its
fix: a string from the file reached the terminal raw, a short write on stdout read as success, or
the run ended in exit 70, a signal or a misleading message. Files are built in tmp_path; what needs
a real process (a terminal, a file-size limit, a closed pipe, a deleted working directory) runs
`python -m memplan_cli`."""
from __future__ import annotations

import json
import os
import pty
import subprocess
import sys

import flatbuffers
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto as T
from onnx import helper as h

from memplan_cli.cli import main
from tests.loaders import fbmodels as fb
from tests.loaders import onnxmodels as om

vi = h.make_tensor_value_info
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# ESC ] (retitle the terminal), BEL, a bidi override, a C1 CSI, a newline, a line separator, an isolate
HOSTILE = "a\x1b]0;pwn\x07\u202eb\x9bc\nd\u2028e\u2066f"
# what a terminal must never receive from a file
RAW = ("\x1b", "\x07", "\u202e", "\x9b", "\u2028", "\u2066")


def run(args):
    r = CliRunner().invoke(main, args, catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


def memplan(args, **kw):
    kw.setdefault("capture_output", True)
    return subprocess.run([sys.executable, "-m", "memplan_cli", *args], text=True, timeout=300,
                          cwd=kw.pop("cwd", ROOT), **kw)


def on_terminal(args, cwd=ROOT) -> tuple[int, str]:
    """`memplan ARGS` with stdout on a pseudo-terminal: its exit status and what the terminal got."""
    leader, follower = pty.openpty()
    try:
        p = subprocess.Popen([sys.executable, "-m", "memplan_cli", *args], stdout=follower,
                             stderr=subprocess.DEVNULL, cwd=cwd, env={**os.environ, "COLUMNS": "200"})
        os.close(follower)
        got = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            got += chunk
        return p.wait(timeout=300), got.decode("utf-8", "replace")
    finally:
        os.close(leader)


def raw_in(text: str) -> list[str]:
    return [c for c in RAW if c in text]


def producer_model(tmp_path) -> str:
    m = om.tiny_cnn()
    m.producer_name = HOSTILE
    return om.save(tmp_path, "m.onnx", m)


def signature_model(tmp_path) -> str:
    """The tiny CNN as TF Lite with a signature whose input and output names are HOSTILE."""
    from circle_schema.v0_10.circle.Model import ModelT
    from circle_schema.v0_10.circle.SignatureDef import SignatureDefT
    from circle_schema.v0_10.circle.TensorMap import TensorMapT

    mt = ModelT.InitFromPackedBuf(fb.tiny_cnn("tflite"), 0)
    sd = SignatureDefT()
    sd.signatureKey, sd.subgraphIndex = HOSTILE, 0
    tin, tout = TensorMapT(), TensorMapT()
    tin.name, tin.tensorIndex = HOSTILE + "in", mt.subgraphs[0].inputs[0]
    tout.name, tout.tensorIndex = HOSTILE + "out", mt.subgraphs[0].outputs[0]
    sd.inputs, sd.outputs = [tin], [tout]
    mt.signatureDefs = [sd]
    b = flatbuffers.Builder(1024)
    b.Finish(mt.Pack(b), file_identifier=b"TFL3")
    p = tmp_path / "sig.tflite"
    p.write_bytes(bytes(b.Output()))
    return str(p)


def custom_op_model(tmp_path) -> str:
    data = fb.build([fb.tensor("x", [2, 4]), fb.tensor("y", [2, 4])], [fb.op(HOSTILE, [0], [1])], [0], [1],
                    fmt="tflite")
    p = tmp_path / "custom.tflite"
    p.write_bytes(data)
    return str(p)


# ---- 1. strings from the file reach the terminal raw ---------------------------------------------
class TestStringsFromTheFileAreEscaped:
    def test_the_rule_escapes_controls_bidi_and_separators(self):
        from memplan_cli.errors import printable

        assert printable(HOSTILE) == "a\\x1b]0;pwn\\x07\\u202eb\\x9bc\\nd\\u2028e\\u2066f"
        for c in ["\u200e", "\u200f", "\u061c", *map(chr, range(0x202a, 0x202f)), *map(chr, range(0x2066, 0x206a))]:
            assert printable(c) == f"\\u{ord(c):04x}"
        assert printable("résumé 名前 x-y_z:0") == "résumé 名前 x-y_z:0"

    def test_onnx_producer_name_in_inspect(self, tmp_path, monkeypatch):
        monkeypatch.setenv("COLUMNS", "300")  # the line unwrapped (inspect wraps at 80 columns otherwise)
        code, out, err = run(["inspect", producer_model(tmp_path)])
        assert code == 0, err
        assert not raw_in(out), out
        assert "producer 'a\\x1b]0;pwn\\x07\\u202eb" in out

    @pytest.mark.parametrize("cmd", [["inspect"], ["analyze"], ["compare"], ["analyze", "--by-layer"]])
    def test_tflite_signature_names(self, tmp_path, cmd):
        code, out, err = run([*cmd, signature_model(tmp_path)])
        assert code == 0, err
        assert not raw_in(out), (cmd, out)
        assert "\\x1b]0;pwn" in out

    def test_custom_op_code_in_inspect(self, tmp_path):
        code, out, err = run(["inspect", custom_op_model(tmp_path)])
        assert not raw_in(out + err), out + err
        assert "\\x1b]0;pwn" in out + err

    def test_bidi_in_tensor_names(self, tmp_path):
        m = om.model([h.make_node("Relu", ["x\u202e"], ["y\u2067"], name="r\u200f")],
                     [vi("x\u202e", T.FLOAT, [2, 4])], [vi("y\u2067", T.FLOAT, [2, 4])], [])
        p = om.save(tmp_path, "m.onnx", m)
        for cmd in (["inspect"], ["analyze"], ["analyze", "--by-layer"], ["verify"], ["compare"]):
            code, out, err = run([*cmd, p])
            assert code == 0, err
            assert not any(c in out + err for c in "\u202e\u2067\u200f"), cmd

    def test_train_ops_error_echo(self, tmp_path):
        p = om.save(tmp_path, "m.onnx", om.tiny_cnn())
        code, out, err = run(["analyze", p, "--train", "ops:\u202eevil\x1b[2J"])
        assert code == 2
        assert not raw_in(err) and "\\u202eevil\\x1b[2J" in err, err

    @pytest.mark.parametrize("cmd", [["verify"], ["verify", "-q"], ["verify", "--budget", "1KiB"], ["analyze"],
                                     ["analyze", "-q"], ["compare"], ["inspect"], ["sweep", "-b", "1,2"],
                                     ["fit", "--budget", "1KiB"]])
    def test_a_model_path_that_holds_controls(self, tmp_path, cmd):
        # a path is a string the user may not have typed (a downloaded archive's folder): verify printed
        # it raw in its report's first line, its -q line and its over-budget line
        folder = tmp_path / HOSTILE
        folder.mkdir()
        p = om.save(folder, "m.onnx", om.tiny_cnn())
        code, out, err = run([*cmd, p])
        assert code in (0, 3), err
        assert not raw_in(out + err), (cmd, out + err)

    @pytest.mark.parametrize("quiet", [[], ["-q"]])
    def test_a_buffer_file_path_that_holds_controls(self, tmp_path, quiet):
        # plan's table and -q line named the CSV by its path as given, raw
        folder = tmp_path / HOSTILE
        folder.mkdir()
        (folder / "b.csv").write_text("id,lower,upper,size\na,0,2,8\nb,1,3,8\n", encoding="utf-8")
        code, out, err = run(["plan", str(folder / "b.csv"), *quiet])
        assert code == 0, err
        assert not raw_in(out + err) and "pwn" in out, out + err  # the table may wrap the escaped path

    def test_plan_csv_ids_on_a_terminal_are_escaped_and_exact_elsewhere(self, tmp_path):
        csv_path = tmp_path / "b.csv"
        csv_path.write_text(f'id,lower,upper,size\n"{HOSTILE}",0,2,8\nplain,1,3,8\n', encoding="utf-8")
        code, shown = on_terminal(["plan", str(csv_path), "-o", "-"])
        assert code == 0
        assert not raw_in(shown), shown
        assert "a\\x1b]0;pwn\\x07\\u202eb\\x9bc\\nd" in shown
        r = memplan(["plan", str(csv_path), "-o", "-"])  # a pipe: the CSV as the file has it
        assert r.returncode == 0 and f'"{HOSTILE}",0,2,8,0' in r.stdout
        out = tmp_path / "p.csv"
        assert memplan(["plan", str(csv_path), "-o", str(out)]).returncode == 0
        assert f'"{HOSTILE}",0,2,8,0' in out.read_text(encoding="utf-8")

    def test_json_keeps_the_exact_string_and_is_inert(self, tmp_path):
        code, out, err = run(["analyze", signature_model(tmp_path), "-f", "json"])
        assert code == 0, err
        assert not raw_in(out)
        assert json.loads(out)["config"]["loss_outputs"] == [HOSTILE + "out"]


# ---- 2. a short write on stdout read as success ------------------------------------------------
def _file_size_limit(limit: int):
    import resource

    def apply():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


class TestStdoutWriteFailures:
    @pytest.mark.parametrize("unbuffered", ["1", ""])
    @pytest.mark.parametrize("args", [["analyze", "{m}", "-f", "json", "--by-layer"], ["analyze", "--help"]])
    def test_a_file_size_limit_on_stdout_is_74(self, tmp_path, args, unbuffered):
        m = om.save(tmp_path, "m.onnx", om.tiny_cnn())
        out = tmp_path / "r.json"
        env = {**os.environ, "PYTHONUNBUFFERED": unbuffered}
        with open(out, "w") as f:
            r = memplan([a.format(m=m) for a in args], stdout=f, stderr=subprocess.PIPE,
                        preexec_fn=_file_size_limit(1024), env=env, capture_output=False)
        assert out.stat().st_size == 1024  # the limit was reached: the report did not fit
        assert r.returncode == 74, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1 and "stdout" in r.stderr, r.stderr

    @pytest.mark.parametrize("args", [["--help"], ["--version"], ["analyze", "--help"], ["inspect", "{m}"],
                                      ["analyze", "{m}"]])
    def test_a_reader_that_went_away_is_141(self, tmp_path, args):
        m = om.save(tmp_path, "m.onnx", om.tiny_cnn())
        read_end, write_end = os.pipe()
        os.close(read_end)  # the reader is gone before memplan writes a byte
        try:
            r = memplan([a.format(m=m) for a in args], stdout=write_end, stderr=subprocess.PIPE,
                        capture_output=False)
        finally:
            os.close(write_end)
        assert r.returncode == 141, r.stderr
        assert r.stderr == ""

    @pytest.mark.parametrize("args", [["--help"], ["--version"], ["analyze", "--help"], ["inspect", "{m}"]])
    def test_a_full_stdout_is_74(self, tmp_path, args):
        m = om.save(tmp_path, "m.onnx", om.tiny_cnn())
        if not os.path.exists("/dev/full"):
            pytest.skip("no /dev/full")
        with open("/dev/full", "w") as full:
            r = memplan([a.format(m=m) for a in args], stdout=full, stderr=subprocess.PIPE, capture_output=False)
        assert r.returncode == 74, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr


# ---- 3. verify's exit 70 on constant out-of-range indices ----------------------------------------
class TestConstantIndicesOutOfRange:
    @pytest.mark.parametrize("op, index", [("Gather", [0, 7]), ("Gather", [0, -5]), ("GatherElements", [[0, 9, 1]])])
    def test_refused_by_analyze_and_verify_alike(self, tmp_path, op, index):
        import numpy as np
        from onnx import numpy_helper as nh

        m = om.model([h.make_node(op, ["x", "i"], ["y"], axis=0)], [vi("x", T.FLOAT, [4, 3])],
                     [vi("y", T.FLOAT, None)], [nh.from_array(np.array(index, dtype=np.int64), "i")])
        p = om.save(tmp_path, "m.onnx", m)
        for cmd in ("analyze", "verify"):
            code, out, err = run([cmd, p])
            assert code == 2, (cmd, err)
            assert len(err.strip().splitlines()) == 1 and p in err and "outside axis 0" in err, err

    def test_indices_in_range_still_verify(self, tmp_path):
        import numpy as np
        from onnx import numpy_helper as nh

        m = om.model([h.make_node("Gather", ["x", "i"], ["y"], axis=0)], [vi("x", T.FLOAT, [4, 3])],
                     [vi("y", T.FLOAT, None)], [nh.from_array(np.array([0, 3, -4], dtype=np.int64), "i")])
        code, out, err = run(["verify", om.save(tmp_path, "m.onnx", m)])
        assert code == 0, err


# ---- 3. the remaining exit-70 paths, signals and misleading messages -----------------------------
def _range_model(tmp_path) -> str:
    import numpy as np
    from onnx import numpy_helper as nh

    g = h.make_graph([h.make_node("Range", ["s", "l", "d"], ["r"], name="big_range"),
                      h.make_node("Cast", ["r"], ["rf"], to=T.FLOAT), h.make_node("Add", ["x", "rf"], ["y"])], "g",
                     [vi("x", T.FLOAT, [1])], [vi("y", T.FLOAT, None)],
                     [nh.from_array(np.array(0, np.int64), "s"), nh.from_array(np.array(2**40, np.int64), "l"),
                      nh.from_array(np.array(1, np.int64), "d")])
    p = tmp_path / "range.onnx"
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]), p)
    assert p.stat().st_size < 250
    return str(p)


class TestShapeInferenceMemory:
    def test_a_200_byte_range_of_2_40_is_one_line_naming_the_op(self, tmp_path):
        p = _range_model(tmp_path)
        r = memplan(["analyze", p])  # unbounded before: 15-21 GB until the kernel killed it
        assert r.returncode == 2, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1 and p in r.stderr
        assert "memory limit" in r.stderr and "'big_range' (Range)" in r.stderr, r.stderr

    def test_the_child_limit_is_what_it_maps_plus_a_budget(self):
        from memplan_cli.loaders import onnx_loader

        def limits(model):
            import resource

            soft = resource.getrlimit(resource.RLIMIT_AS)[0]
            raise ValueError(f"limit {soft}")

        with pytest.raises(RuntimeError, match=r"^limit (\d+)$") as e:
            onnx_loader._contained(limits, onnx.ModelProto(), "shape inference")
        soft = int(str(e.value).split()[1])
        assert onnx_loader.CHILD_MEMORY < soft < 1 << 46


class TestProcessLimits:
    def test_fork_refused_is_not_a_malformed_file(self, tmp_path, monkeypatch):
        p = om.save(tmp_path, "m.onnx", om.tiny_cnn())

        def refused():
            raise BlockingIOError(11, "Resource temporarily unavailable")

        monkeypatch.setattr(os, "fork", refused)
        code, out, err = run(["analyze", p])
        assert code == 2, err
        assert len(err.strip().splitlines()) == 1 and p in err
        assert "cannot start a process" in err and "malformed" not in err, err

    def test_thread_creation_refused_is_not_an_interrupt(self, tmp_path):
        import resource

        if not sys.platform.startswith("linux"):
            pytest.skip("thread stacks sized by RLIMIT_STACK: Linux")
        p = om.save(tmp_path, "m.onnx", om.tiny_cnn())

        def no_threads():  # every new thread's 8 GB stack is more than the 6 GB address space allows
            resource.setrlimit(resource.RLIMIT_STACK, (8 << 30, resource.RLIM_INFINITY))
            resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))

        env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
        for args in (["verify", p, "-q"], ["verify", p, "-q", "--threads", "2"]):
            r = memplan(args, preexec_fn=no_threads, env=env)
            assert r.returncode in (0, 2), (args, r.returncode, r.stderr)  # 130 ("interrupted") before
            assert "interrupted" not in r.stderr and "OpenBLAS" not in r.stderr, r.stderr
            if r.returncode == 2:
                assert len(r.stderr.strip().splitlines()) == 1 and "cannot start a thread" in r.stderr

    def test_python_thread_refused_is_one_line(self, tmp_path, monkeypatch):
        # the planners' worker threads: RuntimeError("can't start new thread") was an internal error
        from memplan_cli import api

        def refused(*a, **k):
            raise RuntimeError("can't start new thread")

        p = om.save(tmp_path, "m.onnx", om.tiny_cnn())
        monkeypatch.setattr(api, "analyze", refused)
        code, out, err = run(["analyze", p])
        assert code == 2, err
        assert "cannot start a thread" in err and "internal error" not in err


class TestAFileChangedWhileRead:
    SCRIPT = ("import mmap, os, sys\n"
              "path = sys.argv[1]\n"
              "real = mmap.mmap\n"
              "def truncating(fd, length, *a, **k):\n"
              "    m = real(fd, length, *a, **k)\n"
              "    os.truncate(path, 0)  # another process cut the file while memplan has it mapped\n"
              "    return m\n"
              "mmap.mmap = truncating\n"
              "from memplan_cli.cli import main\n"
              "main(['inspect', path])\n")

    @pytest.mark.parametrize("fmt", ["circle", "tflite", "onnx"])
    def test_truncated_while_mapped_is_one_line_not_sigbus(self, tmp_path, fmt):
        p = tmp_path / f"m.{fmt}"
        if fmt == "onnx":
            m = om.tiny_cnn()
            m.graph.doc_string = "x" * 20000  # pages past the first: the strip walks into them
            onnx.save(m, p)
        else:
            p.write_bytes(fb.tiny_cnn(fmt) + b"\0" * 20000)
        r = subprocess.run([sys.executable, "-c", self.SCRIPT, str(p)], capture_output=True, text=True,
                           timeout=120, cwd=ROOT)
        assert r.returncode == 2, (r.returncode, r.stderr)  # -7 (SIGBUS), exit 135 in a shell, before
        assert r.stderr.strip().splitlines() == [f"memplan: error: {p}: the file changed while memplan read it "
                                                 "(truncated or rewritten by another process)"]

    def test_a_model_removed_after_its_first_bytes_is_named(self, tmp_path, monkeypatch):
        from memplan_cli.loaders import onnx_loader

        p = om.save(tmp_path, "m.onnx", om.tiny_cnn())
        real = onnx_loader._read_stripped

        def vanish(path):
            os.unlink(path)
            return real(path)

        monkeypatch.setattr(onnx_loader, "_read_stripped", vanish)
        code, out, err = run(["analyze", p])
        assert code == 2 and p in err and "removed while memplan read it" in err, err


class TestOutputPaths:
    @pytest.mark.parametrize("flag", ["-o", "--timeline"])
    def test_an_empty_path_is_refused(self, tmp_path, flag):
        p = om.save(tmp_path, "m.onnx", om.tiny_cnn())
        code, out, err = run(["analyze", p, flag, ""])
        assert code == 2 and "empty path" in err, err
        assert out == ""  # not the report on stdout

    @pytest.mark.parametrize("cmd", [["plan", "{csv}"], ["verify", "{m}"], ["compare", "{m}"], ["fit", "{m}", "--budget", "1MiB"],
                                     ["inspect", "{m}"], ["sweep", "{m}", "--batch-sizes", "1,2"], ["diff", "--baseline", "{m}", "{m}"]])
    def test_an_empty_output_is_refused_by_every_command(self, tmp_path, cmd):
        p = om.save(tmp_path, "m.onnx", om.tiny_cnn())
        csv_path = tmp_path / "b.csv"
        csv_path.write_text("id,lower,upper,size\na,0,2,8\n")
        code, out, err = run([a.format(m=p, csv=csv_path) for a in cmd] + ["-o", ""])
        assert code == 2 and "empty path" in err, err

    @pytest.mark.parametrize("flag", ["-o", "--timeline"])
    def test_a_deleted_working_directory_is_named(self, tmp_path, flag):
        p = om.save(tmp_path, "m.onnx", om.tiny_cnn())
        gone = tmp_path / "gone"
        gone.mkdir()
        r = memplan(["analyze", p, flag, "r.out"], cwd=str(gone), preexec_fn=lambda: os.rmdir(gone))
        assert r.returncode == 2, r.stderr  # 70 (FileNotFoundError from getcwd) before
        assert len(r.stderr.strip().splitlines()) == 1 and "working directory was deleted" in r.stderr


# ---- 4. -o failures get their exit status by cause, not by step ---------------------------------
class TestOutputExitCodesByCause:
    """ENOSPC is 74 whether the temporary file cannot be made (no free inodes) or its write fails (no
    free blocks); a path that cannot name a file is 2 whichever step finds it out."""

    @staticmethod
    def _analyze(tmp_path, target):
        p = om.save(tmp_path, "m.onnx", om.tiny_cnn())
        return run(["analyze", p, "-o", str(target)])

    @pytest.mark.parametrize("step", ["mkstemp", "write", "replace"])
    @pytest.mark.parametrize("err, code", [(28, 74), (122, 74), (27, 74), (30, 74), (13, 74), (5, 74), (20, 2)])
    def test_by_errno_at_every_step(self, tmp_path, monkeypatch, step, err, code):
        import tempfile

        def fail(*a, **k):
            raise OSError(err, os.strerror(err))

        class Failing:
            def __init__(self, fd, *a, **k):
                self.fd = fd

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                os.close(self.fd)

            write = fail

        if step == "mkstemp":
            monkeypatch.setattr(tempfile, "mkstemp", fail)
        elif step == "write":
            real_fdopen = os.fdopen
            monkeypatch.setattr(os, "fdopen", lambda fd, mode="r", *a, **k:
                                Failing(fd) if mode == "w" else real_fdopen(fd, mode, *a, **k))
        else:
            monkeypatch.setattr(os, "replace", fail)
        target = tmp_path / "r.txt"
        got, out, errtext = self._analyze(tmp_path, target)
        monkeypatch.undo()
        assert got == code, (step, err, errtext)
        assert len(errtext.strip().splitlines()) == 1 and os.strerror(err) in errtext
        assert not target.exists() and not list(tmp_path.glob(".memplan-*"))

    @pytest.mark.parametrize("name", ["r.json/", "file/r.json", "missing/r.json"])
    def test_a_path_that_names_no_file_is_2(self, tmp_path, name):
        (tmp_path / "file").write_text("x")
        (tmp_path / "r.json").write_text("x")
        code, out, err = self._analyze(tmp_path, os.path.join(str(tmp_path), name))  # pathlib drops a trailing /
        assert code == 2, err  # "r.json/" was 74 ("Not a directory") while "file/r.json" was 2
        assert len(err.strip().splitlines()) == 1


# ---- kept: concurrent -o writers and signals mid-run (they passed before; they must keep passing) ---
class TestConcurrentWritersAndSignals:
    def test_concurrent_writers_of_one_output_leave_one_whole_report(self, tmp_path):
        m = om.save(tmp_path, "m.onnx", om.tiny_cnn())
        out = tmp_path / "r.json"
        procs = [subprocess.Popen([sys.executable, "-m", "memplan_cli", "analyze", m, "-f", "json", "-o", str(out),
                                   "-b", str(b)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for b in (1, 2, 3, 4, 5, 6)]
        results = [p.communicate(timeout=300) + (p.returncode,) for p in procs]
        assert all(code == 0 for _, _, code in results), results
        doc = json.loads(out.read_text())  # whole: one writer's report, never a mix
        assert doc["config"]["batch_size"] in (1, 2, 3, 4, 5, 6)
        assert not list(tmp_path.glob(".memplan-*"))

    @pytest.mark.parametrize("sig, code", [("SIGTERM", 143), ("SIGHUP", 129), ("SIGINT", 130)])
    def test_a_signal_mid_run_ends_cleanly(self, tmp_path, sig, code):
        import signal
        import time

        out = tmp_path / "sweep.json"
        model = os.path.join(ROOT, "sample_models", "mobilenetv2.onnx")

        def default_signals():  # a shell's background job ignores SIGINT and nohup SIGHUP; a terminal's do not
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            signal.signal(signal.SIGHUP, signal.SIG_DFL)

        p = subprocess.Popen([sys.executable, "-m", "memplan_cli", "sweep", model, "--batch-sizes", "1-1024",
                              "-f", "json", "-o", str(out)], cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, preexec_fn=default_signals)
        # imported and analysing: 1,024 batches of one load take half a minute (64 took 2 s once the model
        # loaded once per sweep, and ended before the signal)
        time.sleep(3)
        if p.poll() is not None:
            pytest.fail(f"the sweep ended before the signal: {p.returncode} {p.stderr.read()}")
        p.send_signal(getattr(signal, sig))
        _, err = p.communicate(timeout=120)
        assert p.returncode == code, err
        assert "Traceback" not in err and "internal error" not in err and len(err.strip().splitlines()) <= 1, err
        assert not out.exists() and not list(tmp_path.glob(".memplan-*"))

    def test_a_signal_while_the_loader_forks_is_not_lost(self, tmp_path):
        """SIGTERM sent from an at-fork callback (where a handler's exception is ignored, as logging's
        lock release showed under CI) still ends the run: 143, one line at most, nothing written."""
        import signal

        m = om.save(tmp_path, "m.onnx", om.tiny_cnn())
        out = tmp_path / "r.json"
        driver = ("import os, signal, sys; "
                  "os.register_at_fork(after_in_parent=lambda: os.kill(os.getpid(), signal.SIGTERM)); "
                  "sys.argv = ['memplan'] + sys.argv[1:]; from memplan_cli.cli import run; run()")
        p = subprocess.run([sys.executable, "-c", driver, "analyze", m, "-b", "2", "-f", "json", "-o", str(out)],
                           cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert p.returncode == 128 + signal.SIGTERM, p.stderr
        assert "Traceback" not in p.stderr and "Exception ignored" not in p.stderr, p.stderr
        assert not out.exists() and not list(tmp_path.glob(".memplan-*"))
