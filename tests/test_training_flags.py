"""The training flags are declared once (config.TRAINING_FLAGS): the click options of every command
that trains, the API's keywords, the merge of flags, metadata and defaults, the JSON `config` and
diff's reading of a baseline's setup back into flags all come from that table, and the table agrees
with the schemas."""
import inspect
import pathlib

import pytest

from memplan_cli import api
from memplan_cli.cli import main
from memplan_cli.commands.options import STEP_ONLY
from memplan_cli.baseline import baseline_flags
from memplan_cli.config import (FLAG_BY_NAME, FLAG_KINDS, TRAINING_FLAGS, TrainConfig, config_json,
                                merge_setup)
from memplan_cli.errors import ConfigError
from memplan_cli.schemas import load_schema

ROOT = pathlib.Path(__file__).parents[1]
# keys of a JSON `config` that are no training flag's (the planner, its options, where values came from)
NOT_TRAINING = {"planner", "time_limit", "profile_options", "sources", "batch_sizes", "searched",
                "swept_dim", "dim_sizes"}
# a value of each flag, as a user gives it on the command line (click's values)
GIVEN = {"batch_size": 3, "dim": ("seq=16",), "optimizer": "adam", "loss": "cce", "loss_outputs": "out*",
         "learning_rate": 0.5, "trainable_ops": "1,3-4", "batchnorm": "frozen", "dropout": "off",
         "train": ("ops:*fc*",), "freeze": ("params:*bias*",), "lora": 4, "lora_targets": "MatMul,*q*",
         "precision": "bf16-mixed"}


def _json_keys(keys) -> set[str]:
    return {k.split(".")[0] for k in keys}


def test_every_flag_has_a_value_in_this_test_and_a_kind():
    assert set(GIVEN) == set(FLAG_BY_NAME)
    assert {f.kind for f in TRAINING_FLAGS} <= set(FLAG_KINDS)
    # the API keyword is the long flag's name: one name per flag
    assert all(f.decls[-1] == "--" + f.name.replace("_", "-") for f in TRAINING_FLAGS)


@pytest.mark.parametrize("kind", ["analysis", "verify", "fit", "sweep"])
def test_the_json_keys_are_the_schemas(kind):
    props = set(load_schema(kind)["properties"]["config"]["properties"])
    training = props - NOT_TRAINING
    ours = _json_keys(f.json_key for f in TRAINING_FLAGS)
    # analyze writes every flag; verify and fit leave out the resolved outputs; sweep the batch too
    left_out = {"analysis": set(), "verify": {"loss_outputs"}, "fit": {"loss_outputs"},
                "sweep": {"batch_size"}}[kind]
    assert training == ours - left_out


def test_a_member_of_a_json_object_is_one_in_the_schema():
    schema = load_schema("analysis")
    config = schema["properties"]["config"]["properties"]
    shared = schema["$defs"]["training.schema.json"]["$defs"]
    for f in TRAINING_FLAGS:
        if "." in f.json_key:
            parent, member = f.json_key.split(".")
            definition = shared[config[parent]["$ref"].rpartition("/")[2]]
            assert member in definition["properties"], f.json_key


def test_sources_and_metadata_keys_are_trainconfig_fields():
    fields = set(TrainConfig.__dataclass_fields__)
    assert {f.field for f in TRAINING_FLAGS} <= fields
    # the circle loader's training metadata (traininfo) uses TrainConfig's names
    assert {f.metadata_key for f in TRAINING_FLAGS if f.metadata_key} <= fields


@pytest.mark.parametrize("command", ["analyze", "compare", "verify", "fit", "diff", "sweep"])
def test_every_training_command_has_every_flag(command):
    params = {p.name: p for p in main.commands[command].params}
    from memplan_cli.commands.options import STEP_ONLY

    for f in TRAINING_FLAGS:
        if command == "sweep" and f.name == "batch_size":
            continue  # sweep takes a list of batch sizes
        if f.name in STEP_ONLY and command != "verify":
            assert f.name not in params, (command, f.name)  # it would change nothing there
            continue
        assert f.name in params, (command, f.name)
        assert set(params[f.name].opts) | set(params[f.name].secondary_opts) == set(f.decls)


