"""Rewrites of the eager op list, one small rule each: what the export wrote differently from what
eager ran (a select, a dropped copy, merged dropouts, sdpa's own dropout, a fused activation)."""
from __future__ import annotations

import math
import re

from memplan_cli import ops
from memplan_cli.ir.graph import COMPUTED_CONSTANTS, Operand
from memplan_cli.ops._torch import (ARGS_IN_ORDER, CAST, FILLS, MAY_ALIAS, GATHER, INPLACE_WRITE, MAX_INDICES,
                                   POINTWISE_MATH, SDPA, UNBIND, VAR, fx_kind, parse_call)
from memplan_cli.ops.slice import SPLIT_TYPE
from memplan_cli.ops.views import IDENTITY_TYPE
from memplan_cli.profiles.torch.attention import computed_in_forward
from memplan_cli.profiles.torch.eager_op import EagerOp
from memplan_cli.ops.loss import LOSS_TYPE
from memplan_cli.profiles.torch.facts import ESTIMATED, facts, fused_activations, no_grad
from memplan_cli.profiles.torch.fuse import fuse


def selects(ops_: list[EagerOp], opd: list, trained=frozenset()) -> list[EagerOp]:
    """A Gather of one index (a 0-d index: the rank drops) from an activation is eager's `select`
    (`x[i]`, `unbind`): a view, not a copy; its backward makes a zeroed gradient of the input's size.
    So is one from a trained parameter (a mixture of experts' `weight[e]`, one expert's slice of a
    stacked weight: SelectBackward0 keeps only the sizes and the index)."""
    out = []
    for op in ops_:
        if op.type == GATHER and len(op.inputs) > 1 and op.inputs[1] >= 0 and not opd[op.inputs[1]].shape \
                and (not opd[op.inputs[0]].is_const or op.inputs[0] in trained):
            op = EagerOp(op.index, "Select", op.inputs[:1], op.outputs, {"axis": int(op.attrs.get("axis", 0))},
                         op.label, op.members)
        out.append(op)
    return out


def lost_clones(ops_: list[EagerOp], g, opd: list, uses: dict) -> list[EagerOp]:
    """A copy the export dropped, read back from the calls the dynamo exporter recorded: an op whose
    call's first argument is an `aten.clone` (`.contiguous()`, `.clone()`) that no op of the file
    records read a copy of its input 0 in eager. So did an op of ARGS_IN_ORDER (mul(%a, %clone):
    Mul(a, b) reads the copy at input 1) at any other argument, its input an activation. Each such
    clone becomes one Clone op (a new contiguous operand, appended to `opd`) before its first reader;
    every reader of it reads the copy, at every input its call passes the clone (`x * x`:
    mul(%clone, %clone)). Only inputs read from outside the op's own call's decomposition are matched."""
    calls = [parse_call(op.call) if op.call else None for op in g.operations]
    names = {c[0] for c in calls if c}
    defs = g.defs()
    made: dict[str, int] = {}
    out = []

    def lost(c, k, x) -> bool:
        arg = c[2][k] if k < len(c[2]) else ""
        p = defs.get(x)
        return x >= 0 and bool(re.fullmatch(r"%clone(_\d+)?", arg)) and arg[1:] not in names and not (
            p is not None and calls[p] and calls[p][0] == c[0])

    for op in ops_:
        c = calls[op.index]
        if not c or not c[2]:
            out.append(op)
            continue
        in_order = ARGS_IN_ORDER.get(c[1]) == op.type
        ks = [k for k, v in enumerate(op.inputs)
              if (k == 0 or (in_order and v >= 0 and not opd[v].is_const)) and lost(c, k, v)]
        if not ks:
            out.append(op)
            continue
        ins = list(op.inputs)
        for k in ks:
            arg, x = c[2][k], op.inputs[k]
            if ins[k] != x:  # already the copy: the same clone at an earlier input
                continue
            if arg not in made:
                y = Operand(len(opd), f"{opd[x].name}:clone", tuple(opd[x].shape), opd[x].dtype)
                opd.append(y)
                made[arg] = y.index
                out.append(EagerOp(op.index, "Clone", [x], [y.index], {}, op.label, op.members))
            uses.setdefault(made[arg], []).append(op.index)
            # every input the call passes the same clone (`x * x` of one `.contiguous()`: mul(%clone, %clone))
            ins = [made[arg] if j == k or (v == x and j < len(c[2]) and c[2][j] == arg) else v
                   for j, v in enumerate(ins)]
        out.append(EagerOp(op.index, op.type, ins, op.outputs, op.attrs, op.label, op.members))
    return out


def output_clones(ops_: list[EagerOp], g, opd: list, uses: dict) -> list[EagerOp]:
    """A copy the dynamo exporter's optimizer dropped behind a view, that only the value's name keeps:
    a view op (its recorded call `aten.select`, `aten.slice`, ...) whose result is named after an fx
    `clone` or `contiguous` node no op of the file records (`logits = predict_logits[:, 0]` then
    `.contiguous()`: ProphetNet's output `clone_18` made by a Gather recording `select_2`). Eager made
    the view, then the copy: the view becomes a new operand (appended to `opd`) and one Clone op makes
    the named result from it, so the view's base is freed once the copy is made, not held as the base
    of the result."""
    names = _recorded_names(g)
    out = []
    for op in ops_:
        outs = [v for v in op.outputs if v >= 0]
        name = opd[outs[0]].name if len(outs) == 1 else ""
        call = _recorded_name(g.operations[op.index]) if 0 <= op.index < len(g.operations) else ""
        if not call or not re.fullmatch(r"(clone|contiguous)(_\d+)?", name) or name in names or name == call \
                or not (facts(op) or {}).get("view"):
            out.append(op)
            continue
        v = outs[0]
        y = Operand(len(opd), f"{name}:view", tuple(opd[v].shape), opd[v].dtype)
        opd.append(y)
        uses.setdefault(y.index, []).append(op.index)
        out.append(EagerOp(op.index, op.type, op.inputs, [y.index if w == v else w for w in op.outputs], op.attrs,
                           op.label, op.members))
        out.append(EagerOp(op.index, "Clone", [y.index], [v], {}, op.label, op.members))
    return out


