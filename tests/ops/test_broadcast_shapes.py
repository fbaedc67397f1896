"""ops.binary.broadcast_shapes: NumPy's broadcasting rule in plain Python (the loaders' checks run
without NumPy), equal to numpy.broadcast_shapes on every input, errors included."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from memplan_cli.ops.binary import broadcast_shapes

shapes = st.lists(st.lists(st.integers(0, 3), max_size=4).map(tuple), min_size=1, max_size=3)


@settings(max_examples=500, deadline=None)
@given(shapes)
def test_equals_numpy(ss):
    try:
        want = np.broadcast_shapes(*ss)
    except ValueError:
        want = None
    try:
        got = broadcast_shapes(*ss)
    except ValueError:
        got = None
    assert got == want
