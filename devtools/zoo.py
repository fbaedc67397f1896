"""Small test models built with `modelgen`, one function each; every one in `ZOO` trains in onert 0.1.0.

Shared by tests and benchmarks: residual blocks (one with a projection shortcut), depthwise convs, average pooling (with and
without a fused activation), Sub/Mul/Div (constant and activation operands), standalone
ReLU/ReLU6, Pad (PAD, and PADV2 before a VALID max-pool), Mean, two non-trivial branches, a shared constant and an unused tensor, two model
inputs, an unread model input, a MobileNetV2 block, a graph whose two onert topological orders
differ. `UNTRAINABLE` holds models onert 0.1.0 refuses to train.
"""
from __future__ import annotations

import numpy as np

from devtools.modelgen import ModelBuilder


def tiny_cnn() -> ModelBuilder:
    m = ModelBuilder()
    x = m.input([1, 8, 8, 3])
    y = m.conv2d(x, 4, 3, activation="RELU")
    y = m.max_pool(y)
    y = m.reshape(y, [-1, 64])
    m.output(m.softmax(m.fully_connected(y, 10)))
    return m


def depthwise() -> ModelBuilder:
    m = ModelBuilder()
    x = m.input([1, 8, 8, 3])
    y = m.depthwise_conv2d(x, 3, activation="RELU6")
    y = m.conv2d(y, 20, 1)
    y = m.depthwise_conv2d(y, 3, stride=2)
    y = m.depthwise_conv2d(y, (3, 5), multiplier=2, activation="RELU")
    y = m.mean(y, [1, 2])
    m.output(m.softmax(m.fully_connected(y, 10)))
    return m


def residual() -> ModelBuilder:
    m = ModelBuilder()
    x = m.input([1, 8, 8, 4])
    y = m.conv2d(x, 8, 3, activation="RELU6")
    a = m.conv2d(y, 8, 1, activation="RELU")
    a = m.depthwise_conv2d(a, 3)
    y = m.add(y, a)
    b = m.conv2d(y, 8, 1)
    y = m.add(b, y, activation="RELU")
    y = m.avg_pool(y, 2, 2)
    y = m.mean(y, [1, 2], keep_dims=True)
    y = m.reshape(y, [-1, 8])
    y = m.fully_connected(y, 6, activation="RELU")
    m.output(m.softmax(m.fully_connected(y, 5)))
    return m


def resnet_projection() -> ModelBuilder:
    """A ResNet block with a projection shortcut built after the main branch, the Add reading the
    projection first: onert's backward order (DFS from the loss over inputs in operand order, then
    reversed) visits the main branch before the projection, memplan's reverse topological order
    the other way round."""
    m = ModelBuilder()
    x = m.input([1, 8, 8, 3])
    y = m.conv2d(x, 8, 3, activation="RELU")
    a = m.conv2d(y, 16, 3, stride=2, activation="RELU")
    a = m.conv2d(a, 16, 3)
    p = m.conv2d(y, 16, 1, stride=2)
    y = m.add(p, a, activation="RELU")
    y = m.mean(y, [1, 2])
    m.output(m.softmax(m.fully_connected(y, 5)))
    return m


def elementwise() -> ModelBuilder:
    m = ModelBuilder()
    x = m.input([1, 6, 6, 2])
    y = m.pad(x, [[0, 0], [0, 1], [0, 1], [0, 0]])
    y = m.conv2d(y, 4, 3, padding="VALID")
    y = m.relu(y)
    y = m.mul(y, m.const([1, 5, 5, 4]))
    y = m.sub(y, m.const([4]), activation="RELU6")
    y = m.max_pool(y, 2, 1, padding="SAME", activation="RELU")
    y = m.relu6(y)
    y = m.div(y, m.const([4]))
    y = m.reshape(y, [-1, 100])
    m.output(m.fully_connected(y, 7))
    return m


