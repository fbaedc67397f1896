"""Pass (stage graph, first; with `--lora RANK`): insert LoRA adapters beside the targeted projections.

Rules:
- A target is a MatMul or FullyConnected whose weight W (input 1) is a 2-D float constant and whose
  input x and output y agree on every dim but the last. `--lora-targets` picks them: op types (a
  type takes every such op of it and skips the others, e.g. attention's activation products), or
  globs matched against the op's name, its exporter's module scope (torch.onnx dynamo's
  `pkg.torch.onnx.name_scopes`), W's name and `#INDEX`. Types are the canonical one, the file's
  (ONNX MatMul, Gemm; TFLite FULLY_CONNECTED) and those of the ops a loader fused (MatMul+Add: MatMul,
  Add); names include the fused nodes' (the ONNX MatMul's name), as `memplan inspect` shows them. The default suits transformers: the attention query
  and value projections as Hugging Face, GPT-2, Llama and T5 name them (`DEFAULT_TARGETS`).
- Each target y = f(x W + b) becomes, as PEFT's `lora.Linear` computes it:
      y0 = x W + b              (the original op, W frozen, its fused activation moved below)
      a  = x A                  A: [in, r], trained
      u  = a B                  B: [r, out], trained
      s  = u * (alpha / r)      a 0-d constant: not a parameter
      y  = f(y0 + s)            the Add carries the original fused activation
  so every reader of y is unchanged. The adapter ops are appended (the IR orders ops topologically).
- Training: the adapters train; every weight of the model stays frozen (`--train biases` also trains
  the biases). Requires-grad analysis then keeps x and a for dA and dB, no gradient for W, and the
  back-props flow from the loss down to the lowest adapter's input and no further.
- A target list that matches nothing, or an explicitly named op that cannot take an adapter, is an
  error: a typo must not silently train nothing.
"""
from __future__ import annotations

import copy
from fnmatch import fnmatchcase

from memplan_cli import ops as registry
from memplan_cli.config import op_names, op_types
from memplan_cli.errors import INSPECT_HINT, ConfigError
from memplan_cli.ir.graph import Operand, Operation
from memplan_cli.ops.binary import ADD_TYPE, MUL_TYPE
from memplan_cli.ops.matmul import MATMUL_TYPE
from memplan_cli.passes.infra import Pass
from memplan_cli.passes.training_graph import LoRAAdapters

# q / v projections: Hugging Face BERT (attention.self.query / value), Llama and Mistral (q_proj /
# v_proj), GPT-2 (c_attn, the fused qkv projection), T5 (SelfAttention.q / .v), ViT (attention.query)
DEFAULT_TARGETS = ("*q_proj*", "*v_proj*", "*query*", "*value*", "*c_attn*", "*Attention.q.*", "*Attention.v.*",
                   "*Attention/q/*", "*Attention/v/*")


def _adaptable(op_type: str) -> bool:
    d = registry.get(op_type)
    return d is not None and d.lora_layout is not None


def _why_not(op, operands) -> str | None:
    if not _adaptable(op.type):
        return f"is a {op.type}; LoRA adapts {' and '.join(registry.types_with('lora_layout'))} ops"
    if len(op.inputs) < 2 or op.inputs[1] < 0:
        return "has no weight"
    w = operands[op.inputs[1]]
    if not (w.is_const and w.dtype.startswith("float") and len(w.shape) == 2):
        return "has no 2-D float constant weight (its second input is an activation)"
    x, y = operands[op.inputs[0]], operands[op.outputs[0]]
    if tuple(x.shape[:-1]) != tuple(y.shape[:-1]):
        return f"maps {list(x.shape)} to {list(y.shape)}: an adapter needs the leading dims kept"
    return None


def _matches(op, operands, pattern: str, by_type: bool) -> bool:
    """`by_type`: match the op's types (canonical, the file's, the fused-from ops: `op_types`); else
    its names (own, scope, fused-from nodes: `op_names`), its weight and #INDEX."""
    if by_type:
        names = op_types(op)
    else:
        w = operands[op.inputs[1]].name if len(op.inputs) > 1 and op.inputs[1] >= 0 else ""
        names = (*op_names(op), w, f"#{op.index}")
    return any(n and fnmatchcase(n, pattern) for n in names)


