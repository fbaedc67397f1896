"""One JSON convention for every command that prints JSON: `schema_version`, `kind` and
`memplan_version` first, analyze's names for the training setup, and a schema per kind shipped in
the wheel (schemas/KIND.schema.json, installed as memplan_cli/schemas/) that the document validates against."""
import json
import pathlib

import jsonschema
import pytest
from click.testing import CliRunner

from memplan_cli.cli import main
from memplan_cli.schemas import load_schema, schema_path

ROOT = pathlib.Path(__file__).parents[2]
MNIST = str(ROOT / "sample_models" / "mnist.circle")
TRAINING_NAMES = {"optimizer", "loss", "learning_rate", "trainable_ops", "batchnorm", "dropout", "train",
                  "freeze", "lora"}


def run(*args) -> dict:
    r = CliRunner().invoke(main, list(args))
    assert r.exit_code in (0, 1, 3), r.output
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def docs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("json")
    base = tmp / "base.json"
    CliRunner().invoke(main, ["analyze", MNIST, "-b", "2", "-f", "json", "-o", str(base)])
    csv = tmp / "b.csv"
    csv.write_text("id,lower,upper,size\na,0,2,4\nb,1,3,2\n")
    return {
        "analyze": run("analyze", MNIST, "-b", "2", "-f", "json"),
        "compare": run("compare", MNIST, "-b", "2", "-f", "json"),
        "diff": run("diff", "--baseline", str(base), MNIST, "-b", "3", "-f", "json", "--fail-on", "total:+1%"),
        "sweep": run("sweep", MNIST, "-b", "1,2", "-f", "json"),
        "verify": run("verify", MNIST, "-b", "2", "-f", "json"),
        "fit": run("fit", MNIST, "--budget", "4MiB", "-f", "json"),
        "plan": run("plan", str(csv), "-f", "json"),
        "inspect": run("inspect", MNIST, "-f", "json"),
    }


@pytest.mark.parametrize("command", ["analyze", "compare", "diff", "sweep", "verify", "fit", "plan", "inspect"])
def test_every_json_document_has_the_envelope_and_its_schema(docs, command):
    doc = docs[command]
    assert list(doc)[:3] == ["schema_version", "kind", "memplan_version"]
    # each schema is named after the kind it validates
    assert schema_path(doc["kind"]).is_file()
    jsonschema.validate(doc, load_schema(doc["kind"]))


@pytest.mark.parametrize("command", ["analyze", "compare", "sweep", "verify", "fit"])
def test_the_training_setup_has_analyze_s_names(docs, command):
    assert TRAINING_NAMES <= set(docs[command]["config"])


def test_a_schema_rejects_a_document_of_another_kind(docs):
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(docs["verify"], load_schema("fit"))


def test_the_envelope_is_written_in_one_place():
    # report.document.document_header writes schema_version, kind and memplan_version for every
    # document; a document that wrote them by hand could drift from the others
    pkg = ROOT / "memplan_cli"
    writers = sorted(str(f.relative_to(pkg)) for f in pkg.rglob("*.py")
                     if '"memplan_version":' in f.read_text() or '"schema_version":' in f.read_text())
    assert writers == ["report/document.py"]


@pytest.mark.parametrize("command", ["analyze", "compare", "sweep", "verify", "fit", "inspect"])
def test_every_model_document_names_the_file_alike(docs, command):
    model = docs[command]["model"]
    assert list(model)[:2] == ["file", "sha256"] and model["file"] == "mnist.circle"


@pytest.mark.parametrize("command", ["analyze", "compare", "sweep", "verify", "fit"])
def test_the_bare_schema_files_validate_with_the_shared_one_in_a_registry(docs, command):
    # the training setup's members are defined once (training.schema.json) and referenced: a validator
    # of the installed files resolves them from a registry, as load_schema's embedded copy does
    from referencing import Registry, Resource

    doc = docs[command]
    shared = json.loads(schema_path("training").read_text(encoding="utf-8"))
    registry = Registry().with_resource(shared["$id"], Resource.from_contents(shared))
    bare = jsonschema.Draft202012Validator(json.loads(schema_path(doc["kind"]).read_text(encoding="utf-8")),
                                           registry=registry)
    bare.validate(doc)
    bad = {**doc, "config": {**doc["config"], "trainable_ops": "some"}}
    assert [e.message for e in bare.iter_errors(bad)] == \
        [e.message for e in jsonschema.Draft202012Validator(load_schema(doc["kind"])).iter_errors(bad)] != []
