"""What torch.onnx's dynamo exporter optimized away, read back for `--profile torch` only.

The dynamo exporter (torch.onnx's default since torch 2.9) runs onnxscript's optimizer, which rewrites
the graph even for a module in training mode. Each node it rewrote records the rule names
(`pkg.onnxscript.rewriter.rule_name`) and the fx node it came from (`pkg.torch.onnx.fx_node`: the
aten call and its arguments), and the graph records its signature (each parameter and buffer by
target). The ONNX loader keeps these in `Graph.metadata[TORCH_EXPORT]` (read by `Graph.export_record`);
`eager_graph` gives the torch profile the graph eager PyTorch runs. The other profiles analyse the file
as it is.

Rules (what eager runs, from what the file records):
- FuseBatchNormIntoConv / Gemm / ConvTranspose: the node's fx node is the batch_norm call. Eager runs
  the convolution (or linear), then batch_norm with its own weight and bias (trained), running_mean
  and running_var (buffers): a BatchNormalization op right after it, whose facts are the registry's.
  The convolution has a bias in eager only when the graph signature lists one for the module that
  owns its weight (the optimizer adds a folded bias, or removes a zero one).
- RemoveOptionalBiasFrom*: a bias the fx node passes as a parameter was all zeros (a fresh zero
  init); eager still holds, differentiates and updates it: the bias comes back.
- FuseConvPad: the fx node is the convolution with its own padding; what the file's pads hold beyond
  it was a zero constant pad (`nn.ZeroPad2d`, `F.pad`), which eager allocates and the convolution
  saves: a constant Pad op right before it. When the node also absorbed a BatchNorm its fx node is
  the batch_norm and the convolution's own padding is not recorded: a convolution pads both ends of
  a dim alike, so it has none where one end has none; where both ends are padded the split is not
  known and is taken as none (timm's pad_same), the convolution and its pad named as estimated.
- Merged initializers: an op reads a parameter its fx node does not take while a parameter its fx
  node takes is nowhere in the file: each stand-in read gets the parameter it stands for. The same
  where the optimizer folded the parameters through views before merging them (EvoNorm's
  `weight.view(1, -1, 1, 1)`): the reader's fx node takes a view no value of the file is named, and
  a parameter of its module is nowhere in the file.
- A 2-D constant folded from one parameter alone (`pkg.onnxscript.optimizer.folded_from`) that the
  file also holds, in the transposed shape (a tied LM head), is a Transpose view of that parameter.
- Rules that only rewrite views, shapes or attributes (HARMLESS) change nothing eager allocates.
- Anything else the file records (another rule, a BatchNorm without affine weights or running
  statistics, arguments that cannot be read) is refused in one line naming the node and the rule,
  with the export flag that avoids it (`optimize=False`).
New ops are inserted where eager runs them (batch_norm right after its convolution, not just before
the convolution's first reader: the downsampling branch of a residual block runs between them); the
file's ops after one move up by one index.
"""
from __future__ import annotations

import copy
import math
import re

from memplan_cli.errors import UnsupportedOpError
from memplan_cli.ops._torch import EXPAND, GATHER, TRANSPOSE, fx_kind, parse_call, split_top
from memplan_cli.ops.activations import RELU_TYPE
from memplan_cli.ops.batchnorm import BN_TYPE
from memplan_cli.ops.binary import ADD_TYPE, MUL_TYPE
from memplan_cli.ops.dropout import DROPOUT_TYPE as DROPOUT
from memplan_cli.ops.expand import TILE_TYPE as TILE
from memplan_cli.ops.matmul import FC_TYPE, MATMUL_TYPE
from memplan_cli.ops.pad import PAD_TYPE
from memplan_cli.ops.reshape import RESHAPE_TYPE as RESHAPE
from memplan_cli.profiles.torch.facts import ESTIMATED

# graph metadata: parameters of a folded computation run again whose shape was estimated
ESTIMATED_PARAMS = "torch_estimated_params"


def torchscript_export(g) -> bool:
    """A torch.onnx TorchScript export: torch.onnx wrote it (the loader keeps its state dict's order,
    `Graph.metadata["state_dict_order"]`) and it holds none of the dynamo exporter's records."""
    return g.export_record() is None and "state_dict_order" in (getattr(g, "metadata", None) or {})

# rewrites of views, shapes and attributes only: eager's memory is the same
HARMLESS = frozenset({"TransposeIdentity", "TransposeTranspose", "ReshapeReshape", "SqueezeReshape1d",
                      "UnsqueezeUnsqueeze", "Flatten2Reshape", "MaterializeReshapeShape", "ExpandIdentity",
                      "CastIdentity", "SlicesSplit", "NormalizePadFormatConv"})
BN_FOLDS = frozenset({"FuseBatchNormIntoConv", "FuseBatchNormIntoGemm", "FuseBatchNormIntoConvTranspose"})
BIAS_REMOVALS = frozenset({"RemoveOptionalBiasFromConv", "RemoveOptionalBiasFromGemm",
                           "RemoveOptionalBiasFromConvTranspose"})
PAD_FOLD = "FuseConvPad"
HANDLED = BN_FOLDS | BIAS_REMOVALS | {PAD_FOLD}

# batch_norm's aten overloads: positions of (weight, bias, running_mean, running_var) and eps
_BN_ARGS = {"_native_batch_norm_legit_functional.default": (1, 2, 3, 4, 7),
            "_native_batch_norm_legit_no_training.default": (1, 2, 3, 4, 6),
            "_native_batch_norm_legit.default": (1, 2, 3, 4, 7),
            "native_batch_norm.default": (1, 2, 3, 4, 7),
            "batch_norm.default": (1, 2, 3, 4, 7)}
# convolution and linear overloads: positions of (bias, padding)
_CONV_ARGS = {"conv1d.default": (2, 4), "conv2d.default": (2, 4), "conv3d.default": (2, 4),
              "convolution.default": (2, 4), "linear.default": (2, None),
              "addmm.default": (0, None)}  # addmm(bias, x, weight): transformers' Conv1D (GPT-2)
