"""Tiny hand-built forward graphs covering every op family the reference kernels bind."""
from __future__ import annotations

from memplan_cli.ir.graph import Graph, Operand, Operation


class _B:
    def __init__(self):
        self.operands: list[Operand] = []
        self.ops: list[Operation] = []

    def t(self, name, shape, const=False, dtype="float32", value=None):
        o = Operand(len(self.operands), name, tuple(shape), dtype, is_const=const)
        o.value = value
        self.operands.append(o)
        return o.index

    def op(self, typ, ins, out_name, out_shape, **attrs):
        y = self.t(out_name, out_shape)
        self.ops.append(Operation(len(self.ops), typ, list(ins), [y], attrs))
        return y

    def graph(self, inputs, outputs, fmt="circle"):
        for i in inputs:
            self.operands[i].is_input = True
        for o in outputs:
            self.operands[o].is_output = True
        g = Graph(self.operands, self.ops, inputs, outputs, source_format=fmt)
        g.verify()
        return g


def conv_net(batch=2):
    """Conv2D (ReLU6) -> DepthwiseConv2D (stride 2, ReLU) -> MaxPool2D -> Relu -> Reshape -> FC -> Softmax."""
    b = _B()
    x = b.t("x", (batch, 6, 6, 2))
    c = b.op("Conv2D", [x, b.t("w0", (4, 3, 3, 2), True), b.t("b0", (4,), True)], "c", (batch, 6, 6, 4),
             stride=(1, 1), dilation=(1, 1), padding="SAME", activation="RELU6", layout="NHWC")
    d = b.op("DepthwiseConv2D", [c, b.t("w1", (1, 3, 3, 8), True), b.t("b1", (8,), True)], "d", (batch, 3, 3, 8),
             stride=(2, 2), dilation=(1, 1), padding="SAME", depth_multiplier=2, activation="RELU", layout="NHWC")
    p = b.op("MaxPool2D", [d], "p", (batch, 2, 2, 8), filter=(2, 2), stride=(1, 1), padding="VALID",
             activation="NONE", layout="NHWC")
    r = b.op("Relu", [p], "r", (batch, 2, 2, 8))
    f = b.op("Reshape", [r, b.t("shape", (2,), True, "int32", (batch, 32))], "f", (batch, 32))
    y = b.op("FullyConnected", [f, b.t("w2", (5, 32), True), b.t("b2", (5,), True)], "y", (batch, 5),
             activation="NONE")
    s = b.op("Softmax", [y], "s", (batch, 5), beta=1.0)
    return b.graph([x], [s])


def residual_net(batch=2):
    """A branch point (x1 read by a Conv and by the residual Add), Pad, AvgPool, Mul/Sub/Div with a
    constant, Sigmoid, Tanh, Concat, Mean, FC (Tanh fused)."""
    b = _B()
    x = b.t("x", (batch, 4, 4, 3))
    x1 = b.op("Conv2D", [x, b.t("w0", (3, 1, 1, 3), True), b.t("b0", (3,), True)], "x1", (batch, 4, 4, 3),
              stride=(1, 1), dilation=(1, 1), padding="VALID", activation="RELU", layout="NHWC")
    x2 = b.op("Conv2D", [x1, b.t("w1", (3, 3, 3, 3), True), b.t("b1", (3,), True)], "x2", (batch, 4, 4, 3),
              stride=(1, 1), dilation=(1, 1), padding="SAME", activation="NONE", layout="NHWC")
    a = b.op("Add", [x1, x2], "a", (batch, 4, 4, 3), activation="RELU")
    pd = b.op("Pad", [a, b.t("pads", (4, 2), True, "int32", (0, 0, 0, 1, 0, 1, 0, 0))], "pd", (batch, 5, 5, 3),
              mode="constant", pads=(0, 0, 0, 0, 0, 1, 1, 0))  # canonical: begins, then ends
    ap = b.op("AvgPool2D", [pd], "ap", (batch, 3, 3, 3), filter=(3, 3), stride=(2, 2), padding="SAME",
              activation="NONE", layout="NHWC")
    m = b.op("Mul", [ap, b.t("scale", (3,), True)], "m", (batch, 3, 3, 3), activation="NONE")
    sg = b.op("Sigmoid", [m], "sg", (batch, 3, 3, 3))
    th = b.op("Tanh", [ap], "th", (batch, 3, 3, 3))
    sb = b.op("Sub", [sg, th], "sb", (batch, 3, 3, 3), activation="NONE")
    dv = b.op("Div", [sb, b.t("den", (1, 1, 1, 3), True)], "dv", (batch, 3, 3, 3), activation="NONE")
    cc = b.op("Concat", [dv, th], "cc", (batch, 3, 3, 6), axis=-1, activation="NONE")
    mn = b.op("Mean", [cc, b.t("axes", (2,), True, "int32", (1, 2))], "mn", (batch, 6), keep_dims=False,
              axes=(1, 2))
    y = b.op("FullyConnected", [mn, b.t("w2", (4, 6), True), b.t("b2", (4,), True)], "y", (batch, 4),
             activation="TANH")
    return b.graph([x], [y])


