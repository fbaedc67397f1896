"""Tiny circle/tflite models written with circle_schema's object API, for loader tests.

`tiny_cnn()` is input[1,8,8,3] -> Conv2D(4@3x3 same, relu) -> MaxPool 2 -> Reshape([1,-1]) ->
FullyConnected(10) -> Softmax. `build(spec)` writes any small graph described as plain lists.
"""
from __future__ import annotations

import flatbuffers
import numpy as np
from circle_schema.v0_10.circle import BuiltinOperator as BOp
from circle_schema.v0_10.circle.Buffer import BufferT
from circle_schema.v0_10.circle.BuiltinOptions import BuiltinOptions as BO
from circle_schema.v0_10.circle.Conv2DOptions import Conv2DOptionsT
from circle_schema.v0_10.circle.DepthwiseConv2DOptions import DepthwiseConv2DOptionsT
from circle_schema.v0_10.circle.FullyConnectedOptions import FullyConnectedOptionsT
from circle_schema.v0_10.circle.Model import ModelT
from circle_schema.v0_10.circle.Operator import OperatorT
from circle_schema.v0_10.circle.OperatorCode import OperatorCodeT
from circle_schema.v0_10.circle.Pool2DOptions import Pool2DOptionsT
from circle_schema.v0_10.circle.ReducerOptions import ReducerOptionsT
from circle_schema.v0_10.circle.SoftmaxOptions import SoftmaxOptionsT
from circle_schema.v0_10.circle.SubGraph import SubGraphT
from circle_schema.v0_10.circle.Tensor import TensorT
from circle_schema.v0_10.circle.TensorType import TensorType

OPS = BOp.BuiltinOperator
IDENT = {"circle": b"CIR0", "tflite": b"TFL3"}
NP_TYPE = {"float32": (np.float32, TensorType.FLOAT32), "int32": (np.int32, TensorType.INT32),
           "int64": (np.int64, TensorType.INT64), "int8": (np.int8, TensorType.INT8),
           "resource": (np.int32, TensorType.RESOURCE)}


def tensor(name, shape, dtype="float32", data=None, signature=None, variable=False):
    """A tensor spec: data None (activation), "fill" (non-zero weights), or a list of values;
    `variable`: TF Lite's is_variable (state an op updates, such as an LSTM's)."""
    return {"name": name, "shape": list(shape), "dtype": dtype, "data": data, "signature": signature,
            "variable": variable}


def op(code, inputs, outputs, options=None, options_type=0):
    return {"code": code, "inputs": list(inputs), "outputs": list(outputs), "options": options,
            "options_type": options_type}


def build(tensors, ops, inputs, outputs, fmt="circle", extra_subgraphs=0) -> bytes:
    m = ModelT()
    m.version = 3
    m.buffers = [BufferT()]  # buffer 0 is the empty sentinel
    sg = SubGraphT()
    sg.tensors, sg.inputs, sg.outputs, sg.operators = [], list(inputs), list(outputs), []
    for t in tensors:
        tt = TensorT()
        tt.name, tt.shape = t["name"], t["shape"]
        npt, tt.type = NP_TYPE[t["dtype"]]
        if t["signature"] is not None:
            tt.shapeSignature = t["signature"]
        tt.isVariable = bool(t.get("variable"))
        if t["data"] is None:
            tt.buffer = 0
        else:
            n = int(np.prod(t["shape"])) if t["shape"] else 1
            vals = np.arange(1, n + 1) if isinstance(t["data"], str) else np.asarray(t["data"])
            b = BufferT()
            b.data = list(np.asarray(vals, dtype=npt).tobytes())
            m.buffers.append(b)
            tt.buffer = len(m.buffers) - 1
        sg.tensors.append(tt)
    codes: list[int] = []
    m.operatorCodes = []
    for o in ops:
        if o["code"] not in codes:
            codes.append(o["code"])
            oc = OperatorCodeT()
            if isinstance(o["code"], str):  # a custom op, by its custom code
                oc.builtinCode = oc.deprecatedBuiltinCode = OPS.CUSTOM
                oc.customCode = o["code"]
            else:
                oc.builtinCode = o["code"]
                oc.deprecatedBuiltinCode = o["code"] if 0 <= o["code"] < 127 else 127
            oc.version = 1
            m.operatorCodes.append(oc)
        ot = OperatorT()
        ot.opcodeIndex = codes.index(o["code"])
        ot.inputs, ot.outputs = o["inputs"], o["outputs"]
        if isinstance(o["options"], bytes):  # a custom op's custom_options
            ot.customOptions = list(o["options"])
        elif o["options"] is not None:
            ot.builtinOptionsType, ot.builtinOptions = o["options_type"], o["options"]
        sg.operators.append(ot)
    m.subgraphs = [sg] + [SubGraphT() for _ in range(extra_subgraphs)]
    b = flatbuffers.Builder(1024)
    b.Finish(m.Pack(b), file_identifier=IDENT[fmt])
    return bytes(b.Output())


