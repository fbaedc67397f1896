"""ops/loss.py: the loss op's verify kernels on outputs that are not float."""
import pytest
from onnx import TensorProto, helper

from tests.ops.gradcheck import check_verify, onnx_model, save


@pytest.mark.parametrize("op", ["Greater", "Equal", "IsNaN"])
def test_a_model_whose_only_output_is_bool_verifies(tmp_path, op):
    """onnx's backend tests of comparisons: the only output is bool, so it carries the loss (nothing
    trains). verify used to stop on NumPy's bool subtraction; the loss counts bools as 0 / 1."""
    ins = ["x"] if op == "IsNaN" else ["x", "c"]
    m = onnx_model([helper.make_node(op, ins, ["y"])], [(n, (2, 3)) for n in ins], [("y", (2, 3), TensorProto.BOOL)], {})
    assert check_verify(save(tmp_path, m))