def _recorded_name(op) -> str:
    """The fx value the dynamo exporter recorded an IR op as computing ("rsqrt"), "" without a call."""
    return op.call.partition(" = ")[0] if op.call else ""


def _recorded_names(g) -> set[str]:
    """The fx values the file's nodes record computing."""
    return {_recorded_name(op) for op in g.operations} - {""}


def _computed_again(ops_: list[EagerOp], opd: list, uses: dict, reads_again) -> list[EagerOp]:
    """What merged_dropouts and merged_duplicates share: a reader that names an input under a second
    fx name read a second tensor eager computed again. `reads_again(op)` lists (k, name, template):
    input k is read under `name`, computed by `template` (its index, type, inputs, attrs, label and
    members). Each (input, name) becomes one copy of the template's op (a new operand
    `<input>:<name>`, appended to `opd`) run just before its first reader; its readers read the copy.
    A template None copies a folded constant (a fill eager makes once per call): a second constant, no op."""
    copies: dict[tuple, int] = {}
    out: list[EagerOp] = []
    for op in ops_:
        new_inputs = list(op.inputs)
        for k, name, t in reads_again(op):
            v = op.inputs[k]
            if (v, name) not in copies:
                o, fill = opd[v], t is None
                y = Operand(len(opd), f"{o.name}:{name}", tuple(o.shape), o.dtype, is_const=fill, computed=fill,
                            broadcast_of=o.broadcast_of if fill else None)
                opd.append(y)
                copies[(v, name)] = y.index
                if not fill:
                    out.append(EagerOp(t.index, t.type, list(t.inputs), [y.index], dict(t.attrs), t.label,
                                       t.members))
            uses.setdefault(copies[(v, name)], []).append(op.index)
            new_inputs[k] = copies[(v, name)]
        out.append(op if new_inputs == op.inputs else
                   EagerOp(op.index, op.type, new_inputs, op.outputs, op.attrs, op.label, op.members))
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
    recorded = _recorded_names(g)
    first: dict[int, str] = {}

    def reads_again(op):
        x = op.inputs[0] if op.inputs else -1
        c = parse_call(g.operations[op.index].call) if x in drops and g.operations[op.index].call else None
        arg = c[2][0] if c and c[2] else ""
        if not arg.startswith("%") or arg[1:] in recorded or first.setdefault(x, arg) == arg:
            return []
        d = drops[x]  # the copy reports under its first reader's index
        return [(0, arg[1:], EagerOp(op.index, d.type, d.inputs, [], d.attrs, d.label, d.members))]

    return _computed_again(ops_, opd, uses, reads_again)


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


# one-input elementwise ops an exporter may write one aten op as a chain of (rsqrt: Sqrt, Reciprocal)
_CHAIN_OPS = POINTWISE_MATH - {CAST}


def one_aten_ops(ops_: list[EagerOp], g, opd: list) -> list[EagerOp]:
    """Consecutive ONNX nodes that record the same fx node (`pkg.torch.onnx.fx_node`) are the one aten
    op that node ran: the dynamo exporter writes `aten.rsqrt` as Sqrt then Reciprocal, both recording
    `%rsqrt`; eager makes one tensor, the result, and rsqrt's backward reads that result
    (derivatives.yaml: `self: -0.5 * grad * result.pow(3).conj()`). Read back where the nodes are a
    chain of one-input elementwise ops and the aten op is a type of the registry (aten.rsqrt ->
    Rsqrt): that op, from the chain's input to its last output."""
    types = {t.lower(): t for t in ops.all_ops()}
    irops = g.operations
    out: list[EagerOp] = []
    k = 0
    while k < len(ops_):
        op = ops_[k]
        name = _recorded_name(irops[op.index]) if op.members == (op.index,) else ""
        j = k + 1
        while name and j < len(ops_) and ops_[j].members == (ops_[j].index,) and \
                _recorded_name(irops[ops_[j].index]) == name and ops_[j].inputs[:1] == ops_[j - 1].outputs[:1]:
            j += 1
        chain = ops_[k:j]
        call = parse_call(irops[op.index].call) if j - k > 1 else None
        eager = types.get(call[1].removeprefix("aten.").lower()) if call else None
        if eager is None or any(c.type not in _CHAIN_OPS or len(c.outputs) != 1 or
                                sum(1 for v in c.inputs if v >= 0 and not opd[v].is_const) != 1 for c in chain):
            out.append(op)
            k += 1
            continue
        last = chain[-1]
        out.append(EagerOp(last.index, eager, [op.inputs[0]], list(last.outputs), {}, last.label,
                           tuple(c.index for c in chain)))
        k = j
    return out


