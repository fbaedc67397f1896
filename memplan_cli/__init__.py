"""memplan: how much memory training a model takes, what it is made of, and how much less a better plan needs.

The Python API (`memplan_cli.api`): `from memplan_cli import analyze, compare, plan`. Loaded on
first use, so `import memplan_cli` (and the CLI's start) stays light.
"""

from memplan_cli.version import __version__

_API = ("analyze", "compare", "plan", "verify", "fit", "sweep", "diff", "inspect", "AnalysisResult",
        "ComparisonResult", "PlanSummary", "VerificationResult", "FitResult", "SweepResult", "DiffResult",
        "InspectResult")
_ERRORS = ("MemplanError", "ModelError", "UnsupportedOpError", "ConfigError")
__all__ = ["__version__", *_API, *_ERRORS]


def __getattr__(name: str):
    if name in _API:
        from memplan_cli import api

        return getattr(api, name)
    if name in _ERRORS:
        from memplan_cli import errors

        return getattr(errors, name)
    raise AttributeError(f"module 'memplan_cli' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *_API, *_ERRORS])
