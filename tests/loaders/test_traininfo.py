import pytest

from memplan_cli.commands.options import config_from_flags
from memplan_cli.errors import ModelError
from memplan_cli.loaders import load_model
from memplan_cli.traininfo import TrainInfoError, read_training_metadata
from devtools.traininfo_write import add_training_metadata, build_training_metadata
from tests.loaders import fbmodels as fb


def test_round_trip_through_a_circle_file(tmp_path):
    data = add_training_metadata(fb.tiny_cnn("circle"), optimizer="adam", learning_rate=0.01, loss="cce",
                                 batch_size=32, trainable=[4, 3])
    g = load_model(fb.write(tmp_path, "m.circle", data))
    md = g.metadata["training"]
    assert md["optimizer"] == "adam" and md["loss"] == "cce" and md["batch_size"] == 32
    assert md["learning_rate"] == pytest.approx(0.01)
    assert md["trainable"] == (3, 4)
    cfg = config_from_flags(g.metadata, optimizer="sgd")
    assert cfg.optimizer == "sgd" and cfg.sources["optimizer"] == "flag"
    assert cfg.loss == "cce" and cfg.sources["loss"] == "metadata"
    assert cfg.batch_size == 32 and cfg.trainable_ops(5) == {3, 4}


def test_unset_fields_are_none():
    fields, notes = read_training_metadata(build_training_metadata(batch_size=0))
    assert fields["batch_size"] is None and fields["trainable"] is None and notes == []
    assert fields["optimizer"] == "sgd" and fields["loss"] == "mse"


def test_sparse_cce_is_counted_as_cce_with_a_note():
    fields, notes = read_training_metadata(build_training_metadata(loss="sparse_cce"))
    assert fields["loss"] == "cce" and "sparse" in notes[0]


def test_wrong_identifier_is_an_error():
    data = bytearray(build_training_metadata())
    data[4:8] = b"XXXX"
    with pytest.raises(TrainInfoError, match="identifier"):
        read_training_metadata(bytes(data))


def test_corrupt_metadata_in_a_model_is_a_model_error(tmp_path):
    data = bytearray(add_training_metadata(fb.tiny_cnn("circle"), batch_size=8))
    i = data.find(b"CTR0")
    data[i:i + 4] = b"NOPE"
    with pytest.raises(ModelError, match="CIRCLE_TRAINING"):
        load_model(fb.write(tmp_path, "m.circle", bytes(data)))