def nchw_net(batch=2):
    """ONNX layout: Conv (explicit pads) -> Relu -> depthwise Conv -> MaxPool -> GlobalAveragePool ->
    Reshape -> FC from MatMul+Add ([I, O] weights)."""
    b = _B()
    x = b.t("x", (batch, 2, 5, 5))
    c = b.op("Conv2D", [x, b.t("w0", (4, 2, 3, 3), True), b.t("b0", (4,), True)], "c", (batch, 4, 5, 5),
             stride=(1, 1), dilation=(1, 1), padding="SAME", pads=(1, 1, 1, 1), activation="NONE", layout="NCHW")
    r = b.op("Relu", [c], "r", (batch, 4, 5, 5))
    d = b.op("DepthwiseConv2D", [r, b.t("w1", (4, 1, 3, 3), True), b.t("b1", (4,), True)], "d",
             (batch, 4, 3, 3), stride=(2, 2), dilation=(1, 1), padding="EXPLICIT", pads=(1, 1, 1, 1),
             depth_multiplier=1, activation="NONE", layout="NCHW")
    p = b.op("MaxPool2D", [d], "p", (batch, 4, 2, 2), filter=(2, 2), stride=(1, 1), padding="VALID",
             pads=(0, 0, 0, 0), activation="NONE", layout="NCHW")
    g = b.op("Mean", [p], "g", (batch, 4, 1, 1), axes=(2, 3), keep_dims=True, layout="NCHW")
    f = b.op("Reshape", [g], "f", (batch, 4))
    y = b.op("FullyConnected", [f, b.t("w2", (4, 3), True), b.t("b2", (3,), True)], "y", (batch, 3),
             activation="NONE", trans_b=False)
    return b.graph([x], [y], fmt="onnx")


def misc_net(batch=2):
    """The rest of the ops with a backward rule: standalone Relu6, Clip (ONNX bounds as scalar
    operands), Mean with keep_dims, Squeeze, FC with a fused RELU_N1_TO_1 / SIGMOID, MatMul with a
    constant adj_y operand, Unsqueeze, MatMul of two activations (both back-props), Flatten; the FC
    output f is a branch point."""
    b = _B()
    x = b.t("x", (batch, 4, 4, 3))
    c = b.op("Conv2D", [x, b.t("w0", (3, 1, 1, 3), True), b.t("b0", (3,), True)], "c", (batch, 4, 4, 3),
             stride=(1, 1), dilation=(1, 1), padding="VALID", activation="NONE", layout="NHWC")
    r6 = b.op("Relu6", [c], "r6", (batch, 4, 4, 3))
    cl = b.op("Clip", [r6, b.t("lo", (), True), b.t("hi", (), True)], "cl", (batch, 4, 4, 3), min=0.1, max=0.9)
    mn = b.op("Mean", [cl, b.t("axes", (2,), True, "int32", (1, 2))], "mn", (batch, 1, 1, 3), keep_dims=True,
              axes=(1, 2))
    sq = b.op("Squeeze", [mn], "sq", (batch, 3), axes=(1, 2))
    f = b.op("FullyConnected", [sq, b.t("w1", (4, 3), True), b.t("b1", (4,), True)], "f", (batch, 4),
             activation="RELU_N1_TO_1")
    m = b.op("MatMul", [f, b.t("w2", (5, 4), True)], "m", (batch, 5), adj_x=False, adj_y=True)
    s = b.op("Unsqueeze", [m], "s", (batch, 5, 1), axes=(2,))
    t = b.op("Unsqueeze", [f], "t", (batch, 1, 4), axes=(1,))
    o = b.op("MatMul", [s, t], "o", (batch, 5, 4), adj_x=False, adj_y=False)
    fl = b.op("Flatten", [o], "fl", (batch, 20))
    y = b.op("FullyConnected", [fl, b.t("w3", (3, 20), True), b.t("b3", (3,), True)], "y", (batch, 3),
             activation="SIGMOID")
    return b.graph([x], [y])


GRAPHS = {"conv": conv_net, "residual": residual_net, "nchw": nchw_net, "misc": misc_net}
