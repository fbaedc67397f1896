"""Constant folding by shape: an op whose every input is a constant computes a constant.

Rules:
- An op whose present inputs are all constants (or that has none, e.g. ConstantOfShape on a constant
  shape, Range on constant bounds) is removed; its outputs become constants. Folding repeats down
  the chain, so a `Constant -> ConstantOfShape -> Mul -> Conv` weight becomes one constant: a
  trainable weight of the Conv, not an activation with no gradient.
- An op whose output is a graph output is kept (the model's result must stay computed), and so is a
  random op (`OpDef.random`: RandomUniformLike of a constant shape draws anew each step).
- An op reading a constant the dynamo exporter's optimizer folded from a parameter together with a
  module buffer (its `folded_from` and graph signature: Swin V2's position-bias MLP over its
  coordinate table) is kept: that value is computed each step in the source, no parameter, and the
  torch profile reads it back as the ops that computed it.
- An op that reads a float constant (of more than one element) that another op also reads (a tied
  embedding table, one bias used twice), or whose outputs hold another number of elements than that
  constant (a Gather of position rows from a table, an Expand of a class token to the batch, a
  Concat of two parameters) is kept: folding it would train a copy, a slice or a broadcast in place
  of the file's own parameter. Scalars (a scale, an epsilon), fills or buffers computed here and
  the file's buffers (`Operand.computed`: a rotary `inv_freq`) are not the file's parameters and do
  not stop folding (a rotary table folds, as the exporter folds it at a fixed length).
- An Identity of a constant is that constant: its readers read the constant itself and the op goes
  (not when its output is a graph output), also of a constant folded here (it is not folded into a
  copy: TorchScript's If branches pass an expanded index on through Identities). TorchScript's
  exporter deduplicates initializers of equal value into one and `Identity` nodes (random init:
  zero biases, unit norm scales), so the file holds one parameter read by several ops: a shared
  weight, whose gradients accumulate.
- What a folded constant is: a fill (ConstantOfShape, through Reshape / Cast / Transpose /
  Squeeze / Unsqueeze / Identity moves) standing alone is a weight (the zoo's light models write
  every weight so), except in a file whose producer lists every parameter (`PARAMETERS_LISTED`: the
  dynamo exporter's graph signature), where a fill the graph computes is the source's own tensor
  made each step (MiniCPM3's `new_empty` that slice assignments fill), a buffer, and so is one in a
  file whose producer writes every parameter as an initializer (`PARAMETERS_STORED`: torch.onnx's
  TorchScript exporter; Longformer's `new_zeros` padding of its chunked attention), there also recorded
  as computed (`COMPUTED_CONSTANTS`: eager makes it in forward each step); anything computed
  from a stored float parameter is a weight; anything else
  computed from fills, integers and scalars (Swin's shifted-window attention mask: ConstantOfShape,
  ScatterND, Reshape, Sub, Where) is a buffer (`Operand.computed`): it gets no gradient, as in the
  framework, where it is no parameter.
- A broadcast (Expand, `OpDef.role` "broadcast") folded into a constant that is no parameter (DeBERTa's
  relative-position indices clamped, then expanded to batch x heads x seq²) records the shape of the
  values it repeats (`Operand.broadcast_of`): its storage, as PyTorch's `expand` is a stride-0 view of
  its input. Profiles that hold views (memplan's `Policy.broadcast_views`) size it so.
- An op the dynamo exporter recorded a call for (`Operation.call`) that computes no parameter is an
  eager op PyTorch runs each step on constants, left unfolded by the exporter's optimizer (over its
  size limits: TAPAS's segment reductions of its table positions). Folded here, its outputs are
  constants; the op and its outputs' bytes are recorded (`FOLDED_CALLS`, at the file's batch; views
  and shape reads, which make no tensor in eager, are not) so that the torch profile can say what it
  does not count.
- A constant folded from one float constant by an op that only moves or narrows its values (a
  Slice, Transpose, Reshape, Cast...) records the name of that constant (`FOLDED_FROM`), so the torch
  profile can name the tensor a chain of views started from (transformers MRA's `zeros_like(query)`,
  which the dynamo exporter stores whole and slices: eager holds the whole tensor).
- Values are not computed (loaders never read weights): only shapes and dtypes carry over, which is
  all memory needs. Operands no longer referenced are left for the loader's clean-up.
"""
from __future__ import annotations

from dataclasses import replace

from memplan_cli import ops
from memplan_cli.ir.graph import COMPUTED_CONSTANTS, FOLDED_CALLS, FOLDED_FROM, Graph, broadcasts_to
from memplan_cli.ops import is_random, role


