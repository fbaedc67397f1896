"""Which float constants of a file are the source model's parameters (what a framework trains).

Exporters fold computed tensors into constants that look like weights: torch.onnx writes causal
masks, rotary cos / sin tables and cached attention biases as float initializers beside the
parameters. Training those would count gradients and optimizer state no framework keeps.

Rules (the file's producer picks the naming rule; each constant is a parameter, not one, or unknown):
- torch.onnx dynamo (the graph's `pkg.torch.export.ExportedProgram.graph_signature` lists each
  PARAMETER, BUFFER and CONSTANT_TENSOR input by target name): an initializer named as a
  parameter is one; named as a buffer or lifted constant is not. Any other float initializer was
  folded by the exporter: it is a parameter when a node reading it records (`pkg.torch.onnx.fx_node`)
  a parameter the file no longer holds under its own name (a weight transposed, a BatchNorm folded
  into a convolution), or reads it as a weight (MatMul's B) in the module that owned such a
  parameter. A value of the reader's own decomposition (a mask's fill) is not one. A constant the
  exporter's optimizer folded says what it was computed from (`pkg.onnxscript.optimizer.folded_from`:
  every value and initializer of the folded chain): naming no parameter, it is not one, whatever
  else the file leaves unaccounted (computed without a parameter, it has no gradient in torch: BERT's
  attention mask at a fixed length, from the position ids; rotary tables, from `inv_freq`). Any other
  value folded from an fx node (`unsqueeze_14`, `embedding_1`: the reader records its name) read in
  the module that owns a parameter the file no longer holds is that parameter (of several, the one
  its record names: EvoNorm's `v.view(...)` and `weight.view(...)`); any other is not one when
  every folded parameter was found elsewhere, and unknown otherwise (it may be that parameter,
  sliced).
  A second constant folded from the same parameters in the same shape (a layer used twice, ALBERT's
  shared layers: one transposed weight per use) is a copy, not another parameter.
- Weight slots (`OpDef.weight_inputs`: a convolution's filter, a norm's scale): a float constant
  read only there is a parameter whatever its name (TorchScript's `onnx::MatMul_12`, TF Lite's
  `arith.constant`).
- tf2onnx and TF Lite: a constant read through a `ReadVariableOp` is a variable (a parameter).
- peft's adapter weights (`<module>.lora_A.<adapter>.weight`, `lora_B`, `lora_embedding_A` / `_B`,
  DoRA's `lora_magnitude_vector`, and the trained copies under `modules_to_save.<adapter>`) are
  parameters whatever the producer: peft names nothing else so. A file that holds them is a LoRA
  fine-tuning export: only they train, as in peft (`peft_train_globs`; a --train flag overrides).
- A constant that every reader reads at an input no gradient flows to (`OpDef.nondiff_inputs`, a
  `no_grad` op: a comparison's operand, a Shape's input) cannot train, whatever its name: it is not
  listed as assumed (the training graph freezes it).
- Anything else (TorchScript's state-dict names, which name buffers too; TF Lite's op-named
  constants such as `arith.constant`; other producers) cannot be told: it trains, and reports list it as "assumed
  trainable" (`Operand.assumed`), so a user can `--freeze params:` it.
"""
from __future__ import annotations

import re
from memplan_cli import ops

PARAM, BUFFER, UNKNOWN = "param", "buffer", "unknown"
# the rule of a file whose producer lists every parameter (opgraph/fold.py PARAMETERS_LISTED)
DYNAMO_RULE = "torch.onnx dynamo graph signature"

# peft's names for what it trains (its tuners' parameter prefixes for LoRA and DoRA, and the trained
# copies of `modules_to_save`); a dot on both sides: a module *named* lora_A elsewhere is not peft's
_PEFT_ADAPTER = re.compile(r"(?:^|\.)(lora_A|lora_B|lora_embedding_A|lora_embedding_B|lora_magnitude_vector)\.")
_PEFT_SAVED = re.compile(r"(?:^|\.)modules_to_save\.")
_SIG_LINE = re.compile(r"^(\w+): (PARAMETER|BUFFER|CONSTANT_TENSOR) target='([^']*)'", re.M)
_FX_ARG = re.compile(r"%(\w+)")



