import time

from memplan_cli.report import progress


def test_progress_is_off_when_stderr_is_not_a_terminal_or_quiet():
    assert progress.enabled(1) is False  # pytest captures stderr
    with progress.Bar(3, "x", False) as bar:
        bar.advance()


class FakeLive:
    def __init__(self):
        self.events = []

    def start(self):
        self.events.append("start")

    def stop(self):
        self.events.append("stop")


def test_display_starts_only_after_the_delay(monkeypatch):
    monkeypatch.setattr(progress, "DELAY", 0.05)
    quick, slow = FakeLive(), FakeLive()
    d = progress._Delayed(quick)
    d.begin()
    d.end()
    time.sleep(0.1)
    assert quick.events == []
    d = progress._Delayed(slow)
    d.begin()
    time.sleep(0.2)
    d.end()
    assert slow.events == ["start", "stop"]


import contextlib  # noqa: E402
import pathlib  # noqa: E402

import pytest  # noqa: E402
from click.testing import CliRunner  # noqa: E402

MNIST = str(pathlib.Path(__file__).parents[2] / "sample_models" / "mnist.circle")


@pytest.mark.parametrize("args", [
    ["verify", MNIST, "-b", "2"],
    ["fit", MNIST, "--budget", "4MiB"],
    ["sweep", MNIST, "-b", "1,2", "-p", "memplan"],
    ["compare", MNIST],
    ["analyze", MNIST, "-b", "8", "--budget", "3MiB"],
])
def test_every_long_command_shows_progress_on_a_terminal_unless_quiet(monkeypatch, args):
    from memplan_cli.cli import main

    shown = []

    @contextlib.contextmanager
    def spinner(text, on):
        shown.append(on)
        yield

    class Bar(progress.Bar):
        def __init__(self, total, text, on):
            shown.append(on)
            super().__init__(total, text, False)

    # a terminal, as far as memplan can tell; the display itself is rich's
    monkeypatch.setattr(progress, "enabled", lambda level: level >= 1)
    monkeypatch.setattr(progress, "spinner", spinner)
    monkeypatch.setattr(progress, "Bar", Bar)
    r = CliRunner().invoke(main, args)
    assert r.exit_code in (0, 3), r.output
    assert True in shown
    shown.clear()
    CliRunner().invoke(main, [*args, "-q"])
    assert True not in shown


def test_a_path_holding_rich_s_brackets_is_shown_as_written(monkeypatch):
    # the spinner's and the bar's text names the model's path: 'a[/]b/m.onnx' (a folder 'a[' holding ']b')
    # raised MarkupError once the display started
    import io

    from rich.console import Console

    monkeypatch.setattr(progress, "DELAY", 0)
    out = io.StringIO()
    monkeypatch.setattr("rich.console.Console", lambda **kw: Console(**{**kw, "stderr": False}, file=out,
                                                                     force_terminal=True))
    text = "analysing a[/]b/[bold]m.onnx\x1b[2J"
    with progress.spinner(text, True):
        time.sleep(0.3)
    with progress.Bar(2, text, True) as bar:
        time.sleep(0.3)
        bar.advance(text)
    assert "a[/]b/[bold]m.onnx\\x1b[2J" in out.getvalue() and "\x1b[2J" not in out.getvalue()
