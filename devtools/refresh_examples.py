"""Rewrite the output shown under each `$ memplan ...` line of README.md and docs/*.md with what it
prints now (tests/docs_examples.py runs them the same way). Blocks whose shown output uses `...` are
left alone and listed, to be updated by hand; read the diff before committing it.

    .venv/bin/python -m devtools.refresh_examples [README.md docs/x.md ...]
"""
from __future__ import annotations

import pathlib
import subprocess
import sys
import tempfile

from tests.docs_examples import ROOT, commands, environment, examples, matches, workdir


def refresh(doc: pathlib.Path, cwd: pathlib.Path, env: dict) -> list[str]:
    text = doc.read_text(encoding="utf-8")
    by_hand = []
    for block in examples(doc):
        if block.skip_reason() is not None or block.is_python:
            continue
        new_lines = []
        changed = False
        for cmd, expected, status in commands(block):
            r = subprocess.run(["bash", "-c", cmd], cwd=cwd, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
            got = [ln.rstrip() for ln in r.stdout.rstrip("\n").split("\n")] if r.stdout.strip() else []
            ok = r.returncode == status and matches(expected, got)
            if not ok and "..." in expected:
                by_hand.append(f"{doc.relative_to(ROOT)}:{block.line}: $ {cmd}")
                got = expected
            elif not ok:
                changed = True
            else:
                got = expected
            new_lines += [f"$ {cmd}", *got] + ([f"exit {r.returncode}"] if (r.returncode or status) and not ok
                                                else [f"exit {status}"] if status else [])
        if changed:
            old = block.text.rstrip("\n")
            text = text.replace(old, "\n".join(new_lines), 1)
    doc.write_text(text, encoding="utf-8")
    return by_hand


def main(argv: list[str]) -> int:
    docs = [ROOT / a for a in argv] or [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    with tempfile.TemporaryDirectory() as tmp:
        cwd, env = workdir(pathlib.Path(tmp) / "w"), environment()
        for d in docs:
            for line in refresh(d, cwd, env):
                print(f"update by hand: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