def _onnx_weight_slots(op_type: str) -> tuple:
    """ONNX inputs that only a layer's weights fill (the op family's "weight_inputs" fact: its
    OpDef.weight_inputs before canonical conversion)."""
    return ops.source_facts("onnx", op_type).get("weight_inputs", ())


def is_variable_read(name: str) -> bool:
    """TensorFlow names a tensor read from a variable (a Keras weight) `.../ReadVariableOp`; tf2onnx
    and the TF Lite converter keep the name (joined with ';' when they fold several into one)."""
    return "ReadVariableOp" in name


def _is_float(t) -> bool:
    return t.data_type in (1, 10, 11, 16)  # float, float16, double, bfloat16


def peft_train_globs(names) -> tuple[str, ...]:
    """`--train params:` globs selecting peft's trained weights among `names` (initializer names),
    or () when none is named as a LoRA adapter: then the file is not a peft LoRA export."""
    kinds = sorted({m.group(1) for n in names for m in [_PEFT_ADAPTER.search(n)] if m})
    if not kinds:
        return ()
    saved = ("params:*.modules_to_save.*",) if any(_PEFT_SAVED.search(n) for n in names) else ()
    return tuple(f"params:*{k}.*" for k in kinds) + saved


def _peft_params(floats) -> set[str]:
    if not any(_PEFT_ADAPTER.search(n) for n in floats):
        return set()
    return {n for n in floats if _PEFT_ADAPTER.search(n) or _PEFT_SAVED.search(n)}


def onnx_rule(model, folded_from: dict | None = None) -> tuple[str, dict[str, str], dict[str, tuple]]:
    """(the naming rule's name, initializer name -> PARAM | BUFFER | UNKNOWN, initializer name -> the
    source model's parameters it was folded from, when the file says) for an ONNX ModelProto (its
    Constant nodes count as initializers). `folded_from`: initializer name -> the names it was folded
    from, as the file's value_info recorded them (the loader reads them before shape inference
    replaces value_info)."""
    g = model.graph
    consts = {t.name: t for t in g.initializer}
    for n in g.node:
        if n.op_type == "Constant" and n.output:
            for a in n.attribute:
                if a.name == "value":
                    consts[n.output[0]] = a.t
    floats = [name for name, t in consts.items() if _is_float(t)]
    sig = next((p.value for p in g.metadata_props if p.key == "pkg.torch.export.ExportedProgram.graph_signature"),
               None)
    if sig is not None:
        sources: dict[str, tuple] = {}
        return DYNAMO_RULE, _dynamo(g, floats, sig, sources, folded_from or {}), sources
    producer = (model.producer_name or "").lower()
    if producer == "tf2onnx":
        return "TensorFlow variable reads", {n: PARAM if is_variable_read(n) else UNKNOWN for n in floats}, {}
    name = "TorchScript state-dict names" if producer == "pytorch" else f"none for producer '{model.producer_name}'"
    peft = _peft_params(floats)
    return name, {n: PARAM if n in peft else UNKNOWN for n in floats}, {}


def _meta(node, key: str):
    return next((p.value for p in node.metadata_props if p.key == key), None)


def _module_of(node) -> str | None:
    """The innermost module path torch.onnx recorded for a node (its name scopes end with the fx
    node's own name, which is not a module)."""
    v = _meta(node, "pkg.torch.onnx.name_scopes")
    if v is None:
        return None
    parts = [x.strip().strip("'\"") for x in v.strip("[]").split(",")]
    return parts[-2] if len(parts) >= 2 else ""


