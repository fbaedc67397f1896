"""Constant folding by shape: an op whose every input is a constant computes a constant.

Rules:
- An op whose present inputs are all constants (or that has none, e.g. ConstantOfShape on a constant
  shape, Range on constant bounds) is removed; its outputs become constants. Folding repeats down
  the chain, so a `Constant -> ConstantOfShape -> Mul -> Conv` weight becomes one constant: a
  trainable weight of the Conv, not an activation with no gradient.
- An op whose output is a graph output is kept (the model's result must stay computed).
- An op that reads a float constant (of more than one element) that another op also reads (a tied
  embedding table, one bias used twice), or whose outputs hold another number of elements than that
  constant (a Gather of position rows from a table, an Expand of a class token to the batch, a
  Concat of two parameters) is kept: folding it would train a copy, a slice or a broadcast in place
  of the file's own parameter. Scalars (a scale, an epsilon) do not stop folding.
- An Identity of a constant is that constant: its readers read the constant itself and the op goes
  (not when its output is a graph output). TorchScript's exporter deduplicates initializers of equal
  value into one and `Identity` nodes (random init: zero biases, unit norm scales), so the file
  holds one parameter read by several ops: a shared weight, whose gradients accumulate.
- Values are not computed (loaders never read weights): only shapes and dtypes carry over, which is
  all memory needs. Operands no longer referenced are left for the loader's clean-up.
"""
from __future__ import annotations

from dataclasses import replace

from memplan_cli.ir.graph import Graph


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
        for k in g.topological_order():
            op = g.operations[k]
            ins = [i for i in op.inputs if i >= 0]
            if any(not g.operands[i].is_const for i in ins) or any(o in outputs for o in op.outputs):
                continue
            if _reads_a_parameter_it_must_not_copy(g, op, ins, readers):
                continue
            for o in op.outputs:
                g.operands[o] = replace(g.operands[o], is_const=True)
            folded.append(k)
        if not folded:
            return aliased
        first = g.operations[min(folded)]
        drop = set(folded)
        kept = [op for op in g.operations if op.index not in drop]
        for n, op in enumerate(kept):
            op.index = n
        g.operations = kept
        g.warnings.append(f"{len(folded)} op(s) computing only from constants were folded into constants "
                          f"(first: {first.source_type or first.type}{f' {first.name}' if first.name else ''})")
        return True


def _alias_constant_identities(g: Graph, outputs: set) -> bool:
    """Remove each Identity whose input is a constant; its readers read that constant."""
    alias: dict[int, int] = {}
    for op in g.operations:
        if (op.type == "Identity" and len(op.inputs) == 1 and op.inputs[0] >= 0 and len(op.outputs) == 1
                and (g.operands[op.inputs[0]].is_const or op.inputs[0] in alias) and op.outputs[0] not in outputs):
            src = op.inputs[0]
            alias[op.outputs[0]] = alias.get(src, src)  # a chain of Identities ends at the constant
    if not alias:
        return False
    kept = [op for op in g.operations if not (op.type == "Identity" and op.outputs and op.outputs[0] in alias)]
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
