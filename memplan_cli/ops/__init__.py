"""The op registry: everything memplan knows about an op family lives in one module of this package.

A family module (`memplan_cli/ops/<family>.py`) declares, at module level:

- `OPS`: a list of `OpDef`, one per canonical op type it defines: the training rule, the verify
  kernels, FLOPs, the op contract, requires-grad facts, the re-batch rule and per-profile facts;
- `ONNX`: ONNX op type -> converter `fn(node: OnnxNode) -> Canon | None` (None: not this family's
  business after all, e.g. an attribute it does not understand: the op keeps its source type and
  is refused if training needs it);
- `TFLITE`: TFLite/circle builtin name -> converter `fn(node: TfliteNode) -> Canon | None`;
- `ONNX_FACTS` / `TFLITE_FACTS` (optional): source op type -> facts the loaders need about an op
  before (or instead of) its conversion, by key: "weight_inputs" (ONNX inputs only a layer's
  parameters fill), "random" (the forward is not a function of its reads), "shape_const_input"
  (a builtin kept unconverted whose input holds a small shape-deciding constant), "shape_float_inputs"
  (ONNX inputs whose small float values decide an output shape), "shape_of" (ONNX Shape / Size:
  its value is the input's static shape), "keeps_batch" (a builtin kept unconverted that keeps
  dim 0 when the model is re-batched), "data_sized_pieces" (ONNX: an op whose outputs are pieces,
  sized by an input the data computes, that sum to the input's length along an axis:
  loaders/data_sized.py), "attrs_as_meant" (`fn(int attrs) -> dict | None`: attributes an exporter
  writes outside ONNX's rule with one meaning, rewritten before shape inference), "branches" (ONNX: a
  conditional on input 0, the attributes holding its (true, false) subgraphs: the shape folding
  inlines the one a known condition picks), "body" (ONNX: a loop over input 0's trip count, the
  attribute holding its body: the shape folding unrolls one whose count is known), "sequence_built"
  (ONNX: "empty" / "inputs" / "insert", how an op builds a sequence of tensors: the shape folding
  reads a known position of one so built as that tensor), "casts_values" (TF Lite: a builtin whose output holds
  its one input's values in float32, so a converter reading a small constant through it reads the
  input's: onnx2tf's float16 files dequantize every constant, a PADV2's fill included), "as_written"
  (ONNX: `fn(node, producer, value) -> dict | None`, attributes the canonical op gets from how the
  file computes the node's inputs, read before the shape fold makes them constants: TorchScript's
  `chunk` written as Slices whose bounds the file computes from the input's shape);
- `PROFILES` (optional): profile name -> op type -> that profile's facts about the op (what
  `profiles/onert`, `singa`, `nntrainer` read); merged into the OpDef's `profiles` at load, so a
  family may keep them beside its OPS or in one table; an op type no family defines (a source op
  kept unconverted, e.g. ONNX Gemm when its converter declines) keeps its facts here too;
- `ONNX_FUSIONS` (optional): `fn(ops, operands) -> ops` run on an ONNX model's converted ops (a
  MatMul and its bias Add read as one FullyConnected);
- `PARAMETER_FOLDS` (optional): `fn(graph) -> [dict]`, where a converter visibly merged a layer's
  parameters into another's (a decomposed LayerNorm's scale and shift into the next FullyConnected):
  what the loaders record for reports (`graph.metadata["merged_parameters"]`).

Modules are discovered by name, in sorted order, so adding an op touches one module and its test.
Nothing here imports loaders, passes or profiles: the registry sits right above `ir`, and the rule
vocabulary it uses (`memplan_cli.ops.rule`) is shared with the passes.
"""
from __future__ import annotations

import importlib
import pkgutil

from memplan_cli.ops.base import Canon, OnnxNode, OpDef, TfliteNode

__all__ = ["Canon", "OnnxNode", "OpDef", "TfliteNode", "get", "all_ops", "onnx_converter",
           "tflite_converter", "family_modules", "source_facts", "types_with", "profile_facts", "role",
           "is_random", "fused_activation_ops", "onnx_fusions", "bias_operands", "parameter_folds"]

_LOADED: dict | None = None
_SKIP = {"base", "rule", "kernel_util"}


def family_modules() -> list:
    """Every op-family module of this package, by name."""
    names = sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name not in _SKIP and not m.name.startswith("_"))
    return [importlib.import_module(f"{__name__}.{n}") for n in names]


