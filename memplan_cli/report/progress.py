"""Progress for long work (sweeps, exact planning): on stderr, only when stderr is a terminal and
the user did not ask for quiet; shown only once the work has taken `DELAY` seconds (quick runs
stay clean), and transient, so nothing is left in the scrollback or in logs."""
from __future__ import annotations

import contextlib
import sys
import threading

from memplan_cli.errors import printable
from memplan_cli.report.output import stream_is_terminal

DELAY = 1.0


def enabled(verbosity: int) -> bool:
    """Progress only for a person watching: stdout and stderr both terminals, and not -q."""
    return verbosity >= 1 and stream_is_terminal(sys.stderr) and stream_is_terminal(sys.stdout)


class _Delayed:
    """Starts a rich live display (`start`/`stop` methods) after DELAY seconds, unless already done."""

    def __init__(self, live):
        self.live = live
        self.started = False
        self.lock = threading.Lock()
        self.timer = threading.Timer(DELAY, self._start)
        self.timer.daemon = True

    def _start(self):
        with self.lock:
            if not self.started:
                self.started = True
                self.live.start()

    def begin(self):
        self.timer.start()

    def end(self):
        self.timer.cancel()
        with self.lock:
            if self.started:
                self.live.stop()
            self.started = True  # a late timer must not start it now


@contextlib.contextmanager
def spinner(text: str, on: bool):
    """A transient spinner on stderr while a block runs (after DELAY seconds)."""
    if not on:
        yield
        return
    from rich.console import Console
    from rich.status import Status
    from rich.text import Text

    # a Text, not markup, its control characters escaped: the text names the model's path, which may
    # hold rich's brackets ('a[/]b/m.onnx')
    d = _Delayed(Status(Text(printable(text)), spinner="dots", console=Console(stderr=True)))
    d.begin()
    try:
        yield
    finally:
        d.end()


class Bar:
    """A rich progress bar with one task (after DELAY seconds); a no-op when off."""

    def __init__(self, total: int, text: str, on: bool):
        self._progress = None
        self._delayed = None
        if on:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            # markup off: the description names the model's path, which may hold rich's brackets
            columns = [TextColumn("{task.description}", markup=False), BarColumn(), TimeElapsedColumn()]
            if total:
                columns.insert(2, MofNCompleteColumn())
            self._progress = Progress(*columns, console=Console(stderr=True), transient=True)
            self._task = self._progress.add_task(printable(text), total=total or None)
            self._delayed = _Delayed(self._progress)

    def __enter__(self):
        if self._delayed:
            self._delayed.begin()
        return self

    def advance(self, text: str | None = None):
        if self._progress:
            self._progress.update(self._task, advance=1, **({"description": printable(text)} if text else {}))

    def __exit__(self, *exc):
        if self._delayed:
            self._delayed.end()
        return False
