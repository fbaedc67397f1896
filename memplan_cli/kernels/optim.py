"""Optimizer updates applied in place to a weight and its state tensors (applyGradient).

sgd: w -= lr g. momentum (Keras form): v = mu v - lr g; w += v. adam in TensorFlow's ApplyAdam form,
which onert 0.1.0 uses (step t counted from 1): m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
lr_t = lr sqrt(1-b2^t) / (1-b1^t); w -= lr_t m / (sqrt(v) + eps). It differs from Kingma & Ba's
m^ / (sqrt(v^) + eps) only in where eps enters (eps / sqrt(1-b2^t) there), which matters for
gradients near eps: measured against onert's exported weights after one Adam step on mnist, this
form agrees to 1e-6, Kingma & Ba's differs by up to 7e-4 (lr 1e-3).
State tensors are zero before the first step. Temporaries: one or two arrays of the weight's size.
"""
from __future__ import annotations

import numpy as np


def sgd(w, g, lr):
    w -= lr * g


def momentum(w, g, v, lr, mu=0.9):
    v *= mu
    v -= lr * g
    w += v


def adam(w, g, m, v, lr, t=1, beta1=0.9, beta2=0.999, eps=1e-7):
    m *= beta1
    m += (1 - beta1) * g
    v *= beta2
    v += (1 - beta2) * (g * g)
    lr_t = float(lr * np.sqrt(1 - beta2 ** t) / (1 - beta1 ** t))
    w -= lr_t * m / (np.sqrt(v) + eps)


STATE_COUNT = {"sgd": 0, "momentum": 1, "adam": 2}


def apply(name, w, g, states, lr, t=1):
    if name == "sgd":
        sgd(w, g, lr)
    elif name == "momentum":
        momentum(w, g, states[0], lr)
    elif name == "adam":
        adam(w, g, states[0], states[1], lr, t)
    else:
        raise ValueError(f"unknown optimizer {name!r}")
