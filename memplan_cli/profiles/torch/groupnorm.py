"""torch's GroupNorm as both exporters write it, read back as eager's one `native_group_norm`."""
from __future__ import annotations

from memplan_cli.ops.binary import ADD_TYPE, MUL_TYPE
from memplan_cli.ops.instancenorm import INSTANCE_NORM_TYPE
from memplan_cli.ops.reshape import RESHAPE_TYPE
from memplan_cli.ops.views import UNSQUEEZE_TYPE
from memplan_cli.profiles.torch.strides import elements


def group_norms(g, uses, defs) -> dict:
    """torch's GroupNorm as both exporters write it, read back as eager's one `native_group_norm`:
    Reshape(x, (N, G, -1)) -> InstanceNormalization(scale, bias: constants of G) -> Reshape to x's
    shape (none when that is already x's shape) -> [Mul by a per-channel weight] -> [Add of a per-channel bias] (each weight a constant of
    C values, or an Unsqueeze of one to (C, 1, ...)). Returns {index of the last op: (members, x,
    weight or -1, bias or -1, G)}."""
    ops = g.operations
    found = {}

    def only(v):
        return v >= 0 and len(uses.get(v, ())) == 1 and v not in g.outputs

    def per_channel(v, c):
        """The constant behind `v` (itself, or the input of the Unsqueeze that makes it) when it holds one
        value per channel and broadcasts over the spatial dims; with the Unsqueeze's index or None."""
        o = g.operands[v]
        p = defs.get(v)
        if not o.is_const and p is not None and ops[p].type == UNSQUEEZE_TYPE and only(v):
            w = ops[p].inputs[0]
            if g.operands[w].is_const and elements(g.operands[w].shape) == c:
                return w, p
        if o.is_const and elements(o.shape) == c and (len(o.shape) <= 1 or int(o.shape[0]) == c):
            return v, None
        return -1, None

    for inorm in ops:
        if inorm.type != INSTANCE_NORM_TYPE or len(inorm.inputs) < 3:
            continue
        r1 = defs.get(inorm.inputs[0])
        if r1 is None or ops[r1].type != RESHAPE_TYPE or not only(inorm.inputs[0]):
            continue
        x = ops[r1].inputs[0]
        xs, rs = tuple(g.operands[x].shape), tuple(g.operands[inorm.inputs[0]].shape)
        if len(xs) < 3 or len(rs) != 3 or rs[0] != xs[0] or int(xs[1]) % int(rs[1]):
            continue
        if not all(g.operands[i].is_const for i in inorm.inputs[1:3]):
            continue
        y = inorm.outputs[0]
        us = uses.get(y, ())
        if not only(y):
            continue
        if ops[us[0]].type == RESHAPE_TYPE and tuple(g.operands[ops[us[0]].outputs[0]].shape) == xs:
            members = [r1, inorm.index, us[0]]
            out = ops[us[0]].outputs[0]
        elif tuple(g.operands[y].shape) == xs:
            # one group per channel of a 1-D input: the reshape back is an identity the dynamo
            # exporter's optimizer removed
            members = [r1, inorm.index]
            out = y
        else:
            continue
        c = int(xs[1])
        w = b = -1
        for kind in (MUL_TYPE, ADD_TYPE):
            nxt = uses.get(out, ())
            if not only(out) or ops[nxt[0]].type != kind or len(ops[nxt[0]].inputs) != 2:
                break
            op = ops[nxt[0]]
            other = op.inputs[1] if op.inputs[0] == out else op.inputs[0]
            v, unsq = per_channel(other, c)
            if v < 0:
                break
            members += [op.index] + ([unsq] if unsq is not None else [])
            if kind == MUL_TYPE:
                w = v
            else:
                b = v
            out = op.outputs[0]
        found[max(m for m in members if ops[m].outputs and out in ops[m].outputs)] = (
            tuple(members), x, w, b, int(rs[1]), out)
    return found
