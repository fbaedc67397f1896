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
