"""Every test sees the same layout width: the table views follow COLUMNS when it is set
(report/output.py: terminal_width), and a developer's shell must not change what a test reads.

Every pass runs under its contract check (passes/infra.py: it touches only the TrainingGraph fields
it declares and changes only those it writes), in this process and in the commands tests start."""
import os

import pytest

from memplan_cli.passes.infra import CHECK_ENV

os.environ.setdefault(CHECK_ENV, "access")


@pytest.fixture(autouse=True)
def _no_columns_from_the_shell(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