# graph metadata: the file lists every parameter of its source (loaders/params.py's dynamo rule), so a
# fill computed in the graph is no parameter
PARAMETERS_LISTED = "parameters_listed"
# graph metadata: the file's producer writes every parameter as an initializer (torch.onnx's
# TorchScript exporter), so a fill the graph computes (`torch.zeros(...)` in forward) is no parameter
PARAMETERS_STORED = "parameters_stored"
_VIEW_ROLES = ("reshape", "broadcast", "identity", "shape_of")


class FoldConstants:
    name = "fold-constants"

    def run(self, g: Graph) -> bool:
        """Fold in place; returns whether anything changed."""
        outputs = set(g.outputs)
        aliased = _alias_constant_identities(g, outputs)
        readers: dict[int, int] = {}
        for op in g.operations:
            for i in set(op.inputs):
                readers[i] = readers.get(i, 0) + 1
        folded: list[int] = []
        kinds: dict[int, str] = {}  # folded operand -> "fill" | "param" | "buffer"
        assumed: dict[int, bool] = {}
        def kind_of(i):  # a constant the loader knows is no parameter (a buffer: inv_freq) is not copied by folding
            return kinds.get(i, "buffer" if g.operands[i].computed else "param")
        eager = _of_a_buffer_and_a_parameter(g)

        for k in g.topological_order():
            op = g.operations[k]
            ins = [i for i in op.inputs if i >= 0]
            if any(not g.operands[i].is_const for i in ins) or any(o in outputs for o in op.outputs):
                continue
            if is_random(op.type):  # a new draw each step (dropout's mask from a constant shape): no constant
                continue
            if any(g.operands[i].name in eager for i in ins):
                continue
            if role(op.type) == "identity" and len(ins) == 1 and len(op.outputs) == 1:
                continue  # read as its constant below, not folded into a copy of it
            if _reads_a_parameter_it_must_not_copy(g, op, [i for i in ins if kind_of(i) == "param"],
                                                   readers):
                continue
            kind = _folded_kind(g, op, ins, kinds)
            made = g.metadata.get(COMPUTED_CONSTANTS) or {}
            # computed here from no parameter: not a file's constant moved, nor a fill standing alone
            # unless the file stores every parameter (TorchScript): then a float fill the file computes
            # is the source's `zeros` / `new_zeros` / `full_like` in forward, made each step (Longformer's
            # -inf masks); integer fills are the exporter's own shape helpers
            if (kind == "buffer" and not (_moves_data(op.type) and g.operands[ins[0]].name not in made)) \
                    or (kind == "fill" and g.metadata.get(PARAMETERS_STORED)
                        and all(g.operands[o].dtype.startswith(("float", "bfloat")) for o in op.outputs)):
                g.metadata[COMPUTED_CONSTANTS] = {**made, **{g.operands[o].name: op.type for o in op.outputs}}
            if kind == "fill" and (g.metadata.get(PARAMETERS_LISTED) or g.metadata.get(PARAMETERS_STORED)):
                kind = "buffer"
            # a fill is a weight by guess; a value computed from parameters is as sure as they are
            guess = kind == "fill" or any(assumed.get(i, g.operands[i].assumed) for i in ins)
            sources = tuple(dict.fromkeys(s for i in ins if kind_of(i) == "param"
                                          and g.operands[i].dtype.startswith(("float", "bfloat"))
                                          and len(g.operands[i].shape) > 0
                                          for s in (g.operands[i].sources or (g.operands[i].name,))))
            stored = _broadcast_source(g, op, ins) if kind == "buffer" else None
            for o in op.outputs:
                assumed[o] = guess
                g.operands[o] = replace(g.operands[o], is_const=True, sources=sources, broadcast_of=stored)
                kinds[o] = kind
            folded.append(k)
            data = [i for i in ins if g.operands[i].dtype.startswith(("float", "bfloat"))
                    and g.operands[i].num_elements > 1]
            if len(data) == 1 and len(op.outputs) == 1 and _moves_or_narrows(op.type):
                g.metadata.setdefault(FOLDED_FROM, {})[g.operands[op.outputs[0]].name] = g.operands[data[0]].name
            if op.call and kind != "param" and role(op.type) not in _VIEW_ROLES:
                g.metadata.setdefault(FOLDED_CALLS, []).append(
                    {"op": op.label, "type": op.type, "outputs": [g.operands[o].name for o in op.outputs],
                     "bytes": sum(g.operands[o].nbytes for o in op.outputs)})
        if not folded:
            return aliased
        for o, kind in kinds.items():
            if kind == "buffer" and g.operands[o].dtype.startswith(("float", "bfloat")):
                g.operands[o] = replace(g.operands[o], computed=True)
            elif kind in ("param", "fill") and assumed.get(o):
                g.operands[o] = replace(g.operands[o], assumed=True)
        first = g.operations[min(folded)]
        drop = set(folded)
        kept = [op for op in g.operations if op.index not in drop]
        for n, op in enumerate(kept):
            op.index = n
        g.operations = kept
        g.warnings.append(f"{len(folded)} op(s) computing only from constants were folded into constants "
                          f"(first: {first.source_type or first.type}{f' {first.name}' if first.name else ''})")
        if _alias_constant_identities(g, outputs):  # Identities of what this run folded, then what they feed
            self.run(g)
        return True


