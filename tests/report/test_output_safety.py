"""`--output` of every command that writes: only a regular file or a new path; never a device, FIFO,
directory or the input itself (by name, symlink or hard link); a symlink is written through to its
existing target; no temporary file is ever left behind. Stdout closed or full: exit 74, one line."""
from __future__ import annotations

import errno
import os
import shutil
import signal
import stat
import subprocess
import sys

import pytest
from click.testing import CliRunner

from memplan_cli.cli import main
from memplan_cli.errors import MemplanError, OutputError
from memplan_cli.report.output import output_target, write_atomic

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MNIST = os.path.join(ROOT, "sample_models", "mnist.onnx")


def run(args):
    r = CliRunner().invoke(main, args, catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


def leftovers(folder) -> list[str]:
    return [n for n in os.listdir(folder) if n.startswith(".memplan-")]


@pytest.fixture
def model(tmp_path):
    p = tmp_path / "m.onnx"
    shutil.copy(MNIST, p)
    return p


def commands(model, tmp_path):
    """Every command that writes a file, as argument lists without -o; its input files."""
    csv = tmp_path / "b.csv"
    csv.write_text("id,lower,upper,size\na,0,2,8\nb,1,3,4\n")
    base = tmp_path / "base.json"
    assert run(["analyze", str(model), "-f", "json", "-o", str(base)])[0] == 0
    m = str(model)
    return {"analyze": (["analyze", m], m), "timeline": (["analyze", m, "--timeline"], m),
            "compare": (["compare", m], m), "sweep": (["sweep", m, "--batch-sizes", "1,2"], m),
            "fit": (["fit", m, "--budget", "1GiB"], m), "verify": (["verify", m], m),
            "diff": (["diff", "--baseline", str(base), m], m), "diff-base": (["diff", "--baseline", str(base), m],
                                                                            str(base)),
            "plan": (["plan", str(csv)], str(csv))}


def _out(args, target):
    return args + [target] if args[-1] == "--timeline" else args + ["-o", target]


@pytest.mark.parametrize("how", ["same name", "symlink", "hard link"])
def test_no_command_overwrites_its_input(model, tmp_path, how):
    for name, (args, inp) in commands(model, tmp_path).items():
        before = open(inp, "rb").read()
        target = inp
        if how == "symlink":
            target = str(tmp_path / "link")
            os.symlink(inp, target)
        elif how == "hard link":
            target = str(tmp_path / "hard")
            os.link(inp, target)
        code, out, err = run(_out(args, target))
        assert code == 2, (name, code, err)
        assert len(err.strip().splitlines()) == 1 and "input file" in err, (name, err)
        assert open(inp, "rb").read() == before, name
        assert not leftovers(tmp_path), name
        if how != "same name":
            os.unlink(target)


def test_a_device_reached_by_name_or_link_is_refused(model, tmp_path, monkeypatch):
    cmds = commands(model, tmp_path)
    replaced = []
    monkeypatch.setattr(os, "replace", lambda a, b: replaced.append(b))
    os.symlink("/dev/null", tmp_path / "null")
    for target in ("/dev/null", str(tmp_path / "null")):
        for name, (args, _) in cmds.items():
            code, out, err = run(_out(args, target))
            assert code == 2 and "character device" in err and len(err.strip().splitlines()) == 1, (name, err)
    assert replaced == []
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_a_fifo_or_a_directory_is_refused(model, tmp_path):
    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    (tmp_path / "d").mkdir()
    for target in (fifo, tmp_path / "d"):
        for name, (args, _) in commands(model, tmp_path).items():
            code, out, err = run(_out(args, str(target)))
            assert code == 2 and "Traceback" not in err, (name, err)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and os.path.isdir(tmp_path / "d")
    with pytest.raises(MemplanError, match="FIFO"):
        output_target(str(fifo))
    with pytest.raises(MemplanError, match="directory"):
        output_target(str(tmp_path / "d"))


def test_a_symlink_is_written_through_to_its_target(model, tmp_path):
    (tmp_path / "reports").mkdir()
    real = tmp_path / "reports" / "r.json"
    real.write_text("old")
    os.chmod(real, 0o640)
    os.symlink("reports/r.json", tmp_path / "latest.json")
    assert run(["analyze", str(model), "-f", "json", "-o", str(tmp_path / "latest.json")])[0] == 0
    assert os.path.islink(tmp_path / "latest.json")
    assert real.read_text().startswith("{") and stat.S_IMODE(os.stat(real).st_mode) == 0o640
    assert not leftovers(tmp_path) and not leftovers(tmp_path / "reports")


def test_a_dangling_symlink_is_refused(model, tmp_path):
    os.symlink(tmp_path / "nowhere" / "r.json", tmp_path / "dangling")
    os.symlink(tmp_path / "missing.json", tmp_path / "dangling2")
    for link in ("dangling", "dangling2"):
        code, out, err = run(["analyze", str(model), "-o", str(tmp_path / link)])
        assert code == 2 and "symlink to a missing file" in err, err
    assert not os.path.exists(tmp_path / "missing.json")


def test_a_failed_write_leaves_no_temporary_file_and_the_old_file(tmp_path, monkeypatch):
    out = tmp_path / "r.json"
    out.write_text("old")

    def full(a, b):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(OutputError, match="No space left") as e:
        write_atomic(str(out), "new")
    assert e.value.exit_code == 74
    assert out.read_text() == "old" and not leftovers(tmp_path)

    def interrupted(a, b):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_atomic(str(out), "new")
    assert out.read_text() == "old" and not leftovers(tmp_path)


def test_sigterm_while_writing_removes_the_temporary_file(model, tmp_path, monkeypatch):
    real_replace = os.replace

    def killed(a, b):
        os.kill(os.getpid(), signal.SIGTERM)  # the CLI's handler raises SystemExit(143) here
        real_replace(a, b)

    monkeypatch.setattr(os, "replace", killed)
    before = signal.getsignal(signal.SIGTERM)
    r = CliRunner().invoke(main, ["analyze", str(model), "-o", str(tmp_path / "r.txt")])
    assert r.exit_code == 143
    assert not leftovers(tmp_path) and not os.path.exists(tmp_path / "r.txt")
    assert signal.getsignal(signal.SIGTERM) == before  # restored after the command


def test_timeline_and_output_naming_one_file_are_refused_before_writing(model, tmp_path):
    code, out, err = run(["analyze", str(model), "-o", str(tmp_path / "x"), "--timeline", str(tmp_path / "x")])
    assert code == 2 and "same file" in err
    assert not os.path.exists(tmp_path / "x")


def test_a_refused_output_writes_nothing_else(model, tmp_path):
    # -o is refused, so --timeline must not have been written either
    code, out, err = run(["analyze", str(model), "-o", "/dev/null", "--timeline", str(tmp_path / "t.svg")])
    assert code == 2 and not os.path.exists(tmp_path / "t.svg")


def _memplan(args, **kw):
    return subprocess.run([sys.executable, "-m", "memplan_cli", *args], capture_output=False, text=True,
                          stderr=subprocess.PIPE, timeout=120, **kw)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("args", [["analyze", MNIST], ["inspect", MNIST], ["analyze", MNIST, "-f", "json"],
                                  ["--help"], ["analyze", "--help"]])
def test_a_full_stdout_is_exit_74_with_one_line(args):
    with open("/dev/full", "w") as full:
        r = _memplan(args, stdout=full)
    assert r.returncode == 74, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "No space left" in r.stderr


@pytest.mark.parametrize("args", [["analyze", MNIST], ["inspect", MNIST]])
def test_a_closed_stdout_is_exit_74_with_one_line(args):
    r = subprocess.run(["sh", "-c", 'exec "$@" >&-', "sh", sys.executable, "-m", "memplan_cli", *args],
                       stderr=subprocess.PIPE, text=True, timeout=120)
    assert r.returncode == 74, r.stderr
    assert r.stderr.strip().splitlines() == ["memplan: error: cannot write the report: stdout is closed"]


@pytest.mark.parametrize("args", [["--help"], ["analyze", "--help"], ["--version"]])
def test_help_and_version_to_a_closed_stdout_are_exit_74(args):
    # they printed nowhere and exited 0 (click's echo skips a None sys.stdout)
    r = subprocess.run(["sh", "-c", 'exec "$@" >&-', "sh", sys.executable, "-m", "memplan_cli", *args],
                       stderr=subprocess.PIPE, text=True, timeout=120)
    assert r.returncode == 74, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "stdout is closed" in r.stderr, r.stderr


def test_with_stdout_closed_a_file_output_still_works_and_gets_no_stray_output(tmp_path):
    out = tmp_path / "r.json"
    r = subprocess.run(["sh", "-c", 'exec "$@" >&-', "sh", sys.executable, "-m", "memplan_cli", "analyze", MNIST,
                        "-f", "json", "-o", str(out)], stderr=subprocess.PIPE, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    import json

    assert json.loads(out.read_text())["schema_version"] == 1
