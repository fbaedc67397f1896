"""ops/activations.py: TF Lite's standalone RELU_N1_TO_1 and RELU_0_TO_1 (the converter's form of
tf.clip_by_value(x, -1, 1) / (x, 0, 1)) train as Clip with those bounds."""
import pytest

from devtools.modelgen import ModelBuilder
from memplan_cli.loaders import load_model
from tests.ops.gradcheck import check_gradients, check_verify


@pytest.mark.parametrize("code,bounds", [(20, (-1.0, 1.0)), (152, (0.0, 1.0))])
def test_bounded_relu_is_a_clip(tmp_path, code, bounds):
    m = ModelBuilder(seed=5)
    x = m.input([2, 6])
    h = m.fully_connected(x, 6)
    c = m._op(code, [h], [2, 6])
    m.output(m.fully_connected(c, 3))
    p = m.save(str(tmp_path / "r.tflite"))
    op = next(o for o in load_model(p).operations if o.type == "Clip")
    assert (op.attrs["min"], op.attrs["max"]) == bounds and len(op.inputs) == 1
    assert check_gradients(p) >= 12
    check_verify(p, "-b", "2")
