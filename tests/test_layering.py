"""The package's import rule: the buffer list is the narrow waist and no import runs back up.

ops (the op registry) -> ir, execute's NumPy kernels; loaders -> ir, ops; passes -> ir, ops, buffers; planners -> nothing of memplan's but themselves; reports ->
buffers and their own modules. Checked on the source (every `import` anywhere in a module, also
inside functions), so a shortcut taken in a hurry fails here rather than in review.
"""
import ast
import pathlib

import pytest

PKG = pathlib.Path(__file__).parents[1] / "memplan_cli"
COMMON = {"errors", "_version"}  # what every layer may raise or print
ALLOWED = {
    # the op registry is one vertical slice per op family: ir asks it for contracts and batch rules,
    # loaders for converters, passes for rules; it uses ir and the NumPy kernel helpers of execute
    "ops": {"ops", "ir", "execute"},
    "ir": {"ir", "ops"},
    "loaders": {"loaders", "ir", "traininfo", "ops"},
    "traininfo": {"traininfo"},
    "passes": {"passes", "ir", "buffers", "config", "ops"},
    "planners": {"planners", "check"},  # `best` keeps only plans the independent verifier passes
    "check": {"check", "buffers"},
    "report": {"report", "buffers"},
}


def memplan_imports(path: pathlib.Path) -> set[str]:
    """The first-level memplan_cli modules `path` imports."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for n in names:
            parts = n.split(".")
            if parts[0] == "memplan_cli" and len(parts) > 1:
                out.add(parts[1])
    return out


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_no_import_runs_back_up(layer):
    bad = {}
    for f in sorted((PKG / layer).rglob("*.py")):
        extra = memplan_imports(f) - ALLOWED[layer] - COMMON
        if extra:
            bad[str(f.relative_to(PKG))] = sorted(extra)
    assert not bad, f"{layer} may import only {sorted(ALLOWED[layer])}: {bad}"


def test_the_checker_sees_function_level_imports(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from memplan_cli.loaders import load_model\n")
    assert memplan_imports(f) == {"loaders"}
