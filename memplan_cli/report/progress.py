"""Progress for long work (sweeps, exact planning): on stderr, only when stderr is a terminal and
the user did not ask for quiet; transient, so nothing is left in the scrollback or in logs."""
from __future__ import annotations

import contextlib
import sys

from memplan_cli.report.output import stream_is_terminal


def enabled(verbosity: int) -> bool:
    return verbosity >= 1 and stream_is_terminal(sys.stderr)


@contextlib.contextmanager
def spinner(text: str, on: bool):
    """A transient spinner while a block runs (rich's status shows only after it starts spinning)."""
    if not on:
        yield
        return
    from rich.console import Console

    with Console(stderr=True).status(text, spinner="dots"):
        yield


class Bar:
    """A rich progress bar with one task; a no-op when off."""

    def __init__(self, total: int, text: str, on: bool):
        self.on = on
        self._progress = None
        self._task = None
        if on:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                      TimeElapsedColumn(), console=Console(stderr=True), transient=True)
            self._task = self._progress.add_task(text, total=total)

    def __enter__(self):
        if self._progress:
            self._progress.start()
        return self

    def advance(self, text: str | None = None):
        if self._progress:
            self._progress.update(self._task, advance=1, **({"description": text} if text else {}))

    def __exit__(self, *exc):
        if self._progress:
            self._progress.stop()
        return False
