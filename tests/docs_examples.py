"""The examples of README.md and docs/*.md, as runnable steps (used by tests/test_docs_examples.py and
tests/test_packaging.py).

An example is a fenced block whose first line starts with `$ `: each `$ COMMAND` line runs in bash,
and the lines after it, up to the next `$ `, are what it prints (stdout and stderr together). A line
`...` stands for any lines; a last line `exit N` is the exit status it must end with (else 0).
Blocks run in order, all of one document in one working folder (where `sample_models`, `docs` and
`tests` link to the repository's), so a file an example writes is there for the next. A python
block preceded by `<!-- example: python -->` runs there too. A comment `<!-- example: needs MOD[,MOD] -->` before a
block skips it, with the reason, where those modules are not importable; `<!-- example: skip
REASON -->` always skips it.
"""
from __future__ import annotations

import importlib.util
import os
import pathlib
import re
import subprocess
import sys
from dataclasses import dataclass, field

ROOT = pathlib.Path(__file__).resolve().parents[1]
_FENCE = re.compile(r"^```(\w*)\s*$")
_MARK = re.compile(r"^<!--\s*example:\s*(.*?)\s*-->\s*$")


@dataclass
class Block:
    doc: str
    line: int
    lang: str
    text: str
    marks: list[str] = field(default_factory=list)

    @property
    def is_console(self) -> bool:
        return self.text.lstrip().startswith("$ ")

    @property
    def is_python(self) -> bool:
        return self.lang == "python" and "python" in self.marks

    def skip_reason(self) -> str | None:
        for m in self.marks:
            if m.startswith("skip"):
                return m[4:].strip() or "marked skip"
            if m.startswith("needs "):
                missing = [x for x in m[6:].replace(" ", "").split(",") if importlib.util.find_spec(x) is None]
                if missing:
                    return f"needs {', '.join(missing)} (not installed here)"
        return None


def blocks(path: pathlib.Path) -> list[Block]:
    out, marks, lines = [], [], path.read_text(encoding="utf-8").split("\n")
    i = 0
    while i < len(lines):
        m = _MARK.match(lines[i])
        if m:
            marks.append(m.group(1))
            i += 1
            continue
        f = _FENCE.match(lines[i])
        if f:
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            out.append(Block(path.name, i + 1, f.group(1), "\n".join(lines[i + 1:j]), marks))
            marks, i = [], j + 1
            continue
        if lines[i].strip():
            marks = []
        i += 1
    return out


def examples(path: pathlib.Path) -> list[Block]:
    return [b for b in blocks(path) if b.is_console or b.is_python]


def commands(block: Block) -> list[tuple[str, list[str], int]]:
    """(command, expected lines, expected exit status) per `$ ` line of a console block."""
    out = []
    for line in block.text.split("\n"):
        if line.startswith("$ "):
            out.append([line[2:], [], 0])
        elif out:
            out[-1][1].append(line.rstrip())
    for c in out:
        while c[1] and not c[1][-1]:
            c[1].pop()
        if c[1] and re.fullmatch(r"exit \d+", c[1][-1]):
            c[2] = int(c[1].pop().split()[1])
    return [tuple(c) for c in out]


def matches(expected: list[str], got: list[str]) -> bool:
    """Line by line, `...` matching any run of lines (none included)."""
    if not expected:
        return not got
    if expected[0] == "...":
        return any(matches(expected[1:], got[k:]) for k in range(len(got) + 1))
    return bool(got) and got[0] == expected[0] and matches(expected[1:], got[1:])


def workdir(tmp: pathlib.Path, root: pathlib.Path = ROOT) -> pathlib.Path:
    """A folder outside the repository holding what the examples read (links to the repository's)."""
    tmp.mkdir(parents=True, exist_ok=True)
    for name in ("sample_models", "docs", "tests"):
        (tmp / name).symlink_to(root / name, target_is_directory=True)
    return tmp


def environment(bin_dir: str | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMPLAN_", "PYTEST", "COV_"))}
    env["PATH"] = (bin_dir or os.path.dirname(sys.executable)) + os.pathsep + env.get("PATH", "")
    env.update({"NO_COLOR": "1", "TERM": "dumb", "COLUMNS": "80", "PYTHONHASHSEED": "0"})
    return env


def run_block(block: Block, cwd: pathlib.Path, env: dict, python: str = sys.executable) -> list[str]:
    """The differences between what the block shows and what it prints now (empty: it holds)."""
    problems = []
    if block.is_python:
        r = subprocess.run([python, "-c", block.text], cwd=cwd, env=env, capture_output=True, text=True)
        if r.returncode:
            problems.append(f"{block.doc}:{block.line}: the python block failed:\n{r.stderr[-2000:]}")
        return problems
    for cmd, expected, status in commands(block):
        r = subprocess.run(["bash", "-c", cmd], cwd=cwd, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        got = [ln.rstrip() for ln in r.stdout.rstrip("\n").split("\n")] if r.stdout.strip() else []
        if r.returncode != status or not matches(expected, got):
            problems.append(f"{block.doc}:{block.line}: `$ {cmd}` exit {r.returncode} (shown: {status}), "
                            f"printed:\n" + "\n".join(got) + "\n--- the text shows:\n" + "\n".join(expected))
    return problems
