"""Write small circle / tflite models for tests, with circle_schema's object API.

    m = ModelBuilder()
    x = m.input([1, 8, 8, 3])
    y = m.conv2d(x, 4, 3, activation="RELU")
    y = m.reshape(y, [1, -1])
    y = m.softmax(m.fully_connected(y, 10))
    m.output(y)
    m.save("tiny.circle")          # "CIR0"; a .tflite path gets "TFL3"

Weights are filled with small random non-zero numbers (onert needs the bytes; converters drop
all-zero biases, so tests never rely on zeros). Shapes are inferred here (NHWC, TFLite rules), so
a test can also read `m.shape(t)`. Only the ops memplan's tests need are covered.
"""
from __future__ import annotations

import math
import os

import numpy as np

ACT = {"NONE": 0, "RELU": 1, "RELU_N1_TO_1": 2, "RELU6": 3, "TANH": 4, "SIGN_BIT": 5}
TYPE = {"float32": 0, "float16": 1, "int32": 2}
NP_TYPE = {"float32": np.float32, "float16": np.float16, "int32": np.int32}


def _same_out(size: int, stride: int) -> int:
    return (size + stride - 1) // stride


def _valid_out(size: int, k: int, stride: int, dilation: int = 1) -> int:
    return (size - (k - 1) * dilation - 1) // stride + 1


def _spatial(h: int, w: int, kh: int, kw: int, stride: int, padding: str, dilation: int = 1):
    """(the options' padding code, out height, out width) of a window op: TF Lite's SAME or VALID."""
    if padding == "SAME":
        return 0, _same_out(h, stride), _same_out(w, stride)
    return 1, _valid_out(h, kh, stride, dilation), _valid_out(w, kw, stride, dilation)


