"""F.scaled_dot_product_attention as torch.onnx decomposes it, read back as the one eager op; the
constants its recorded call says eager computes during the step."""
from __future__ import annotations

import re

from memplan_cli import ops as registry
from memplan_cli.ir.graph import COMPUTED_CONSTANTS
from memplan_cli.ops._torch import GATHER, SDPA, SDPA_CALLS, TRANSPOSE, parse_call, sdpa_dropout
from memplan_cli.profiles.torch.strides import elements


def is_scalar(g, v) -> bool:
    return v >= 0 and elements(g.operands[v].shape) == 1


def sdpa_decompositions(g, uses, defs) -> dict:
    """torch.onnx's decomposition of `F.scaled_dot_product_attention` read back as the one eager op:
    MatMul(q * s, k^T * s) (both operands scaled by a one-element factor: sdpa's math, never a
    hand-written attention), [+ mask], Softmax (last axis), [Where(IsNaN(p), 0, p): its _safe_softmax],
    [Dropout], MatMul with v; k^T through the Reshape / Transpose views the decomposition writes, k and
    v through its grouped-query repeat (Unsqueeze, Expand, Reshape). Returns {index of the last MatMul:
    (members, q, k, v, mask or -1, softmax output, dropout op or None)}."""
    ops = g.operations
    found = {}

    def only(v, users=1):
        return v >= 0 and len(uses.get(v, ())) == users and v not in g.outputs

    def unrepeat(v, chain):
        """The grouped-query repeat (x[:, :, None].expand(...).reshape(...)) undone: sdpa's enable_gqa."""
        found = []
        p = defs.get(v)
        if p is not None and ops[p].type == SDPA["reshape"] and only(v):
            found.append(p)
            v = ops[p].inputs[0]
        pe = defs.get(v)
        if pe is None or ops[pe].type != SDPA["expand"] or not only(v):
            return v if not found else ops[found[0]].outputs[0]
        u = ops[pe].inputs[0]
        pu = defs.get(u)
        x = ops[pu].inputs[0] if pu is not None else -1
        if pu is None or ops[pu].type != SDPA["unsqueeze"] or not only(u) or len(g.operands[x].shape) != 4 \
                or tuple(int(a) % 5 for a in ops[pu].attrs.get("axes", ())) != (2,):
            return v if not found else ops[found[0]].outputs[0]
        chain += found + [pe, pu]
        return x

    for m2 in ops:
        if m2.type != SDPA["matmul"] or len(m2.inputs) != 2:
            continue
        members = [m2.index]
        p = m2.inputs[0]
        drop = None
        if defs.get(p) is not None and ops[defs[p]].type == SDPA["dropout"] and only(p):
            members.append(defs[p])
            if float(ops[defs[p]].attrs.get("ratio", 0.5)) > 0:
                drop = ops[defs[p]]
            p = ops[defs[p]].inputs[0]
        if defs.get(p) is not None and ops[defs[p]].type == SDPA["where"] and only(p):
            w = ops[defs[p]]
            c, sm = w.inputs[0], w.inputs[2] if len(w.inputs) > 2 else -1
            pc = defs.get(c)
            if pc is None or ops[pc].type != SDPA["isnan"] or ops[pc].inputs[0] != sm or not only(c) \
                    or sorted(uses.get(sm, ())) != sorted((pc, w.index)):
                continue
            members += [w.index, pc]
            p = sm
        elif not only(p):
            continue
        ps = defs.get(p)
        if ps is None or ops[ps].type != SDPA["softmax"]:
            continue
        ax = ops[ps].attrs.get("axes", ops[ps].attrs.get("axis", -1))
        ax = tuple(ax) if isinstance(ax, (tuple, list)) else (ax,)
        if tuple(int(a) % len(g.operands[p].shape) for a in ax) != (len(g.operands[p].shape) - 1,):
            continue
        members.append(ps)
        sm_out = p
        x = ops[ps].inputs[0]
        mask = -1
        px = defs.get(x)
        if px is not None and ops[px].type == SDPA["mask"] and only(x):
            a, b = ops[px].inputs[:2]
            if defs.get(a) is not None and ops[defs[a]].type == SDPA["matmul"]:
                x, mask = a, b
            elif defs.get(b) is not None and ops[defs[b]].type == SDPA["matmul"]:
                x, mask = b, a
            else:
                continue
            members.append(px)
        p1 = defs.get(x)
        if p1 is None or ops[p1].type != SDPA["matmul"] or not only(x):
            continue
        m1 = ops[p1]
        sides = []
        for v in m1.inputs[:2]:
            pm = defs.get(v)
            if pm is None or ops[pm].type != SDPA["scale"] or not only(v):
                break
            a, b = ops[pm].inputs[:2]
            if is_scalar(g, b) and not is_scalar(g, a):
                sides.append((pm, a))
            elif is_scalar(g, a) and not is_scalar(g, b):
                sides.append((pm, b))
            else:
                break
        if len(sides) != 2 and sdpa_dropout(m1.call) is not None:
            # the exporter leaves out the factors for a scale of 1 (OPT scales q itself); its recorded
            # call says the MatMul is sdpa's
            sides = [(None, m1.inputs[0]), (None, m1.inputs[1])]
        if len(sides) != 2:
            continue
        members += [p1] + [pm for pm, _ in sides if pm is not None]
        q = sides[0][1]
        qs = tuple(g.operands[q].shape)
        # back through the views of k^T to the nearest k of (..., S_kv, head dim), repeat undone
        chain: list[int] = []
        kt = sides[1][1]
        k, v = -1, kt
        while k < 0:
            p = defs.get(v)
            if p is None or ops[p].type not in SDPA["views"] or not only(v):
                break
            chain.append(p)
            v = ops[p].inputs[0]
            rep: list[int] = []
            c = unrepeat(v, rep)
            ks = tuple(g.operands[c].shape)
            if len(ks) == len(qs) and ks[-1] == qs[-1] and ks[:-3] == qs[:-3]:
                k = c
                chain += rep
        if k < 0 and chain and elements(g.operands[v].shape) == elements(g.operands[kt].shape):
            k = v  # the views start from a folded (batch x heads, S, d) k (nn.MultiheadAttention's)
        if k < 0:
            continue
        vchain: list[int] = []
        v = unrepeat(m2.inputs[1], vchain)
        dropout_p = recorded_dropout(ops, (m2.index, ps, p1))
        if dropout_p is None and drop is None and torchscript_decomposition(g, chain, members):
            dropout_p = 0.0  # TorchScript writes sdpa's Dropout whenever its dropout_p is not 0
        found[m2.index] = (tuple(members + chain + vchain), q, k, v, mask, sm_out, drop,
                           {"q_len": int(qs[-2]), "kv_len": int(g.operands[kt].shape[-1]), "head_dim": int(qs[-1]),
                            "dropout_p": dropout_p})
    return found