@pytest.mark.parametrize("function", [api.analyze, api.compare])
def test_the_api_takes_every_flag_by_its_name(function):
    sig = inspect.signature(function)
    assert {f.name for f in TRAINING_FLAGS} <= set(sig.parameters)


def test_an_unknown_training_keyword_is_a_type_error():
    with pytest.raises(TypeError, match="trainable"):
        api.analyze(str(ROOT / "sample_models" / "mnist.circle"), trainable="all")


@pytest.mark.parametrize("name, bad", [("batch_size", 0), ("lora", True), ("learning_rate", "fast"),
                                       ("trainable_ops", [-1]), ("train", [3]), ("loss_outputs", 5)])
def test_the_api_checks_an_argument_as_click_checks_the_flag(name, bad):
    with pytest.raises(ConfigError, match=name):
        api.config_from_flags({}, **{name: bad})


def test_flags_win_over_metadata_over_defaults():
    md = {"training": {"optimizer": "momentum", "batch_size": 7, "trainable": (1, 2), "train": ("ops:a",)}}
    cfg = merge_setup(md, {"optimizer": "adam"})
    assert (cfg.optimizer, cfg.batch_size, cfg.trainable, cfg.train) == ("adam", 7, (1, 2), ("ops:a",))
    assert cfg.sources == {"optimizer": "flag", "batch_size": "metadata", "trainable": "metadata",
                           "train": "metadata", "loss": "default", "learning_rate": "default",
                           "batchnorm": "default", "dropout": "default", "precision": "default"}
    # --lora freezes every weight of the file: a peft file's adapters are not what trains then
    assert merge_setup(md, {"lora": 2}).train == ()


def test_the_json_config_follows_the_table():
    cfg = merge_setup({}, GIVEN)
    doc = config_json(cfg, loss_outputs=["out0"])
    assert list(doc) == list(dict.fromkeys(k.split(".")[0] for k in (f.json_key for f in TRAINING_FLAGS)))
    assert doc["lora"] == {"rank": 4, "targets": ["MatMul", "*q*"]}
    assert doc["trainable_ops"] == [1, 3, 4] and doc["loss_outputs"] == ["out0"]
    assert config_json(TrainConfig())["lora"] is None and "loss_outputs" not in config_json(TrainConfig())


def test_diff_reads_every_flag_back_from_a_baseline(monkeypatch):
    """A baseline's setup, read back into flags, gives the same setup: diff's mapping is the table's."""
    cfg = merge_setup({}, GIVEN)
    doc = {"config": {**config_json(cfg, loss_outputs=["out0"]),
                      "sources": {f.field: "flag" for f in TRAINING_FLAGS}}}
    flags = baseline_flags(doc, {}, set())
    again = merge_setup({}, flags)
    assert again == cfg.with_(loss_outputs=("out0",))
    # a flag given to diff wins; a resolved value the user did not pick stays TARGET's
    doc["config"]["sources"]["loss_outputs"] = "default"
    flags = baseline_flags(doc, {"optimizer": "sgd"}, {"optimizer"})
    assert flags["optimizer"] == "sgd" and "loss_outputs" not in flags


def test_diff_notes_a_difference_of_every_flag_that_changes_memory():
    """diff's notes follow the table too: a new flag is noted without a list of its own in report/diff.py."""
    from memplan_cli.report.diff import config_differences

    a = config_json(merge_setup({}, {}), loss_outputs=["out0"])
    b = config_json(merge_setup({}, GIVEN), loss_outputs=["out0", "out1"])
    notes = config_differences({"config": a}, {"config": b})
    keys = list(dict.fromkeys(f.json_key.split(".")[0] for f in TRAINING_FLAGS if not f.step_only))
    assert [n.split(" differs")[0] for n in notes] == keys
    # a report from before a flag existed left its key out: compared as the flag's `absent` value
    old = {k: v for k, v in a.items() if k not in ("dims", "precision")}
    assert config_differences({"config": old}, {"config": a}) == []