def unbinds(ops_: list[EagerOp], g, opd: list) -> list[EagerOp]:
    """`x.unbind(d)` (timm's `q, k, v = qkv.unbind(0)`) as the dynamo exporter writes it: a Slice of x
    and a Squeeze per piece, all recording the one fx node `%unbind`. Eager's unbind returns views (a
    select each) and its backward (UnbindBackward0: `unbind_backward`, a stack of the pieces'
    gradients, a 0-d zero expanded for a piece that got none) makes one gradient of x's size, where
    a Slice's backward each would make one. The group is read back as one op, `Unbind`, from x to the pieces."""
    irops = g.operations
    groups: dict[str, list[int]] = {}
    for k, op in enumerate(ops_):
        c = parse_call(irops[op.index].call) if op.members == (op.index,) and irops[op.index].call else None
        if c and c[1].removeprefix("aten.") == UNBIND["target"]:
            groups.setdefault(c[0], []).append(k)
    fused: dict[int, EagerOp] = {}
    drop: set[int] = set()
    for name, ks in groups.items():
        members = [ops_[k] for k in ks]
        made = {v for m in members for v in m.outputs}
        ins = {v for m in members for v in m.inputs if v >= 0 and v not in made and not opd[v].is_const}
        pieces = [v for m in members for v in m.outputs if any(v in r.inputs for r in ops_ if r not in members)
                  or v in g.outputs]
        if len(ins) != 1 or not pieces or len(members) < 2:
            continue
        x = ins.pop()
        args = parse_call(irops[members[0].index].call)[2]
        try:
            axis = int(args[1]) % len(opd[x].shape) if len(args) > 1 else 0
        except ValueError:
            continue
        if any(tuple(opd[v].shape) != tuple(opd[x].shape[:axis]) + tuple(opd[x].shape[axis + 1:]) for v in pieces):
            continue
        first = members[0]
        fused[ks[0]] = EagerOp(first.index, UNBIND["type"], [x], pieces, {"axis": axis}, first.label,
                               tuple(m.index for m in members))
        drop.update(ks[1:])
    if not fused:
        return ops_
    return [fused.get(k, op) for k, op in enumerate(ops_) if k not in drop]


