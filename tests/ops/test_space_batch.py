"""ops/space_batch.py: TFLite SPACE_TO_BATCH_ND / BATCH_TO_SPACE_ND (the converter's form of a dilated
convolution): the definition on a hand-checked case, the round trip, gradients by finite differences,
verify. (Checked against tf.space_to_batch_nd / tf.batch_to_space element for element when written;
tests/corpus/keras_dilated_up.tflite is the real converter output.)"""
import numpy as np
import pytest

from devtools.modelgen import ModelBuilder
from memplan_cli.ops.space_batch import batch_to_space, space_to_batch
from tests.ops.gradcheck import check_gradients, check_verify


def test_space_to_batch_by_hand():
    x = np.arange(16).reshape(1, 4, 4, 1)
    y = space_to_batch(x, (2, 2), ((0, 0), (0, 0)))
    # block offset (i, j) becomes batch entry 2 i + j: the pixels x[2a + i, 2b + j]
    assert y.shape == (4, 2, 2, 1)
    np.testing.assert_array_equal(y[1, :, :, 0], [[1, 3], [9, 11]])
    np.testing.assert_array_equal(y[2, :, :, 0], [[4, 6], [12, 14]])


@pytest.mark.parametrize("shape,block,pads", [((2, 7, 5, 3), (2, 3), ((1, 0), (2, 2))), ((3, 10, 4), (2,), ((2, 2),))])
def test_round_trip(shape, block, pads):
    x = np.random.default_rng(0).normal(size=shape)
    np.testing.assert_array_equal(batch_to_space(space_to_batch(x, block, pads), block, pads), x)


def test_dilated_conv_as_the_converter_writes_it(tmp_path):
    from circle_schema.v0_10.circle.BatchToSpaceNDOptions import BatchToSpaceNDOptionsT
    from circle_schema.v0_10.circle.BuiltinOptions import BuiltinOptions
    from circle_schema.v0_10.circle.SpaceToBatchNDOptions import SpaceToBatchNDOptionsT

    m = ModelBuilder(seed=7)
    x = m.input([1, 8, 8, 3])
    h = m.conv2d(x, 4, 1)
    block = m.const([2], "int32", np.array([2, 2], np.int32))
    pads = m.const([2, 2], "int32", np.array([[2, 2], [2, 2]], np.int32))
    s = m._op(38, [h, block, pads], [4, 6, 6, 4], BuiltinOptions.SpaceToBatchNDOptions, SpaceToBatchNDOptionsT())
    c = m.conv2d(s, 4, 3, padding="VALID")
    crops = m.const([2, 2], "int32", np.array([[0, 0], [0, 0]], np.int32))
    b = m._op(37, [c, block, crops], [1, 8, 8, 4], BuiltinOptions.BatchToSpaceNDOptions, BatchToSpaceNDOptionsT())
    m.output(m.fully_connected(m.reshape(b, [1, 256]), 3))
    p = m.save(str(tmp_path / "d.tflite"))
    assert check_gradients(p) >= 30
    check_verify(p)
    check_verify(p, "-b", "2")
