"""Every example in README.md and docs/*.md that shows memplan's output still prints what the text
shows (tests/docs_examples.py says how an example is written and marked)."""
import pathlib

import pytest

from tests.docs_examples import ROOT, environment, examples, run_block, workdir

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.slow
@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_examples_print_what_the_text_shows(doc, tmp_path):
    """Every example of one document, in order, in one folder (those that cannot run here are
    reported by the test below)."""
    runnable = [b for b in examples(doc) if b.skip_reason() is None]
    if not runnable:
        pytest.skip(f"{doc.relative_to(ROOT)} shows no example that runs here")
    cwd, env = workdir(tmp_path), environment()
    problems = []
    for b in runnable:
        problems += run_block(b, cwd, env)
    assert not problems, "\n\n".join(problems)


MARKED = [b for d in DOCS for b in examples(d) if any(m.startswith(("skip", "needs")) for m in b.marks)]


@pytest.mark.parametrize("block", MARKED, ids=lambda b: f"{b.doc}:{b.line}")
def test_examples_that_need_more_say_why(block):
    """An example marked `needs` runs with the others where its modules are installed; here it says
    why it did not."""
    reason = block.skip_reason()
    if reason:
        pytest.skip(f"{block.doc}:{block.line}: {reason}")


def test_an_example_is_recognised_and_compared(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text("text\n\n```\n$ echo a; echo b; echo c\na\n...\nc\n$ exit 3\nexit 3\n```\n\n"
                   "<!-- example: skip not runnable here -->\n```\n$ false\n```\n")
    found = examples(doc)
    assert [b.skip_reason() for b in found] == [None, "not runnable here"]
    assert run_block(found[0], tmp_path, environment()) == []
    wrong = found[0].__class__(**{**found[0].__dict__, "text": "$ echo a\nb"})
    assert run_block(wrong, tmp_path, environment()) != []


REPO_DIRS = ("memplan_cli/", "scripts/", "benchmarks/", "tests/", "sample_models/", "docs/", "devtools/", ".ci/")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_docs_name_only_files_that_exist(doc):
    """Links and repository paths in backticks name files of this repository; no machine's own paths."""
    import re

    text = doc.read_text(encoding="utf-8")
    assert "/work/" not in text and "/home/" not in text
    missing = []
    for target in re.findall(r"\]\(([^)#\s]+)", text):
        if "://" not in target and not (doc.parent / target).exists():
            missing.append(target)
    for path in re.findall(r"`([\w./-]+)`", text):
        if path.startswith(REPO_DIRS) and "*" not in path and not (ROOT / path.rstrip("/")).exists():
            missing.append(path)
    assert missing == []