_AVOID = "export with torch.onnx.export(..., dynamo=True, optimize=False) to keep what eager runs"


def _target(fx: str) -> str:
    m = re.search(r"target=(?:torch\.ops\.)?aten\.([\w.]+)\]", fx)
    return m.group(1) if m else ""


def _args(fx: str) -> list[str] | None:
    """The fx node's positional arguments as text (`%p_1_weight`, `None`, `[1, 1]`, `1e-05`)."""
    m = re.search(r"\]\(args = \((.*)\), kwargs = \{(.*)\}\)\s*$", fx.strip(), re.S)
    if not m or m.group(2).strip():
        return None  # keyword arguments: not read
    return split_top(m.group(1))


def _ints(text: str, n: int) -> tuple | None:
    """An int or a list of ints, as the fx node prints it, for n dims."""
    t = text.strip()
    if re.fullmatch(r"-?\d+", t):
        return (int(t),) * n
    if t.startswith("[") and t.endswith("]"):
        vals = [v.strip() for v in t[1:-1].split(",") if v.strip()]
        if all(re.fullmatch(r"-?\d+", v) for v in vals):
            vals = [int(v) for v in vals]
            return tuple(vals * n) if len(vals) == 1 else tuple(vals) if len(vals) == n else None
    return None


class _Signature:
    def __init__(self, placeholders: dict):
        self.kind = {ph: kt[0] for ph, kt in placeholders.items()}
        self.target = {ph: kt[1] for ph, kt in placeholders.items()}
        self.params = {t for ph, t in self.target.items() if self.kind[ph] == "PARAMETER"}

    def of(self, arg: str, kind: str) -> str | None:
        """The target of placeholder `%name` when it is a `kind` (PARAMETER, BUFFER), else None."""
        ph = arg[1:] if arg.startswith("%") else None
        return self.target[ph] if ph in self.kind and self.kind[ph] == kind else None


def signature_buffers(graph) -> set[str]:
    """The module's buffers the dynamo exporter's graph signature lists (BUFFER targets): eager's module
    holds each the whole step, whatever reads it (GPT's causal `bias` table, sliced to the sequence)."""
    sig = _Signature(graph.signature())
    return {t for ph, t in sig.target.items() if sig.kind[ph] == "BUFFER"}


def _refuse(op, rule: str, why: str) -> UnsupportedOpError:
    return UnsupportedOpError(f"torch profile: op {op.label}: the dynamo exporter's optimizer rewrote it "
                              f"({rule}) and {why}; {_AVOID}")


# fx nodes that only view (or copy) their input: a parameter folded through these alone is that
# parameter rearranged, no computation
_FX_VIEWS = frozenset({"view", "_unsafe_view", "unsqueeze", "squeeze", "transpose", "permute", "expand", "reshape",
                       "t", "select", "slice", "alias", "clone", "contiguous", "flatten", "unflatten", "getitem",
                       "detach", "lift_fresh_copy"})


def _onnx_value(name: str) -> bool:
    """A value the ONNX optimizer named (`val_12`), no fx node."""
    return re.fullmatch(r"val_\d+", name) is not None


def _fx_node(name: str, targets) -> bool:
    """A `folded_from` source that is an fx node: neither a parameter or buffer (`targets`) nor an
    ONNX-level value."""
    return name not in targets and not _onnx_value(name)


def folded_computations(graph) -> set[str]:
    """Constants the dynamo exporter's optimizer folded from a parameter together with values eager
    computes from it (`pkg.onnxscript.optimizer.folded_from` names the parameter and fx nodes such as
    `linear_3`, `getitem`): eager recomputes them every step, with their activations and a gradient
    into the parameter, and the file keeps only the result. `--profile torch` names their readers as
    estimated (a single-parameter fold, a transposed or renamed weight, is no such computation)."""
    sig = _Signature(graph.signature())
    targets = set(sig.target.values())

    def computed(src: str) -> bool:  # an fx node that computes (not a view)
        return _fx_node(src, targets) and fx_kind(src) not in _FX_VIEWS
    # the constant's own name is its last fx node (`embedding_1`: the rows a gather took)
    return {name for name, srcs in graph.folded_from().items()
            if any(s in sig.params for s in srcs) and any(computed(s) for s in (*srcs, name))}


def folded_lookup_tables(graph) -> list[str]:
    """Parameters the dynamo exporter's optimizer folded, several into one constant, through embedding
    lookups (MarkupLM's 50 xpath tag tables looked up at a pad id, then `cat`: one constant named
    `cat`), that the file no longer holds. No chain reads them back (`unfolded_computations` takes a
    chain of one missing parameter): the constant, read by estimated ops (`folded_computations`),
    stands for them at its own size, where eager holds each table whole (embedding's backward makes
    a gradient of the table's shape) at sizes the file does not give. Named as estimated
    parameters, counted as the constant."""
    sig = _Signature(graph.signature())
    targets = set(sig.target.values())
    names = {o.name for o in graph.operands if o.is_const}
    read = {graph.operands[v].name for op in graph.operations for v in op.inputs if v >= 0}
    folded = graph.folded_from()
    out: set[str] = set()
    for name in folded_computations(graph):
        srcs = folded.get(name) or ()
        missing = {t for t in srcs if t in sig.params and t not in names}
        if name in read and len(missing) > 1 and any(_fx_node(t, targets) and fx_kind(t) == "embedding" for t in srcs):
            out |= missing
    return sorted(out)


def expand_base_bytes(o) -> int | None:
    """Bytes eager holds for a folded constant an fx `expand` node made (`expand_2`: a relative-position
    index broadcast over batch x heads): expand is a view (derivatives.yaml: its backward is
    `sum_to`), so eager holds only the tensor it broadcast. Which dims were broadcast is not recorded:
    taken as the leading one (the batch a per-sample value is expanded over), and its readers are
    named as estimated. None for any other constant."""
    if fx_kind(o.name) != "expand" or len(o.shape) < 2 or int(o.shape[0]) <= 1:
        return None
    return o.nbytes // int(o.shape[0])


