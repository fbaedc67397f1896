"""Einsum (ONNX Einsum, opset 12+: torch.einsum in TorchScript exports; XLNet's relative attention,
Transformer-XL, Perceiver).

Canonical attr `equation`: explicit ("ij,jk->ik"), the ellipsis written out as capital letters
(right-aligned; a dim of 1 broadcasts against the others), the implicit output made explicit (the
letters that appear once, in alphabetical order, after the ellipsis dims).

Training rule (derivatives.yaml `einsum`: the gradient of each operand is an einsum of the output
gradient with the other operands, which are saved):
- operand k's gradient / back-prop = einsum(dY, the other operands -> operand k's letters), with the
  letters only operand k has (summed away in forward) broadcast back and broadcast dims summed;
  it reads dY and every other operand (kept for backward), never operand k itself.
FLOPs: 2 x the product of every letter's size for each operand beyond the first (the contraction
as one loop nest); backward the same per operand whose gradient is computed.
Refused at load: a letter repeated within one operand or the output (traces, diagonals).
"""
from __future__ import annotations

import math
import string

import numpy as np

from memplan_cli.kernels.common import reduce_to_shape
from memplan_cli.ops.base import Canon, OpDef
from memplan_cli.ops.rule import OpRule, StepIO, bp_targets, forward_io


def parse(equation: str, ranks: list[int]) -> tuple[list[str], str] | None:
    """(input subscripts, output subscript) with the ellipsis written out; None if malformed."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    subs = lhs.split(",")
    if len(subs) != len(ranks):
        return None
    n_ell = max([r - len(s.replace("...", "")) for s, r in zip(subs, ranks) if "..." in s] or [0])
    ell = string.ascii_uppercase[:n_ell]
    out_subs = []
    for s, r in zip(subs, ranks):
        if "..." in s:
            k = r - len(s.replace("...", ""))
            if k < 0:
                return None
            s = s.replace("...", ell[n_ell - k:])
        if len(s) != r or not all(c in string.ascii_letters for c in s):
            return None
        out_subs.append(s)
    if arrow:
        out = rhs.replace("...", ell)
    else:
        counts = {c: sum(s.count(c) for s in out_subs) for c in "".join(out_subs)}
        out = ell + "".join(sorted(c for c, n in counts.items() if n == 1 and c not in ell))
    if not all(c in "".join(out_subs) for c in out):
        return None
    return out_subs, out


def _split(eq: str) -> tuple[list[str], str]:
    lhs, _, out = eq.partition("->")
    return lhs.split(","), out


def letter_sizes(eq: str, shapes) -> dict:
    subs, _ = _split(eq)
    sizes: dict = {}
    for s, sh in zip(subs, shapes):
        for c, n in zip(s, sh):
            sizes[c] = max(sizes.get(c, 1), int(n))
    return sizes


def _reads_for(ins, targets) -> list:
    """The operands whose values the gradients of `targets` need: every operand at a position other
    than the target's own (an operand used twice, x·x, reads itself)."""
    return [o for j, o in enumerate(ins) if any(ins[k] == t and k != j for t in targets for k in range(len(ins)))]


def rule(op, ctx) -> OpRule:
    ins = [i for i in op.inputs if i >= 0]
    y = op.outputs[0]
    weights = [i for i in dict.fromkeys(ins) if ctx.is_param(i)]
    r = OpRule(forward=forward_io(op), weights=weights)
    trained = weights if ctx.trains(op) else []
    if trained:
        reads = [("bp", y)] + [("fwd", o) for o in dict.fromkeys(_reads_for(ins, trained))]
        r.calc_gradient = StepIO(reads, [("grad", w) for w in trained])
    targets = bp_targets(op, ctx, ins)
    if targets:
        reads = [("bp", y)] + [("fwd", o) for o in dict.fromkeys(_reads_for(ins, targets))]
        r.calc_derivative = StepIO(reads, [("bp", t) for t in targets])
    return r


def forward(ctx):
    n = len(ctx.op.inputs)
    ctx.y()[...] = np.einsum(ctx.attrs["equation"], *[np.asarray(ctx.x(k)) for k in range(n)])


