"""Every reference kernel's backward against central finite differences (float64, tiny shapes).

Each check contracts the op's output with a fixed random tensor R (L = sum(R * f(inputs))), so
dL/dy = R, and compares the kernel's gradient with (L(p + h) - L(p - h)) / 2h for every element.
"""
import numpy as np
import pytest

from memplan_cli.kernels import activation, fc, loss, optim, shape, softmax

H = 1e-6
RTOL = 1e-6
ATOL = 1e-8


def numgrad(f, p):
    """d f() / d p by central differences; f reads p (modified in place)."""
    g = np.zeros_like(p)
    flat, gflat = p.reshape(-1), g.reshape(-1)
    for k in range(flat.size):
        old = flat[k]
        flat[k] = old + H
        a = f()
        flat[k] = old - H
        b = f()
        flat[k] = old
        gflat[k] = (a - b) / (2 * H)
    return g


def rand(rng, *shape, lo=-1.0, hi=1.0):
    return rng.uniform(lo, hi, size=shape)


def close(got, want):
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL * max(1.0, np.abs(want).max()) * 100)


def away_from_kinks(x, act):
    """Nudge pre-activations away from the non-differentiable points of ReLU-family activations."""
    for k in {"RELU": [0], "RELU6": [0, 6], "RELU_N1_TO_1": [-1, 1]}.get(act, []):
        near = np.abs(x - k) < 0.05
        x[near] += 0.1
    return x


ACTS = ["NONE", "RELU", "RELU6", "RELU_N1_TO_1", "TANH", "SIGMOID"]


# ---- activations ------------------------------------------------------------------------------
@pytest.mark.parametrize("act", ACTS[1:])
def test_standalone_activation(act):
    rng = np.random.default_rng(1)
    x = away_from_kinks(rand(rng, 2, 5, lo=-8, hi=8), act)
    r = rand(rng, 2, 5)
    y = np.empty_like(x)
    activation.forward(x, y, act)
    dx = np.empty_like(x)
    activation.calc_derivative(y, r, dx, act)

    def f():
        out = np.empty_like(x)
        activation.forward(x, out, act)
        return (r * out).sum()

    close(dx, numgrad(f, x))


def test_activation_values():
    x = np.array([-7.0, -0.5, 0.5, 7.0])
    out = np.empty(4)
    assert activation.forward(x, out, "RELU6").tolist() == [0, 0, 0.5, 6]
    assert activation.forward(x, out, "RELU").tolist() == [0, 0, 0.5, 7]
    np.testing.assert_allclose(activation.forward(x, out, "SIGMOID"), 1 / (1 + np.exp(-x)))


# ---- fully connected / matmul -------------------------------------------------------------------
@pytest.mark.parametrize("act", ["NONE", "RELU", "TANH"])
@pytest.mark.parametrize("layout", ["OI", "IO"])
def test_fully_connected(act, layout):
    rng = np.random.default_rng(2)
    x, w, b = rand(rng, 3, 4), rand(rng, 5, 4), rand(rng, 5)
    if layout == "IO":
        w = np.ascontiguousarray(w.T)
    r = rand(rng, 3, 5)
    y = np.empty((3, 5))

    def f():
        fc.forward(x, w, b, y, act, layout)
        return (r * y).sum()

    f()
    y_kept = y.copy()
    dx, dw, db = np.empty_like(x), np.empty_like(w), np.empty_like(b)
    fc.calc_derivative(r, w, dx, y=y_kept, act=act, w_layout=layout)
    fc.calc_gradient(r, x, dw, db, y=y_kept, act=act, w_layout=layout)
    close(dx, numgrad(f, x))
    close(dw, numgrad(f, w))
    close(db, numgrad(f, b))


def test_fully_connected_flattens_input_and_accumulates():
    rng = np.random.default_rng(3)
    x, w = rand(rng, 2, 3, 2), rand(rng, 4, 6)
    y = np.empty((2, 4))
    fc.forward(x, w, None, y)
    np.testing.assert_allclose(y, x.reshape(2, 6) @ w.T)
    dx = np.ones_like(x)
    fc.calc_derivative(np.ones((2, 4)), w, dx, acc=True)
    np.testing.assert_allclose(dx, 1 + (np.ones((2, 4)) @ w).reshape(x.shape))


def test_matmul_with_broadcast():
    rng = np.random.default_rng(4)
    a, b = rand(rng, 2, 3, 4), rand(rng, 4, 5)
    r = rand(rng, 2, 3, 5)
    y = np.empty((2, 3, 5))

    def f():
        fc.matmul_forward(a, b, y)
        return (r * y).sum()

    da, db = np.empty_like(a), np.empty_like(b)
    fc.matmul_grad_a(r, b, da)
    fc.matmul_grad_b(r, a, db)
    close(da, numgrad(f, a))
    close(db, numgrad(f, b))


# convolution and pooling kernels: tests/ops/test_window_kernels.py; Pad: tests/ops/test_pad.py