# fx nodes of a folded chain that copy into a new tensor (`.contiguous()`, `clone`, `repeat`), and
# those that broadcast a tensor over new leading copies (expand: a view; repeat: a copy)
_FX_COPIES = frozenset({"clone", "contiguous", "repeat"})
_FX_BROADCASTS = frozenset({"expand", "repeat"})
# fx nodes after which the elements of a chain are not its input's (a slice drops some; getitem is
# dropout's output, or a view of a split)
_FX_UNSIZED = frozenset({"slice", "select", "getitem"})
_ZEROS = frozenset({"zeros", "zeros_like", "new_zeros"})
# fx views that keep every element of their input in place (no slice, select or copy): a parameter
# through these is the same bytes in eager
_FX_REARRANGES = frozenset({"view", "_unsafe_view", "unsqueeze", "squeeze", "reshape", "flatten", "unflatten",
                            "alias", "detach", "t", "transpose", "permute"})


def unfolded_computations(graph, sig=None, md=None) -> list[dict]:
    """Folded parameter computations (`folded_computations`) whose eager ops the file lets us read back:
    the optimizer's `folded_from` names the parameters and the fx nodes of the chain, each fx node
    named after its aten op. Three chains are read back, from one parameter the file no longer holds:
    - `embedding(table, ids)` of ids computed without a gradient (token types of constant ids,
      position rows): eager gathers the rows each step, and embedding's backward makes a gradient of
      the table's shape (derivatives.yaml, `embedding_dense_backward`): (rows, the constant's last
      dim). The rows are not in the file: one for `zeros` ids, else one per position (the ids may
      differ at each; a position table has at least that many rows); named as estimated.
    - `linear(x)` of the parameter (through dropout), then views, copies and a broadcast over the batch
      (DeBERTa's relative positions projected by its key and query layers), where the linear's weight
      (and bias) is a parameter the file holds and a FullyConnected (without bias, a MatMul) reads:
      eager runs the linear each step (its input saved), copies the result to the constant's size
      (`clone` / `repeat`), and expand's and repeat's backward sum the gradient back to the linear's
      output (`sum_to(grad, self.sizes())`); the parameter trains at (rows, the weight's input
      features). The rows are the constant's elements over the output features and, where the chain
      has an expand or repeat, over the file's batch (what the broadcast copies; not recorded:
      estimated).
    - `expand` of the parameter alone (timm's class token), or after views that keep its elements
      (Inkling's queries, `view` then `expand`): a view of it in eager, its gradient summed back to
      it; which dims it broadcast is not recorded: the leading ones of the input's leading sizes (at
      least one) are taken: estimated.
    Each: {"const", "param", "kind", "rows", "readers", "estimated", ...}."""
    md = md if md is not None else graph.export_record() or {}
    sig = sig if sig is not None else _Signature(md.get("signature") or {})
    folded = md.get("folded_from") or {}
    targets = set(sig.target.values())
    consts = {o.name: o for o in graph.operands if o.is_const}
    readers: dict[int, list] = {}
    for op in graph.operations:
        for v in op.inputs:
            if v >= 0:
                readers.setdefault(v, []).append(op.index)
    # the parameters the file holds: by name, or as the one parameter a constant was folded from
    held: dict[str, int] = {n: o.index for n, o in consts.items() if n in sig.params and o.index in readers}
    for name, srcs in folded.items():
        if len(srcs) == 1 and srcs[0] in sig.params and name in consts and consts[name].index in readers:
            held.setdefault(srcs[0], consts[name].index)
    x0 = graph.operands[graph.inputs[0]] if graph.inputs else None
    batch = int(x0.shape[0]) if x0 is not None and x0.shape else 0
    x0_shape = [int(d) if isinstance(d, int) else -1 for d in (x0.shape if x0 is not None and x0.shape else ())]
    plans = []
    for name in sorted(folded_computations(graph)):
        c = consts.get(name)
        if c is None or c.index not in readers or not c.dtype.startswith(("float", "bfloat")) or not c.shape:
            continue
        srcs = folded[name]
        params = sorted({s for s in srcs if s in sig.params})
        missing = [p for p in params if p not in held]
        fx = {fx_kind(s) for s in srcs if _fx_node(s, targets)}
        if len(missing) != 1:
            continue
        plan = {"const": c.index, "param": missing[0], "readers": sorted(readers[c.index]), "estimated": True}
        if fx_kind(name) == "embedding" and params == missing and len(c.shape) >= 2:
            # one row per id the table must hold: `zeros` ids, one; any others (an arange, a buffer whose
            # values the file does not hold) may differ at each position: one per position
            rows = 1 if fx & _ZEROS else int(c.shape[-2])
            plans.append({**plan, "kind": "embedding", "rows": rows, "cols": int(c.shape[-1])})
            continue
        fx.add(fx_kind(name))
        if fx - _FX_VIEWS - _FX_COPIES != {"linear"}:
            continue
        others = set(params) - set(missing)
        # the layer that reads the weight elsewhere: a FullyConnected, or a MatMul (a linear without bias)
        fc = next((op for op in graph.operations if op.type in (FC_TYPE, MATMUL_TYPE) and len(op.inputs) > 1
                   and op.inputs[1] in {held[p] for p in others}), None)
        if fc is None:
            continue
        bias = fc.inputs[2] if fc.type == FC_TYPE and len(fc.inputs) > 2 and fc.inputs[2] >= 0 else -1
        used = {p for p in others if held[p] in (fc.inputs[1], bias)}
        if used != others or len(graph.operands[fc.inputs[1]].shape) != 2:
            continue
        wshape = tuple(int(d) for d in graph.operands[fc.inputs[1]].shape)
        trans_b = bool(fc.attrs.get("trans_b"))
        n_in, n_out = wshape[::-1] if trans_b else wshape
        k = batch if fx & _FX_BROADCASTS else 1
        total = math.prod(int(d) for d in c.shape)
        if k < 1 or total % (k * n_out):
            continue
        dropout = sorted(s for s in srcs if fx_kind(s) == "getitem")
        plans.append({**plan, "kind": "linear", "rows": total // (k * n_out), "cols": n_in, "out": n_out,
                      "layer": fc.type, "weight": fc.inputs[1], "bias": bias, "trans_b": trans_b, "repeats": k,
                      "copy": bool(fx & _FX_COPIES), "dropout": tuple(dropout),
                      "estimated": bool(fx & (_FX_BROADCASTS | _FX_UNSIZED))})
    # a parameter expanded, nothing else (timm's `cls_token.expand(B, -1, -1)`), or first rearranged by
    # views that keep every element (Inkling's `query.view(-1, d).expand(*shape[:-2], -1, -1)`): in eager
    # a view of the parameter, whose gradient expand's backward sums back to it (`sum_to(grad,
    # self.sizes())`); the views change no byte eager holds
    for name, srcs in sorted(folded.items()):
        c = consts.get(name)
        params = {s for s in srcs if s in sig.params}
        if c is None or c.index not in readers or fx_kind(name) != "expand" or len(c.shape) < 2 \
                or int(c.shape[0]) <= 1 or len(params) != 1 or params & set(held) \
                or any(_fx_node(s, targets) and fx_kind(s) not in _FX_REARRANGES for s in srcs):
            continue
        # a constant depends on the input's shape alone: its leading dims of the input's leading sizes
        # are taken as broadcast (the batch, and its positions where a query is expanded over each)
        shape = [int(d) for d in c.shape]
        lead = next((k for k, (a, b) in enumerate(zip(shape, x0_shape)) if a != b), min(len(shape), len(x0_shape)))
        lead = min(max(lead, 1), len(shape) - 1)
        plans.append({"const": c.index, "param": params.pop(), "readers": sorted(readers[c.index]), "kind": "expand",
                      "rows": 1, "cols": (1,) * (lead - 1) + tuple(shape[lead:]), "estimated": True})
    plans += _buffer_linears(graph, sig, folded, consts, readers, held)
    planned = {p["const"] for p in plans}
    plans += [p for p in _standardized(graph, sig, folded, consts, readers, held) if p["const"] not in planned]
    # a parameter read back by several chains is one tensor: chains that disagree on its shape are left
    # as the file has them
    shape: dict[str, tuple] = {}
    for p in plans:
        shape.setdefault(p["param"], (p["rows"], p["cols"]))
    return [p for p in plans if shape[p["param"]] == (p["rows"], p["cols"])]


