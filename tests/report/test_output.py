"""Where reports go: atomic writes."""
import os

from memplan_cli.report.output import write_atomic


def test_atomic_write_gives_an_ordinary_file_mode(tmp_path):
    mask = os.umask(0o022)
    try:
        write_atomic(str(tmp_path / "r.json"), "{}\n")
    finally:
        os.umask(mask)
    assert (tmp_path / "r.json").read_text() == "{}\n"
    assert (tmp_path / "r.json").stat().st_mode & 0o777 == 0o644
