"""A `memplan analyze` command that a report prints, as lines that fit the width and paste as one
command (`memplan fit`'s options, a note's suggested command)."""
from __future__ import annotations

import re
import shlex


def shell_lines(command: str, width: int, lead: str = "") -> list[str]:
    """`command` as lines of at most `width` columns, the first after `lead`: broken at spaces, each
    line but the last ending in ` \\` (a shell line continuation, so the lines still paste as one
    command). A word longer than a line (a deep model path) is cut into pieces, each quoted on its
    own and ended by `\\` with no space: the shell drops the backslash and the newline and joins the
    pieces into one word, so their lines start at column 0 (an indent would split the word)."""
    indent = " " * (len(lead) + 4)
    lines, line, fresh = [], lead, True
    for word, raw in _shell_words(command):
        if not fresh and len(line) + 1 + len(word) + 2 > width:
            lines.append(line + " \\")
            line, fresh = indent, True
        sep = "" if fresh else " "
        if raw is not None and len(line) + len(sep) + len(word) + 2 > width:
            pieces = _pieces(raw, width - len(line) - len(sep) - 1, width - 1)
            lines.append(line + sep + pieces[0] + "\\")
            lines.extend(piece + "\\" for piece in pieces[1:-1])
            line, fresh = pieces[-1], False
            continue
        line, fresh = line + sep + word, False
    lines.append(line)
    return lines


def _pieces(raw: str, first: int, rest: int) -> list[str]:
    """`raw` cut into shell-quoted pieces, the first at most `first` columns, the others `rest`."""
    out, room = [], max(first, 8)
    while raw:
        n = len(raw)
        while n > 1 and len(shlex.quote(raw[:n])) > room:
            n -= 1
        out.append(shlex.quote(raw[:n]))
        raw, room = raw[n:], rest
    return out


def _shell_words(command: str) -> list[tuple[str, str | None]]:
    """`command`'s words as the shell quotes them, a flag and its value kept as one: the places a
    line may break; each with its unquoted text when it is one token (None for a flag and its value).
    The program, the subcommand and the model path are words of their own, so a long path moves to a
    line of its own instead of running past the width."""
    words: list[tuple[str, str | None]] = []
    flag_waits = False
    for token in shlex.split(command):
        quoted = shlex.quote(token)
        if flag_waits and not re.match(r"--?[A-Za-z]", token):
            words[-1] = (words[-1][0] + " " + quoted, None)
            flag_waits = False
        else:
            words.append((quoted, token))
            flag_waits = bool(re.match(r"--?[A-Za-z]", token)) and "=" not in token
    return words