def chunks(ops_: list[EagerOp], opd: list) -> list[EagerOp]:
    """`x.chunk(n, d)` as TorchScript writes it: a Slice per piece whose bounds the file computes from
    x's shape (ops/slice.py reads each piece's place, attrs "chunk": (i, n, d)). Eager's chunk is one
    `split` (its pieces views; SplitBackward0: `split_backward`, one `cat` of the pieces' gradients,
    zeros for a piece that got none) where a Slice each would run `slice_backward` (a zeroed tensor of
    x's size each). The pieces are read back as one Split, run where the first piece was; a piece the
    file dropped (nothing read it) is an output nothing reads."""
    groups: dict[tuple, dict[int, int]] = {}
    for k, op in enumerate(ops_):
        c = op.attrs.get("chunk")
        if c and op.members == (op.index,) and op.inputs and op.inputs[0] >= 0 and not opd[op.inputs[0]].is_const:
            groups.setdefault((op.inputs[0], int(c[1]), int(c[2])), {})[int(c[0])] = k
    fused: dict[int, EagerOp] = {}
    drop: set[int] = set()
    for (x, n, d), pieces in groups.items():
        shape = tuple(opd[x].shape)
        if len(pieces) < 2 or not shape:
            continue
        axis = d % len(shape)
        size = -(-shape[axis] // n)
        sizes = [max(0, min(size, shape[axis] - i * size)) for i in range(n)]
        while sizes and sizes[-1] == 0 and len(sizes) - 1 not in pieces:  # chunk returns no empty tail
            sizes.pop()
        if any(i >= len(sizes) or tuple(opd[ops_[k].outputs[0]].shape) != shape[:axis] + (sizes[i],)
               + shape[axis + 1:] for i, k in pieces.items()):
            continue
        outs = []
        for i, sz in enumerate(sizes):
            if i in pieces:
                outs.append(ops_[pieces[i]].outputs[0])
            else:
                o = Operand(len(opd), f"{opd[x].name}:chunk{i}", shape[:axis] + (sz,) + shape[axis + 1:],
                            opd[x].dtype)
                opd.append(o)
                outs.append(o.index)
        ks = sorted(pieces.values())
        first = ops_[ks[0]]
        fused[ks[0]] = EagerOp(first.index, SPLIT_TYPE, [x], outs, {"axis": axis, "sizes": tuple(sizes)},
                               first.label, tuple(ops_[k].index for k in ks))
        drop.update(ks[1:])
    if not fused:
        return ops_
    return [fused.get(k, op) for k, op in enumerate(ops_) if k not in drop]


def merged_duplicates(ops_: list[EagerOp], g, opd: list, uses: dict) -> list[EagerOp]:
    """Equal ops the dynamo exporter's optimizer merged (onnx_ir's common-subexpression elimination,
    which records no rule name): a reader whose recorded call names, for an input, an fx value no node
    of the file makes, of the same target as the value's producer (`%sub_6` where the file makes
    `sub_5` = aten.sub of the same inputs: CohereLayerNorm's `x - mean` written twice), read a
    second tensor eager computed again. Each such name becomes a copy of the producer's op (a new
    operand, appended to `opd`) run just before its first reader; its readers read the copy."""
    irops = g.operations
    if not any(op.call for op in irops):
        return ops_
    made = _recorded_names(g)
    # a node a named rewrite rule made may stand for several fx nodes of its own rule's choosing: only
    # the unnamed pass's merges are read back
    ruled = {r["node"] for r in (g.export_record() or {}).get("rewritten", ())}
    producer = {v: op for op in ops_ if len(op.outputs) == 1 for v in op.outputs}
    calls = {op.index: parse_call(op.call) for op in irops if op.call}
    read = {n for c in calls.values() if c for n in re.findall(r"%(\w+)", " ".join(c[2]))}

    def reads_again(op):
        c = calls.get(op.index) if op.members == (op.index,) else None
        names = re.findall(r"%(\w+)", " ".join(c[2])) if c else []
        again = []
        for k, v in enumerate(op.inputs):
            p = producer.get(v)
            pname = _recorded_name(irops[p.index]) if p is not None and p.members == (p.index,) and \
                irops[p.index].name not in ruled else ""
            # a fill folded into a constant (`zeros_1`, which calls read by that name): eager makes one
            # per call, so a second call's name (`zeros_2`) is a second tensor. So is any folded value of
            # an op that returns a new tensor (ProphetNet's `_to_copy` of each layer's `repeat`ed
            # position buckets, which each layer's gather saves), not one that may alias its input, nor
            # one the loader takes as a parameter (a per-layer parameter's `-A.exp()`, equal at init)
            fill = v >= 0 and p is None and opd[v].is_const and opd[v].name in read and (
                (opd[v].computed and fx_kind(opd[v].name) in FILLS)
                or (fx_kind(opd[v].name) not in MAY_ALIAS and not opd[v].assumed))
            pname = opd[v].name if fill else pname
            if not pname or pname in names:
                continue
            dup = [n for n in names if n not in made and fx_kind(n) == fx_kind(pname)]
            if len(dup) == 1:
                again.append((k, dup[0], None if fill else p))
        return again

    return _computed_again(ops_, opd, uses, reads_again)


_LAYER = re.compile(r"^(.*?/[^/]*\.)(\d+)/")  # a module path's first list entry: `/m/decoder/layers.` and `0`


def merged_across_layers(ops_: list[EagerOp], g, opd: list, uses: dict) -> list[EagerOp]:
    """Equal computations of sibling layers that TorchScript's common-subexpression pass merged
    (torch.onnx runs `_jit_pass_cse` before the export; it records nothing): a constant the file
    computes in forward (`computed_in_forward`: ProphetNet's relative-position buckets `repeat`ed and
    cast by each decoder layer, then gathered) named in one entry of a module list
    (`/m/decoder/layers.0/...`) and read by an op of another entry (`/m/decoder/layers.1/...`).
    Eager's layer does not see another layer's locals: it computed its own, which its reader then
    saves (each GatherBackward keeps its own index). Each such (constant, layer) becomes a second
    constant eager computes, made at its first reader. One a view made (an `unsqueeze` of the rotary
    table the parent computed) is no tensor of its own in eager: each layer views the same one."""
    irops = g.operations
    if any(op.call for op in irops):
        return ops_
    by = (getattr(g, "metadata", None) or {}).get(COMPUTED_CONSTANTS) or {}

    def a_view(t):
        f = (ops.get(t).profiles.get("torch") if ops.get(t) else None) or {}
        return isinstance(f, dict) and bool(f.get("view"))

    made = {v for v in computed_in_forward(g, frozenset()) if not a_view(by.get(opd[v].name, ""))}

    def counted(op, k, v):  # what the replay counts of it: a float tensor, or integers the op saves
        o = opd[v]
        if o.dtype.startswith(("float", "bfloat")):
            return math.prod(o.shape) > 1
        return o.dtype.startswith(("int", "uint")) and any(w == f"in{k}" for w, _ in (facts(op) or {}).get("saves", ()))

    def reads_again(op):
        m = _LAYER.match(irops[op.index].name or "") if op.members == (op.index,) else None
        if m is None:
            return []
        again = []
        for k, v in enumerate(op.inputs):
            w = _LAYER.match(opd[v].name) if v in made and counted(op, k, v) else None
            if w is not None and w.group(1) == m.group(1) and w.group(2) != m.group(2):
                again.append((k, f"{m.group(1).rsplit('/', 1)[-1]}{m.group(2)}", None))
        return again

    return _computed_again(ops_, opd, uses, reads_again) if made else ops_


def centred_twice(ops_: list[EagerOp], g, opd: list, uses: dict) -> list[EagerOp]:
    """A written-out LayerNorm's `x - mean` in a TorchScript export, read as eager's two: the exporter
    merges equal nodes and records nothing (torch.onnx's `_jit_pass_cse`, utils.py `_optimize_graph`),
    so `(x - mean).pow(2).mean()` beside `(x - mean) / sqrt(var + eps)` is one Sub in the file where
    eager computes it twice. The file cannot tell that form from `d = x - mean` used twice; the norms
    written out this way in transformers and timm repeat it (Cohere's, DeBERTa's, ViTDet's), the dynamo
    exports of them record two `sub` nodes, so the second is read back: a Sub(x, Mean(x, axes,
    keepdims)) read by exactly two ops, a square (Pow 2, or Mul of it by itself) whose Mean over the
    same axes is the variance, and one other reader, which reads a copy of the Sub computed just before
    it. Both Subs are named as estimated. Only for files without recorded calls (the dynamo exporter's
    merges are read back by `merged_duplicates`)."""
    irops = g.operations
    if any(op.call for op in irops):
        return ops_
    producer = {v: op for op in ops_ if op.members == (op.index,) for v in op.outputs[:1]}
    readers: dict[int, list] = {}
    for op in ops_:
        for v in set(op.inputs):
            if v >= 0:
                readers.setdefault(v, []).append(op)

    def square_of(op, d) -> bool:
        return (op.type == VAR["pow"] and op.inputs == [d] and op.attrs.get("exponent") == 2.0) or \
            (op.type == VAR["square"] and op.inputs == [d, d])

    copy_for: dict[int, tuple] = {}  # index of the other reader -> (the Sub, d)
    for sub in ops_:
        if sub.type != VAR["sub"] or sub.members != (sub.index,) or len(sub.inputs) != 2 or \
                len(sub.outputs) != 1:
            continue
        x, mu = sub.inputs
        d = sub.outputs[0]
        mean = producer.get(mu)
        rs = readers.get(d, [])
        if mean is None or mean.type != VAR["mean"] or mean.inputs[:1] != [x] or not mean.attrs.get("keep_dims") \
                or not mean.attrs.get("axes") or len(rs) != 2 or d in g.outputs:
            continue
        sq = next((r for r in rs if square_of(r, d)), None)
        other = next((r for r in rs if r is not sq), None)
        var = [r for r in readers.get(sq.outputs[0], [])] if sq is not None and sq.outputs else []
        if sq is None or other is None or len(var) != 1 or var[0].type != VAR["mean"] or \
                var[0].attrs.get("axes") != mean.attrs.get("axes"):
            continue
        copy_for[other.index] = (sub, d)
    if not copy_for:
        return ops_
    subs = {sub.index for sub, _ in copy_for.values()}
    out: list[EagerOp] = []
    for op in ops_:
        if op.index in subs and op.members == (op.index,):
            op.attrs[ESTIMATED] = True
        hit = copy_for.get(op.index) if op.members == (op.index,) else None
        if hit is not None:
            sub, d = hit
            y = Operand(len(opd), f"{opd[d].name}:again", tuple(opd[d].shape), opd[d].dtype)
            opd.append(y)
            out.append(EagerOp(sub.index, sub.type, list(sub.inputs), [y.index], {**sub.attrs, ESTIMATED: True},
                               sub.label, sub.members))
            uses[d] = [u for u in uses.get(d, []) if u != op.index]
            uses.setdefault(y.index, []).append(op.index)
            op = EagerOp(op.index, op.type, [y.index if v == d else v for v in op.inputs], op.outputs, op.attrs,
                         op.label, op.members)
        out.append(op)
    return out


def inplace_writes(ops_: list[EagerOp], g, opd: list) -> list[EagerOp]:
    """A slice or index assignment, read back as eager's write into the tensor itself: a ScatterND
    (no reduction) of a TorchScript export (its symbolics write one only for `index_put_` and a
    `copy_` into a slice view) or recording a dynamo `slice_scatter` or `index_put` (the
    functionalized `copy_` and `index_put_`).
    Its result is its data's storage (ops/scatter.py); where the data is a constant that trains not
    (MiniCPM3's `new_empty`, a fill eager makes just before), the write makes that tensor: its data
    input is dropped and its result is new."""
    irops = g.operations
    traced = any(op.call for op in irops)
    out = []
    for op in ops_:
        if op.type == INPLACE_WRITE["type"] and op.members == (op.index,) and len(op.inputs) >= 3 and \
                str(op.attrs.get("reduction", "none")) == "none":
            c = parse_call(irops[op.index].call) if irops[op.index].call else None
            target = c[1].removeprefix("aten.") if c else ""
            if not traced or target in INPLACE_WRITE["targets"]:
                data = op.inputs[0]
                fresh = data >= 0 and opd[data].is_const and not opd[data].assumed
                # which write: recorded by the dynamo exporter; TorchScript's is taken as a slice's
                op = EagerOp(op.index, op.type, [-1 if fresh else data] + op.inputs[1:], op.outputs,
                             {**op.attrs, INPLACE_WRITE["attr"]: target or INPLACE_WRITE["targets"][0]},
                             op.label, op.members)
        out.append(op)
    return _selected_rows(_selected_writes(out, g), g, opd) if traced else out


def _selected_rows(ops_: list[EagerOp], g, opd: list) -> list[EagerOp]:
    """`x[:, i] = v` as the dynamo exporter functionalizes it when no slice follows the select: one
    `select_scatter`, written as a ScatterElements whose indices are the exporter's (the int `i`
    expanded to v's shape). Eager runs one copy_ into `x.select(dim, i)`: the write `inplace_writes`
    reads (CopySlices; derivatives.yaml's select_scatter saves nothing but sizes), its indices no
    tensor. Where x is a fill (`zeros_like`, folded), the write makes it."""
    irops = g.operations
    out = []
    for op in ops_:
        c = parse_call(irops[op.index].call) if op.members == (op.index,) and irops[op.index].call else None
        if op.type == INPLACE_WRITE["row_type"] and c and c[1].removeprefix("aten.") == INPLACE_WRITE["select_back"] \
                and len(op.inputs) >= 3 and str(op.attrs.get("reduction", "none")) == "none" \
                and not op.attrs.get(INPLACE_WRITE["attr"]):
            data = op.inputs[0]
            fresh = data >= 0 and opd[data].is_const and not opd[data].assumed
            op = EagerOp(op.index, INPLACE_WRITE["type"], [-1 if fresh else data] + op.inputs[1:], op.outputs,
                         {**op.attrs, INPLACE_WRITE["attr"]: INPLACE_WRITE["select_back"]}, op.label, op.members)
        out.append(op)
    return out


def _selected_writes(ops_: list[EagerOp], g) -> list[EagerOp]:
    """`x[..., i, :n] = v` as the dynamo exporter functionalizes it: `s = select(x, i)`, a
    slice_scatter into s (read as a write by `inplace_writes`), and a select_scatter putting the row
    back into x. Eager runs one copy_ into a view of x (one CopySlices on x): the three are read back
    as one write into x whose result is the select_scatter's; the ops between (the decompositions'
    Transposes and Unsqueeze) go."""
    irops = g.operations

    def name_target(op):
        c = parse_call(irops[op.index].call) if irops[op.index].call else None
        return (c[0], c[1].removeprefix("aten.")) if c else ("", "")
    producer = {v: k for k, op in enumerate(ops_) for v in op.outputs}
    drop: set[int] = set()
    fused: dict[int, EagerOp] = {}
    for k, back in enumerate(ops_):
        name, target = name_target(back)
        if target != INPLACE_WRITE["select_back"] or len(back.inputs) < 3 or back.inputs[0] < 0:
            continue
        chain, v = [], back.inputs[2]
        w = None
        while v in producer:  # back through the decompositions' views to the write
            j = producer[v]
            op = ops_[j]
            if op.attrs.get(INPLACE_WRITE["attr"]) and name_target(op)[1] == "slice_scatter":
                w = j
                break
            if not _is_view(op) or not op.inputs:
                break
            chain.append(j)
            v = op.inputs[0]
        if w is None or ops_[w].inputs[0] < 0:
            continue
        u, sel = ops_[w].inputs[0], None
        while u in producer:  # the write's data back through views to the select of x
            op = ops_[producer[u]]
            if name_target(op)[1] == INPLACE_WRITE["select"]:
                sel = op
                break
            if not _is_view(op) or not op.inputs:
                break
            u = op.inputs[0]
        if sel is None or sel.inputs[:1] != back.inputs[:1]:
            continue
        wr = ops_[w]
        fused[k] = EagerOp(wr.index, wr.type, [back.inputs[0]] + wr.inputs[1:], list(back.outputs), wr.attrs,
                           wr.label, wr.members)
        drop.update([w, *chain])
    if not fused:
        return ops_
    return [fused.get(k, op) for k, op in enumerate(ops_) if k not in drop]


def _is_view(op) -> bool:
    f = facts(op) or {}
    return bool(f.get("view")) or (f.get("view_if") is not None and f["view_if"](op))


def clones_before_writes(ops_: list[EagerOp], g, opd: list, uses: dict) -> list[EagerOp]:
    """A view of a tensor that an in-place write (`inplace_writes`) changes afterwards, read before that
    write, was a copy in eager: autograd refuses a saved tensor modified in place (the version counter
    check, `SavedVariable::unpack`), so code that reads a slice, then writes the tensor, clones the
    slice first (`row = attn[..., i, :i].clone()` in the delta-rule loops of linear attention), and
    TorchScript writes `clone` as nothing (its symbolic returns the input). Such a view's output becomes
    a Clone op (a new contiguous operand, appended to `opd`) just after it; its readers read the copy."""
    ops_ = list(ops_)
    pos = {id(op): k for k, op in enumerate(ops_)}
    root: dict[int, int] = {}  # operand -> the operand whose storage it shares
    writes: list[tuple[int, int]] = []  # (position, root written)
    views: list = []  # (position, view op) of views of activations
    for k, op in enumerate(ops_):
        inplace = op.attrs.get(INPLACE_WRITE["attr"])
        if inplace and op.inputs[0] >= 0:
            r = root.get(op.inputs[0], op.inputs[0])
            writes.append((k, r))
            for v in op.outputs:
                root[v] = r
        elif inplace:
            for v in op.outputs:
                root[v] = v
        elif op.inputs and op.inputs[0] >= 0 and not opd[op.inputs[0]].is_const and _is_view(op):
            r = root.get(op.inputs[0], op.inputs[0])
            for v in op.outputs[:1]:
                root[v] = r
            views.append((k, op))
    if not writes:
        return ops_
    readers: dict[int, list] = {}
    for k, op in enumerate(ops_):
        for v in set(op.inputs):
            if v >= 0:
                readers.setdefault(v, []).append(k)

    def first_read(v, seen=()) -> int | None:
        """The first position a non-view op reads v, through views of it."""
        best = None
        for k in readers.get(v, []):
            op = ops_[k]
            if _is_view(op) and not op.attrs.get(INPLACE_WRITE["attr"]) and op.inputs[0] == v and k not in seen:
                k2 = first_read(op.outputs[0], seen + (k,)) if op.outputs else None
            else:
                k2 = k
            if k2 is not None and (best is None or k2 < best):
                best = k2
        return best

    cloned: set[int] = set()
    for k, op in views:
        v = op.outputs[0]
        r = root.get(v, v)
        if root.get(op.inputs[0], op.inputs[0]) != r:
            continue
        later = [w for w, wr in writes if wr == r and w > k]
        if not later:
            continue
        first = first_read(v)
        if first is not None and first < later[0] and not ops_[first].attrs.get(INPLACE_WRITE["attr"]) \
                and not _is_view(ops_[first]):
            cloned.add(pos[id(op)])
    if not cloned:
        return ops_
    return copies_after(ops_, opd, uses, cloned)


def copies_after(ops_: list[EagerOp], opd: list, uses: dict, cloned: set[int],
                 outputs: set[int] = frozenset()) -> list[EagerOp]:
    """Each op at a position of `cloned` followed by a Clone of its output (a new contiguous operand,
    appended to `opd`): every later reader reads the copy. An output of the graph (`outputs`) stays
    the graph's: the op makes a new operand, the view, and the Clone makes the output from it (as
    `output_clones` reads a dynamo file's)."""
    ops_ = list(ops_)
    out: list[EagerOp] = []
    for k, op in enumerate(ops_):
        if k in cloned and op.outputs[0] in outputs:
            v = op.outputs[0]
            y = Operand(len(opd), f"{opd[v].name}:view", tuple(opd[v].shape), opd[v].dtype)
            opd.append(y)
            uses.setdefault(y.index, []).append(op.index)
            out.append(EagerOp(op.index, op.type, op.inputs, [y.index] + list(op.outputs[1:]), op.attrs, op.label,
                               op.members))
            out.append(EagerOp(op.index, "Clone", [y.index], [v], {}, op.label, op.members))
            continue
        out.append(op)
        if k not in cloned:
            continue
        v = op.outputs[0]
        y = Operand(len(opd), f"{opd[v].name}:clone", tuple(opd[v].shape), opd[v].dtype)
        opd.append(y)
        out.append(EagerOp(op.index, "Clone", [v], [y.index], {}, op.label, op.members))
        for j in range(k + 1, len(ops_)):
            r = ops_[j]
            if v in r.inputs:
                ops_[j] = EagerOp(r.index, r.type, [y.index if x == v else x for x in r.inputs], r.outputs,
                                  r.attrs, r.label, r.members)
                uses.setdefault(y.index, []).append(r.index)
    return out


def variances(ops_: list[EagerOp], g, uses: dict) -> list[EagerOp]:
    """`x.var(dims)` as both exporters write it, read back as eager's one `aten::var.correction`:
    Mean(x, axes, keepdims) -> Sub(x, mean) -> Mul(d, d) -> Mean(axes), each intermediate read only by
    the next node. Eager keeps x alone (ops/reduce.py); the exporters' `x - mean` is no tensor of the
    forward. Where the nodes record their fx calls (the dynamo exporter), all four must record the one
    var / std call: a variance written out by hand (`((x - m) * (x - m)).mean()`) runs as its own
    ops in eager, each saving what it reads. The result is Var's output, at the last Mean's shape."""
    irops = g.operations
    producer = {v: op for op in ops_ if op.members == (op.index,) for v in op.outputs[:1]}

    def only(v, reader):
        return v >= 0 and v not in g.outputs and set(uses.get(v, ())) == {reader}

    def recorded_var(members) -> bool:
        calls = [irops[m.index].call for m in members]
        if not any(calls):
            return True
        parsed = [parse_call(c) if c else None for c in calls]
        return all(c is not None and c[1].rsplit(".", 1)[-1] in VAR["targets"] for c in parsed) and \
            len({c[0] for c in parsed}) == 1

    found: dict[int, tuple] = {}  # index of the last Mean -> (members, x)
    for op in ops_:
        if op.type != VAR["mean"] or op.members != (op.index,) or len(op.outputs) != 1:
            continue
        sq = producer.get(op.inputs[0])
        if sq is None or sq.type != VAR["square"] or len(sq.inputs) != 2 or sq.inputs[0] != sq.inputs[1] \
                or not only(sq.outputs[0], op.index):
            continue
        sub = producer.get(sq.inputs[0])
        if sub is None or sub.type != VAR["sub"] or len(sub.inputs) != 2 or not only(sub.outputs[0], sq.index):
            continue
        x, mu = sub.inputs
        mean = producer.get(mu)
        if mean is None or mean.type != VAR["mean"] or mean.inputs[:1] != [x] or not only(mu, sub.index) or \
                not mean.attrs.get("keep_dims") or mean.attrs.get("axes") != op.attrs.get("axes") or \
                not op.attrs.get("axes"):
            continue
        members = (mean, sub, sq, op)
        if recorded_var(members):
            found[op.index] = (tuple(m.index for m in members), x)
    if not found:
        return ops_
    gone = {m for members, _ in found.values() for m in members}
    out = []
    for op in ops_:
        if op.index in found and op.members == (op.index,):
            members, x = found[op.index]
            out.append(EagerOp(op.index, VAR["eager"], [x], list(op.outputs), {"axes": op.attrs.get("axes")},
                               op.label, members))
        elif not (op.members == (op.index,) and op.index in gone):
            out.append(op)
    return out


def same_dtype_casts(ops_: list[EagerOp], opd: list) -> list[EagerOp]:
    """A Cast to the dtype its input has already is no op in eager: TorchScript writes `x.float()` /
    `x.to(dtype)` as a Cast whatever x's dtype, and `Tensor.to` returns x itself when nothing changes
    (aten/src/ATen/native/TensorConversions.cpp, `to_will_alias`): no copy, no autograd node. Read as
    an Identity (a view). Float32 steps only: under --precision a `.float()` of a lower-precision
    activation is a copy."""
    out = []
    for op in ops_:
        if op.type == CAST and op.members == (op.index,) and op.inputs and op.inputs[0] >= 0 and \
                len(op.outputs) == 1 and opd[op.inputs[0]].dtype == opd[op.outputs[0]].dtype:
            op = EagerOp(op.index, IDENTITY_TYPE, op.inputs[:1], list(op.outputs), {}, op.label, op.members)
        out.append(op)
    return out


def unread_statistics(ops_: list[EagerOp], g) -> list[EagerOp]:
    """Values eager never computes: an op's input that feeds only outputs nobody reads (the family's
    torch fact "only_for_outputs": ONNX BatchNormalization's input_mean / input_var make only its
    running-statistics outputs). `F.batch_norm(w, None, None, training=True)` (timm's weight
    standardisation) has no running statistics; both exporters fill those required inputs with
    ReduceMean chains over the input, but eager runs native_batch_norm alone. An op whose every read
    output is read only at such an input, or by an op dropped so, is dropped (an op nobody reads at
    all stays as it is)."""
    outputs = set(g.outputs)
    readers: dict[int, list] = {}
    for pos, op in enumerate(ops_):
        for k, v in enumerate(op.inputs):
            if v >= 0:
                readers.setdefault(v, []).append((pos, k))
    dead_reads: set[tuple] = set()
    dead: set[int] = set()
    for pos in range(len(ops_) - 1, -1, -1):
        op = ops_[pos]
        reads = [r for v in op.outputs for r in readers.get(v, ())]
        if reads and not outputs & set(op.outputs) and all(r in dead_reads or r[0] in dead for r in reads):
            dead.add(pos)
            continue
        for k, outs in ((facts(op) or {}).get("only_for_outputs") or {}).items():
            if all(not readers.get(op.outputs[o]) and op.outputs[o] not in outputs
                   for o in outs if o < len(op.outputs)):
                dead_reads.add((pos, k))
    return [op for pos, op in enumerate(ops_) if pos not in dead] if dead else ops_


def detached_reads(ops_: list[EagerOp], g, opd: list) -> list[EagerOp]:
    """A value read through `.detach()`: no export keeps an op for it, but the dynamo exporter's record
    of a reader names `%detach` where the file feeds it the value itself (`sub(%gelu, %detach)` reading
    `amax`). That input carries no gradient from that reader (attrs "detached": its positions)."""
    irops = g.operations
    calls = [parse_call(op.call) if op.call else None for op in irops]
    recorded = {c[0] for c in calls if c}
    if not recorded:
        return ops_
    for op in ops_:
        c = calls[op.index] if op.members == (op.index,) else None
        if c:
            args = set(re.findall(r"%(\w+)", " ".join(c[2]) + " " + " ".join(c[3].values())))
            detach = [a for a in args if fx_kind(a) == "detach" and a not in recorded]
            missing = [k for k, v in enumerate(op.inputs) if v >= 0 and opd[v].name in recorded
                       and opd[v].name not in args]
            if detach and len(missing) == len(detach):
                op.attrs["detached"] = tuple(missing)
    return ops_


def floating(o: Operand) -> bool:
    """Whether autograd lets the tensor require grad: floating-point (or complex) dtypes only."""
    return o.dtype.startswith(("float", "bfloat", "complex"))


def gradientless(ops_: list[EagerOp], g, opd: list) -> list[EagerOp]:
    """An op none of whose results reaches the loss through a gradient-carrying read (an argmin of
    distances, a value read only detached, a top-k whose indices alone are read) keeps no backward
    node: eager records one, but nothing ever runs it, and it is freed (with what it saved) when its
    results die. A result of integer or bool dtype carries no gradient (autograd's rule: only
    floating-point tensors require grad; derivatives.yaml marks topk's / sort's / max.dim's indices
    not differentiable), so a read of one does not keep its op's node. Attrs "no_node"."""
    readers: dict[int, list[tuple[int, int]]] = {}
    for p, op in enumerate(ops_):
        for k, v in enumerate(op.inputs):
            if v >= 0:
                readers.setdefault(v, []).append((p, k))
    outputs = set(g.outputs)
    live = [False] * len(ops_)
    for p in range(len(ops_) - 1, -1, -1):
        op = ops_[p]
        if op.type == LOSS_TYPE:
            live[p] = True
            continue
        if (facts(op) or {}).get("draws") or no_grad(op.type):
            continue
        live[p] = any(v in outputs or any(live[q] and k not in ops_[q].attrs.get("detached", ())
                                          for q, k in readers.get(v, ()))
                      for v in op.outputs if v >= 0 and floating(opd[v]))
        if not live[p]:
            op.attrs["no_node"] = True
    return ops_


def max_with_indices(ops_: list[EagerOp], opd: list) -> list[EagerOp]:
    """max.dim / min.dim whose indices are read, as TorchScript's symbolic writes it: a ReduceMax and an
    ArgMax of the same input over the same one axis, keepdims alike. Eager ran one max.dim (attrs
    "with_indices", read by the family's facts); without the ArgMax, amax and `max(dim).values` look
    alike in the file."""
    args = {}
    for op in ops_:
        if op.type in MAX_INDICES.values():
            args.setdefault((op.type, op.inputs[0]), []).append(op)
    for op in ops_:
        axes = op.attrs.get("axes")
        if op.type not in MAX_INDICES or not axes or len(axes) != 1:
            continue
        rank = max(len(opd[op.inputs[0]].shape), 1)
        if any(int(a.attrs.get("axis", 0)) % rank == int(axes[0]) % rank and
               bool(a.attrs.get("keepdims", 1)) == bool(op.attrs.get("keep_dims"))
               for a in args.get((MAX_INDICES[op.type], op.inputs[0]), ())):
            op.attrs["with_indices"] = True
    return ops_


def eager_ops(g, uses: dict, opd: list, trained=frozenset()) -> list[EagerOp]:
    """The ops eager runs for `g`: the exporters' splits fused back, then each rewrite above in turn
    (new operands appended to `opd`, their readers to `uses`). `trained`: the weights that train."""
    ops_ = merged_duplicates(one_aten_ops(variances(fuse(g, uses, trained), g, uses), g, opd), g, opd, uses)
    ops_ = inplace_writes(centred_twice(unread_statistics(ops_, g), g, opd, uses), g, opd)
    ops_ = clones_before_writes(ops_, g, opd, uses)
    ops_ = selects(merged_dropouts(lost_clones(ops_, g, opd, uses), g, opd, uses), opd, trained)
    ops_ = output_clones(ops_, g, opd, uses)
    ops_ = chunks(unbinds(max_with_indices(ops_, opd), g, opd), opd)
    ops_ = merged_across_layers(ops_, g, opd, uses)
    return gradientless(detached_reads(split_activations(sdpa_dropouts(ops_, opd, uses), opd, uses), g, opd), g,
                        opd)