def conv_opts(stride=1, padding=0, act=1):
    o = Conv2DOptionsT()
    o.padding, o.strideH, o.strideW, o.fusedActivationFunction = padding, stride, stride, act
    o.dilationHFactor = o.dilationWFactor = 1
    return o


def dw_opts(stride=1, padding=0, act=3, mult=1):
    o = DepthwiseConv2DOptionsT()
    o.padding, o.strideH, o.strideW, o.fusedActivationFunction, o.depthMultiplier = padding, stride, stride, act, mult
    o.dilationHFactor = o.dilationWFactor = 1
    return o


def pool_opts(k=2, stride=2, padding=1):
    o = Pool2DOptionsT()
    o.padding, o.strideH, o.strideW, o.filterHeight, o.filterWidth = padding, stride, stride, k, k
    return o


def fc_opts(act=0):
    o = FullyConnectedOptionsT()
    o.fusedActivationFunction = act
    return o


def mean_opts(keep=False):
    o = ReducerOptionsT()
    o.keepDims = keep
    return o


def softmax_opts():
    o = SoftmaxOptionsT()
    o.beta = 1.0
    return o


def tiny_cnn(fmt="circle", batch=1, dynamic=False) -> bytes:
    sig = (lambda s: [-1] + list(s[1:])) if dynamic else (lambda s: None)
    t = [
        tensor("input", [batch, 8, 8, 3], signature=sig([batch, 8, 8, 3])),  # 0
        tensor("conv/w", [4, 3, 3, 3], data="fill"),                         # 1
        tensor("conv/b", [4], data="fill"),                                  # 2
        tensor("conv", [batch, 8, 8, 4], signature=sig([batch, 8, 8, 4])),   # 3
        tensor("pool", [batch, 4, 4, 4], signature=sig([batch, 4, 4, 4])),   # 4
        tensor("shape", [2], "int32", data=[-1 if dynamic else batch, 64]),  # 5
        tensor("flat", [batch, 64], signature=sig([batch, 64])),             # 6
        tensor("fc/w", [10, 64], data="fill"),                               # 7
        tensor("fc/b", [10], data="fill"),                                   # 8
        tensor("fc", [batch, 10], signature=sig([batch, 10])),               # 9
        tensor("prob", [batch, 10], signature=sig([batch, 10])),             # 10
    ]
    o = [
        op(OPS.CONV_2D, [0, 1, 2], [3], conv_opts(), BO.Conv2DOptions),
        op(OPS.MAX_POOL_2D, [3], [4], pool_opts(), BO.Pool2DOptions),
        op(OPS.RESHAPE, [4, 5], [6]),
        op(OPS.FULLY_CONNECTED, [6, 7, 8], [9], fc_opts(), BO.FullyConnectedOptions),
        op(OPS.SOFTMAX, [9], [10], softmax_opts(), BO.SoftmaxOptions),
    ]
    return build(t, o, [0], [10], fmt)


def write(tmp_path, name: str, data: bytes) -> str:
    p = tmp_path / name
    p.write_bytes(data)
    return str(p)
