"""Command-line entry point. Kept thin: each command lives in `memplan_cli/commands/<name>.py`,
parses its flags and calls the work; this module only wires commands and turns errors into exit codes.

Exit codes: 0 ok; 1 regression (diff thresholds); 2 bad input or usage; 3 over budget (sweep);
70 internal error (a bug in memplan: please report it).
"""
from __future__ import annotations

import gc
import os
import sys

import click

from memplan_cli.errors import MemplanError
from memplan_cli.version import __version__

# A 100,000-op graph holds millions of small objects: with the default thresholds the cyclic
# collector rescans them all again and again (45% of the CPU time, measured). Young cycles are still
# collected; full collections of the long-lived graph practically never run. The CLI's choice only.
gc.set_threshold(100_000, 50, 10_000)

COMMAND_MODULES = ("analyze", "inspect", "diff", "sweep", "verify", "plan", "compare", "fit")


def usage_line(e: click.UsageError) -> str:
    """click's usage error (three lines: usage, hint, error) as memplan's one line."""
    where = e.ctx.command_path if e.ctx is not None else "memplan"
    return f"memplan: error: {e.format_message()} (see '{where} --help')"


class MemplanGroup(click.Group):
    """Turns MemplanError into one line on stderr and exit 2, and click's usage errors into one
    line too; never shows a traceback (set MEMPLAN_DEBUG=1 to see one for an internal error)."""

    def make_context(self, info_name, args, parent=None, **extra):
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.UsageError as e:
            if type(e).__name__ == "NoArgsIsHelpError":  # bare `memplan`: the help, as click shows it
                raise
            click.echo(usage_line(e), err=True)
            sys.exit(e.exit_code)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except click.UsageError as e:
            click.echo(usage_line(e), err=True)
            ctx.exit(e.exit_code)
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
