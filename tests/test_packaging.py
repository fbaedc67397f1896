"""`pip install .` ships memplan_cli and nothing dev-only: the package list setuptools builds the
wheel from (setup.py's PACKAGES: memplan_cli's packages and the top-level schemas/) holds no
test generator, no onert runtime harness and no tests; the runtime dependencies are what the
package imports; and a clone without a C compiler installs and follows the README."""
import ast
import importlib.util
import os
import pathlib
import shutil
import subprocess
import sys
import tomllib
import zipfile

import pytest

ROOT = pathlib.Path(__file__).parents[1]
DEV_ONLY_MODULES = {"modelgen", "zoo", "onert_runtime", "onert_check", "runtime"}
DEV_ONLY_CLASSES = {"ModelBuilder"}


def _setup_py():
    """setup.py as a module, without running setup() (it runs only as __main__)."""
    spec = importlib.util.spec_from_file_location("memplan_setup_py", ROOT / "setup.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def shipped_packages() -> list[str]:
    return list(_setup_py().PACKAGES)


def package_dir(pkg: str) -> pathlib.Path:
    """Where a shipped package's files are in the repository (setup.py's package_dir mapping)."""
    mapped = _setup_py().PACKAGE_DIR
    return ROOT / mapped[pkg] if pkg in mapped else ROOT.joinpath(*pkg.split("."))


def test_only_memplan_cli_ships():
    pkgs = shipped_packages()
    assert "memplan_cli" in pkgs
    assert [p for p in pkgs if p.split(".")[0] != "memplan_cli"] == []
    # the dev-only package exists next to it, so the check above has something to leave out
    assert (ROOT / "devtools" / "__init__.py").is_file()


def test_no_test_generator_ships():
    bad = []
    for pkg in shipped_packages():
        d = package_dir(pkg)
        for f in sorted(d.glob("*.py")):
            if f.stem in DEV_ONLY_MODULES or pkg.split(".")[-1] in {"testing", "tests"}:
                bad.append(str(f.relative_to(ROOT)))
            classes = {n.name for n in ast.walk(ast.parse(f.read_text())) if isinstance(n, ast.ClassDef)}
            if classes & DEV_ONLY_CLASSES:
                bad.append(f"{f.relative_to(ROOT)}: {sorted(classes & DEV_ONLY_CLASSES)}")
    assert bad == []


def test_runtime_dependencies_are_what_the_package_imports():
    """Every runtime dependency is imported somewhere in memplan_cli (jsonschema and tflite are only
    the tests'); test-only modules stay out of the package."""
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    import_names = {"circle-schema": "circle_schema"}
    imported = set()
    for f in (ROOT / "memplan_cli").rglob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                imported.add(node.module.split(".")[0])
    for dep in meta["dependencies"]:
        name = dep.split(">")[0].split("=")[0].split("<")[0].strip()
        assert import_names.get(name, name) in imported, f"{name} is a dependency but memplan_cli never imports it"
    assert not (ROOT / "memplan_cli" / "traininfo" / "write.py").exists()
    assert isinstance(meta["license"], str)  # an SPDX expression: the TOML table is deprecated


def _clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTHON", "MEMPLAN_", "PYTEST", "VIRTUAL_ENV", "PIP_REQUIRE"))}
    env.update(extra)
    return env


def _run(cmd, cwd, env, timeout=900):
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                       shell=isinstance(cmd, str), executable="/bin/bash" if isinstance(cmd, str) else None)
    assert r.returncode == 0, f"{cmd}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r.stdout + r.stderr


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="the README's commands are for a POSIX shell")
def test_a_fresh_clone_without_a_compiler_follows_the_readme(tmp_path):
    """On a clone with no C compiler (CC=/bin/false): the README's first line as written, then a
    wheel built the same way, installed, and the README's examples run from outside the repository
    with the installed memplan (pure-Python kernels)."""
    from tests.docs_examples import environment, examples, run_block, workdir

    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout to copy the tracked files from")
    clone = tmp_path / "clone"
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split("\0")
    for f in filter(None, files):
        if (ROOT / f).is_file():
            (clone / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, clone / f)
    env = _clean_env(CC="/bin/false", CXX="/bin/false", LDSHARED="/bin/false")
    first = (ROOT / "README.md").read_text().split("```bash\n", 1)[1].split("\n", 1)[0]
    assert first.startswith("python3 -m venv .venv") and "memplan analyze" in first
    # where Python writes no bytecode, the editable install has compiled it (setup.py), so a start
    # does not compile every module's source again
    out = _run(first.replace("python3 ", f"{sys.executable} ", 1), clone, dict(env, PYTHONDONTWRITEBYTECODE="1"))
    assert "memplan planned" in out and "lower bound" in out
    assert list((clone / "memplan_cli" / "__pycache__").glob("cli.*.pyc"))
    assert list((clone / "memplan_cli" / "ops" / "__pycache__").glob("conv.*.pyc"))

    # a wheel, built without a compiler: no compiled kernels, the schemas, nothing dev-only
    log = _run([str(clone / ".venv" / "bin" / "pip"), "wheel", "-v", "--no-deps", "-w", str(tmp_path / "w"), "."],
               clone, env)
    assert "SetuptoolsDeprecationWarning" not in log
    assert "the C planner kernels were not built" in log
    wheel = next((tmp_path / "w").glob("memplan-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert not [n for n in names if n.endswith((".so", ".pyd"))]
    assert {"memplan_cli/schemas/analysis.schema.json", "memplan_cli/schemas/verify.schema.json"} <= set(names)
    assert not [n for n in names if n.startswith(("tests/", "devtools/")) or n.endswith("traininfo/write.py")]
    _run([str(clone / ".venv" / "bin" / "pip"), "install", "-q", "--force-reinstall", "--no-deps", str(wheel)],
         clone, env)

    # from outside the repository, as a user would: the installed package, the README's examples
    bin_dir = str(clone / ".venv" / "bin")
    outside = workdir(tmp_path / "outside", clone)
    where = _run([str(clone / ".venv" / "bin" / "python"), "-c",
                  "import memplan_cli, memplan_cli.planners._native as n; print(memplan_cli.__file__, n.BACKEND)"],
                 outside, _clean_env())
    assert "site-packages" in where and where.split()[-1] == "python"
    assert "planner kernels: python" in _run("memplan analyze sample_models/mnist.circle -v", outside,
                                             environment(bin_dir))
    problems = []
    for b in examples(clone / "README.md"):
        if b.skip_reason() is None:
            problems += run_block(b, outside, environment(bin_dir), python=str(clone / ".venv" / "bin" / "python"))
    assert not problems, "\n\n".join(problems)


def _tracked_files() -> list[tuple[str, str]]:
    """(git mode, path) of every file in the repository's index; skips outside a git checkout."""
    git = shutil.which("git")
    if git is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    out = subprocess.run([git, "ls-files", "-s", "-z"], cwd=ROOT, capture_output=True, check=True)
    rows = []
    for entry in out.stdout.decode().split("\0"):
        if entry:
            meta, path = entry.split("\t", 1)
            rows.append((meta.split()[0], path))
    return rows


def test_the_repository_tracks_no_symlink_and_no_environment():
    """A clone must not depend on the machine it was made on: a committed symlink (a `.venv` that
    pointed into a developer's worktree once slipped in) names a path of that machine."""
    rows = _tracked_files()
    assert rows, "git ls-files found nothing"
    assert [p for mode, p in rows if mode == "120000"] == []
    assert [p for _, p in rows if p.split("/")[0] in {".venv", "venv", "build", "dist"}] == []


# what the repository's root holds; anything else there is a stray file (a report written with
# `-o` into the checkout once got committed as `adam`)
ROOT_FILES = {"README.md", "pyproject.toml", "setup.py", "requirements-dev.txt", ".gitignore"}


def _looks_like_report(path: pathlib.Path) -> bool:
    """A memplan report: JSON with memplan's envelope, or a table's header line ('MODEL (FORMAT, N
    ops) · profile ...')."""
    try:
        head = path.read_bytes()[:4096].decode("utf-8", "replace")
    except OSError:
        return False
    return '"memplan_version"' in head or " · profile " in head.split("\n", 1)[0]


def test_no_stray_file_at_the_root():
    tracked_root = sorted(p for _, p in _tracked_files() if "/" not in p)
    assert [p for p in tracked_root if p not in ROOT_FILES] == []
    # untracked ones too: a report written there is one `git add .` from being committed
    reports = [p.name for p in ROOT.iterdir() if p.is_file() and p.name not in ROOT_FILES and _looks_like_report(p)]
    assert reports == []


def test_the_stray_file_check_sees_a_report(tmp_path):
    table = tmp_path / "adam"
    table.write_text("bert_tiny_dynamo.onnx (onnx, 38 ops) · profile memplan · batch 2 · sgd\n")
    doc = tmp_path / "out"
    doc.write_text('{\n  "schema_version": 1,\n  "kind": "analysis",\n  "memplan_version": "0.1.0"\n}\n')
    other = tmp_path / "notes"
    other.write_text("a note\n")
    assert [_looks_like_report(p) for p in (table, doc, other)] == [True, True, False]