def _buffer_linears(graph, sig, folded, consts, readers, held) -> list[dict]:
    """A linear of a module buffer that the optimizer folded into a constant (Swin V2's continuous
    position bias: `cpb_mlp(relative_coords_table)`), either its product with the weight (`val_N`,
    read by the bias Add, whose recorded call is `linear(buffer, weight, ...)`) or the whole linear
    (a constant named by its own fx node, `linear_1`, folded from the weight, the bias and the
    buffer): `folded_from` names one buffer, the weight (and bias) the file no longer holds and
    ONNX-level values only. Eager computes it each step (derivatives.yaml's `addmm`/`mm`: the weight's
    gradient is `grad^T @ buffer`, the buffer needs none) and trains the weight at its own size, not
    the product's. The file holds neither the buffer nor the weight: the input features are not
    recorded and are taken as one, the matmul named as estimated. The bias is told from the weight
    by nn.Linear's names (`<module>.weight`, `<module>.bias`)."""
    targets = set(sig.target.values())
    plans = []
    for name, srcs in sorted(folded.items()):
        c = consts.get(name)
        if c is None or c.index not in readers or len(c.shape) < 2 or not c.dtype.startswith(("float", "bfloat")):
            continue
        params = sorted(s for s in srcs if s in sig.params)
        buffers = [s for s in srcs if s in targets and s not in sig.params]
        fx = [fx_kind(s) for s in srcs if _fx_node(s, targets)]
        if len(buffers) != 1 or any(p in held for p in params) or fx not in ([], ["linear"]) \
                or (fx and fx_kind(name) != "relu"):
            continue
        plan = {"const": c.index, "readers": sorted(readers[c.index]), "kind": "buffer_linear", "rows": 1,
                "cols": int(c.shape[-1]), "buffer": buffers[0], "bias": None, "estimated": True}
        if _onnx_value(name) and len(params) == 1:  # the product: every reader is the linear's own node
            ok = True
            for k in readers[c.index]:
                call = parse_call(graph.operations[k].call or "")
                if not call or call[1] != "aten.linear" or len(call[2]) < 2 \
                        or sig.of(call[2][0], "BUFFER") != buffers[0] or sig.of(call[2][1], "PARAMETER") != params[0]:
                    ok = False
            if ok:
                plans.append({**plan, "param": params[0]})
        elif fx_kind(name) in ("linear", "relu") and len(params) == 2:  # the whole linear (and its ReLU)
            module = {p.rsplit(".", 1)[0] for p in params}
            if len(module) == 1 and {p.rsplit(".", 1)[1] for p in params} == {"weight", "bias"}:
                (m,) = module
                plans.append({**plan, "param": f"{m}.weight", "bias": f"{m}.bias", "relu": fx_kind(name) == "relu"})
    return plans