def torchscript_decomposition(g, chain, members) -> bool:
    """Whether an sdpa decomposition is the TorchScript exporter's (torch.onnx's symbolic_opset14
    `scaled_dot_product_attention`): k^T is one Transpose of k swapping its last two axes, and no op
    records an aten call. That symbolic writes a Dropout of the attention weights exactly when
    dropout_p != 0. The function the dynamo exporter uses (onnxscript's torch_lib) reshapes k to 3-D
    around a Transpose (0, 2, 1) and writes a Dropout in inference form, which its optimizer
    removes: there only the recorded call says what dropout_p was."""
    ops = g.operations
    if len(chain) != 1 or ops[chain[0]].type != TRANSPOSE or any(ops[i].call for i in members + chain):
        return False
    rank = len(g.operands[ops[chain[0]].inputs[0]].shape)
    perm = tuple(int(a) for a in ops[chain[0]].attrs.get("perm") or ())
    return rank >= 2 and perm == tuple(range(rank - 2)) + (rank - 1, rank - 2)


def recorded_dropout(ops, members) -> float | None:
    """sdpa's dropout_p as the dynamo exporter recorded it beside its decomposition's ops (their `call`):
    None when an op has no such record (TorchScript, or metadata stripped) or they disagree."""
    ps = {sdpa_dropout(ops[i].call) for i in members}
    return ps.pop() if len(ps) == 1 else None


def sdpa_masks(g) -> set[int]:
    """Constants the Add of sdpa's decomposition reads, where its recorded call builds the mask itself
    (is_causal) or receives a computed value (an fx node, not a parameter `%p_...`, buffer `%b_...` or
    constant `%c_...`): a value eager computes during the step."""
    masks: set[int] = set()
    for op in g.operations:
        c = parse_call(op.call) if op.call and op.type == SDPA["mask"] else None
        if c and c[1] in SDPA_CALLS:
            arg = c[2][3] if len(c[2]) > 3 and c[1] != "aten._scaled_dot_product_flash_attention_for_cpu" \
                else c[3].get("attn_mask", "None")
            if not arg.startswith(("%p_", "%b_", "%c_")):
                masks.update(i for i in op.inputs if i >= 0 and g.operands[i].is_const)
    return masks


def folded_values(g, trained, masks) -> set[int]:
    """Constants that are values eager computes during forward (a mask, a position bias, rotary
    tables), folded by the dynamo exporter: an op's recorded call reads the constant by its own name
    (`%expand_2`: an fx node, never a parameter `%p_...` or a buffer `%b_...`), or an sdpa mask
    (`sdpa_masks`). Those that do not train are forward values (made at their first reader, freed
    after their last), not held the whole step."""
    names: set[str] = set()
    first: set[int] = set()
    for op in g.operations:
        if op.call:
            names.update(re.findall(r"%(\w+)", op.call.partition(" = ")[2].partition("(")[2]))
            # the call's first argument, its `self`, is the op's input 0: a constant there that the
            # call reads as an fx node (not `%p_` / `%b_` / `%c_`) is a value eager computed, though
            # the exporter renamed it (JetMoE's `torch.zeros(...)` that `index_put` writes into: `%zeros_2`
            # in the call, `val_240` in the file)
            c = parse_call(op.call)
            if c and c[2] and re.fullmatch(r"%\w+", c[2][0]) and not c[2][0].startswith(("%p_", "%b_", "%c_")) \
                    and op.inputs and op.inputs[0] >= 0 and g.operands[op.inputs[0]].is_const:
                first.add(op.inputs[0])
    return {o.index for o in g.operands if o.is_const and (o.name in names or o.index in masks or o.index in first)
            and o.index not in trained}