def _dynamo(g, floats, sig: str, sources: dict, folded_from: dict) -> dict[str, str]:
    """The kinds by the graph signature; `sources` gets, for each folded parameter, the targets of the
    parameters it was folded from."""
    placeholders: dict[str, tuple[str, str]] = {}  # placeholder -> (kind, target)
    for ph, kind, target in _SIG_LINE.findall(sig):
        placeholders[ph] = (kind, target)
    params = {t for k, t in placeholders.values() if k == "PARAMETER"}
    others = {t for k, t in placeholders.values() if k != "PARAMETER"}
    names = set(floats)
    # parameters the file no longer holds by name: the exporter folded them into other initializers
    missing = {ph: t for ph, (k, t) in placeholders.items() if k == "PARAMETER" and t not in names}
    missing_modules = {t.rsplit(".", 1)[0]: ph for ph, t in missing.items()}
    readers: dict[str, list] = {}
    for n in g.node:
        for i in n.input:
            if i in names:
                readers.setdefault(i, []).append(n)
    out: dict[str, str] = {}
    accounted: set[str] = set()
    claimed: dict[frozenset, set] = {}  # folded parameters -> shapes of the constants folded from them
    dims = {t.name: tuple(int(d) for d in t.dims) for t in g.initializer}
    pending: list[str] = []  # the output of a folded fx node: from what, the file does not say
    for name in floats:
        if name in params:
            out[name] = PARAM
            continue
        if name in others:
            out[name] = BUFFER
            continue
        rs = readers.get(name, [])
        folded = folded_from.get(name)
        if folded is not None and not params.intersection(folded):
            out[name] = BUFFER  # computed from buffers, constants and shapes only
            continue
        fx = [_meta(n, "pkg.torch.onnx.fx_node") for n in rs]
        if not fx or any(f is None for f in fx):
            out[name] = UNKNOWN
            continue
        args = set()
        for f in fx:
            args |= set(_FX_ARG.findall(f.split("](", 1)[-1]))
        # a reader that takes a folded parameter (a linear's weight transposed inside its own
        # decomposition), or reads it as its weight in the module owning a folded one
        # (FalconLinear's `x @ weight.T`: the transpose was its own fx node)
        hit = (args & set(missing)) | {missing_modules[_module_of(n)] for n in rs if _module_of(n) in missing_modules
                                       and any(n.input[k] == name for k in _onnx_weight_slots(n.op_type)
                                               if k < len(n.input))}
        # of the parameters a call takes (GroupNorm's weight and bias), the ones the optimizer's record
        # says this constant was folded from (its bias alone: not a second copy of the weight)
        own = {ph for ph in hit if missing[ph] in (folded or ())}
        hit = own or hit
        shape = dims.get(name, ())
        if hit and any(s in claimed.get(frozenset(hit), ()) for s in (shape, shape[::-1])):
            # the same folded parameters again, in the same shape: a layer used twice (ALBERT's shared
            # layers) folds its transposed weight once per use; the parameter trains once, as in torch
            out[name] = BUFFER
        elif hit:
            out[name] = PARAM
            sources[name] = tuple(sorted(placeholders[ph][1] for ph in hit))
            accounted |= hit
            claimed.setdefault(frozenset(hit), set()).add(shape)
        elif name in args:
            pending.append(name)
        else:
            out[name] = BUFFER  # a value of the reader's own decomposition (a mask's fill)
    # a parameter stored under another parameter's name (tied weights; equal values the exporter
    # deduplicated) is found by a node that takes it and reads a parameter
    for n in g.node:
        f = _meta(n, "pkg.torch.onnx.fx_node")
        if f is None:
            continue
        refs = set(_FX_ARG.findall(f.split("](", 1)[-1])) & set(missing)
        if refs - accounted and any(out.get(i) == PARAM for i in n.input):
            accounted |= refs
    # a module none of whose parameters the file holds by name, whose nodes read a parameter, reads
    # it under another name (Falcon's word embeddings, tied to lm_head: the Gather takes lm_head's)
    module_params: dict[str, set] = {}
    for ph, (k, t) in placeholders.items():
        if k == "PARAMETER":
            module_params.setdefault(t.rsplit(".", 1)[0], set()).add(ph)
    for n in g.node:
        m = _module_of(n)
        own = module_params.get(m)
        if own and own <= set(missing) and any(out.get(i) == PARAM for i in n.input):
            accounted |= own
    # a folded fx value read in a module whose own parameter the file no longer holds was computed
    # from it (Gemma's RMSNorm scale `1 + weight`, one constant for every norm once the exporter merged
    # the equal values): that parameter, changed
    still: list[str] = []
    for name in pending:
        owners = {ph for n in readers.get(name, []) for ph in module_params.get(_module_of(n), ())
                  if ph in missing and ph not in accounted}
        # of those, the ones the optimizer's record says it was folded from (EvoNorm's `v.view(...)`
        # and `weight.view(...)`, one constant each): each constant its own parameter
        named = {ph for ph in owners if missing[ph] in (folded_from.get(name) or ())}
        owners = named or owners
        if owners:
            out[name] = PARAM
            sources[name] = tuple(sorted(placeholders[ph][1] for ph in owners))
            accounted |= owners
        else:
            still.append(name)
    # any other is computed from buffers and constants only when every folded parameter has been
    # found elsewhere (GPT-2's position rows, sliced at export, are not: unknown)
    for name in still:
        out[name] = BUFFER if set(missing) <= accounted else UNKNOWN
    return out