def two_branches() -> ModelBuilder:
    m = ModelBuilder()
    x = m.input([1, 8, 8, 3])
    y = m.conv2d(x, 4, 1)
    a = m.conv2d(y, 6, 3, activation="RELU")
    a = m.conv2d(a, 4, 1)
    b = m.conv2d(y, 2, 1)
    b = m.conv2d(b, 4, 3, activation="RELU6")
    y = m.add(a, b)
    y = m.reshape(y, [-1, 256])
    m.output(m.fully_connected(y, 10))
    return m


def pooling() -> ModelBuilder:
    """Average pooling with a fused activation, strided conv, SAME max pooling, Mean without keep_dims."""
    m = ModelBuilder()
    x = m.input([1, 12, 12, 3])
    y = m.conv2d(x, 6, 3, activation="RELU")
    y = m.avg_pool(y, 2, 2, activation="RELU6")
    y = m.conv2d(y, 8, 3, stride=2, padding="VALID")
    y = m.max_pool(y, 3, 1, padding="SAME")
    y = m.avg_pool(y, 2, 1, padding="SAME")
    y = m.mean(y, [1, 2])
    y = m.fully_connected(y, 16, activation="RELU6")
    m.output(m.fully_connected(y, 4))
    return m


def padded_max_pool() -> ModelBuilder:
    """A padded max-pool as litert-torch and onnx2tf write torch's MaxPool2d(3, 2, padding=1): PADV2
    filled with the lowest float32, then a VALID pool (resnet's stem)."""
    m = ModelBuilder()
    x = m.input([1, 10, 10, 3])
    y = m.conv2d(x, 4, 3, stride=2, activation="RELU")
    y = m.pad(y, [[0, 0], [1, 1], [1, 1], [0, 0]], value=float(np.finfo(np.float32).min))
    y = m.max_pool(y, 3, 2, padding="VALID")
    y = m.conv2d(y, 6, 3)
    y = m.reshape(y, [-1, 54])
    m.output(m.fully_connected(y, 4))
    return m


def arithmetic() -> ModelBuilder:
    """Mul and Div of two activations, Sub with the constant first, Add with a fused RELU6."""
    m = ModelBuilder()
    x = m.input([1, 5, 5, 4])
    a = m.conv2d(x, 4, 3, activation="RELU")
    b = m.conv2d(x, 4, 1, activation="RELU6")
    p = m.mul(a, b)
    q = m.div(p, m.add(b, m.const([4]), activation="RELU6"))
    r = m.sub(m.const([1, 5, 5, 4]), q)
    y = m.add(r, a, activation="RELU6")
    y = m.reshape(y, [-1, 100])
    m.output(m.fully_connected(y, 3))
    return m


def shared_const() -> ModelBuilder:
    """One constant read by three ops (onert copies it twice) and a tensor nothing reads (dropped)."""
    m = ModelBuilder()
    x = m.input([1, 6, 6, 2])
    c = m.const([2])
    m.const([3, 3])  # unused: UnusedOperandEliminationPass removes it
    y = m.mul(x, c)
    y = m.conv2d(y, 4, 3, activation="RELU")
    z = m.add(m.conv2d(y, 2, 1), c)
    z = m.sub(z, c)
    z = m.reshape(z, [-1, 72])
    m.output(m.fully_connected(z, 5))
    return m


def two_inputs() -> ModelBuilder:
    """Two model inputs: two permuted copies x' with no def, claimed in onert's hash-map order."""
    m = ModelBuilder()
    a = m.input([1, 4, 4, 3])
    b = m.input([1, 4, 4, 3])
    y = m.add(m.conv2d(a, 3, 1), b)
    y = m.reshape(y, [-1, 48])
    m.output(m.fully_connected(y, 6))
    return m


def dead_input() -> ModelBuilder:
    """A second model input nothing reads: onert leaves it on the builtin backend, unplanned."""
    m = ModelBuilder()
    a = m.input([1, 4, 4, 3])
    m.input([1, 4, 4, 3])
    y = m.conv2d(a, 3, 1)
    m.output(m.fully_connected(m.reshape(y, [-1, 48]), 6))
    return m