def _load() -> dict:
    global _LOADED
    if _LOADED is not None:
        return _LOADED
    ops: dict[str, OpDef] = {}
    onnx: dict[str, object] = {}
    tflite: dict[str, object] = {}
    facts: dict[str, dict] = {"onnx": {}, "tflite": {}}
    fusions: list = []
    folds: list = []
    profile_tables: list = []
    owner: dict[str, str] = {}
    for mod in family_modules():
        fam = mod.__name__.rsplit(".", 1)[-1]
        for d in getattr(mod, "OPS", []):
            if d.type in ops:
                raise RuntimeError(f"op type {d.type} is defined by both ops.{owner[d.type]} and ops.{fam}")
            d.family = fam
            ops[d.type] = d
            owner[d.type] = fam
        for table, src in ((onnx, getattr(mod, "ONNX", {})), (tflite, getattr(mod, "TFLITE", {}))):
            for k, fn in src.items():
                if k in table:
                    raise RuntimeError(f"{k} is converted by two op families (ops.{fam} and another)")
                table[k] = fn
        for fmt, src in (("onnx", getattr(mod, "ONNX_FACTS", {})), ("tflite", getattr(mod, "TFLITE_FACTS", {}))):
            for k, f in src.items():
                if k in facts[fmt]:
                    raise RuntimeError(f"{k}'s {fmt} facts are declared by two op families (ops.{fam} and another)")
                facts[fmt][k] = f
        fusions += list(getattr(mod, "ONNX_FUSIONS", ()))
        folds += list(getattr(mod, "PARAMETER_FOLDS", ()))
        profile_tables += [(fam, prof, t, f) for prof, table in getattr(mod, "PROFILES", {}).items()
                           for t, f in table.items()]
    unregistered: dict[str, dict] = {}
    for fam, prof, t, f in profile_tables:
        have = ops[t].profiles if t in ops else unregistered.setdefault(prof, {})
        key = prof if t in ops else t
        if key in have and have[key] is not f:  # the same table met again (a reload) is no conflict
            raise RuntimeError(f"{prof} facts of {t} are declared twice (ops.{fam} and another)")
        if t in ops:
            ops[t].profiles = {**have, prof: f}  # a copy: some families share one dict among OpDefs
        else:
            have[t] = f
    _LOADED = {"ops": ops, "onnx": onnx, "tflite": tflite, "facts": facts, "fusions": tuple(fusions),
               "folds": tuple(folds), "profiles": unregistered}
    return _LOADED


def get(op_type: str) -> OpDef | None:
    """The registry entry of a canonical op type, or None."""
    return _load()["ops"].get(op_type)


def all_ops() -> dict[str, OpDef]:
    return dict(_load()["ops"])


def bias_operands(graph) -> set[int]:
    """Operand indices of the biases in `graph`: the inputs each op's `OpDef.bias_inputs` names
    (a convolution's or FullyConnected's third input, a norm's shift, an Add of a per-channel vector)."""
    out: set[int] = set()
    for op in graph.operations:
        d = get(op.type)
        if d is None or not d.bias_inputs:
            continue
        pos = d.bias_inputs(op, graph.operands) if callable(d.bias_inputs) else d.bias_inputs
        for k in pos:
            if k < len(op.inputs) and op.inputs[k] >= 0 and graph.operands[op.inputs[k]].is_const:
                out.add(op.inputs[k])
    return out


def source_facts(fmt: str, op_type: str) -> dict:
    """What the op families declare about a source op type ("onnx" or "tflite"; see the module doc)."""
    return _load()["facts"][fmt].get(op_type, {})


def types_with(field_name: str) -> tuple:
    """The canonical op types whose OpDef sets `field_name` (truthy), in registry order."""
    return tuple(t for t, d in _load()["ops"].items() if getattr(d, field_name))


def role(op_type: str) -> str:
    """The op's structural role (`OpDef.role`: "shape_of", "reshape", "fill", "identity",
    "broadcast"); "" for none and for an op type no family defines."""
    d = get(op_type)
    return d.role if d is not None else ""


def autocast_policy(op) -> str:
    """The dtype policy of `op` under mixed precision (`OpDef.autocast`, resolved for this op):
    "lower", "fp32", "first", "fixed" or "" (type promotion); "" for an op type no family defines."""
    d = get(op.type)
    if d is None:
        return ""
    return d.autocast(op) if callable(d.autocast) else d.autocast


def is_random(op_type: str) -> bool:
    """The op's forward is not a function of its reads: a registered op's `OpDef.random`, or an
    ONNX op kept unconverted whose facts say so."""
    d = get(op_type)
    return d.random if d is not None else bool(source_facts("onnx", op_type).get("random"))


def profile_facts(profile: str, op_type: str) -> dict | None:
    """What the op families declare for `profile` about `op_type` (`OpDef.profiles[profile]`, or a
    source op type's entry in a family's PROFILES), or None."""
    d = get(op_type)
    if d is not None:
        return (d.profiles or {}).get(profile)
    return _load()["profiles"].get(profile, {}).get(op_type)


def fused_activation_ops() -> dict:
    """Fused activation name (`ir/vocab.py` ACTIVATIONS: "RELU", "TANH", ...) -> the standalone op
    type computing it (`OpDef.activation`): what a runtime without fused activations runs instead."""
    from memplan_cli.ir.vocab import ACTIVATIONS

    return {d.activation: t for t, d in _load()["ops"].items() if d.activation in ACTIVATIONS}


def onnx_fusions() -> tuple:
    """`fn(ops, operands) -> ops` the families run on an ONNX model's converted ops, in module order
    (MatMul + bias Add -> FullyConnected, as TF Lite has it)."""
    return _load()["fusions"]


def parameter_folds(graph) -> list[dict]:
    """Where a converter visibly merged a layer's parameters into another's (each family's
    `PARAMETER_FOLDS`), in module order."""
    return [f for fn in _load()["folds"] for f in fn(graph)]


def onnx_converter(op_type: str):
    return _load()["onnx"].get(op_type)


def tflite_converter(builtin: str):
    return _load()["tflite"].get(builtin)
