"""The package's import rule: the buffer list is the narrow waist and imports only run down.

Every package and first-level module of memplan_cli has an entry in ALLOWED (a new one fails
`test_every_module_has_a_rule` until it gets one), and may import only the memplan_cli modules its
entry names, plus `errors` (what every layer may raise) and the package's `__version__`. From the
bottom up:

- leaves: `errors`, `version`, `buffers` (the waist: Buffer, Step, Pool, BufferList), `lazyimport` (the
  stand-in that defers a library's import to its first use) import nothing of memplan's, nor does
  `sizes` (sizes as text, the one budget parser) but errors; nor does
  `schemas` (the JSON Schemas, at the repository's top level, shipped as memplan_cli.schemas); `config`
  and `inputs` (the regular-file check every input opener makes) only errors; `traininfo` only
  itself.
- `kernels`: NumPy reference kernels (no memplan imports).
- `ir` (the graph) imports nothing but itself: it knows no op. `ops` (the op registry, one vertical
  slice per op family) uses ir and `kernels`; `opgraph` (the analyses that consult the registry: op
  contracts, re-batching, shape values, folding, loss outputs) uses ir, ops and lazyimport (a NumPy
  that loads on first use).
- `loaders` -> inputs, ir, opgraph, ops, traininfo, lazyimport (loaders know nothing of training).
- `passes` -> ir, opgraph, ops, buffers, config (the training graph).
- `check` -> buffers; `planners` -> check only (`best` keeps only plans the independent verifier
  passes; planners know nothing of models); `report` -> buffers, sizes and config (the training flags' JSON names) only.
- `profiles` -> buffers, check, ir, ops, passes, planners (a graph + setup -> a BufferList and
  plans; the onert profile reads onert's facts from the op registry).
- `planrun` -> check, planners; `plancsv` -> inputs, planrun (buffer lists beyond models).
- `analysis` -> buffers, check, config, ir, loaders, opgraph, planners, profiles; `comparison` -> analysis,
  buffers, config, loaders; `execute` (runs a given training step in a given layout) -> ops,
  kernels only; `remat` (the remat solver) -> analysis and what lies below it; `verification` (the
  work of `memplan verify`: load, analyse, build the step, run it) -> analysis, loaders, passes,
  ops, execute.
- `baseline` (a saved report read back for `diff`: parsed within limits, checked, its setup as
  flags) -> config, inputs, profiles (their names), report (the report check).
- `api` (the Python API: analyze, compare, plan, verify, fit, sweep, diff, inspect, and the setup
  merging the commands share) -> analysis, baseline, inspection, comparison, config, loaders, opgraph, planners, planrun, plancsv, profiles, remat, report,
  verification.
- `inspection` (the work of `memplan inspect`: a graph's lines and JSON) -> analysis (the file's
  hash), ir, opgraph (the outputs' names), report (the documents' header).
- `commands` (click parsing and printing, one command a file) -> api, report and errors only (not
  even `version` or the package: the rule is STRICT), never `cli`; `cli` -> commands;
  `__main__` -> cli; `__init__` -> version, and api and errors lazily (a module `__getattr__`, so
  `import memplan_cli` stays light); nothing inside the package imports `__init__`'s names.

Nothing in memplan_cli imports the dev-only `devtools` or `tests`. No two modules import each other,
directly or around a loop (`test_no_import_cycle_between_modules`), function-level imports included. Checked on the source (every
`import` anywhere in a module, also inside functions, absolute or relative), so a shortcut taken
in a hurry fails here rather than in review.
"""
import ast
import pathlib

import pytest

