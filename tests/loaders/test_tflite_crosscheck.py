"""The tflite samples read through the `tflite` package (an independent reader) give what memplan's loader gives."""
import os

import pytest
import tflite

from memplan_cli.loaders import load_model
from memplan_cli import ops

SAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "sample_models")
OPNAMES = {v: k for k, v in vars(tflite.BuiltinOperator).items() if not k.startswith("_")}
TYPES = {v: k.lower() for k, v in vars(tflite.TensorType).items() if not k.startswith("_")}


@pytest.mark.parametrize("name", ["mnist", "mobilenetv2"])
def test_same_ops_tensors_and_constants_as_the_tflite_package(name):
    path = os.path.join(SAMPLES, f"{name}.tflite")
    if not os.path.exists(path):
        pytest.skip("sample not generated")
    data = open(path, "rb").read()
    m = tflite.Model.GetRootAsModel(data, 0)
    sg = m.Subgraphs(0)
    g = load_model(path)
    assert len(g.operands) == sg.TensorsLength() and len(g.operations) == sg.OperatorsLength()
    for j in range(sg.TensorsLength()):
        t = sg.Tensors(j)
        o = g.operands[j]
        assert o.shape == tuple(t.ShapeAsNumpy().tolist()) and o.dtype == TYPES[t.Type()]
        buf = m.Buffers(t.Buffer())
        assert o.is_const == (buf.DataLength() > 0)
        assert o.name == t.Name().decode()
    for j in range(sg.OperatorsLength()):
        op = sg.Operators(j)
        oc = m.OperatorCodes(op.OpcodeIndex())
        src = OPNAMES[max(oc.BuiltinCode(), oc.DeprecatedBuiltinCode())]
        assert g.operations[j].source_type == src
        # the op registry's converter gave it its canonical name, or it keeps the builtin's
        assert g.operations[j].type == src or ops.tflite_converter(src) is not None
        assert g.operations[j].inputs == op.InputsAsNumpy().tolist()
        assert g.operations[j].outputs == op.OutputsAsNumpy().tolist()