def _standardized(graph, sig, folded, consts, readers, held) -> list[dict]:
    """A convolution weight computed from itself each step, which the optimizer folded into one
    constant: timm's StdConv2d / ScaledStdConv2d (`batch_norm(weight.reshape(1, out, -1), None, None,
    weight=(gain * scale).view(-1), training=True).reshape_as(weight)`: views, `mul`, one `getitem`),
    a group_norm over the reshaped weight, the Weight Standardization paper's written-out `(w -
    mean) / std`. Its `folded_from` names the convolution's own weight (`<module>.weight`, at the
    constant's shape), at most one more parameter of its module (a gain, one per output channel),
    no buffer or lifted constant, and at least one fx node that computes; every reader reads it as a
    convolution's weight. The file holds neither parameter: eager trains both, holds the computed
    weight until the convolution's backward and runs the computation's backward into the weight
    each step. What the computation was is not recorded (a `getitem`'s op, a chain's shapes): it is
    taken as batch_norm's over (1, out, -1) with the gain as its weight, and named as estimated."""
    from memplan_cli.ops.conv import CONV

    targets = set(sig.target.values())
    plans = []
    for name, srcs in sorted(folded.items()):
        c = consts.get(name)
        if c is None or c.index not in readers or len(c.shape) < 3:
            continue
        params = sorted(t for t in srcs if t in sig.params)
        fx = {fx_kind(t) for t in srcs if _fx_node(t, targets)} | {fx_kind(name)}
        if not fx - (_FX_VIEWS - {"getitem"}) or set(params) != {t for t in srcs if t in targets} \
                or any(p in held for p in params):
            continue
        weight = [t for t in params if t.rsplit(".", 1)[-1] == "weight"]
        if len(weight) != 1 or not 1 <= len(params) <= 2:
            continue
        module = weight[0].rsplit(".", 1)[0] if "." in weight[0] else ""
        gain = [t for t in params if t != weight[0]]
        if any((t.rsplit(".", 1)[0] if "." in t else "") != module for t in gain):
            continue
        if not all(graph.operations[k].type in CONV and graph.operations[k].inputs[1:2] == [c.index]
                   for k in readers[c.index]):
            continue
        plans.append({"const": c.index, "param": weight[0], "gain": gain[0] if gain else "", "kind": "standardized",
                      "readers": sorted(readers[c.index]), "rows": int(c.shape[0]),
                      "cols": tuple(int(d) for d in c.shape[1:]), "estimated": False})
    return plans


def _unfold(g, plans, operand, insert) -> None:
    """Each folded computation of `plans` (`unfolded_computations`) as eager runs it before the
    constant's first reader; its readers read the result (a forward value, no constant). A parameter
    (or its dropout) shared by several chains is one tensor."""
    made: dict = {}
    estimated = set(g.metadata.get(ESTIMATED_PARAMS) or ())
    for plan in sorted(plans, key=lambda p: p["readers"][0]):
        if plan["estimated"]:
            estimated.add(plan["param"])
        c = g.operands[plan["const"]]
        at, name = plan["readers"][0], plan["param"]
        est = {ESTIMATED: True} if plan["estimated"] else {}
        if name not in made:
            cols = plan["cols"] if isinstance(plan["cols"], tuple) else (plan["cols"],)
            made[name] = operand(name, (plan["rows"], *cols), c.dtype, const=True)
        x = made[name]
        out = operand(f"{c.name}:eager", c.shape, c.dtype)
        if plan["kind"] == "standardized":
            # reshape(1, out, -1) -> batch_norm (training, no running statistics; its weight `gain *
            # scale` or none) -> reshape_as(weight): the batch_norm named as estimated
            rows, cols = plan["rows"], math.prod(plan["cols"])
            flat = operand(f"{name}:flat", (1, rows, cols), c.dtype)
            insert(at, RESHAPE, [x], [flat], {}, f"{c.name}:flat")
            # the parameters' shapes are the constant's (exact); which op made the getitem is not
            # recorded: the ops are named as estimated
            est = {ESTIMATED: True}
            if plan["gain"]:
                if plan["gain"] not in made:
                    made[plan["gain"]] = operand(plan["gain"], (rows,), c.dtype, const=True)
                scale = operand(f"{plan['gain']}:scale", (), c.dtype, const=True, buffer=True)
                weight = operand(f"{plan['gain']}:scaled", (rows,), c.dtype)
                insert(at, MUL_TYPE, [made[plan["gain"]], scale], [weight], dict(est), f"{c.name}:gain")
            else:  # batch_norm without a weight: no tensor in eager, a constant the replay holds
                weight = operand(f"{c.name}:ones", (rows,), c.dtype, const=True, buffer=True)
            normed = operand(f"{c.name}:standardized", (1, rows, cols), c.dtype)
            insert(at, BN_TYPE, [flat, weight, -1, -1, -1], [normed], {"epsilon": 1e-5, "momentum": 0.0, **est},
                   f"{c.name}:batch_norm")
            insert(at, RESHAPE, [normed], [out], {}, f"{c.name}:view")
        elif plan["kind"] == "buffer_linear":  # the buffer (held by the module) times the weight
            buf = operand(plan["buffer"], (*c.shape[:-1], plan["rows"]), c.dtype, const=True, buffer=True)
            if plan["bias"]:
                mm = operand(f"{c.name}:mm", c.shape, c.dtype)
                insert(at, MATMUL_TYPE, [buf, x], [mm], dict(est), f"{c.name}:linear")
                if plan["bias"] not in made:
                    made[plan["bias"]] = operand(plan["bias"], (int(c.shape[-1]),), c.dtype, const=True)
                lin = operand(f"{c.name}:linear", c.shape, c.dtype) if plan.get("relu") else out
                insert(at, ADD_TYPE, [mm, made[plan["bias"]]], [lin], dict(est), f"{c.name}:bias")
                if plan.get("relu"):
                    insert(at, RELU_TYPE, [lin], [out], dict(est), f"{c.name}:relu")
            else:
                insert(at, MATMUL_TYPE, [buf, x], [out], dict(est), f"{c.name}:linear")
        elif plan["kind"] == "expand":  # which dims it broadcast is not recorded (unfolded_computations)
            insert(at, EXPAND, [x], [out], dict(est), c.name)
        elif plan["kind"] == "embedding":
            ids = operand(f"{c.name}:ids", c.shape[:-1], "int64", const=True, buffer=True)
            insert(at, GATHER, [x, ids], [out], {"axis": 0, **est}, c.name)
        else:
            if plan["dropout"]:
                key = (name, plan["dropout"])
                if key not in made:
                    made[key] = operand(f"{name}:dropout", g.operands[x].shape, c.dtype)
                    insert(at, DROPOUT, [x], [made[key]], {"ratio": 0.5, **est}, f"{name}:dropout")
                x = made[key]
            y = operand(f"{c.name}:linear", (plan["rows"], plan["out"]), c.dtype)
            if plan["layer"] == FC_TYPE:
                insert(at, FC_TYPE, [x, plan["weight"], plan["bias"]], [y],
                       {"activation": "NONE", "trans_b": plan["trans_b"], **est}, f"{c.name}:linear")
            else:
                insert(at, MATMUL_TYPE, [x, plan["weight"]], [y], dict(est), f"{c.name}:linear")
            if plan["copy"]:
                t = operand(f"{c.name}:copy", (plan["repeats"] * plan["rows"], plan["out"]), c.dtype)
                insert(at, TILE, [y], [t], {"repeats": (plan["repeats"], 1), **est}, f"{c.name}:copy")
                y = t
            insert(at, RESHAPE, [y], [out], dict(est), f"{c.name}:view")
        for k in plan["readers"]:
            op = g.operations[k] = copy.copy(g.operations[k])
            op.inputs = [out if v == plan["const"] else v for v in op.inputs]
    if estimated:
        g.metadata[ESTIMATED_PARAMS] = tuple(sorted(estimated))