def _of_a_buffer_and_a_parameter(g: Graph) -> set[str]:
    """Constants the dynamo exporter's optimizer folded from a parameter together with a module buffer
    (its `folded_from` and graph signature): a value eager computes each step from both (Swin V2's
    position-bias MLP over its coordinate table), no parameter, so its readers are eager's ops too."""
    kind = {kt[1]: kt[0] for kt in g.signature().values()}
    return {name for name, srcs in g.folded_from().items()
            if any(kind.get(s) == "PARAMETER" for s in srcs) and any(kind.get(s) == "BUFFER" for s in srcs)}


def _broadcast_source(g: Graph, op, ins) -> tuple | None:
    """The shape of the values a folded broadcast repeats (its input's own storage when that is a
    broadcast too), or None when the op is no broadcast or repeats nothing."""
    if role(op.type) != "broadcast" or len(ins) != 1 or len(op.outputs) != 1:
        return None
    src = g.operands[ins[0]]
    stored = src.broadcast_of if src.broadcast_of is not None else tuple(src.shape)
    return stored if broadcasts_to(stored, tuple(g.operands[op.outputs[0]].shape)) else None


def _moves_or_narrows(op_type: str) -> bool:
    """The op's output is its input's values rearranged, retyped or a part of them (`OpDef.narrows`)."""
    d = ops.get(op_type)
    return d is not None and (d.moves_data or d.narrows)


def _moves_data(op_type: str) -> bool:
    """The op's output is its input's values rearranged or retyped (its registry entry says so)."""
    d = ops.get(op_type)
    return d is not None and d.moves_data


def _folded_kind(g: Graph, op, ins, kinds) -> str:
    """What the output of a folded op is: "fill" (ConstantOfShape, or moved), "param" (computed from a
    stored float parameter) or "buffer" (computed from fills, integers and scalars)."""
    def kind_of(i):
        if i in kinds:
            return kinds[i]
        o = g.operands[i]
        if o.dtype.startswith(("float", "bfloat")) and len(o.shape) > 0 and not o.computed:
            return "param"
        return None  # an integer or a scalar constant

    if role(op.type) == "fill":
        return "fill"
    if _moves_data(op.type) and ins:
        k = kind_of(ins[0])
        return k if k is not None else "buffer"
    seen = {kind_of(i) for i in ins}
    return "param" if "param" in seen else "buffer"


def _alias_constant_identities(g: Graph, outputs: set) -> bool:
    """Remove each Identity whose input is a constant; its readers read that constant."""
    alias: dict[int, int] = {}
    for op in g.operations:
        if (role(op.type) == "identity" and len(op.inputs) == 1 and op.inputs[0] >= 0 and len(op.outputs) == 1
                and (g.operands[op.inputs[0]].is_const or op.inputs[0] in alias) and op.outputs[0] not in outputs):
            src = op.inputs[0]
            alias[op.outputs[0]] = alias.get(src, src)  # a chain of Identities ends at the constant
    if not alias:
        return False
    kept = [op for op in g.operations if not (role(op.type) == "identity" and op.outputs and op.outputs[0] in alias)]
    for n, op in enumerate(kept):
        op.index = n
        op.inputs = [alias.get(i, i) for i in op.inputs]
    g.operations = kept
    g.warnings.append(f"{len(alias)} Identity op(s) of a constant read as that constant (a weight shared by "
                      f"its readers)")
    return True


def _reads_a_parameter_it_must_not_copy(g: Graph, op, ins, readers) -> bool:
    out = sum(g.operands[o].num_elements for o in op.outputs)
    for i in ins:
        o = g.operands[i]
        if not o.dtype.startswith(("float", "bfloat")):
            continue
        if o.num_elements > 1 and (readers.get(i, 0) > 1 or o.num_elements != out):
            return True
    return False