def operand_grad(eq: str, k: int, dy, others: dict, shape) -> np.ndarray:
    """d loss / d operand k: dY contracted with the other operands, broadcast back to operand k."""
    subs, out = _split(eq)
    mine = subs[k]
    keep = "".join(c for c in dict.fromkeys(mine) if c in out or any(c in s for j, s in enumerate(subs) if j != k))
    terms = [out] + [subs[j] for j in sorted(others)]
    g = np.einsum(",".join(terms) + "->" + keep, dy, *[others[j] for j in sorted(others)])
    # letters only operand k has were summed in forward: their gradient is the same for every index
    for pos, c in enumerate(mine):
        if c not in keep:
            g = np.expand_dims(g, pos)
    return reduce_to_shape(np.broadcast_to(g, np.broadcast_shapes(g.shape, shape)), shape)


def _back(kind):
    def step(ctx):
        eq = ctx.attrs["equation"]
        ins = ctx.op.inputs
        dy = np.asarray(ctx.dy())
        for k in range(len(ins)):
            if ins.index(ins[k]) != k:
                continue  # an operand used twice: its first position sums every position's share
            out = ctx.grad(k) if kind == "calcGradient" else ctx.dx(k)
            if out is None:
                continue
            total = None
            for pos in (j for j, o in enumerate(ins) if o == ins[k]):
                others = {j: np.asarray(ctx.x(j)) for j in range(len(ins)) if j != pos}
                g = operand_grad(eq, pos, dy, others, out.shape)
                total = g if total is None else total + g
            out[...] = total
    return step


def check(op, operands):
    eq = op.attrs.get("equation")
    if not eq:
        return "has an equation memplan cannot read"
    subs, out = _split(eq)
    for s in subs + [out]:
        if len(set(s)) != len(s):
            return f"repeats a subscript in {s!r} of {eq!r} (a trace or diagonal): not implemented"
    shapes = [tuple(operands[i].shape) for i in op.inputs if i >= 0]
    if len(shapes) != len(subs) or any(len(s) != len(sh) for s, sh in zip(subs, shapes)):
        return f"has an equation {eq!r} that does not fit its inputs {shapes}"
    sizes = letter_sizes(eq, shapes)
    for s, sh in zip(subs, shapes):
        if any(n not in (1, sizes[c]) for c, n in zip(s, sh)):
            return f"has inputs {shapes} whose sizes disagree for {eq!r}"
    want = tuple(sizes[c] for c in out)
    if tuple(operands[op.outputs[0]].shape) != want:
        return f"has an output {tuple(operands[op.outputs[0]].shape)}, not {want} for {eq!r}"
    return None


def flops(op, operands):
    shapes = [operands[i].shape for i in op.inputs if i >= 0]
    total = math.prod(letter_sizes(op.attrs["equation"], shapes).values())
    f = 2 * total * max(1, len(shapes) - 1)
    return f, f * len(shapes)


def _batch(op, graph, shapes, batched):
    eq = op.attrs["equation"]
    ins = [i for i in op.inputs if i >= 0]
    sizes = letter_sizes(eq, [shapes[i] for i in ins])
    return [tuple(sizes[c] for c in _split(eq)[1])]


# `--profile torch`: ATen's einsum (Linear.cpp) of two operands, as it runs. Each operand is viewed in
# one aligned order (the output's letters, then the contracted ones in subscript order: A-Z, a-z); a
# contracted letter only one operand has is summed out of it first (`a.sum(dims, true)`: a new
# tensor); then `sumproduct_pair` permutes the left operand to (both and out, left's own out, summed)
# and the right to (both and out, summed, right's own out), reshapes each to 3 dims (a copy where its
# strides allow no view) and runs bmm, which saves those two for each other's gradient; the result
# is bmm's output viewed back and permuted to the output's order (a non-contiguous layout). Backward,
# bmm reshapes the incoming gradient to its own 3 dims the same way (a copy where no view exists).
def _subscript_order(c: str) -> tuple:
    return (c.islower(), c)


