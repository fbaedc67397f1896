"""Errors that end a command with exit status 2 and one line on stderr, and the other exit statuses
the commands share (README, "Exit status"; memplan_cli/cli.py turns errors into theirs)."""

# the check ran and failed: `verify` (the plan does not hold), `diff` (a threshold is exceeded)
EXIT_FAILED = 1
# the budget cannot be met: no batch (sweep), no remat plan (analyze, verify), no option (fit)
# fits. A budget that is no size, or 0 bytes, is bad input (2: memplan_cli/sizes.parse_budget).
EXIT_OVER_BUDGET = 3

_CONTROL = {c: f"\\x{c:02x}" for c in [*range(0x20), *range(0x7f, 0xa0)]}
_CONTROL.update({0x0a: "\\n", 0x0d: "\\r", 0x09: " "})


def one_line(text) -> str:
    """`text` with control characters escaped (a newline becomes \\n, ESC \\x1b): messages and reports
    quote a model's own strings (tensor names, external-data locations), which must neither break
    the line nor drive the terminal."""
    return str(text).translate(_CONTROL)


class MemplanError(Exception):
    """A problem with the user's input (file, flags). Reported as one line, exit status 2."""

    exit_code = 2

    def __init__(self, message: str, path: str | None = None):
        self.path = path
        self.message = message  # without the path: for tables that name the file already
        super().__init__(f"{path}: {message}" if path else message)


class OutputError(MemplanError):
    """Writing the report failed: a full disk, an I/O error, a closed or full stdout. Exit status 74
    (EX_IOERR of sysexits.h): the input was fine, the output was not."""

    exit_code = 74


class ModelError(MemplanError):
    """The model file cannot be read or is not a model memplan understands."""


class UnsupportedOpError(MemplanError):
    """An op inside the backward region has no backward rule."""


class ConfigError(MemplanError):
    """Training configuration flags are invalid or conflict."""


def naming(path: str, err: MemplanError) -> MemplanError:
    """`err` with `path` in front of its message, unless it names a file already: an error found
    while training a model (an op without a rule, a trainable index out of range) is about that file."""
    return err if err.path is not None else type(err)(err.message, path)