class ModelBuilder:
    """One subgraph, built op by op. Tensor handles are ints (tensor indices)."""

    def __init__(self, seed: int = 0):
        from circle_schema.v0_10.circle import Buffer, Model, SubGraph

        self._mod = {"Buffer": Buffer, "Model": Model, "SubGraph": SubGraph}
        self.rng = np.random.default_rng(seed)
        self.tensors: list = []
        self.buffers: list = [Buffer.BufferT()]  # buffer 0: the empty sentinel
        self.ops: list = []
        self.opcodes: dict[int, int] = {}  # builtin code -> opcode index
        self.inputs: list[int] = []
        self.outputs: list[int] = []
        self._shapes: list[list[int]] = []

    # ---- tensors ---------------------------------------------------------------------------
    def _tensor(self, shape, dtype="float32", data=None, name=None) -> int:
        from circle_schema.v0_10.circle.Tensor import TensorT

        t = TensorT()
        t.shape = [int(d) for d in shape]
        t.type = TYPE[dtype]
        t.name = name or f"t{len(self.tensors)}"
        if data is not None:
            b = self._mod["Buffer"].BufferT()
            b.data = np.ascontiguousarray(data, dtype=NP_TYPE[dtype]).view(np.uint8).reshape(-1)
            self.buffers.append(b)
            t.buffer = len(self.buffers) - 1
        else:
            b = self._mod["Buffer"].BufferT()
            self.buffers.append(b)
            t.buffer = len(self.buffers) - 1
        self.tensors.append(t)
        self._shapes.append(list(t.shape))
        return len(self.tensors) - 1

    def shape(self, t: int) -> list[int]:
        return list(self._shapes[t])

    def const(self, shape, dtype="float32", value=None) -> int:
        if value is None:
            n = math.prod(shape) if shape else 1
            value = (self.rng.random(n, dtype=np.float32) * 0.2 - 0.1 + 0.01).reshape(shape)
        return self._tensor(shape, dtype, data=np.asarray(value).reshape(shape))

    def input(self, shape, name=None) -> int:
        t = self._tensor(shape, name=name)
        self.inputs.append(t)
        return t

    def output(self, t: int) -> int:
        self.outputs.append(t)
        return t

    # ---- ops -------------------------------------------------------------------------------
    def _op(self, code: int, inputs, out_shape, opt_type=0, opt=None, out_dtype="float32") -> int:
        from circle_schema.v0_10.circle.Operator import OperatorT

        out = self._tensor(out_shape, out_dtype)
        op = OperatorT()
        if code not in self.opcodes:
            self.opcodes[code] = len(self.opcodes)
        op.opcodeIndex = self.opcodes[code]
        op.inputs = list(inputs)
        op.outputs = [out]
        op.builtinOptionsType = opt_type
        op.builtinOptions = opt
        self.ops.append(op)
        return out

    def conv2d(self, x, filters, kernel, stride=1, padding="SAME", activation="NONE",
               bias=True, dilation=1) -> int:
        from circle_schema.v0_10.circle.BuiltinOptions import BuiltinOptions
        from circle_schema.v0_10.circle.Conv2DOptions import Conv2DOptionsT

        kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
        n, h, w, c = self.shape(x)
        wt = self.const([filters, kh, kw, c])
        b = self.const([filters]) if bias else -1
        o = Conv2DOptionsT()
        o.padding, oh, ow = _spatial(h, w, kh, kw, stride, padding, dilation)
        o.strideH = o.strideW = stride
        o.dilationHFactor = o.dilationWFactor = dilation
        o.fusedActivationFunction = ACT[activation]
        return self._op(3, [x, wt, b], [n, oh, ow, filters], BuiltinOptions.Conv2DOptions, o)

    def depthwise_conv2d(self, x, kernel, stride=1, padding="SAME", activation="NONE",
                         multiplier=1, bias=True) -> int:
        from circle_schema.v0_10.circle.BuiltinOptions import BuiltinOptions
        from circle_schema.v0_10.circle.DepthwiseConv2DOptions import DepthwiseConv2DOptionsT

        kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
        n, h, w, c = self.shape(x)
        co = c * multiplier
        wt = self.const([1, kh, kw, co])
        b = self.const([co]) if bias else -1
        o = DepthwiseConv2DOptionsT()
        o.padding, oh, ow = _spatial(h, w, kh, kw, stride, padding)
        o.strideH = o.strideW = stride
        o.depthMultiplier = multiplier
        o.dilationHFactor = o.dilationWFactor = 1
        o.fusedActivationFunction = ACT[activation]
        return self._op(4, [x, wt, b], [n, oh, ow, co], BuiltinOptions.DepthwiseConv2DOptions, o)

    def fully_connected(self, x, units, activation="NONE", bias=True) -> int:
        from circle_schema.v0_10.circle.BuiltinOptions import BuiltinOptions
        from circle_schema.v0_10.circle.FullyConnectedOptions import FullyConnectedOptionsT

        s = self.shape(x)
        wt = self.const([units, s[-1]])
        b = self.const([units]) if bias else -1
        o = FullyConnectedOptionsT()
        o.fusedActivationFunction = ACT[activation]
        rows = math.prod(s[:-1])
        return self._op(9, [x, wt, b], [rows, units], BuiltinOptions.FullyConnectedOptions, o)

    def _pool(self, code, x, size, stride, padding, activation) -> int:
        from circle_schema.v0_10.circle.BuiltinOptions import BuiltinOptions
        from circle_schema.v0_10.circle.Pool2DOptions import Pool2DOptionsT

        n, h, w, c = self.shape(x)
        o = Pool2DOptionsT()
        o.padding, oh, ow = _spatial(h, w, size, size, stride, padding)
        o.strideH = o.strideW = stride
        o.filterHeight = o.filterWidth = size
        o.fusedActivationFunction = ACT[activation]
        return self._op(code, [x], [n, oh, ow, c], BuiltinOptions.Pool2DOptions, o)

    def max_pool(self, x, size=2, stride=2, padding="VALID", activation="NONE") -> int:
        return self._pool(17, x, size, stride, padding, activation)

    def avg_pool(self, x, size=2, stride=2, padding="VALID", activation="NONE") -> int:
        return self._pool(1, x, size, stride, padding, activation)

    def _binary(self, code, opt_name, a, b, activation) -> int:
        import importlib

        from circle_schema.v0_10.circle.BuiltinOptions import BuiltinOptions

        mod = importlib.import_module(f"circle_schema.v0_10.circle.{opt_name}")
        o = getattr(mod, opt_name + "T")()
        o.fusedActivationFunction = ACT[activation]
        sa, sb = self.shape(a), self.shape(b)
        out = list(np.broadcast_shapes(tuple(sa), tuple(sb)))
        return self._op(code, [a, b], out, getattr(BuiltinOptions, opt_name), o)

    def add(self, a, b, activation="NONE") -> int:
        return self._binary(0, "AddOptions", a, b, activation)

    def sub(self, a, b, activation="NONE") -> int:
        return self._binary(41, "SubOptions", a, b, activation)

    def mul(self, a, b, activation="NONE") -> int:
        return self._binary(18, "MulOptions", a, b, activation)

    def div(self, a, b, activation="NONE") -> int:
        return self._binary(42, "DivOptions", a, b, activation)

    def relu(self, x) -> int:
        return self._op(19, [x], self.shape(x))

    def relu6(self, x) -> int:
        return self._op(21, [x], self.shape(x))

    def tanh(self, x) -> int:
        return self._op(28, [x], self.shape(x))

    def sigmoid(self, x) -> int:
        return self._op(14, [x], self.shape(x))

    def softmax(self, x, beta=1.0) -> int:
        from circle_schema.v0_10.circle.BuiltinOptions import BuiltinOptions
        from circle_schema.v0_10.circle.SoftmaxOptions import SoftmaxOptionsT

        o = SoftmaxOptionsT()
        o.beta = beta
        return self._op(25, [x], self.shape(x), BuiltinOptions.SoftmaxOptions, o)

    def reshape(self, x, new_shape) -> int:
        from circle_schema.v0_10.circle.BuiltinOptions import BuiltinOptions
        from circle_schema.v0_10.circle.ReshapeOptions import ReshapeOptionsT

        n = math.prod(self.shape(x))
        ns = list(new_shape)
        if -1 in ns:
            k = ns.index(-1)
            ns[k] = n // math.prod(d for d in ns if d != -1)
        shp = self.const([len(new_shape)], "int32", np.array(new_shape, np.int32))
        o = ReshapeOptionsT()
        o.newShape = list(new_shape)
        dtype = {code: name for name, code in TYPE.items()}[self.tensors[x].type]  # a reshape keeps it
        return self._op(22, [x, shp], ns, BuiltinOptions.ReshapeOptions, o, out_dtype=dtype)

    def pad(self, x, paddings, value=None) -> int:
        """PAD, or PADV2 filling with `value` (a float32 scalar constant) when one is given."""
        from circle_schema.v0_10.circle.BuiltinOptions import BuiltinOptions
        from circle_schema.v0_10.circle.PadOptions import PadOptionsT
        from circle_schema.v0_10.circle.PadV2Options import PadV2OptionsT

        s = self.shape(x)
        p = self.const([len(s), 2], "int32", np.array(paddings, np.int32))
        out = [d + a + b for d, (a, b) in zip(s, paddings)]
        if value is None:
            return self._op(34, [x, p], out, BuiltinOptions.PadOptions, PadOptionsT())
        v = self.const([], "float32", np.array(value, np.float32))
        return self._op(60, [x, p, v], out, BuiltinOptions.PadV2Options, PadV2OptionsT())

    def mean(self, x, axes, keep_dims=False) -> int:
        from circle_schema.v0_10.circle.BuiltinOptions import BuiltinOptions
        from circle_schema.v0_10.circle.ReducerOptions import ReducerOptionsT

        s = self.shape(x)
        ax = self.const([len(axes)], "int32", np.array(axes, np.int32))
        o = ReducerOptionsT()
        o.keepDims = keep_dims
        axs = {a % len(s) for a in axes}
        out = [1 if i in axs else d for i, d in enumerate(s)] if keep_dims else \
              [d for i, d in enumerate(s) if i not in axs]
        return self._op(40, [x, ax], out, BuiltinOptions.ReducerOptions, o)

    def concat(self, xs, axis=-1) -> int:
        from circle_schema.v0_10.circle.BuiltinOptions import BuiltinOptions
        from circle_schema.v0_10.circle.ConcatenationOptions import ConcatenationOptionsT

        shapes = [self.shape(x) for x in xs]
        a = axis % len(shapes[0])
        out = list(shapes[0])
        out[a] = sum(s[a] for s in shapes)
        o = ConcatenationOptionsT()
        o.axis = axis
        return self._op(2, list(xs), out, BuiltinOptions.ConcatenationOptions, o)

    # ---- output ----------------------------------------------------------------------------
    def to_bytes(self, identifier: bytes = b"CIR0") -> bytes:
        import flatbuffers
        from circle_schema.v0_10.circle.OperatorCode import OperatorCodeT

        sg = self._mod["SubGraph"].SubGraphT()
        sg.tensors = self.tensors
        sg.inputs = list(self.inputs)
        sg.outputs = list(self.outputs)
        sg.operators = self.ops
        sg.name = "main"
        m = self._mod["Model"].ModelT()
        m.version = 3
        codes = []
        for code, _ in sorted(self.opcodes.items(), key=lambda kv: kv[1]):
            oc = OperatorCodeT()
            oc.builtinCode = code
            oc.deprecatedBuiltinCode = code if code < 127 else 127
            oc.version = 1
            codes.append(oc)
        m.operatorCodes = codes
        m.subgraphs = [sg]
        m.buffers = self.buffers
        m.description = "memplan test model"
        b = flatbuffers.Builder(1024)
        b.Finish(m.Pack(b), file_identifier=identifier)
        return bytes(b.Output())

    def save(self, path: str) -> str:
        ident = b"TFL3" if path.endswith(".tflite") else b"CIR0"
        data = self.to_bytes(ident)
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        return path