def computed_in_forward(g, trained) -> set[int]:
    """Constants a TorchScript file computes with its own ops from fills, shapes, indices and scalars,
    folded at load (`COMPUTED_CONSTANTS`: a causal mask's `Where`, relative-position buckets'
    `repeat` and cast): the file stores no such tensor, so no module holds one; eager computes it in
    forward each step. They are forward values (made at their first reader, freed after their last
    or with the backward that saved them), as `folded_values` reads a dynamo file's by their fx names."""
    md = getattr(g, "metadata", None) or {}
    if "state_dict_order" not in md or any(op.call for op in g.operations):
        return set()
    names = set(md.get(COMPUTED_CONSTANTS) or ())
    # a traced constant (`Operand.computed`) that every reader writes into out of place, as a scatter's
    # data: the exporter's `zeros` for `index_add` (ScatterElements of the source into zeros, added to
    # the target) and the `zeros_like` a loop accumulates into; eager makes it in forward (or not at
    # all: `index_add_` writes in place), never holds it the whole step. A non-persistent buffer the
    # trace writes as a constant is read as itself, not only written into.
    uses: dict[int, list] = {}
    for op in g.operations:
        for k, i in enumerate(op.inputs):
            if i >= 0:
                uses.setdefault(i, []).append((op.type, k))
    written = {i for i, us in uses.items() if all(registry.role(t) == "writes_into" and k == 0 for t, k in us)}
    return {o.index for o in g.operands if o.is_const and o.index not in trained
            and (o.name in names or (o.index in written and o.computed and not o.sources))}


def folded_causal_tables(g) -> dict:
    """Where a TorchScript file may have folded a slice of a module's causal table (GPT-2-style
    attention: transformers' ImageGPT, OpenAI GPT, GPT-Neo and Bark register a (1, 1, P, P) table of
    the position count P as a buffer, non-persistent in most, and read `bias[:, :, :T, :T]`). A
    non-persistent buffer is not in the state dict the exporter writes: the trace holds it as a
    constant and folds the slice, so the file keeps (1, 1, T, T) constants under the module's scope
    and nothing of the table's size; eager's module holds the whole table all step. A mask the
    module computes from the shapes each forward is written alike, so the file cannot tell the two:
    the figure counts no table, and this names them. Found where the file reads a learned position
    table of P > T rows at positions 0 .. T-1 (a Gather of a constant arange) and holds bool or float
    constants of shape (1, ..., 1, T, T), of 3 dims or more, under module scopes (TorchScript node
    names): {"modules": the scopes, "rows": P, "slice": T, "bytes": one P x P table per scope, of the
    smallest element size among its constants}; {} elsewhere (a dynamo file lists the buffer:
    replay.held_before holds it)."""
    from memplan_cli.ir.dtypes import dtype_size
    from memplan_cli.profiles.torch.export import torchscript_export
    from memplan_cli.profiles.torch.functions import module_path

    if not torchscript_export(g) or any(op.call for op in g.operations):
        return {}
    rows = slices = 0
    for op in g.operations:
        if op.type != GATHER or len(op.inputs) < 2 or min(op.inputs[:2]) < 0:
            continue
        table, at = g.operands[op.inputs[0]], g.operands[op.inputs[1]]
        if table.is_const and len(table.shape) == 2 and table.dtype.startswith(("float", "bfloat")) \
                and at.is_const and at.value and tuple(at.value) == tuple(range(len(at.value))) \
                and table.shape[0] > len(at.value):
            rows, slices = int(table.shape[0]), len(at.value)
            break
    if not rows:
        return {}
    uses = g.uses()
    size: dict[str, int] = {}
    for o in g.operands:
        shp = tuple(o.shape)
        # a mask's shape, (1, 1, T, T) as the table's slice keeps it; bool or float (a 2-D (T, T) constant is
        # a folded weight's transpose where the width equals T, and an integer one DeBERTa's relative
        # positions); computed from no parameter
        if o.is_const and len(shp) >= 3 and shp[-2:] == (slices, slices) and all(d == 1 for d in shp[:-2]) \
                and (o.dtype == "bool" or o.dtype.startswith(("float", "bfloat"))) and not o.sources \
                and uses.get(o.index) and module_path(o.name):
            sc = module_path(o.name)
            size[sc] = min(size.get(sc, 8), dtype_size(o.dtype))
    if not size:
        return {}
    return {"modules": sorted(size), "rows": rows, "slice": slices,
            "bytes": sum(rows * rows * n for n in size.values())}
