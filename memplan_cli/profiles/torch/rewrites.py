"""Rewrites of the eager op list, one small rule each: what the export wrote differently from what
eager ran (a select, a dropped copy, merged dropouts, sdpa's own dropout, a fused activation)."""
from __future__ import annotations

import re

from memplan_cli.ir.graph import Operand
from memplan_cli.ops._torch import GATHER, SDPA, parse_call
from memplan_cli.profiles.torch.eager_op import EagerOp
from memplan_cli.profiles.torch.facts import fused_activations
from memplan_cli.profiles.torch.fuse import fuse


def selects(ops_: list[EagerOp], opd: list) -> list[EagerOp]:
    """A Gather of one index (a 0-d index: the rank drops) from an activation is eager's `select`
    (`x[i]`, `unbind`): a view, not a copy; its backward makes a zeroed gradient of the input's size."""
    out = []
    for op in ops_:
        if op.type == GATHER and len(op.inputs) > 1 and op.inputs[1] >= 0 and not opd[op.inputs[1]].shape \
                and not opd[op.inputs[0]].is_const:
            op = EagerOp(op.index, "Select", op.inputs[:1], op.outputs, {"axis": int(op.attrs.get("axis", 0))},
                         op.label, op.members)
        out.append(op)
    return out


def lost_clones(ops_: list[EagerOp], g, opd: list, uses: dict) -> list[EagerOp]:
    """A copy the export dropped, read back from the calls the dynamo exporter recorded: an op whose
    call's first argument is an `aten.clone` (`.contiguous()`, `.clone()`) that no op of the file
    records read a copy of its input 0 in eager. Each such clone becomes one Clone op (a new
    contiguous operand, appended to `opd`) before its first reader; every reader of it reads the copy.
    Only ops that read their input 0 from outside their own call's decomposition are matched."""
    calls = [parse_call(op.call) if op.call else None for op in g.operations]
    names = {c[0] for c in calls if c}
    defs = g.defs()
    made: dict[str, int] = {}
    out = []
    for op in ops_:
        c = calls[op.index]
        x = op.inputs[0] if op.inputs else -1
        arg = c[2][0] if c and c[2] else ""
        p = defs.get(x)
        if x < 0 or not re.fullmatch(r"%clone(_\d+)?", arg) or arg[1:] in names or (
                p is not None and calls[p] and calls[p][0] == c[0]):
            out.append(op)
            continue
        if arg not in made:
            y = Operand(len(opd), f"{opd[x].name}:clone", tuple(opd[x].shape), opd[x].dtype)
            opd.append(y)
            made[arg] = y.index
            out.append(EagerOp(op.index, "Clone", [x], [y.index], {}, op.label, op.members))
        uses.setdefault(made[arg], []).append(op.index)
        out.append(EagerOp(op.index, op.type, [made[arg]] + op.inputs[1:], op.outputs, op.attrs, op.label, op.members))
    return out


def merged_dropouts(ops_: list[EagerOp], g, opd: list, uses: dict) -> list[EagerOp]:
    """Dropouts of one input the dynamo exporter merged into one (its optimizer folds equal nodes; peft's
    lora_dropout of q_proj and of v_proj): the ops reading the Dropout's output record it under
    different names (`%getitem`, `%getitem_2`), one per draw eager made. Each further name is another
    Dropout of the same input (a new operand, appended to `opd`), run before its first reader."""
    drops = {o: op for op in ops_ if op.type == SDPA["dropout"] and float(op.attrs.get("ratio", 0.5)) > 0
             for o in op.outputs[:1]}
    if not drops:
        return ops_
    # names of values an op of the file computes (a Dropout's own output is read as an unrecorded
    # `%getitem`): a reader naming one of these reads another value at input 0
    recorded = {c.partition(" = ")[0] for c in (op.call for op in g.operations) if c}
    first: dict[int, str] = {}
    made: dict[tuple, int] = {}
    out = []
    for op in ops_:
        x = op.inputs[0] if op.inputs else -1
        c = parse_call(g.operations[op.index].call) if x in drops and g.operations[op.index].call else None
        arg = c[2][0] if c and c[2] else ""
        if not arg.startswith("%") or arg[1:] in recorded or first.setdefault(x, arg) == arg:
            out.append(op)
            continue
        if (x, arg) not in made:
            d = drops[x]
            y = Operand(len(opd), f"{opd[x].name}:{arg[1:]}", tuple(opd[x].shape), opd[x].dtype)
            opd.append(y)
            made[(x, arg)] = y.index
            out.append(EagerOp(op.index, d.type, list(d.inputs), [y.index], dict(d.attrs), d.label, d.members))
        uses.setdefault(made[(x, arg)], []).append(op.index)
        out.append(EagerOp(op.index, op.type, [made[(x, arg)]] + op.inputs[1:], op.outputs, op.attrs, op.label,
                           op.members))
    return out


def sdpa_dropouts(ops_: list[EagerOp], opd: list, uses: dict) -> list[EagerOp]:
    """sdpa's own dropout on the math path (`fuse` marks the MatMul with v): a Dropout of the
    attention probabilities, on a new operand (appended to `opd`), read by that MatMul instead."""
    out = []
    for op in ops_:
        p = op.attrs.get("sdpa_dropout")
        if p is None:
            out.append(op)
            continue
        x = opd[op.attrs["sdpa_probs"]]
        y = Operand(len(opd), f"{x.name}:dropout", tuple(x.shape), x.dtype)
        opd.append(y)
        uses[y.index] = [op.index]
        out.append(EagerOp(op.index, SDPA["dropout"], [x.index], [y.index], {"ratio": p}, op.label, op.members))
        attrs = {k: v for k, v in op.attrs.items() if not k.startswith("sdpa_")}
        out.append(EagerOp(op.index, op.type, [y.index if v == x.index else v for v in op.inputs], op.outputs, attrs,
                           op.label, op.members))
    return out


def split_activations(ops_: list[EagerOp], opd: list, uses: dict) -> list[EagerOp]:
    """A fused activation (TF Lite) is a second eager op: the op writes a pre-activation operand (new,
    appended to `opd`), the activation reads it."""
    out = []
    for op in ops_:
        act = (op.attrs.get("activation") or "NONE").upper()
        if act == "NONE" or act not in fused_activations() or len(op.outputs) != 1:
            out.append(op)
            continue
        y = opd[op.outputs[0]]
        pre = Operand(len(opd), f"{y.name}:pre", tuple(y.shape), y.dtype)
        opd.append(pre)
        uses[pre.index] = [op.index]
        out.append(EagerOp(op.index, op.type, op.inputs, [pre.index], {**op.attrs, "activation": "NONE"}, op.label,
                           op.members))
        out.append(EagerOp(op.index, fused_activations()[act], [pre.index], [y.index], {}, op.label, op.members))
    return out


def eager_ops(g, uses: dict, opd: list) -> list[EagerOp]:
    """The ops eager runs for `g`: the exporters' splits fused back, then each rewrite above in turn
    (new operands appended to `opd`, their readers to `uses`)."""
    ops_ = selects(merged_dropouts(lost_clones(fuse(g, uses), g, opd, uses), g, opd, uses), opd)
    return split_activations(sdpa_dropouts(ops_, opd, uses), opd, uses)
