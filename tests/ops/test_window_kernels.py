"""The N-D conv and pool kernels (memplan_cli/ops/_window.py) against finite differences and direct loops:
1-D, 2-D and 3-D, strides, dilation, asymmetric pads, groups, depthwise, ceil_mode, count_include_pad."""
import itertools

import numpy as np
import pytest

from memplan_cli.ops import _window as W
from tests.execute.test_kernels import close, numgrad, rand


def geom(xs, k, s, d, pads, ceil=False):
    nd = len(k)
    g = W.Window(xs[2:], (1,) * nd, k, (s,) * nd if isinstance(s, int) else s,
                 (d,) * nd if isinstance(d, int) else d, pads)
    return W.Window(xs[2:], g.out_size(ceil), g.kernel, g.stride, g.dilation, pads)


def direct_conv(x, w, g, group):
    """The definition, one output element at a time."""
    n, c = x.shape[:2]
    o = w.shape[0]
    xp = np.pad(x, [(0, 0), (0, 0)] + [(b, e + x_) for b, e, x_ in zip(g.begin, g.end, g.extra)])
    y = np.zeros((n, o) + g.outs)
    cg, og = c // group, o // group
    for pos in itertools.product(*[range(v) for v in g.outs]):
        for t in g.taps:
            idx = tuple(p * s + i * d for p, s, i, d in zip(pos, g.stride, t, g.dilation))
            for oc in range(o):
                gi = oc // og
                y[(slice(None), oc) + pos] += xp[(slice(None), slice(gi * cg, (gi + 1) * cg)) + idx] @ w[(oc, slice(None)) + t]
    return y


CONV_CASES = [
    # (x shape, out channels, kernel, stride, dilation, pads, group)
    ((2, 3, 7), 4, (3,), 1, 1, (1, 1), 1),
    ((1, 4, 9), 6, (3,), 2, 2, (2, 0), 2),
    ((2, 3, 5, 5), 4, (3, 3), 1, 1, (1, 1, 1, 1), 1),
    ((1, 2, 6, 5), 4, (3, 2), 2, 1, (1, 0, 2, 1), 2),
    ((1, 3, 7, 7), 6, (3, 3), 2, 2, (2, 2, 1, 1), 3),  # depthwise, multiplier 2
    ((1, 2, 4, 5, 4), 3, (2, 3, 2), (1, 2, 1), 1, (0, 1, 1, 1, 0, 0), 1),
    ((1, 4, 5, 4, 4), 4, (3, 1, 2), 2, (1, 1, 2), (1, 0, 0, 1, 0, 1), 2),
]


@pytest.mark.parametrize("xs,o,k,s,d,pads,group", CONV_CASES)
def test_conv_matches_the_definition_and_its_gradients_finite_differences(xs, o, k, s, d, pads, group):
    rng = np.random.default_rng(5)
    x, w, b = rand(rng, *xs), rand(rng, o, xs[1] // group, *k), rand(rng, o)
    g = geom(xs, k, s, d, pads)
    y = W.conv_forward(x, w, b, g, group)
    np.testing.assert_allclose(y, direct_conv(x, w, g, group) + b.reshape((1, o) + (1,) * len(k)))
    r = rand(rng, *y.shape)

    def f():
        return (r * W.conv_forward(x, w, b, g, group)).sum()

    close(W.conv_backward_input(r, w, x.shape, g, group), numgrad(f, x))
    close(W.conv_backward_weight(r, x, w.shape, g, group), numgrad(f, w))


def test_grouped_conv_is_a_block_diagonal_conv():
    rng = np.random.default_rng(8)
    x, w = rand(rng, 1, 4, 5, 5), rand(rng, 6, 2, 3, 3)
    full = np.zeros((6, 4, 3, 3))
    for gi in range(2):
        full[gi * 3:(gi + 1) * 3, gi * 2:(gi + 1) * 2] = w[gi * 3:(gi + 1) * 3]
    g = geom(x.shape, (3, 3), 2, 1, (1, 1, 1, 1))
    np.testing.assert_allclose(W.conv_forward(x, w, None, g, 2), W.conv_forward(x, full, None, g, 1))


POOL_CASES = [
    # (x shape, kernel, stride, dilation, pads, ceil)
    ((2, 3, 8), (3,), 2, 1, (1, 1), False),
    ((1, 2, 9), (2,), 2, 2, (0, 1), True),
    ((2, 2, 4, 4), (2, 2), 2, 1, (0, 0, 0, 0), False),
    ((1, 2, 5, 5), (3, 3), 2, 1, (1, 1, 1, 1), True),
    ((1, 2, 7, 6), (3, 2), (2, 1), (2, 1), (1, 0, 1, 1), False),
    ((1, 2, 5, 4, 5), (2, 2, 3), 2, 1, (0, 1, 0, 0, 0, 1), True),
]


@pytest.mark.parametrize("xs,k,s,d,pads,ceil", POOL_CASES)
def test_max_pool_routes_the_gradient_to_each_maximum(xs, k, s, d, pads, ceil):
    rng = np.random.default_rng(10)
    x = rng.permutation(np.arange(np.prod(xs), dtype=float)).reshape(xs) / 10  # distinct: no ties
    g = geom(xs, k, s, d, pads, ceil)
    y, arg = W.max_pool(x, g)
    r = rand(rng, *y.shape)
    close(W.max_pool_backward(r, arg, xs, g), numgrad(lambda: (r * W.max_pool(x, g)[0]).sum(), x))
    assert np.isfinite(y).all()  # every window sees at least one real element


@pytest.mark.parametrize("xs,k,s,d,pads,ceil", POOL_CASES)
@pytest.mark.parametrize("include_pad", [False, True])
def test_avg_pool_gradient(xs, k, s, d, pads, ceil, include_pad):
    rng = np.random.default_rng(11)
    x = rand(rng, *xs)
    g = geom(xs, k, s, d, pads, ceil)
    r = rand(rng, *W.avg_pool(x, g, include_pad).shape)
    close(W.avg_pool_backward(r, xs, g, include_pad), numgrad(lambda: (r * W.avg_pool(x, g, include_pad)).sum(), x))


def test_avg_pool_divisors_follow_torch():
    """count_include_pad counts explicit padding but never the ceil_mode overhang (torch's rule)."""
    x = np.ones((1, 1, 6))
    g = geom(x.shape, (3,), 2, 1, (1, 1), ceil=True)  # windows [-1, 1], [1, 3], [3, 5], [5, 7]: 6 pads, 7 overhangs
    assert g.outs == (4,) and g.extra == (1,)
    np.testing.assert_allclose(W.avg_pool(x, g, True)[0, 0], [2 / 3, 1, 1, 1 / 2])
    np.testing.assert_allclose(W.avg_pool(x, g, False)[0, 0], [1, 1, 1, 1])
