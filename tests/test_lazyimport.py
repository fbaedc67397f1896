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


def test_importing_memplan_leaves_numpy_whole_for_other_code():
    # a package's stand-in in sys.modules broke the import of its submodules (numpy.testing)
    out = _run(
        "import sys\n"
        "import memplan_cli.cli\n"
        "from memplan_cli.cli import main\n"
        f"sys.argv = ['memplan', 'analyze', {MOBILENET!r}, '-p', 'onert', '-f', 'json']\n"
        "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        "from memplan_cli.lazyimport import DeferredModule\n"
        "print(any(isinstance(m, DeferredModule) for n, m in sys.modules.items() if n.split('.')[0] == 'numpy'))\n"
        "import numpy as np\n"
        "import onnx\n"
        "np.testing.assert_equal(1, 1)\n"
        "print(type(np).__name__)\n")
    assert out.split("\n")[-3:-1] == ["False", "module"]


def test_a_private_stand_in_loads_the_real_module_on_first_read():
    out = _run(
        "import sys\n"
        "from memplan_cli.lazyimport import deferred\n"
        "c = deferred('colorsys')\n"
        "print('colorsys' in sys.modules)\n"
        "print(c.rgb_to_hls(1.0, 0.0, 0.0), 'colorsys' in sys.modules, deferred('colorsys') is sys.modules['colorsys'])\n")
    assert out.split("\n")[:2] == ["False", "(0.0, 0.5, 1.0) True True"]
