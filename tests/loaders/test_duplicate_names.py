"""Two tensors a file names alike: identity is the operand (Buffer.key), names are display only.

A TFLite or circle file may give every tensor the same name. Each profile must analyse it to the
same figures as the identical model with unique names, and verify must run its plans (memplan's and
onert's) as it does for the uniquely named one.
"""
import pytest
from click.testing import CliRunner

from devtools.modelgen import ModelBuilder
from memplan_cli import analyze
from memplan_cli.cli import main
from memplan_cli.loaders import load_model


# names that collide with the names memplan derives for training tensors (back-prop, gradient, state)
DERIVED = ("w", "w:bp", "w:grad", "w:m", "w:v", "w:bp@3")


def _model(path, same_name) -> str:
    m = ModelBuilder(seed=1)
    x = m.input([1, 8, 8, 3])
    y = m.conv2d(x, 4, 3, activation="RELU")
    z = m.conv2d(y, 4, 3, activation="RELU")
    s = m.add(z, y)  # a residual: two back-prop contributions to one tensor
    o = m.fully_connected(m.reshape(s, [1, -1]), 5)
    m.output(o)
    if same_name == "derived":
        for k, t in enumerate(m.tensors):
            t.name = DERIVED[k % len(DERIVED)]
    elif same_name:
        for t in m.tensors:
            t.name = "same"
    return m.save(str(path))


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("dup")
    return (_model(d / "unique.circle", False), _model(d / "same.circle", True),
            _model(d / "derived.circle", "derived"))


def test_loader_shows_repeated_names_apart(models):
    g = load_model(models[1])
    names = [o.name for o in g.operands]
    assert names[0] == "same" and len(set(names)) == len(names)
    assert any("share a name" in w for w in g.warnings)
    assert not any("share a name" in w for w in load_model(models[0]).warnings)


@pytest.mark.parametrize("profile", ["memplan", "onert", "nntrainer", "singa"])
def test_same_figures_as_unique_names(models, profile):
    unique, same, derived = (analyze(p, batch_size=2, optimizer="adam", trainable_ops="all", profile=profile,
                                     compare_onert=False) for p in models)
    for other in (same, derived):
        assert other.planned == unique.planned
        assert other.report["totals"] == unique.report["totals"]


@pytest.mark.parametrize("which", [1, 2])
@pytest.mark.parametrize("profile", ["memplan", "onert"])
def test_verify_runs_the_plan(models, profile, which):
    r = CliRunner().invoke(main, ["verify", models[which], "-b", "2", "-t", "all", "-O", "adam", "-p", profile],
                           env={"NO_COLOR": "1"})
    assert r.exit_code == 0, r.output
    assert "PASS" in r.output
