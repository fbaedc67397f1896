"""Command-line entry point. Kept thin: each command lives in `memplan_cli/commands/<name>.py`,
parses its flags and calls the work; this module only wires commands and turns errors into exit codes.

Exit codes: 0 ok; 1 regression (diff thresholds); 2 bad input or usage; 3 over budget (sweep);
70 internal error (a bug in memplan: please report it).
"""
from __future__ import annotations

import importlib.util
import os
import sys


def _defer_numpy() -> None:
    """Load NumPy on its first use: flatbuffers and circle-schema import it at module level, but
    nothing from loading a circle / tflite file to the onert profile's report uses it (see
    memplan_cli/lazyimport.py). The CLI's choice only: importing memplan_cli as a library does not."""
    if "numpy" not in sys.modules and importlib.util.find_spec("numpy") is not None:
        from memplan_cli.lazyimport import defer

        defer("numpy")


_defer_numpy()
# A 100,000-op graph holds millions of small objects: with the default thresholds the cyclic
# collector rescans them all again and again (45% of the CPU time, measured). Young cycles are still
# collected; full collections of the long-lived graph practically never run. The CLI's choice only.
import gc  # noqa: E402

gc.set_threshold(100_000, 50, 10_000)

import click  # noqa: E402

from memplan_cli.version import __version__  # noqa: E402
from memplan_cli.errors import MemplanError  # noqa: E402

COMMAND_MODULES = ("analyze", "inspect", "diff", "sweep", "verify", "plan", "compare", "fit")


class MemplanGroup(click.Group):
    """Turns MemplanError into one line on stderr and exit 2; never shows a traceback
    (set MEMPLAN_DEBUG=1 to see one for an internal error)."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except MemplanError as e:
            click.echo(f"memplan: error: {e}", err=True)
            ctx.exit(e.exit_code)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except KeyboardInterrupt:
            click.echo("memplan: interrupted", err=True)
            ctx.exit(130)
        except MemoryError:
            click.echo("memplan: error: out of memory", err=True)
            ctx.exit(2)
        except Exception as e:  # a bug: one line, no traceback, unless asked
            if os.environ.get("MEMPLAN_DEBUG"):
                raise
            click.echo(f"memplan: internal error: {type(e).__name__}: {e} "
                       "(a bug in memplan; MEMPLAN_DEBUG=1 shows the traceback)", err=True)
            ctx.exit(70)


@click.group(cls=MemplanGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="memplan")
def main():
    """How much memory training a model takes, what it is made of, and how much less a better plan needs."""


def _register_commands():
    import importlib

    for name in COMMAND_MODULES:
        mod = importlib.import_module(f"memplan_cli.commands.{name}")
        main.add_command(mod.command)


_register_commands()

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
