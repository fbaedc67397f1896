"""Strides, as ATen computes them: which views exist, the layout a new tensor gets, when a matmul
operand is copied, what counts as channels-last. Pure functions of shapes and strides (in elements)."""
from __future__ import annotations

from memplan_cli.ops._torch import EXPAND, NARROWS, TRANSPOSE, UNBIND


def elements(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def contiguous_strides(shape) -> tuple:
    """Contiguous strides (in elements) of `shape`."""
    out, n = [], 1
    for d in reversed(tuple(shape)):
        out.append(n)
        n *= int(d)
    return tuple(reversed(out))


def is_contiguous(shape, strides) -> bool:
    """torch's is_contiguous: sizes of 1 have any stride."""
    return all(st == c for d, st, c in zip(shape, strides, contiguous_strides(shape)) if int(d) != 1)


def view_strides(old, oldst, new):
    """The strides of `old` (strides `oldst`) viewed as `new`, or None when no view exists and reshape
    copies (ATen's computeStride)."""
    old, oldst, new = tuple(int(d) for d in old), tuple(oldst), tuple(int(d) for d in new)
    if elements(old) == 0 or not old:
        return contiguous_strides(new)
    newst = [0] * len(new)
    view_d = len(new) - 1
    chunk = oldst[-1]
    t_n = v_n = 1
    for d in range(len(old) - 1, -1, -1):
        t_n *= old[d]
        if d == 0 or (old[d - 1] != 1 and oldst[d - 1] != t_n * chunk):
            while view_d >= 0 and (v_n < t_n or new[view_d] == 1):
                newst[view_d] = v_n * chunk
                v_n *= new[view_d]
                view_d -= 1
            if v_n != t_n:
                return None
            if d > 0:
                chunk = oldst[d - 1]
                t_n = v_n = 1
    return tuple(newst) if view_d == -1 else None


def view_output_strides(op, opd, st, k=0):
    """Strides of view op `op`'s output k, given its input's strides `st`; None: the op copies."""
    x, y = tuple(opd[op.inputs[0]].shape), tuple(opd[op.outputs[k]].shape)
    if op.type == TRANSPOSE:
        perm = op.attrs.get("perm") or tuple(reversed(range(len(x))))
        return tuple(st[int(i)] for i in perm)
    if op.type in ("Select", UNBIND["type"]):  # the selected dim goes (each piece of an unbind is a select)
        ax = int(op.attrs.get("axis", 0)) % len(x)
        return tuple(st[:ax]) + tuple(st[ax + 1:])
    if op.type == EXPAND:  # broadcast dims get stride 0
        pad = (0,) * (len(y) - len(x))
        full = pad + tuple(st)
        xs = (1,) * (len(y) - len(x)) + x
        return tuple(0 if xs[i] == 1 and y[i] != 1 else full[i] for i in range(len(y)))
    if op.type in NARROWS and len(x) == len(y):
        return tuple(st)  # a narrow keeps its input's strides
    if x == y:
        return tuple(st)
    return view_strides(x, st, y)


def iterator_strides(out_shape, ins) -> tuple:
    """The output strides TensorIterator gives an elementwise op of inputs `ins` ((shape, strides)
    pairs): dimensions sorted by the inputs' strides (broadcast ones skipped), a dense result."""
    out_shape = tuple(int(d) for d in out_shape)
    nd = len(out_shape)
    al = []
    for shp, st in ins:
        pad = nd - len(shp)
        al.append([0] * pad + [0 if int(shp[i]) == 1 and out_shape[pad + i] != 1 else st[i]
                               for i in range(len(shp))])
    perm = list(range(nd - 1, -1, -1))  # perm[0] is the fastest axis

    def should_swap(d0, d1):
        for st in al:
            a, b = st[d0], st[d1]
            if a == 0 or b == 0:
                continue
            if a != b:
                return -1 if a < b else 1
            if out_shape[d0] > out_shape[d1]:
                return 1
        return 0

    for i in range(1, nd):
        d1 = i
        for d0 in range(i - 1, -1, -1):
            c = should_swap(perm[d0], perm[d1])
            if c > 0:
                perm[d0], perm[d1] = perm[d1], perm[d0]
                d1 = d0
            elif c < 0:
                break
    st, n = [0] * nd, 1
    for d in perm:
        st[d] = n
        n *= out_shape[d]
    return tuple(st)


def bmm_copies(shape, st) -> bool:
    """A matmul operand of 3+ dims is folded to (batch, m, n) (a reshape: a copy when no view exists);
    bmm takes a row- or column-major matrix as it is and copies any other layout."""
    shape = tuple(int(d) for d in shape)
    b = elements(shape[:-2])
    f = view_strides(shape, st, (b,) + shape[-2:])
    if f is None:
        return True
    m, n = shape[-2:]
    return not ((f[-1] == 1 or n == 1) and f[-2] >= max(n, 1) or (f[-2] == 1 or m == 1) and f[-1] >= max(m, 1))



def expanded_strides(shape, st, to) -> tuple:
    """The strides of `expand(to)` of a tensor (shape, st): stride 0 on every dim it broadcasts."""
    shape, pad = tuple(int(d) for d in shape), len(to) - len(shape)
    return tuple(0 if i < pad or (shape[i - pad] == 1 and int(n) != 1) else st[i - pad] for i, n in enumerate(to))


def channels_last_2d(shape, st) -> bool:
    """ATen's is_channels_last_strides_2d_s4: strides that suggest channels-last (ambiguous ones, such
    as (N, 1, 1, 1), count as contiguous)."""
    if len(shape) != 4 or st[1] == 0:
        return False
    low = 0
    for d in (1, 3, 2, 0):
        if int(shape[d]) == 0 or st[d] < low or (d == 0 and low == st[1]):
            return False
        low = st[d] * (int(shape[d]) if int(shape[d]) > 1 else 1)
    return True
