"""The graph's ops as eager runs them: the exporters' splits of one eager op read back as that op
(sdpa, GroupNorm, weight norm, linear 1-D and nearest-exact upsampling, silu, linear), in eager's order."""
from __future__ import annotations

from memplan_cli.ops._torch import SDPA
from memplan_cli.ops.activations import SIGMOID_TYPE
from memplan_cli.ops.binary import ADD_TYPE, MUL_TYPE
from memplan_cli.ops.dft import DFT_TYPE
from memplan_cli.ops.matmul import MATMUL_TYPE
from memplan_cli.ops.reduce import WEIGHT_NORM_EAGER
from memplan_cli.ops.resize import LINEAR_1D_EAGER, NEAREST_EAGER, linear_1d_decompositions, nearest_decompositions
from memplan_cli.profiles.torch.attention import sdpa_decompositions
from memplan_cli.profiles.torch.eager_op import EagerOp, eager_order
from memplan_cli.profiles.torch.facts import ESTIMATED, facts
from memplan_cli.profiles.torch.groupnorm import group_norms
from memplan_cli.profiles.torch.weightnorm import weight_norms


def is_weight(g, defs, v) -> bool:
    o = g.operands[v]
    if o.is_const:
        return True
    p = defs.get(v)
    return (p is not None and (facts(g.operations[p]) or {}).get("strided") and len(o.shape) == 2
            and g.operands[g.operations[p].inputs[0]].is_const)



def computed_from(g, defs, v, trained) -> bool:
    """Whether operand v is computed from a trained weight (autograd: it requires grad)."""
    seen, todo = set(), [v]
    while todo:
        u = todo.pop()
        if u < 0 or u in seen:
            continue
        seen.add(u)
        if u in trained:
            return True
        p = defs.get(u)
        if p is not None:
            todo.extend(g.operations[p].inputs)
    return False


def flash_takes_mask(g, defs, mask, q, trained) -> bool:
    """Whether the CPU flash kernel takes sdpa's attn_mask (ATen sdp_utils_cpp.h `check_attn_mask_shape`):
    one that requires no gradient, whose last two dims are the query's and the key's lengths (or 1), of 2
    dims, or of 4 whose first two are 1 or the batch and 1 or the heads. Otherwise eager runs sdpa's math
    path (measured, torch 2.14: `torch._fused_sdp_choice` over mask shapes, with and without grad)."""
    if mask < 0:
        return True
    ms, qs = tuple(int(d) for d in g.operands[mask].shape), tuple(int(d) for d in g.operands[q].shape)
    if computed_from(g, defs, mask, trained) or len(qs) != 4 or len(ms) not in (2, 4):
        return False
    return ms[-2] in (qs[2], 1) and (len(ms) == 2 or (ms[0] in (1, qs[0]) and ms[1] in (1, qs[1])))


