"""Every test sees the same layout width: the table views follow COLUMNS when it is set
(report/output.py: terminal_width), and a developer's shell must not change what a test reads."""
import pytest


@pytest.fixture(autouse=True)
def _no_columns_from_the_shell(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
