"""Errors that end a command with exit status 2 and one line on stderr, and the other exit statuses
the commands share (README, "Exit status"; memplan_cli/cli.py turns errors into theirs)."""

import unicodedata

# the check ran and failed: `verify` (the plan does not hold), `diff` (a threshold is exceeded)
EXIT_FAILED = 1
# the budget cannot be met: no batch (sweep), no remat plan (analyze, verify), no option (fit)
# fits. A budget that is no size, or 0 bytes, is bad input (2: memplan_cli/sizes.parse_budget).
EXIT_OVER_BUDGET = 3

# What a terminal must never receive from a file: C0 and C1 controls (ESC, BEL, CSI, a newline),
# format characters (the bidi overrides U+202A-202E and isolates U+2066-2069, U+200E/F marks, zero
# width characters), line and paragraph separators, and lone surrogates (a file name's odd bytes).
_ESCAPED_CATEGORIES = frozenset(("Cc", "Cf", "Zl", "Zp", "Cs"))
_SHORT = {0x0a: "\\n", 0x0d: "\\r", 0x09: " "}


def _escape(c: str) -> str:
    o = ord(c)
    if o in _SHORT:
        return _SHORT[o]
    return f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}"


def printable(text) -> str:
    """`text` safe to print on a terminal, on one line: every character a terminal would act on
    instead of showing (a newline, ESC sequences that clear or retitle it, BEL, C1 controls, bidi
    overrides that reorder what follows) is written as an escape (\\n, \\x1b, \\u202e); a tab
    becomes a space. The one rule for every string from a file (names, producer, signatures, custom
    op codes, CSV ids, metadata) shown to a person: messages, tables and `inspect`. JSON and CSV
    files keep the exact strings."""
    s = str(text)
    if s.isprintable():  # the common case, in C
        return s
    return "".join(_escape(c) if unicodedata.category(c) in _ESCAPED_CATEGORIES else c for c in s)


# the name the error paths have always used
one_line = printable


def shell_path(path: str) -> str:
    """`path` as one word of a command memplan suggests, so that it runs as printed: shell-quoted,
    with ./ before a leading dash (which would read as a flag)."""
    import shlex

    return shlex.quote("./" + path if path.startswith("-") else path)


class MemplanError(Exception):
    """A problem with the user's input (file, flags). Reported as one line, exit status 2."""

    exit_code = 2

    def __init__(self, message: str, path: str | None = None, *, flags_message: str | None = None):
        self.path = path
        self.message = message  # without the path: for tables that name the file already
        # the same message naming the command line's flags (--max-dim) where `message`, the
        # API's, names its keywords (max_dim); None: one wording serves both
        self.flags_message = flags_message
        super().__init__(f"{path}: {message}" if path else message)

    @classmethod
    def worded(cls, keywords: str, flags: str, path: str | None = None):
        """The error about parameters the API and the CLI name differently: `keywords` is its
        message (the API's, `str(e)`), `flags` the command line's (`cli_text()`)."""
        return cls(keywords, path, flags_message=flags)

    @classmethod
    def about(cls, keyword: str, rest: str, path: str | None = None):
        """The error `KEYWORD rest` about one parameter: the API names it `keyword` (max_dim), the
        command line by its long flag (--max-dim: the keyword, dashes for underscores)."""
        return cls.worded(f"{keyword}{rest}", f"--{keyword.replace('_', '-')}{rest}", path)

    def cli_text(self) -> str:
        """The message as the command line says it: its flags, not the API's keywords."""
        message = self.flags_message or self.message
        return f"{self.path}: {message}" if self.path else message


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


# what a message found before its file was known suggests; `naming` puts the file in (a command that
# runs as printed)
INSPECT_HINT = "`memplan inspect MODEL`"


def naming(path: str, err: MemplanError) -> MemplanError:
    """`err` with `path` in front of its message, unless it names a file already: an error found
    while training a model (an op without a rule, a trainable index out of range) is about that file.
    Its INSPECT_HINT names the file too, shell-quoted."""
    if err.path is not None:
        return err
    hint = f"`memplan inspect {shell_path(path)}`"

    def named(text):
        return text.replace(INSPECT_HINT, hint) if text is not None else None

    return type(err)(named(err.message), path, flags_message=named(err.flags_message))