def eager_graph(graph):
    """`graph` with what the dynamo exporter's optimizer removed put back as eager runs it (a copy),
    or `graph` itself when the file records no such rewrite. Raises UnsupportedOpError for a rewrite
    the file does not record well enough."""
    md = graph.export_record()
    if not md:
        return graph
    from memplan_cli.ir.graph import Operand, Operation

    by_name: dict[str, list] = {}
    for op in graph.operations:
        by_name.setdefault(op.name, []).append(op)
    todo = []
    for rec in md["rewritten"]:
        rules = tuple(rec["rules"])
        if all(r in HARMLESS for r in rules):
            continue
        ops = by_name.get(rec["node"], [])
        if len(ops) != 1 or not rec["node"]:
            raise UnsupportedOpError(f"torch profile: node '{rec['node']}' ({rec['op_type']}) was rewritten by the "
                                     f"dynamo exporter's optimizer ({', '.join(rules)}) and is not one op of the "
                                     f"graph; {_AVOID}")
        op = ops[0]
        other = [r for r in rules if r not in HANDLED and r not in HARMLESS]
        if other:
            raise _refuse(op, other[0], "what eager runs there is not read back")
        todo.append((op, rules, rec["fx_node"]))
    sig = _Signature(graph.signature())
    merged = _merged(graph, sig, md)
    views = _folded_views(graph, sig, md)
    unfold = unfolded_computations(graph, sig, md)
    again = _folded_again(graph, sig, md)
    if not todo and not merged and not views and not unfold and not again:
        return graph
    g = copy.copy(graph)
    g.operands, g.operations = list(graph.operands), list(graph.operations)
    g.inputs, g.outputs = list(graph.inputs), list(graph.outputs)
    g.metadata = dict(graph.metadata)

    def operand(name, shape, dtype="float32", const=False, buffer=False):
        o = Operand(len(g.operands), name, tuple(int(d) for d in shape), dtype, is_const=const, computed=buffer)
        g.operands.append(o)
        return o.index

    # a parameter the optimizer merged into an equal one (all zero biases, all unit norm weights of a
    # random init) is its own tensor in eager: each stand-in read gets the parameter it stands for
    copies: dict[str, int] = {}
    for k, slots in merged.items():
        op = g.operations[k] = copy.copy(g.operations[k])
        op.inputs = list(op.inputs)
        for pos, target in slots:
            stand_in = g.operands[op.inputs[pos]]
            if target not in copies:
                copies[target] = operand(target, stand_in.shape, stand_in.dtype, const=True)
            op.inputs[pos] = copies[target]
    # one parameter folded alike at each call of its module (a module run several times: the exporter
    # folds its weight's transpose once per call): one tensor in eager, read at each call
    for k, op in enumerate(g.operations):
        if any(v in again for v in op.inputs):
            op = g.operations[k] = copy.copy(op)
            op.inputs = [again.get(v, v) for v in op.inputs]
    before: dict[int, list] = {}  # op index -> ops eager runs just before it (a pad), after it (batch_norm)
    after: dict[int, list] = {}

    def add(where, at, typ, ins, outs, attrs, name):
        where.setdefault(at, []).append(Operation(-1, typ, ins, outs, dict(attrs), source_type=typ, name=name))

    # a parameter's transpose folded into a second constant (a tied weight: the LM head reads the
    # embedding table transposed) is a view of that parameter in eager, not a second tensor
    for c, p in views.items():
        readers = [op for op in g.operations if c in op.inputs]
        t = operand(f"{g.operands[p].name}:transposed", g.operands[c].shape, g.operands[c].dtype)
        add(before, readers[0].index, TRANSPOSE, [p], [t], {"perm": (1, 0)}, f"{g.operands[p].name}.T")
        for op in readers:
            k = op.index
            op = g.operations[k] = copy.copy(g.operations[k])
            op.inputs = [t if v == c else v for v in op.inputs]

    _unfold(g, unfold, operand, lambda at, *a: add(before, at, *a))

    for op0, rules, fx in sorted(todo, key=lambda t: t[0].index):
        op = g.operations[op0.index] = copy.copy(g.operations[op0.index])  # a folded input re-pointed
        op.inputs, op.attrs = list(op.inputs), dict(op.attrs)
        args = _args(fx)
        target = _target(fx)
        y = op.outputs[0]
        ys = g.operands[y].shape
        channels = int(ys[1]) if len(ys) > 1 else 0
        bias_shape = (int(ys[-1]),) if op.type in (FC_TYPE, MATMUL_TYPE) else (channels,)
        fold = next((r for r in rules if r in BN_FOLDS), None)
        if fold is not None:
            pos = _BN_ARGS.get(target)
            if pos is None or args is None or len(args) <= max(pos):
                raise _refuse(op, fold, f"its batch_norm call ({target or 'unreadable'}) is not read back")
            w, b = (sig.of(args[k], "PARAMETER") for k in pos[:2])
            rm, rv = (sig.of(args[k], "BUFFER") for k in pos[2:4])
            if not (w and b and rm and rv):
                raise _refuse(op, fold, "its BatchNorm has no affine weight or no running statistics, which "
                                        "was not worked out")
            wname = g.operands[op.inputs[1]].name if len(op.inputs) > 1 and op.inputs[1] >= 0 else ""
            if wname not in sig.params:
                raise _refuse(op, fold, f"its weight '{wname}' is no parameter of the graph signature, so "
                                        f"whether eager's layer had a bias is not known")
            own_bias = wname.rsplit(".", 1)[0] + ".bias" if "." in wname else "bias"
            while len(op.inputs) < 3:
                op.inputs.append(-1)
            if own_bias in sig.params:
                if op.inputs[2] < 0:
                    op.inputs[2] = operand(own_bias, bias_shape, const=True)
            else:
                op.inputs[2] = -1  # the folded bias: eager's layer has none
            pre = operand(f"{g.operands[y].name}:pre_batch_norm", ys, g.operands[y].dtype)
            op.outputs = [pre if v == y else v for v in op.outputs]
            ins = [pre, operand(w, (channels,), const=True), operand(b, (channels,), const=True),
                   operand(rm, (channels,), const=True, buffer=True), operand(rv, (channels,), const=True, buffer=True)]
            eps = float(args[pos[4]]) if len(args) > pos[4] and re.fullmatch(r"[-+.\deE]+", args[pos[4]]) else 1e-5
            add(after, op.index, BN_TYPE, ins, [y], {"epsilon": eps, "momentum": 0.9}, w.rsplit(".", 1)[0])
        elif any(r in BIAS_REMOVALS for r in rules):
            rule = next(r for r in rules if r in BIAS_REMOVALS)
            pos = _CONV_ARGS.get(target)
            if pos is None or args is None:
                raise _refuse(op, rule, f"its call ({target or 'unreadable'}) is not read back")
            bias = sig.of(args[pos[0]], "PARAMETER") if len(args) > pos[0] else None
            while len(op.inputs) < 3:
                op.inputs.append(-1)
            if bias and op.inputs[2] < 0:
                op.inputs[2] = operand(bias, bias_shape, const=True)
        if PAD_FOLD in rules:
            _unfold_pad(g, op, target, args, operand, lambda *a: add(before, op.index, *a))
    # in the order eager runs them; the file's ops after an inserted one move up (their labels too)
    ops = []
    for op in g.operations:
        ops += before.get(op.index, []) + [op] + after.get(op.index, [])
    g.operations = []
    for k, op in enumerate(ops):
        op = copy.copy(op)
        op.index = k
        g.operations.append(op)
    return g