def fuse(g, uses, trained=frozenset()) -> list[EagerOp]:
    """The graph's ops as eager runs them (see the module docstring). `trained`: the weights that train
    (an sdpa mask computed from one requires grad, which the CPU flash kernel does not take)."""
    defs = g.defs()
    ops = g.operations
    gone: set[int] = set()
    out: list[EagerOp] = []
    attention = sdpa_decompositions(g, uses, defs)
    norms = group_norms(g, uses, defs)
    for members, *_ in norms.values():
        gone.update(members)
    wnorms = weight_norms(g, uses, defs)
    for members, *_ in wnorms.values():
        gone.update(members)
    # the upsampling kernels the dynamo exporter decomposed: {last op: (eager op, members, x, y)}
    resamples = {i: (LINEAR_1D_EAGER,) + d for i, d in linear_1d_decompositions(g, uses, defs).items()}
    for _, members, *_ in resamples.values():
        gone.update(members)
    nearest = nearest_decompositions(g, uses, defs, frozenset(gone))  # after the linear ones: their taps too
    resamples.update((i, (NEAREST_EAGER,) + d) for i, d in nearest.items())
    for members, *_ in nearest.values():
        gone.update(members)
    dropout = any(op.type == SDPA["dropout"] and float(op.attrs.get("ratio", 0.5)) > 0 for op in ops)
    if any(a[6] is not None for a in attention.values()):
        dropout = False  # an attention's own Dropout is written: TorchScript's export, the others had none
    math: dict[int, float] = {}  # the last MatMul of an sdpa whose recorded dropout_p is on -> p
    safe: dict[int, int] = {}  # its Softmax -> the output of the Where(IsNaN) after it
    inplace: dict[int, int] = {}  # the math path's Add of the mask (in place into the scores) -> the mask
    for m2, (members, q, k, v, mask, sm_out, drop, sizes) in attention.items():
        p = sizes["dropout_p"]
        if drop is None and (p is None or p == 0) and flash_takes_mask(g, defs, mask, q, trained):
            # no dropout in the graph (or a recorded dropout_p of 0): eager ran the fused CPU kernel
            # (_scaled_dot_product_flash_attention_for_cpu). With dropout elsewhere and nothing recorded,
            # the export cannot say whether sdpa's own dropout was on (TorchScript writes it): refused
            gone.update(members)
            continue
        # the math path (the CPU flash kernel takes no dropout, nor a mask it does not take), op by op
        # as the decomposition (ATen's _scaled_dot_product_attention_math: q and k scaled, matmul, the
        # mask added in place (`attn.add_(mask)`), _safe_softmax, [dropout], matmul with v)
        if drop is None and p is not None and p > 0:
            # the dynamo exporter recorded sdpa's dropout_p but wrote no Dropout: eager's dropout put back
            math[m2] = p
        nan = [i for i in members if ops[i].type in (SDPA["where"], SDPA["isnan"])]
        gone.update(nan)  # Softmax, IsNaN, Where: the math path's one _safe_softmax
        if nan:
            where = next(i for i in nan if ops[i].type == SDPA["where"])
            safe[defs[sm_out]] = ops[where].outputs[0]
        else:
            safe[defs[sm_out]] = sm_out
        add = defs.get(ops[defs[sm_out]].inputs[0])
        if mask >= 0 and add is not None and ops[add].type == SDPA["mask"]:
            inplace[add] = mask
    for op in eager_order(g, defs):
        if op.index in norms:
            members, x, w, b, groups, y = norms[op.index]
            out.append(EagerOp(op.index, "GroupNorm", [x, w, b], [y], {"groups": groups}, op.label, members))
            continue
        if op.index in wnorms:
            members, v, gain, dim, y = wnorms[op.index]
            out.append(EagerOp(op.index, WEIGHT_NORM_EAGER, [v, gain], [y], {"dim": dim}, op.label, members))
            continue
        if op.index in resamples:  # eager's one upsample_linear1d / upsample_nearest_exact (ops/resize.py)
            (kind, attrs), members, x, y = resamples[op.index]
            out.append(EagerOp(op.index, kind, [x], [y], dict(attrs), op.label, members))
            continue
        if op.index in attention and op.index in gone:
            members, q, k, v, mask, _, _, sizes = attention[op.index]
            ins = [q, k, v] + ([mask] if mask >= 0 and not g.operands[mask].is_const else [])
            known = sizes["dropout_p"] is not None
            out.append(EagerOp(op.index, "SDPA" if known or not dropout else "SDPA?", ins, list(op.outputs), sizes,
                               op.label, tuple(sorted(members))))
            continue
        if op.index in math:
            out.append(EagerOp(op.index, op.type, list(op.inputs), list(op.outputs),
                               {**op.attrs, "sdpa_dropout": math[op.index], "sdpa_probs": op.inputs[0]},
                               op.label, (op.index,)))
            continue
        if op.index in safe:
            out.append(EagerOp(op.index, "SafeSoftmax", list(op.inputs), [safe[op.index]], dict(op.attrs), op.label,
                               (op.index,)))
            continue
        if op.index in gone:
            continue
        if op.index in inplace:  # the scores first: the result is their storage
            ins = [v for v in op.inputs if v != inplace[op.index]] + [inplace[op.index]]
            out.append(EagerOp(op.index, op.type, ins, list(op.outputs), {**op.attrs, "inplace": True}, op.label,
                               (op.index,)))
            continue
        # x * Sigmoid(x) -> silu(x)
        if op.type == MUL_TYPE and len(op.inputs) == 2:
            a, b = op.inputs
            for x, s in ((a, b), (b, a)):
                p = defs.get(s)
                if p is not None and ops[p].type == SIGMOID_TYPE and ops[p].inputs[0] == x and uses[s] == [op.index]:
                    out = [o for o in out if o.index != p]
                    out.append(EagerOp(op.index, "SiLU", [x], list(op.outputs), {}, op.label, (p, op.index)))
                    break
            else:
                out.append(EagerOp(op.index, op.type, list(op.inputs), list(op.outputs), dict(op.attrs), op.label,
                                   (op.index,)))
            continue
        # MatMul(x, W) + b -> linear (W a constant, or a transposed view of a 2-D one: a tied weight)
        if op.type == MATMUL_TYPE and len(op.inputs) == 2 and is_weight(g, defs, op.inputs[1]):
            y = op.outputs[0]
            us = uses[y]
            if len(us) == 1 and ops[us[0]].type == ADD_TYPE and y not in g.outputs:
                add = ops[us[0]]
                other = [i for i in add.inputs if i != y]
                if len(other) == 1 and g.operands[other[0]].is_const and len(g.operands[other[0]].shape) <= 1:
                    gone.add(add.index)
                    est = {ESTIMATED: True} if op.attrs.get(ESTIMATED) or add.attrs.get(ESTIMATED) else {}
                    out.append(EagerOp(op.index, "Linear", [op.inputs[0], op.inputs[1], other[0]], list(add.outputs),
                                       est, op.label, (op.index, add.index)))
                    continue
        # one DFT per axis of one recorded call (`aten._fft_c2c(x, [1, 2], ...)`, as the dynamo exporter
        # writes fftn) -> that one call: eager makes no intermediate, and one gradient in backward
        if op.type == DFT_TYPE and op.call and out and out[-1].type == DFT_TYPE and out[-1].call == op.call:
            prev = out[-1]
            if prev.outputs[0] == op.inputs[0] and uses[op.inputs[0]] == [op.index] and op.inputs[0] not in g.outputs:
                out[-1] = EagerOp(op.index, DFT_TYPE, list(prev.inputs), list(op.outputs), dict(prev.attrs), op.label,
                                  prev.members + (op.index,), op.call)
                continue
        out.append(EagerOp(op.index, op.type, list(op.inputs), list(op.outputs), dict(op.attrs), op.label, (op.index,),
                           op.call or ""))
    return out