def _pair(op, operands) -> dict | None:
    """sumproduct_pair's plan for a two-operand einsum: each operand's letters in its bmm order, the
    output's, bmm's 3-dim shapes; None for another arity."""
    eq = op.attrs.get("equation", "")
    ins = list(op.inputs)
    if not eq or len(ins) != 2 or any(i < 0 for i in ins):
        return None
    subs, out = _split(eq)
    size = [{c: int(n) for c, n in zip(sub, operands[i].shape)} for sub, i in zip(subs, ins)]

    def has(k, c):
        return size[k].get(c, 1) != 1

    contracted = sorted({c for sub in subs for c in sub if c not in out}, key=_subscript_order)
    summed = [c for c in contracted if has(0, c) and has(1, c)]
    lro = [c for c in out if has(0, c) and has(1, c)]
    lo = [c for c in out if has(0, c) and not has(1, c)]
    ro = [c for c in out if has(1, c) and not has(0, c)]
    n = {c: max(size[0].get(c, 1), size[1].get(c, 1)) for c in out + "".join(contracted)}
    dims = (math.prod(n[c] for c in lro), math.prod(n[c] for c in lo), math.prod(n[c] for c in summed),
            math.prod(n[c] for c in ro))
    return {"subs": subs, "out": out, "size": size, "order": (lro + lo + summed, lro + summed + ro),
            "bmm_order": lro + lo + ro, "shape3": ((dims[0], dims[1], dims[2]), (dims[0], dims[2], dims[3])),
            "out3": (dims[0], dims[1], dims[3])}


def _contiguous(shape) -> list:
    st, acc = [], 1
    for d in reversed(shape):
        st.append(acc)
        acc *= int(d)
    return st[::-1]


def bmm_operands(op, operands, strides, view_strides) -> tuple:
    """Bytes of the tensor bmm saves in place of each operand: 0 where it saves a view of the operand
    itself, else its permuted copy. `strides`: each operand's; `view_strides(shape, strides, new)`:
    ATen's computeStride (None: reshape copies)."""
    plan = _pair(op, operands)
    out = []
    for k, v in enumerate(op.inputs):
        size, st = plan["size"][k], dict(zip(plan["subs"][k], strides[k]))
        letters = [c for c in plan["order"][k] if size.get(c, 1) != 1]
        view = view_strides([size[c] for c in letters], [st[c] for c in letters], plan["shape3"][k]) \
            if letters else ()
        out.append(0 if view is not None else operands[v].nbytes)
    return tuple(out)


def out_strides(op, operands) -> tuple | None:
    """The output's strides: bmm's contiguous result in (both, left's, right's) order, permuted back."""
    plan = _pair(op, operands)
    n = dict(zip(plan["out"], operands[op.outputs[0]].shape))
    order = plan["bmm_order"] + [c for c in plan["out"] if c not in plan["bmm_order"]]
    st = dict(zip(order, _contiguous([int(n[c]) for c in order])))
    return tuple(st[c] for c in plan["out"])


def grad_reshaped(op, operands) -> tuple:
    """bmm's backward takes the incoming gradient permuted to its order and reshaped to 3 dims."""
    plan = _pair(op, operands)
    out = plan["out"]
    order = plan["bmm_order"] + [c for c in out if c not in plan["bmm_order"]]
    return tuple(out.index(c) for c in order), plan["out3"]


def _torch(op) -> dict | None:
    """Two operands contracted over a letter both have: ATen's sumproduct_pair's bmm (above). Any other
    einsum is left to the general rule (named as estimated): another arity, an operand used twice, a
    letter summed out of one operand first (its gradient is an expanded view of a smaller tensor), or
    nothing contracted (sumproduct_pair runs `mul` then)."""
    if len(op.inputs) != 2 or any(i < 0 for i in op.inputs) or op.inputs[0] == op.inputs[1]:
        return None
    subs, out = _split(op.attrs.get("equation", "->"))
    contracted = {c for sub in subs for c in sub if c not in out}
    if len(subs) != 2 or not contracted or any(c not in subs[0] or c not in subs[1] for c in contracted):
        return None
    return {"saves": (("in0", "g1"), ("in1", "g0")), "bmm_operands": bmm_operands, "out_strides": out_strides,
            "grad_reshaped": grad_reshaped}


OPS = [OpDef("Einsum", rule=rule, kernels={"forward": forward, "calcGradient": _back("calcGradient"),
                                          "calcDerivative": _back("calcDerivative")},
             flops=flops, check=check, batch=_batch, profiles={"torch": _torch},
             autocast="lower")]  # einsum is composite: its bmm calls take autocast's lower-precision policy


def _onnx(node) -> Canon:
    ranks = [len(node.shape(k) or ()) for k in range(len(node.inputs))]
    parsed = parse(str(node.attrs.get("equation", "")), ranks)
    if parsed is None:
        return Canon("Einsum", {"equation": ""})  # refused by check with the equation named
    subs, out = parsed
    return Canon("Einsum", {"equation": ",".join(subs) + "->" + out})


ONNX = {"Einsum": _onnx}