def _merged(graph, sig, md) -> dict[int, list]:
    """{op index: [(input position, the parameter target it stands for)]}: an op reads a parameter
    (by name) its fx node does not take, while a parameter its fx node takes is nowhere in the file (not
    by name, not folded into another constant): the optimizer merged equal initializers. Matched in
    order when the counts agree; otherwise left as the file has it."""
    reads = md.get("param_args") or {}
    present = {o.name for o in graph.operands if o.is_const}
    folded = {t for srcs in (md.get("folded_from") or {}).values() for t in srcs}
    out = {}
    for op in graph.operations:
        args = reads.get(op.name)
        if not args:
            continue
        own = {sig.target[a] for a in args}
        lost = [sig.target[a] for a in args if sig.target[a] not in present and sig.target[a] not in folded]
        stand_ins = [k for k, v in enumerate(op.inputs) if v >= 0 and graph.operands[v].is_const
                     and graph.operands[v].name in sig.params and graph.operands[v].name not in own]
        if lost and len(lost) == len(stand_ins):
            out[op.index] = list(zip(stand_ins, lost))
    for k, slots in _merged_views(graph, sig, md).items():
        out.setdefault(k, []).extend(slots)
    return out


def _merged_views(graph, sig, md) -> dict[int, list]:
    """The same merge for parameters the optimizer folded through views first (EvoNorm's
    `v.view(1, -1, 1, 1)` and `weight.view(1, -1, 1, 1)`, ViTDet's channels-first norms'
    `weight[:, None, None]`, both ones at init: one constant kept): an
    op reads a constant folded from one parameter and views alone while its fx node takes, instead, a
    value of the same fx kind (`%view_2` for `view_1`) that nothing in the file is named: it read
    another parameter, lost. Which one: a parameter of the op's module (its recorded scope) that the
    file holds nowhere, by name or folded; of several, the one named like the stand-in's parameter
    (n3.v for n2.v), else the first by name (the bytes are the same). An op whose fx node takes
    parameters themselves, not the stand-in's (GroupNorm's decomposition reads its weight and bias
    folded to (C, 1, 1): two norms of one width share them), read the lost one of those named like
    the stand-in's parameter. {op index: [(position, target)]}."""
    folded = md.get("folded_from") or {}
    present = {o.name for o in graph.operands}
    in_folds = {t for srcs in folded.values() for t in srcs}
    lost = sorted(t for t in sig.params if t not in present and t not in in_folds)
    if not lost:
        return {}
    viewed = {}  # folded constant -> the one parameter it views
    for name, srcs in folded.items():
        params = [t for t in srcs if t in sig.params]
        # the parameter, the optimizer's constants, and views between (`weight[:, None, None]`: an
        # `unsqueeze` the next `unsqueeze` read)
        if len(params) == 1 and all(t in sig.params or _onnx_value(t) or fx_kind(t) in _FX_VIEWS for t in srcs):
            viewed[name] = params[0]
    taken: set[str] = set()
    out: dict[int, list] = {}
    for op in graph.operations:
        call = op.call.partition(" = ")[2] if op.call else ""
        args = re.findall(r"%(\w+)", call.partition("(")[2])
        for pos, v in enumerate(op.inputs):
            name = graph.operands[v].name if v >= 0 else ""
            if name not in viewed or name in args:
                continue
            # a call that takes the parameters themselves (the exporter's decomposition viewed them:
            # GroupNorm's weight and bias as (C, 1, 1)), not the stand-in's own: it read the one of
            # them named like the stand-in's parameter
            named = [sig.target[a] for a in args if sig.kind.get(a) == "PARAMETER"]
            leaf = viewed[name].rsplit(".", 1)[-1]
            target = next((t for t in named if t in lost and t not in taken and t.rsplit(".", 1)[-1] == leaf),
                          None) if viewed[name] not in named else None
            if target is not None:
                taken.add(target)
                out.setdefault(op.index, []).append((pos, target))
                continue
            kind = fx_kind(name)
            if not any(fx_kind(a) == kind and a not in present for a in args):
                continue
            scope = "." + (op.scope or "") + "."
            mods = [t for t in lost if t not in taken and "." + t.rsplit(".", 1)[0] + "." in scope]
            if not mods:
                continue
            inner = max(len(t.rsplit(".", 1)[0]) for t in mods)
            mods = [t for t in mods if len(t.rsplit(".", 1)[0]) == inner]
            leaf = viewed[name].rsplit(".", 1)[-1]
            target = next((t for t in mods if t.rsplit(".", 1)[-1] == leaf), mods[0])
            taken.add(target)
            out.setdefault(op.index, []).append((pos, target))
    return out