# circle builtin code -> memplan canonical op type
_CANON = {0: "Add", 1: "AvgPool2D", 2: "Concat", 3: "Conv2D", 4: "DepthwiseConv2D",
          9: "FullyConnected", 14: "Sigmoid", 17: "MaxPool2D", 18: "Mul", 19: "Relu", 21: "Relu6", 22: "Reshape",
          25: "Softmax", 28: "Tanh", 34: "Pad", 40: "Mean", 41: "Sub", 42: "Div", 60: "Pad"}
_ACT_NAME = {v: k for k, v in ACT.items()}


def to_graph(mb: ModelBuilder, batch: int = 1):
    """The builder's model as a memplan Graph, every activation's dim 0 scaled to `batch`.

    For tests that must not depend on a loader; attrs use the names the loaders use
    (`activation`, `stride`, `padding`, `kernel`, `dilation`, `keep_dims`, `layout`; Pad's `pads` as
    begins, then ends).
    """
    from memplan_cli.ir.graph import Graph, Operand, Operation

    code_of = {idx: code for code, idx in mb.opcodes.items()}
    operands = []
    for k, t in enumerate(mb.tensors):
        const = mb.buffers[t.buffer].data is not None
        shape = list(mb.shape(k))
        if not const and shape:
            shape[0] *= batch
        operands.append(Operand(k, t.name, tuple(shape), {0: "float32", 2: "int32"}[t.type], const,
                                k in mb.inputs, k in mb.outputs))
    ops = []
    for n, op in enumerate(mb.ops):
        code = code_of[op.opcodeIndex]
        o = op.builtinOptions
        attrs = {}
        if o is not None and hasattr(o, "fusedActivationFunction"):
            attrs["activation"] = _ACT_NAME[o.fusedActivationFunction]
        if o is not None and hasattr(o, "strideH"):
            attrs["stride"] = (o.strideH, o.strideW)
            attrs["padding"] = "SAME" if o.padding == 0 else "VALID"
        if o is not None and hasattr(o, "filterHeight"):
            attrs["kernel"] = (o.filterHeight, o.filterWidth)
        if code in (1, 3, 4, 17):
            attrs["layout"] = "NHWC"
        if code in (34, 60):  # the paddings constant [[before, after], ...]; PADV2's fill
            p = mb.buffers[mb.tensors[op.inputs[1]].buffer].data.view(np.int32).reshape(-1, 2)
            value = float(mb.buffers[mb.tensors[op.inputs[2]].buffer].data.view(np.float32)[0]) if code == 60 else 0.0
            attrs.update(mode="constant", value=value, pads=tuple(int(v) for v in p[:, 0]) +
                         tuple(int(v) for v in p[:, 1]))
        if o is not None and hasattr(o, "dilationHFactor"):
            attrs["dilation"] = (o.dilationHFactor, o.dilationWFactor)
        if o is not None and hasattr(o, "keepDims"):
            attrs["keep_dims"] = bool(o.keepDims)
        if code == 2:
            attrs["axis"] = o.axis
        if code == 40:  # Mean's axes constant, canonical as ops/reduce.py reads it
            ax = mb.buffers[mb.tensors[op.inputs[1]].buffer].data.view(np.int32)
            attrs["axes"] = tuple(sorted(int(a) % len(mb.shape(op.inputs[0])) for a in ax))
        ops.append(Operation(n, _CANON[code], list(op.inputs), list(op.outputs), attrs,
                             source_type=str(code)))
    g = Graph(operands, ops, list(mb.inputs), list(mb.outputs), name="modelgen", source_format="circle")
    g.verify()
    return g
