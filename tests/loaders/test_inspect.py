from click.testing import CliRunner

from memplan_cli.cli import main
from devtools.traininfo_write import add_training_metadata
from tests.loaders import fbmodels as fb


def test_inspect_lists_ops_operands_values_and_metadata(tmp_path):
    data = add_training_metadata(fb.tiny_cnn("circle"), optimizer="adam", learning_rate=0.001, trainable=[3, 4])
    p = fb.write(tmp_path, "m.circle", data)
    r = CliRunner().invoke(main, ["inspect", p, "-b", "4"])
    assert r.exit_code == 0, r.output
    out = r.stdout
    assert "circle, 5 ops, 11 operands, 762 float parameters" in out
    assert "batch size 4 (the file has 1)" in out
    assert "optimizer=adam learning_rate=0.001 " in out and "trainable=[3, 4]" in out
    assert "Conv2D           (%0, %1, %2) -> (%3) [CONV_2D] activation=RELU" in out
    assert "[4, 8, 8, 4]" in out and "shape = [1, 64]" in out
