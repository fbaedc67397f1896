"""memplan_cli.lazyimport: a stand-in passes `import` untouched and loads the real module on the
first attribute read; afterwards both names hold the real namespace."""
import pathlib
import subprocess
import sys

MOBILENET = str(pathlib.Path(__file__).parents[1] / "sample_models" / "mobilenetv2.circle")


def _run(code: str) -> str:
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_a_deferred_module_loads_on_first_attribute_read():
    out = _run(
        "import sys\n"
        "from memplan_cli.lazyimport import DeferredModule, defer\n"
        "defer('colorsys')\n"
        "import colorsys\n"  # the stand-in: not loaded by the import statement
        "print(type(colorsys) is DeferredModule, 'rgb_to_hls' in vars(colorsys))\n"
        "print(colorsys.rgb_to_hls(1.0, 0.0, 0.0))\n"
        "print(type(sys.modules['colorsys']) is DeferredModule, 'rgb_to_hls' in vars(colorsys))\n")
    assert out.split("\n")[:3] == ["True False", "(0.0, 0.5, 1.0)", "False True"]


def test_the_circle_loader_reads_only_the_schema_tables_it_needs():
    out = _run(
        "import sys\n"
        "from memplan_cli.lazyimport import DeferredModule\n"
        "from memplan_cli.loaders import load_model\n"
        f"g = load_model({MOBILENET!r})\n"
        "mods = [m for n, m in sys.modules.items() if n.startswith('circle_schema.v0_10.circle.')]\n"
        "print(len(g.operations), len(mods), sum(type(m) is not DeferredModule for m in mods))\n")
    ops, mods, real = map(int, out.split())
    assert ops > 60 and mods > 150 and real < 40
