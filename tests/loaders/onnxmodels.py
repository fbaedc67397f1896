"""Tiny ONNX models built with onnx.helper, for loader tests."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _w(name, shape, dtype=np.float32):
    return numpy_helper.from_array(np.arange(1, int(np.prod(shape)) + 1, dtype=dtype).reshape(shape), name)


def model(nodes, inputs, outputs, inits, opset=17) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def tiny_cnn(batch=1, flatten=False) -> onnx.ModelProto:
    """NCHW twin of fbmodels.tiny_cnn: Conv 4@3x3 pad 1, Relu, MaxPool 2, Reshape/Flatten, Gemm 10, Softmax."""
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 3, 8, 8])
    y = helper.make_tensor_value_info("prob", TensorProto.FLOAT, [batch, 10])
    inits = [_w("conv/w", [4, 3, 3, 3]), _w("conv/b", [4]), _w("fc/w", [10, 64]), _w("fc/b", [10])]
    nodes = [helper.make_node("Conv", ["input", "conv/w", "conv/b"], ["conv"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
             helper.make_node("Relu", ["conv"], ["relu"]),
             helper.make_node("MaxPool", ["relu"], ["pool"], kernel_shape=[2, 2], strides=[2, 2])]
    if flatten:
        nodes.append(helper.make_node("Flatten", ["pool"], ["flat"], axis=1))
    else:
        inits.append(numpy_helper.from_array(np.array([1, -1], np.int64), "shape"))
        nodes.append(helper.make_node("Reshape", ["pool", "shape"], ["flat"]))
    nodes += [helper.make_node("Gemm", ["flat", "fc/w", "fc/b"], ["fc"], transB=1),
              helper.make_node("Softmax", ["fc"], ["prob"])]
    return model(nodes, [x], [y], inits)


def save(tmp_path, name, m: onnx.ModelProto, **kw) -> str:
    p = str(tmp_path / name)
    onnx.save(m, p, **kw)
    return p


def nested_if(depth: int, width: int = 4) -> onnx.ModelProto:
    """x[1, width] -> one If whose then and else branches each hold an If, `depth` levels deep: the
    file doubles per level (2^(depth+1) - 2 nodes inside subgraphs). A Relu of the outer x at the leaves."""
    def level(d, tag):
        out = f"y{tag}"
        if d == 0:
            return helper.make_node("Relu", ["x"], [out], name=f"relu{tag}")
        branches = [helper.make_graph([level(d - 1, tag + b)], f"g{tag}{b}", [],
                                      [helper.make_tensor_value_info(f"y{tag}{b}", TensorProto.FLOAT, [1, width])])
                    for b in ("t", "e")]
        return helper.make_node("If", ["c"], [out], name=f"if{tag}", then_branch=branches[0],
                                else_branch=branches[1])

    g = helper.make_graph([level(depth, "")], "nested",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width]),
                           helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, width])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
