"""Small test models built with `modelgen`, one function each; every one trains in onert 0.1.0.

Shared by tests and benchmarks: residual blocks, depthwise convs, average pooling, Sub/Mul/Div,
standalone ReLU/ReLU6, Pad, Mean, two non-trivial branches, a frozen prefix.
"""
from __future__ import annotations

from memplan_cli.testing.modelgen import ModelBuilder


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


ZOO = {"tiny_cnn": tiny_cnn, "depthwise": depthwise, "residual": residual,
       "elementwise": elementwise, "two_branches": two_branches}