def weight_slot_operands(graph) -> set[int]:
    """Operands read only in `OpDef.weight_inputs` positions (and read at all)."""
    slot: dict[int, bool] = {}
    for op in graph.operations:
        d = ops.get(op.type)
        w = d.weight_inputs if d is not None else ()
        for k, i in enumerate(op.inputs):
            if i >= 0:
                slot[i] = slot.get(i, True) and k in w
    return {i for i, ok in slot.items() if ok}


def shared_bias_operands(graph) -> set[int]:
    """Constants in a bias slot (`OpDef.bias_inputs`) of ops that do not share their weights. A TF Lite
    converter writes equal constants once: layers with weights of their own that share a bias held
    equal values, a zero bias the converter wrote where the source layer had none (litert-torch and
    onnx2tf give a bias-free depthwise convolution one) as much as a zero-initialised one, and the
    file cannot tell which. Ops that also share their weights are one layer used again (a recurrence
    unrolled over time steps): its bias is that layer's."""
    users: dict[int, list] = {}
    for op in graph.operations:
        d = ops.get(op.type)
        b = d.bias_inputs if d is not None else ()
        b = b(op, graph.operands) if callable(b) else b
        weights = tuple(op.inputs[k] for k in (d.weight_inputs if d is not None else ())
                        if k not in b and k < len(op.inputs))
        for k in b:
            if k < len(op.inputs) and op.inputs[k] >= 0 and graph.operands[op.inputs[k]].is_const:
                users.setdefault(op.inputs[k], []).append(weights)
    return {i for i, w in users.items() if len(w) > 1 and len(set(w)) > 1}


def _embedding_tables(graph) -> set[tuple]:
    """Shapes of the 2-D float constants an op reads rows of (`OpDef.table_inputs`: token embeddings)."""
    out = set()
    for op in graph.operations:
        d = ops.get(op.type)
        for k in (d.table_inputs if d is not None else ()):
            t = graph.operands[op.inputs[k]] if k < len(op.inputs) and op.inputs[k] >= 0 else None
            if t is not None and t.is_const and len(t.shape) == 2 and t.dtype.startswith("float"):
                out.add(tuple(t.shape))
    return out


