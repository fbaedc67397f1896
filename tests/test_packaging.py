"""`pip install .` ships memplan_cli and nothing dev-only: the package list setuptools builds the
wheel from (pyproject's `[tool.setuptools.packages.find]`, the same call setuptools makes) holds no
test generator, no onert runtime harness and no tests."""
import ast
import pathlib
import tomllib

from setuptools import find_packages

ROOT = pathlib.Path(__file__).parents[1]
DEV_ONLY_MODULES = {"modelgen", "zoo", "onert_runtime", "onert_check", "runtime"}
DEV_ONLY_CLASSES = {"ModelBuilder"}


def shipped_packages() -> list[str]:
    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    return find_packages(where=str(ROOT / find.get("where", ["."])[0]),
                         include=find.get("include", ["*"]), exclude=find.get("exclude", []))


def test_only_memplan_cli_ships():
    pkgs = shipped_packages()
    assert "memplan_cli" in pkgs
    assert [p for p in pkgs if p.split(".")[0] != "memplan_cli"] == []
    # the dev-only package exists next to it, so the check above has something to leave out
    assert (ROOT / "devtools" / "__init__.py").is_file()


def test_no_test_generator_ships():
    bad = []
    for pkg in shipped_packages():
        d = ROOT.joinpath(*pkg.split("."))
        for f in sorted(d.glob("*.py")):
            if f.stem in DEV_ONLY_MODULES or pkg.split(".")[-1] in {"testing", "tests"}:
                bad.append(str(f.relative_to(ROOT)))
            classes = {n.name for n in ast.walk(ast.parse(f.read_text())) if isinstance(n, ast.ClassDef)}
            if classes & DEV_ONLY_CLASSES:
                bad.append(f"{f.relative_to(ROOT)}: {sorted(classes & DEV_ONLY_CLASSES)}")
    assert bad == []