PKG = pathlib.Path(__file__).parents[1] / "memplan_cli"
COMMON = {"errors", "version", "__init__"}  # what every layer may raise; the version; the package (`from memplan_cli import __version__`)
ALLOWED = {
    "errors": set(),
    "version": set(),
    "buffers": set(),
    "config": set(),
    "inputs": set(),
    "lazyimport": set(),
    "sizes": set(),
    "traininfo": {"traininfo"},
    "kernels": set(),
    "ir": {"ir"},
    "ops": {"ops", "ir", "kernels"},
    "opgraph": {"opgraph", "ir", "ops", "lazyimport"},
    "loaders": {"loaders", "inputs", "ir", "opgraph", "traininfo", "ops", "lazyimport"},
    "passes": {"passes", "ir", "opgraph", "buffers", "config", "ops"},
    "check": {"check", "buffers"},
    "planners": {"planners", "check"},
    "report": {"report", "buffers", "config", "sizes"},
    "profiles": {"profiles", "buffers", "check", "ir", "ops", "passes", "planners"},
    "planrun": {"check", "planners"},
    "plancsv": {"inputs", "planrun"},
    "analysis": {"buffers", "check", "config", "ir", "loaders", "opgraph", "planners", "profiles"},
    "comparison": {"analysis", "buffers", "config", "loaders"},
    "execute": {"execute", "ops", "kernels"},
    "verification": {"verification", "analysis", "loaders", "passes", "ops", "execute"},
    "remat": {"remat", "analysis", "buffers", "check", "config", "ir", "ops", "passes", "planners", "profiles"},
    "baseline": {"config", "inputs", "profiles", "report"},
    "inspection": {"analysis", "ir", "opgraph", "report"},
    "api": {"analysis", "baseline", "buffers", "inspection", "comparison", "config", "ir", "loaders", "opgraph", "planners", "planrun", "plancsv",
            "profiles", "remat", "report", "sizes", "verification"},
    # complete, COMMON not added (STRICT): the commands parse and print, and reach the work only through
    # the API
    "commands": {"commands", "api", "report", "errors"},
    "cli": {"commands"},
    "__main__": {"cli"},
    "__init__": {"api", "version"},
}
# layers whose ALLOWED entry is the whole rule (not even COMMON's version or package names)
STRICT = {"commands"}
DEV_ONLY = {"devtools", "tests"}


def _module_name(path: pathlib.Path) -> str:
    """Dotted module name of a file under PKG ('memplan_cli.report.table')."""
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: pathlib.Path, name: str):
    """(node, module) for every import statement of `path` (module `name`): an ImportFrom's module
    with relative imports resolved against its package, None for a plain Import."""
    is_pkg = path.name == "__init__.py"
    here = name.split(".")
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = here if is_pkg else here[:-1]
                base = base[:len(base) - (node.level - 1)]
                yield node, ".".join(base + ([node.module] if node.module else []))
            else:
                yield node, node.module
        elif isinstance(node, ast.Import):
            yield node, None