def settle(graph, rule: str) -> None:
    """Weight slots decide what the naming rule left unknown; the rule's name goes to the graph's
    metadata for reports (`parameter_rule`). One exception stays unknown: a weight whose shape is an
    embedding table's transposed. It is either an untied output projection or the table's own
    transposed copy (tied weights, which TorchScript's constant folding writes as a new constant
    `onnx::MatMul_N`: training it too would count the table twice). The file cannot tell without
    reading the weights, so it trains and is listed as assumed. So does, in a TF Lite or circle file,
    a bias several ops share (`shared_bias_operands`: maybe a zero the converter wrote). A constant
    no gradient can reach (`gradient_free`: only compared, only its shape read) is not assumed
    either: it cannot train."""
    tables = _embedding_tables(graph)
    shared = shared_bias_operands(graph) if graph.source_format in ("tflite", "circle") else set()
    for i in weight_slot_operands(graph):
        o = graph.operands[i]
        if o.assumed and not (len(o.shape) == 2 and tuple(reversed(o.shape)) in tables) and i not in shared:
            o.assumed = False
    for i in gradient_free(graph):  # it cannot train, whatever it is: nothing to assume
        graph.operands[i].assumed = False
    graph.metadata["parameter_rule"] = rule
    fixed = fixed_row_tables(graph)
    if fixed:
        graph.metadata["fixed_row_tables"] = fixed


def fixed_row_tables(graph) -> list[str]:
    """The position tables among what trains by assumption: the assumed weights that every op reading
    them looks up at rows the file fixes, each row once (`OpDef.table_inputs` read at constant,
    distinct indices: RoFormer's sinusoidal table in a TorchScript file), and the parameters a dynamo
    file's assumed constants were folded from through a lookup (the same table's rows, folded). A
    learned table is read so too; eager may keep such a table frozen, and the file does not say which
    (reports offer the command that freezes it, with an "if")."""
    readers: dict[int, list] = {}
    for op in graph.operations:
        for i in op.inputs:
            if i >= 0 and graph.operands[i].assumed and graph.operands[i].is_const:
                readers.setdefault(i, []).append(op)

    def at_positions(op, w) -> bool:  # not one row repeated (token types at a zero buffer)
        d = ops.get(op.type)
        tables = d.table_inputs if d is not None else ()
        if len(op.inputs) != 2 or [op.inputs[k] for k in tables] != [w] or op.inputs[1 - tables[0]] < 0:
            return False
        rows = graph.operands[op.inputs[1 - tables[0]]]
        return rows.is_const and isinstance(rows.value, tuple) and len(set(rows.value)) == len(rows.value) > 1

    out = [graph.operands[w].name for w, readers_of in sorted(readers.items())
           if all(at_positions(op, w) for op in readers_of)]
    # a dynamo file: an assumed constant the exporter's optimizer folded (its `folded_from` record) from
    # a parameter through an embedding lookup (torch.export names each fx node after its aten op:
    # `embedding`, `embedding_2`), its rows at the positions the trace fixed
    folded, params = graph.folded_from(), graph.signature_parameters()
    for o in graph.operands:
        if not (o.assumed and o.is_const):
            continue
        for src in o.sources or (o.name,):
            chain = folded.get(src) or ()
            # ids made by a fill (`ones` times a pad id: MarkupLM's xpath tags) are one row repeated, as
            # token types at a zero buffer in a TorchScript file: no table read at positions
            if any(_LOOKUP_NODE.match(n) for n in chain) and not any(_FILL_NODE.match(n) for n in chain):
                out += [t for t in chain if t in params and t not in out]
    return out


_LOOKUP_NODE = re.compile(r"(?:embedding|index_select)(?:_\d+)?$")
_FILL_NODE = re.compile(r"(?:new_)?(?:zeros|ones|full)(?:_like)?(?:_\d+)?$")


def gradient_free(graph) -> set[int]:
    """Constants no gradient can reach: every op reading them reads them at an input its op family
    never back-propagates to (`OpDef.nondiff_inputs`: indices, shapes, a comparison's operands of a
    `no_grad` op). Whatever the file says they are, they do not train (the training graph freezes
    them: "no loss depends on it"), so `settle` does not leave them assumed trainable."""
    free: dict[int, bool] = {}
    for op in graph.operations:
        d = ops.get(op.type)
        for k, i in enumerate(op.inputs):
            if i >= 0 and graph.operands[i].is_const:
                nondiff = d is not None and (d.no_grad or k in d.nondiff_inputs)
                free[i] = free.get(i, True) and nondiff
    return {i for i, ok in free.items() if ok}