def _folded_again(graph, sig, md) -> dict[int, int]:
    """{folded constant: the first constant folded the same way}: constants each folded from one and
    the same parameter alone (the optimizer's record names only it: a transpose or a view of it), of
    one shape and dtype. torch.export traces a module called several times (HRM's recurrent stacks, a
    shared layer) once per call, and the optimizer folds the weight's transpose at each; eager reads
    the one parameter each time, so it is held, differentiated and updated once."""
    folded = md.get("folded_from") or {}
    by_name = {o.name: o.index for o in graph.operands if o.is_const}
    first: dict[tuple, int] = {}
    out = {}
    for name, srcs in folded.items():
        c = by_name.get(name)
        if c is None or len(srcs) != 1 or srcs[0] not in sig.params:
            continue
        key = (srcs[0], tuple(graph.operands[c].shape), graph.operands[c].dtype)
        if key in first:
            out[c] = first[key]
        else:
            first[key] = c
    return out


def _folded_views(graph, sig, md) -> dict[int, int]:
    """{folded constant: the parameter it is the transpose of}: a 2-D constant folded from one
    parameter alone that the file also holds by name, in the transposed shape."""
    folded = md.get("folded_from") or {}
    by_name = {o.name: o.index for o in graph.operands if o.is_const}
    read = {v for op in graph.operations for v in op.inputs if v >= 0}
    out = {}
    for name, srcs in folded.items():
        c = by_name.get(name)
        if c is None or c not in read or len(srcs) != 1 or srcs[0] not in sig.params or srcs[0] not in by_name:
            continue
        p = by_name[srcs[0]]
        cs, ps = tuple(graph.operands[c].shape), tuple(graph.operands[p].shape)
        if len(cs) == 2 and cs == ps[::-1] and graph.operands[c].dtype == graph.operands[p].dtype:
            out[c] = p
    return out


def _unfold_pad(g, op, target, args, operand, insert) -> None:
    """Conv(x) with pads = its own padding + a zero pad's: Pad(x) -> Conv with its own padding."""
    from memplan_cli.ops.conv import same_pads

    pos = _CONV_ARGS.get(target)
    x = g.operands[op.inputs[0]]
    nd = len(x.shape) - 2
    estimated = False
    if target in _BN_ARGS and "pads" in op.attrs and nd >= 1:
        # the recorded call is the batch_norm the node also absorbed: the convolution's own padding is
        # not recorded. A convolution pads both ends of a dim alike (ConvNd's numeric padding; an
        # asymmetric padding='same' ATen pads itself first), so its own padding is at most the smaller
        # end: none where an end has none (a rule); else taken as none, all of it the pad's (timm's
        # pad_same), and the convolution and its pad named as estimated
        pads = tuple(int(p) for p in op.attrs["pads"])
        own = (0,) * nd
        estimated = any(min(pads[k], pads[nd + k]) for k in range(nd))
    elif target in _BN_ARGS or pos is None or pos[1] is None or args is None or "pads" not in op.attrs or nd < 1:
        raise _refuse(op, PAD_FOLD, f"its call ({target or 'unreadable'}) is not read back")
    else:
        own = _ints(args[pos[1]], nd) if len(args) > pos[1] else (0,) * nd
        if own is None:
            raise _refuse(op, PAD_FOLD, f"its own padding ({args[pos[1]]}) is not read back")
    pads = tuple(int(p) for p in op.attrs["pads"])
    extra = tuple(p - q for p, q in zip(pads, own + own))
    if any(e < 0 for e in extra):
        raise _refuse(op, PAD_FOLD, f"its pads {list(pads)} are smaller than its own padding {list(own)}")
    shape = tuple(x.shape[:2]) + tuple(int(x.shape[2 + k]) + extra[k] + extra[nd + k] for k in range(nd))
    padded = operand(f"{x.name}:padded", shape, x.dtype)
    pad_attrs = {"mode": "constant", "pads": (0, 0) + extra[:nd] + (0, 0) + extra[nd:], "value": 0.0}
    if estimated:
        pad_attrs[ESTIMATED] = op.attrs[ESTIMATED] = True
    insert(PAD_TYPE, [op.inputs[0]], [padded], pad_attrs, f"{op.name}:pad")
    op.inputs[0] = padded
    op.attrs["pads"] = own + own
    if "padding" in op.attrs:
        kernel, stride = op.attrs.get("kernel", ()), op.attrs.get("stride", (1,) * nd)
        dil = op.attrs.get("dilation", (1,) * nd)
        op.attrs["padding"] = "VALID" if not any(own) else \
            "SAME" if own + own == same_pads(shape[2:], kernel, stride, dil) else "EXPLICIT"