def lora_targets(graph, patterns) -> list[int]:
    """Op indices that get an adapter; ConfigError when nothing matches or a named op cannot take one."""
    explicit = bool(patterns)
    patterns = tuple(patterns) or DEFAULT_TARGETS
    ops = graph.operations
    out = []
    for op in ops:
        by_name = any(_matches(op, graph.operands, p, False) for p in patterns)
        if not by_name and not any(_matches(op, graph.operands, p, True) for p in patterns):
            continue
        why = _why_not(op, graph.operands)
        if why is None:
            out.append(op.index)
        elif explicit and by_name and _adaptable(op.type):
            # named on purpose and cannot take one: say so (a type such as MatMul also matches
            # attention's activation x activation products, which are skipped)
            raise ConfigError(f"--lora-targets: op {op.label} {why}")
    if not out:
        which = ",".join(patterns)
        raise ConfigError(f"--lora: no MatMul / FullyConnected op with a constant weight matches "
                          f"{'--lora-targets ' + which if explicit else 'the default targets (' + which + ')'}; "
                          "name them with --lora-targets (op types, or globs over op names, module scopes and "
                          f"weight names; {INSPECT_HINT} lists them)")
    return out


class LoRAInsertion(Pass):
    name = "lora-insertion"
    reads = frozenset({"graph"})
    writes = frozenset({"graph", "lora"})

    def __init__(self, rank: int = 0, targets=(), alpha: float | None = None):
        self.rank, self.targets = rank, tuple(targets)
        self.alpha = float(alpha if alpha is not None else rank)

    def run(self, tg) -> bool:
        if self.rank <= 0:
            return False
        g = tg.graph = copy.copy(tg.graph)
        g.operands, g.operations = list(g.operands), list(g.operations)
        g.inputs, g.outputs = list(g.inputs), list(g.outputs)
        targets = lora_targets(g, self.targets)
        r = self.rank
        adapters, originals = [], {o.index for o in g.operands if o.is_const}

        def operand(name, shape, dtype="float32", const=False):
            o = Operand(len(g.operands), name, tuple(shape), dtype, is_const=const)
            g.operands.append(o)
            return o.index

        def add_op(typ, ins, outs, attrs=None, label=""):
            g.operations.append(Operation(len(g.operations), typ, ins, outs, dict(attrs or {}),
                                          source_type="LoRA", name=label))

        for k in targets:
            op = g.operations[k] = copy.copy(g.operations[k])
            op.attrs = dict(op.attrs)
            x, w, y = op.inputs[0], op.inputs[1], op.outputs[0]
            ws = g.operands[w].shape
            n_in, n_out = (ws[1], ws[0]) if registry.get(op.type).lora_layout(op) == "OI" else (ws[0], ws[1])
            lead = g.operands[y].shape[:-1]
            dt = g.operands[w].dtype
            tag = op.name or f"op{k}"
            base = g.operands[w].name
            a_w = operand(f"{base}.lora_A", (n_in, r), dt, const=True)
            b_w = operand(f"{base}.lora_B", (r, n_out), dt, const=True)
            y0 = operand(f"{g.operands[y].name}.base", g.operands[y].shape, g.operands[y].dtype)
            a = operand(f"{tag}.lora_a", lead + (r,), dt)
            u = operand(f"{tag}.lora_u", lead + (n_out,), dt)
            scale = operand(f"{tag}.lora_scaling", (), dt, const=True)
            s = operand(f"{tag}.lora_s", lead + (n_out,), dt)
            act = op.attrs.get("activation", "NONE")
            op.outputs = [y0 if o == y else o for o in op.outputs]
            if "activation" in op.attrs:
                op.attrs["activation"] = "NONE"
            add_op(MATMUL_TYPE, [x, a_w], [a], label=f"{tag}.lora_A")
            add_op(MATMUL_TYPE, [a, b_w], [u], label=f"{tag}.lora_B")
            add_op(MUL_TYPE, [u, scale], [s], {"activation": "NONE"}, label=f"{tag}.lora_scaling")
            add_op(ADD_TYPE, [y0, s], [y], {"activation": act}, label=f"{tag}.lora_add")
            adapters.append({"op": op.label, "A": a_w, "B": b_w, "in": n_in, "out": n_out})
        tg.lora = LoRAAdapters(r, self.alpha, adapters, originals)
        return True