def imported_modules(path: pathlib.Path, name: str | None = None) -> set[str]:
    """Every absolute module name `path` (module `name`, by default from its place under PKG)
    imports, relative imports resolved against its package. `from a import b` yields `a` and
    `a.b` (b may be a submodule)."""
    out = set()
    for node, mod in _imports(path, name or _module_name(path)):
        if isinstance(node, ast.ImportFrom):
            out.add(mod)
            out.update(f"{mod}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def memplan_imports(path: pathlib.Path, name: str | None = None) -> set[str]:
    """The first-level memplan_cli modules `path` imports. `memplan_cli` itself and its dunders
    (`__version__`) count as `__init__`; any other name taken from `memplan_cli` is the API's;
    `from memplan_cli import api` takes the submodule only, no name of the package's own."""
    out = set()
    modules = first_level()
    for node, mod in _imports(path, name or _module_name(path)):
        if isinstance(node, ast.ImportFrom):
            fulls = [f"{mod}.{a.name}" for a in node.names]
            if mod != "memplan_cli" or not all(a.name in modules for a in node.names):
                fulls.append(mod)
        else:
            fulls = [a.name for a in node.names]
        for full in fulls:
            parts = full.split(".")
            if parts[0] != "memplan_cli":
                continue
            if len(parts) == 1 or parts[1].startswith("__") and parts[1] not in modules:
                out.add("__init__")
            else:
                out.add(parts[1] if parts[1] in modules else "api")
    return out


def first_level() -> set[str]:
    return {p.stem if p.is_file() else p.name for p in PKG.iterdir()
            if (p.is_file() and p.suffix == ".py") or (p.is_dir() and (p / "__init__.py").exists())}


def files_of(layer: str) -> list[pathlib.Path]:
    d = PKG / layer
    return sorted(d.rglob("*.py")) if d.is_dir() else [PKG / f"{layer}.py"]


def test_every_module_has_a_rule():
    assert first_level() == set(ALLOWED), (
        f"without a rule: {sorted(first_level() - set(ALLOWED))}; "
        f"rules for nothing: {sorted(set(ALLOWED) - first_level())}")


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_no_import_runs_back_up(layer):
    bad = {}
    for f in files_of(layer):
        # a package's own name is always fine inside it (memplan_cli.report.x importing report.y)
        extra = memplan_imports(f) - ALLOWED[layer] - (set() if layer in STRICT else COMMON) - {layer}
        if extra:
            bad[str(f.relative_to(PKG))] = sorted(extra)
    assert not bad, f"{layer} may import only {sorted(ALLOWED[layer])}: {bad}"


def test_the_ir_is_below_the_op_registry():
    # the IR core knows no op: what consults the registry lives in opgraph/, above ops/
    bad = {str(f.relative_to(PKG)): sorted(memplan_imports(f) & {"ops", "opgraph"}) for f in files_of("ir")}
    assert not {k: v for k, v in bad.items() if v}
    assert "ir" in ALLOWED["ops"] and not ALLOWED["ir"] & {"ops", "opgraph"}


def test_the_schemas_package_imports_nothing_of_memplan():
    assert memplan_imports(PKG.parent / "schemas" / "__init__.py", "memplan_cli.schemas") == set()


def test_the_package_never_imports_dev_only_code():
    bad = {str(f.relative_to(PKG)): sorted(n for n in imported_modules(f) if n.split(".")[0] in DEV_ONLY)
           for f in sorted(PKG.rglob("*.py"))}
    assert not {k: v for k, v in bad.items() if v}


def test_the_checker_sees_function_level_imports(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from memplan_cli.loaders import load_model\n")
    assert memplan_imports(f, "memplan_cli.m") == {"loaders"}


def test_the_checker_resolves_relative_imports(tmp_path):
    f = tmp_path / "probe.py"
    f.write_text("from ..analysis import analyze\nfrom . import table\nfrom .. import planners\n")
    assert memplan_imports(f, "memplan_cli.report.probe") == {"analysis", "report", "planners"}
    assert memplan_imports(f, "memplan_cli.report.sub.probe") == {"report"}


def test_the_checker_tells_submodules_from_names(tmp_path):
    f = tmp_path / "probe.py"
    f.write_text("from memplan_cli import ops, __version__\n")
    assert memplan_imports(f, "memplan_cli.x") == {"ops", "__init__"}
    f.write_text("from memplan_cli import ops\n")
    assert memplan_imports(f, "memplan_cli.x") == {"ops"}
    f.write_text("from memplan_cli import analyze\n")
    assert memplan_imports(f, "memplan_cli.x") == {"__init__", "api"}


def _module_graph() -> dict[str, set[str]]:
    """memplan_cli module -> the memplan_cli modules whose names it imports (a package stands for its
    __init__). `from pkg import sub` depends on the module `sub`, not on pkg's __init__ (Python runs
    a parent package first whatever its children need: that is not a dependency of names)."""
    files = {_module_name(f): f for f in PKG.rglob("*.py")}
    graph = {}
    for name, f in files.items():
        deps = set()
        for node, mod in _imports(f, name):
            if isinstance(node, ast.ImportFrom):
                for a in node.names:
                    deps.add(f"{mod}.{a.name}" if f"{mod}.{a.name}" in files else mod)
            elif isinstance(node, ast.Import):
                deps.update(a.name for a in node.names)
        graph[name] = {d for d in deps if d in files and d != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import loop of `graph` (a list of modules, the first repeated at the end), or None."""
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []
    for root in sorted(graph):
        if root in state:
            continue
        work = [(root, iter(sorted(graph[root])))]
        state[root] = 1
        stack.append(root)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is None:
                work.pop()
                stack.pop()
                state[node] = 2
            elif state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            elif nxt not in state:
                state[nxt] = 1
                stack.append(nxt)
                work.append((nxt, iter(sorted(graph.get(nxt, ())))))
    return None


def test_no_import_cycle_between_modules():
    cycle = find_cycle(_module_graph())
    assert cycle is None, "import loop: " + " -> ".join(cycle)


def test_the_cycle_finder_finds_a_loop():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None