def mobilenet_block() -> ModelBuilder:
    """MobileNetV2's stride-2 block with its explicit PAD, then an inverted residual block."""
    m = ModelBuilder()
    x = m.input([1, 16, 16, 8])
    y = m.conv2d(x, 16, 1, activation="RELU6")
    y = m.pad(y, [[0, 0], [0, 1], [0, 1], [0, 0]])
    y = m.depthwise_conv2d(y, 3, stride=2, padding="VALID", activation="RELU6")
    y = m.conv2d(y, 8, 1)
    e = m.conv2d(y, 24, 1, activation="RELU6")
    e = m.depthwise_conv2d(e, 3, activation="RELU6")
    e = m.conv2d(e, 8, 1)
    y = m.add(y, e)
    y = m.mean(y, [1, 2])
    m.output(m.softmax(m.fully_connected(y, 10)))
    return m


def branch_orders() -> ModelBuilder:
    """A branching graph where onert's two topological orders differ: TensorPlanner walks the
    partial graph as ops 0,1,2,3,4,..., kernels are generated for the whole graph as 0,1,3,4,2,...
    (both picked by hash-container order; with FirstFit and the last 3 ops trained, the first one
    changes the non-const capacity)."""
    m = ModelBuilder()
    x = m.input([1, 4, 4, 3])
    a = m.conv2d(x, 4, 1)
    b = m.conv2d(a, 4, 3)
    c = m.add(a, b)
    d = m.conv2d(b, 4, 1, activation="RELU")
    e = m.depthwise_conv2d(b, 3)
    y = m.add(m.add(c, d), e)
    y = m.reshape(y, [-1, 64])
    m.output(m.fully_connected(y, 5))
    return m


ZOO = {"tiny_cnn": tiny_cnn, "depthwise": depthwise, "residual": residual, "resnet_projection": resnet_projection,
       "elementwise": elementwise, "two_branches": two_branches, "pooling": pooling, "padded_max_pool": padded_max_pool,
       "arithmetic": arithmetic, "shared_const": shared_const, "two_inputs": two_inputs, "dead_input": dead_input,
       "mobilenet_block": mobilenet_block, "branch_orders": branch_orders}


# ---- models onert 0.1.0 cannot train (measured: "Error during nnfw_session::...") -------------

def tanh_op() -> ModelBuilder:
    """A standalone TANH: "Tanh operation is not trainable yet" (train_prepare fails)."""
    m = ModelBuilder()
    x = m.input([1, 6, 6, 2])
    y = m.tanh(m.conv2d(x, 4, 3))
    m.output(m.fully_connected(m.reshape(y, [-1, 144]), 3))
    return m


def sigmoid_op() -> ModelBuilder:
    """A LOGISTIC (sigmoid) op: not trainable in onert 0.1.0 (train_prepare fails)."""
    m = ModelBuilder()
    x = m.input([1, 8])
    m.output(m.sigmoid(m.fully_connected(m.fully_connected(x, 6, activation="RELU"), 3)))
    return m


def concat() -> ModelBuilder:
    """A CONCATENATION: not trainable in onert 0.1.0 (train_prepare fails)."""
    m = ModelBuilder()
    x = m.input([1, 4, 4, 2])
    y = m.concat([m.conv2d(x, 2, 1), m.conv2d(x, 3, 1)])
    m.output(m.fully_connected(m.reshape(y, [-1, 80]), 3))
    return m


def fc_tanh() -> ModelBuilder:
    """A fused TANH activation: compiles, then the first training step fails
    ("Unsupported fused activation function.")."""
    m = ModelBuilder()
    x = m.input([1, 8])
    m.output(m.fully_connected(m.fully_connected(x, 6, activation="TANH"), 3))
    return m


def duplicate_input() -> ModelBuilder:
    """Add(x, x) inside the backward region: TensorPlanner "does not support duplicate inputs of an
    operation" (train_prepare fails)."""
    m = ModelBuilder()
    x = m.input([1, 4, 4, 2])
    y = m.conv2d(x, 3, 1)
    y = m.add(y, y)
    m.output(m.fully_connected(m.reshape(y, [-1, 48]), 3))
    return m


UNTRAINABLE = {"tanh_op": tanh_op, "sigmoid_op": sigmoid_op, "concat": concat, "fc_tanh": fc_tanh,
               "duplicate_input": duplicate_input}