# ---- softmax, reshape, mean, concat ------------------------------------------------------
def test_softmax():
    rng = np.random.default_rng(14)
    x, r = rand(rng, 3, 5), rand(rng, 3, 5)
    y = np.empty_like(x)

    def f():
        softmax.forward(x, y, beta=1.5)
        return (r * y).sum()

    f()
    np.testing.assert_allclose(y.sum(axis=1), 1)
    dx = np.empty_like(x)
    softmax.calc_derivative(y.copy(), r, dx, beta=1.5)
    close(dx, numgrad(f, x))


def test_reshape_mean_concat():
    rng = np.random.default_rng(15)
    x = rand(rng, 2, 3, 4)
    # reshape
    y = np.empty((6, 4))
    r = rand(rng, 6, 4)
    dx = np.empty_like(x)
    shape.reshape_calc_derivative(r, dx)
    close(dx, numgrad(lambda: (r * shape.reshape_forward(x, y)).sum(), x))
    # mean, keepdims and not, negative axis
    for keep in (False, True):
        y = np.empty((2, 1, 1) if keep else (2,))
        r = rand(rng, *y.shape)
        shape.mean_calc_derivative(r, [1, -1], dx)
        close(dx, numgrad(lambda: (r * shape.mean_forward(x, [1, -1], y, keep)).sum(), x))
    # concat
    a, b = rand(rng, 2, 2), rand(rng, 2, 3)
    y = np.empty((2, 5))
    r = rand(rng, 2, 5)
    f = lambda: (r * shape.concat_forward([a, b], 1, y)).sum()  # noqa: E731
    for k, t in enumerate((a, b)):
        d = np.empty_like(t)
        shape.concat_calc_derivative(r, 1, k, [2, 3], d)
        close(d, numgrad(f, t))


# ---- losses -----------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["mse", "cce"])
def test_losses(kind):
    rng = np.random.default_rng(16)
    logits = rand(rng, 4, 3)
    y = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    t = np.eye(3)[rng.integers(0, 3, 4)]
    out = np.empty(1)

    def f():
        return loss.FORWARD[kind](y, t, out)[0]

    dy = np.empty_like(y)
    loss.DERIVATIVE[kind](y, t, dy)
    close(dy, numgrad(f, y))


def test_cce_through_softmax_is_softmax_minus_target():
    rng = np.random.default_rng(17)
    x = rand(rng, 4, 3)
    t = np.eye(3)[[0, 2, 1, 1]]
    y, dy, dx = np.empty_like(x), np.empty_like(x), np.empty_like(x)
    softmax.forward(x, y)
    loss.cce_calc_derivative(y, t, dy)
    softmax.calc_derivative(y, dy, dx)
    np.testing.assert_allclose(dx, (y - t) / 4, atol=1e-12)


# ---- optimizers -------------------------------------------------------------------------------
def test_optimizers_by_hand():
    w, g = np.array([1.0, -2.0]), np.array([0.5, 0.25])
    a = w.copy()
    optim.apply("sgd", a, g, [], 0.1)
    np.testing.assert_allclose(a, [0.95, -2.025])
    a, v = w.copy(), np.zeros(2)
    optim.apply("momentum", a, g, [v], 0.1)
    optim.apply("momentum", a, g, [v], 0.1)
    # v1 = -0.1 g; v2 = 0.9 v1 - 0.1 g = -0.19 g; w = w - 0.29 g
    np.testing.assert_allclose(a, w - 0.29 * g)
    a, m, v = w.copy(), np.zeros(2), np.zeros(2)
    optim.apply("adam", a, g, [m, v], 0.1, t=1)
    # first bias-corrected step moves every weight by about lr * sign(g)
    np.testing.assert_allclose(a, w - 0.1 * np.sign(g), rtol=1e-5)
    np.testing.assert_allclose(m, 0.1 * g)
    np.testing.assert_allclose(v, 0.001 * g * g)


def test_adam_is_onerts_applyadam_form():
    """onert (TensorFlow's ApplyAdam): w -= lr sqrt(1-b2^t)/(1-b1^t) m / (sqrt(v) + eps), so for the
    first step eps acts as eps / sqrt(1-b2) next to |g|; Kingma & Ba's m^/(sqrt(v^)+eps) would move a
    weight whose gradient is 1e-6 by lr * 0.91 instead of lr * 0.24."""
    w, g = np.array([1.0, -2.0, 0.5], np.float32), np.array([0.5, 1e-6, -3e-6], np.float32)
    a, m, v = w.copy(), np.zeros(3, np.float32), np.zeros(3, np.float32)
    optim.apply("adam", a, g, [m, v], 0.1, t=1)
    g64 = g.astype(np.float64)
    np.testing.assert_allclose(a, w - 0.1 * g64 / (np.abs(g64) + 1e-7 / np.sqrt(0.001)), rtol=1e-6)
    assert a.dtype == np.float32
    # second step, t = 2, by hand
    m2, v2 = 0.9 * m + 0.1 * g64, 0.999 * v + 0.001 * g64 * g64
    want = a - 0.1 * np.sqrt(1 - 0.999 ** 2) / (1 - 0.9 ** 2) * m2 / (np.sqrt(v2) + 1e-7)
    optim.apply("adam", a, g, [m, v], 0.1, t=2)
    np.testing.assert_allclose(a, want, rtol=1e-6)
