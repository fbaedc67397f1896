"""torch's weight norm as both exporters write it, read back as eager's one `_weight_norm_interface`
(ops/reduce.py has its facts and the source they come from)."""
from __future__ import annotations

from memplan_cli.ops.binary import DIV_TYPE, MUL_TYPE
from memplan_cli.ops.reduce import REDUCE_L2_TYPE


def weight_norms(g, uses, defs) -> dict:
    """Mul(Div(v, ReduceL2(v)), g) (TorchScript) or Mul(v, Div(g, ReduceL2(v))) (dynamo), v and g
    constants (the parametrization's original1 / original0), the norm over every axis of v but `dim`
    (kept), g of v's size along `dim` and 1 elsewhere, `dim` the first or the last axis (where eager
    takes the fused kernel), the norm and the quotient read by nothing else. Returns {index of the Mul:
    (members, v, g, dim, output)}."""
    ops, opd = g.operations, g.operands
    found = {}

    def only(v, reader):
        return v >= 0 and uses.get(v, ()) == [reader] and v not in g.outputs

    for mul in ops:
        if mul.type != MUL_TYPE or len(mul.inputs) != 2:
            continue
        for quot, other in ((mul.inputs[0], mul.inputs[1]), (mul.inputs[1], mul.inputs[0])):
            d = defs.get(quot)
            if d is None or ops[d].type != DIV_TYPE or len(ops[d].inputs) != 2 or not only(quot, mul.index):
                continue
            num, den = ops[d].inputs
            r = defs.get(den)
            if r is None or ops[r].type != REDUCE_L2_TYPE or not only(den, d):
                continue
            v = ops[r].inputs[0]
            if not (opd[v].is_const and opd[num].is_const and opd[other].is_const):
                continue
            if v == num:  # (v / ||v||) * g
                gain = other
            elif v == other:  # v * (g / ||v||)
                gain = num
            else:
                continue
            vs, gs = tuple(int(x) for x in opd[v].shape), tuple(int(x) for x in opd[gain].shape)
            rank = len(vs)
            axes = tuple(sorted(int(a) % rank for a in (ops[r].attrs.get("axes") or ())))
            kept = [k for k in range(rank) if k not in axes]
            if rank < 2 or len(kept) != 1 or not ops[r].attrs.get("keep_dims") or len(gs) != rank:
                continue
            dim = kept[0]
            if dim not in (0, rank - 1) or any(gs[k] != (vs[k] if k == dim else 1) for k in range(rank)):
                continue
            found[mul.index] = ((r, d, mul.index), v, gain, dim, mul.outputs[0])
            break
    return found
