"""What onert 0.1.0's train backend can train: the onert profile refuses everything else.

onert puts every op of the model on its train backend, so an op it has no train kernel for fails the
compile wherever it is; some attribute values fail only when the op's backward is configured or runs
(the op is in the essential backward order); some compile and run but train wrongly. The profile
gives no figure for any of them: one line naming the op, the reason and what onert does.

Facts per op type come from the op registry (`OpDef.profiles["onert"]`, keys as in `TABLE`) and, for
ops not (yet) there, from `TABLE` below; a type in neither is refused. Each check is
`fn(op, operands) -> reason | None` on a `trainir.TOp` and the TrainIR's operands (`.shape`,
`.is_const`, `.name`), the signature of `OpDef.check`.

Rules (onert 0.1.0 from PyPI, measured with the runtime, see tests/onert/test_refusals.py; sources:
Samsung/ONE `runtime/onert/backend/train/KernelGenerator.cc`, `ops/*Layer.cc`, the loader):
- train kernels exist for Conv2D, DepthwiseConv2D, FullyConnected, Add, Sub, Mul, Div, MaxPool2D,
  AvgPool2D, Mean, Relu, Relu6, Softmax, Reshape, Pad (and the loss); any other op: "... operation is
  not trainable yet" (compile fails);
- fused activations NONE, RELU, RELU6 only, wherever the op is (others fail the first step);
- an absent optional input (-1) fails the loader for every op but FullyConnected ("loader doesn't
  support optional input tensor yet"): a Conv2D or DepthwiseConv2D without a bias;
- a Reshape with a constant shape: onert re-batches only a leading 1 (to the input's dim 0);
- circle expresses 2-D convolution and pooling only, with SAME or VALID padding, floor output sizes,
  no pool dilation, no ceil_mode, AvgPool excluding padding; Pad in constant mode up to rank 4, no
  negative amounts; Softmax over the last axis: an ONNX op beyond these has no circle equivalent;
- a grouped (not depthwise) Conv2D compiles and runs but trains wrongly (a RegNet-X export: loss
  46.05 where TF Lite gives 2.34; its forward differs from a grouped convolution's);
- ops whose backward runs (the essential backward order): Conv2D / DepthwiseConv2D with dilation
  ("Unsupported dilation yet"), DepthwiseConv2D with unequal strides ("Not support different length
  strides"), FullyConnected with an input of rank other than 2, Add / Sub / Mul with a constant
  input (onert crashes, SIGSEGV, in the first step: no back-prop tensor for the constant) or with
  inputs of different shapes (no broadcasting: "Shape of lhs, rhs, incoming, lhs_grad, and rhs_grad
  must match"), Div ("Unsupported Binary Arithmetic Operation"), Softmax with beta != 1 (its gradient
  ignores beta), and any op reading one tensor twice (TensorPlanner rejects duplicate inputs).
"""
from __future__ import annotations

import math

from memplan_cli.errors import UnsupportedOpError

ACTIVATIONS = ("NONE", "RELU", "RELU6")
VERSION = "onert 0.1.0's train backend"
STAGES = ("compile", "train")


class AfterCompile(str):
    """A reason onert finds only after it compiles (and allocates): the training step fails, crashes
    or computes wrong values. `refusal(ir, stage="compile")` skips these, for replaying what onert
    allocates when it compiles such a model (tests and benchmarks); the profile refuses them."""


# ---- helpers ----------------------------------------------------------------------------------

def _shape(operands, i) -> tuple:
    return tuple(operands[i].shape) if i >= 0 else ()


def _pair(v, n: int, default: int = 1) -> tuple:
    if v is None:
        return (default,) * n
    if isinstance(v, int):
        return (v,) * n
    return tuple(int(x) for x in v)


def _channels_last(op) -> bool:
    return op.attrs.get("layout", "NHWC") != "NCHW"


def _spatial(op, shape) -> tuple:
    return tuple(shape[1:-1]) if _channels_last(op) else tuple(shape[2:])


def _channels(op, shape) -> int:
    return shape[-1] if _channels_last(op) else shape[1]


def _kernel(op, operands) -> tuple:
    """Kernel size per spatial dim: the attribute, else the filter's shape."""
    k = op.attrs.get("kernel") or op.attrs.get("filter") or op.attrs.get("kernel_shape")
    if k:
        return tuple(int(x) for x in k)
    w = _shape(operands, op.inputs[1]) if len(op.inputs) > 1 else ()
    if len(w) < 3:
        return ()
    # circle: [O, H, W, I] (depthwise [1, H, W, O]); ONNX: [O, I/g, *kernel]
    return tuple(w[1:-1]) if _channels_last(op) else tuple(w[2:])


def _dilation(op) -> tuple:
    d = op.attrs.get("dilation", op.attrs.get("dilations"))
    return tuple(int(x) for x in d) if d else ()


def _window(op, operands) -> str | None:
    """A 2-D window op (conv or pool) as circle can write it: 4-D NHWC-able input, SAME or VALID
    padding, floor output sizes."""
    x, y = _shape(operands, op.inputs[0]), _shape(operands, op.outputs[0])
    if len(x) != 4 or len(y) != 4:
        n = max(len(x) - 2, 0)
        return f"{op.type} over {n} spatial dimension(s): {VERSION} has 2-D convolution and pooling only"
    ins, outs = _spatial(op, x), _spatial(op, y)
    k = _kernel(op, operands)
    if len(k) != 2:
        return f"{op.type} with a kernel of {len(k)} dimension(s): {VERSION} has 2-D windows only"
    s = _pair(op.attrs.get("stride", op.attrs.get("strides")), 2)
    d = _dilation(op) or (1, 1)
    pad = op.attrs.get("padding", "VALID")
    pads = tuple(op.attrs.get("pads") or (0, 0, 0, 0))
    if op.attrs.get("ceil_mode"):
        return f"{op.type} with ceil_mode: circle's windows round output sizes down"
    same = tuple(_same_pads(ins[i], outs[i], k[i], s[i], d[i]) for i in range(2))
    if pad == "EXPLICIT":
        begin, end = pads[:2], pads[2:4]
        if any(pads):
            if tuple(zip(begin, end)) != same:
                return (f"{op.type} with explicit pads {pads}: circle writes only SAME or VALID "
                        f"padding (a converter adds a PAD op, other tensors)")
            pad = "SAME"
        else:
            pad = "VALID"
    want = tuple(-(-ins[i] // s[i]) if pad == "SAME" else (ins[i] - (k[i] - 1) * d[i] - 1) // s[i] + 1
                 for i in range(2))
    if want != outs:
        return (f"{op.type} output {outs} is not what circle's {pad} window gives ({want}): "
                f"ceil_mode, dilation or padding that circle cannot express")
    return None


def _same_pads(size: int, out: int, k: int, s: int, d: int) -> tuple:
    """TF SAME: the total padding that gives `out`, the smaller half first."""
    total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
    return (total // 2, total - total // 2)


# ---- per-op facts: forward (checked wherever the op is) and backward (when its backward runs) ----

def _conv_fwd(op, operands):
    if len(op.inputs) < 3 or op.inputs[2] < 0:
        return (f"{op.type} without a bias input: onert 0.1.0's loader rejects an absent optional input "
                f"(\"loader doesn't support optional input tensor yet\")")
    r = _window(op, operands)
    if r:
        return r
    if op.type == "Conv2D":
        x, w = _shape(operands, op.inputs[0]), _shape(operands, op.inputs[1])
        groups = int(op.attrs.get("group", op.attrs.get("groups", 1)) or 1)
        w_in = w[-1] if _channels_last(op) else w[1]
        if groups == 1 and w_in and _channels(op, x) != w_in:
            groups = _channels(op, x) // w_in
        if groups != 1:
            return AfterCompile(f"grouped Conv2D ({groups} groups): {VERSION} compiles it but trains it "
                                f"wrongly (measured: loss 46.05 where TF Lite gives 2.34 on a RegNet-X "
                                f"export)")
    return None


def _conv_bwd(op, operands):
    if any(v != 1 for v in _dilation(op)):
        return f"dilated {op.type} (dilation {_dilation(op)}): \"Unsupported dilation yet\" in its backward"
    if op.type == "DepthwiseConv2D":
        s = _pair(op.attrs.get("stride", op.attrs.get("strides")), 2)
        if s[0] != s[1]:
            return AfterCompile(f"DepthwiseConv2D with strides {s}: \"Not support different length "
                                f"strides\" in its backward")
    return None


def _pool_fwd(op, operands):
    if any(v != 1 for v in _dilation(op)):
        return f"dilated {op.type} (dilation {_dilation(op)}): circle's pooling has no dilation"
    if op.type == "AvgPool2D" and op.attrs.get("count_include_pad") and any(op.attrs.get("pads") or ()):
        return "AvgPool2D counting padding (count_include_pad): circle's average excludes it"
    return _window(op, operands)


def _binary_bwd(op, operands):
    if op.type == "Div":
        return AfterCompile("Div: \"Unsupported Binary Arithmetic Operation\" in its backward")
    for i in op.inputs:
        if i >= 0 and operands[i].is_const:
            return AfterCompile(f"{op.type} with a constant input ({operands[i].name}): onert crashes "
                                f"(SIGSEGV) in its backward, which has no back-prop tensor for a constant")
    shapes = {_shape(operands, i) for i in op.inputs if i >= 0} | {_shape(operands, op.outputs[0])}
    if len(shapes) > 1:
        shown = " and ".join(str(_shape(operands, i)) for i in op.inputs)
        return AfterCompile(f"{op.type} broadcasting {shown}: its backward needs equal shapes (\"Shape of "
                            f"lhs, rhs, incoming, lhs_grad, and rhs_grad must match\")")
    return None


def _pad_fwd(op, operands):
    mode = str(op.attrs.get("mode", "constant")).lower()
    if mode != "constant":
        return f"Pad in {mode} mode: {VERSION} pads with a constant only (MIRROR_PAD is not loaded)"
    rank = len(_shape(operands, op.inputs[0]))
    if rank > 4:
        return f"Pad of a rank-{rank} tensor: \"Padding for rank > 4 NYI\""
    pads = op.attrs.get("pads")
    if pads is None and len(op.inputs) > 1 and op.inputs[1] >= 0:
        pads = getattr(operands[op.inputs[1]], "value", None)
    if pads is not None and any(p < 0 for p in pads):
        return "Pad with negative amounts (a crop): circle's PAD adds only"
    return None


def _reshape_fwd(op, operands):
    """onert's shape inference for a Reshape with a constant shape (`util/ShapeInference.cc`
    inferReshapeShape): one -1 takes the rest; when the element counts still differ, a leading 1
    becomes the input's dim 0 if that makes them equal, else "Reshape: 2nd param is not compatible
    with the shape of input" (measured: [4, 8] after a [1, 4, 8] input, at batch 2)."""
    if len(op.inputs) < 2 or op.inputs[1] < 0:
        return None
    v = getattr(operands[op.inputs[1]], "value", None)
    if not v:
        return None
    x = _shape(operands, op.inputs[0])
    n = math.prod(x)
    zero_copies = op.attrs.get("zero_copies_input")  # ONNX: a 0 copies the input's dim
    ret = [x[k] if d == 0 and zero_copies and k < len(x) else d for k, d in enumerate(v)]
    if sum(d < 0 for d in ret) > 1:
        return f"Reshape to {tuple(v)}: more than one -1"
    if any(d < 0 for d in ret):
        rest = math.prod(d for d in ret if d >= 0)
        ret = [n // rest if d < 0 and rest else d for d in ret]
    total = math.prod(ret)
    if total == n or (ret and ret[0] == 1 and x and total * x[0] == n):
        return None
    return (f"Reshape to the constant shape {tuple(v)}, which does not hold its input {x}: onert re-batches "
            f"only a leading 1 (\"Reshape: 2nd param is not compatible with the shape of input\")")


# Facts of the ops onert 0.1.0 has train kernels for that are not in the op registry (Softmax and
# FullyConnected keep theirs in ops/softmax.py and ops/matmul.py). Keys, each optional:
# "forward" / "backward": fn(op, operands) -> reason onert refuses at load or compile (backward: only
# when the op's backward runs); "forward_run" / "backward_run": the same for what onert finds after it
# compiles (its step fails, crashes or trains wrongly); "refuse": a reason, whatever the attributes.
TABLE = {
    "Conv2D": {"forward": _conv_fwd, "backward": _conv_bwd},
    "DepthwiseConv2D": {"forward": _conv_fwd, "backward": _conv_bwd},
    "Add": {"backward": _binary_bwd}, "Sub": {"backward": _binary_bwd}, "Mul": {"backward": _binary_bwd},
    "Div": {"backward": _binary_bwd},
    "MaxPool2D": {"forward": _pool_fwd}, "AvgPool2D": {"forward": _pool_fwd},
    "Mean": {}, "Relu": {}, "Relu6": {}, "Reshape": {"forward": _reshape_fwd},
    "Pad": {"forward": _pad_fwd},
    "Loss": {},
}
# the only op whose optional inputs onert's loader accepts
OPTIONAL_INPUTS_OK = ("FullyConnected", "Loss")


def facts(op_type: str) -> dict | str:
    """The onert facts of `op_type` (registry first, then `TABLE`), or why onert cannot train it."""
    from memplan_cli import ops

    d = ops.get(op_type)
    p = (d.profiles or {}).get("onert") if d is not None else None
    if p is None:
        p = TABLE.get(op_type)
    if p is None:
        return f"{op_type} has no kernel in {VERSION} (onert fails to compile)"
    if p.get("refuse"):
        return str(p["refuse"])
    return p


def supported_types() -> list[str]:
    """Op types the onert profile has train kernels for (registry and table), sorted."""
    from memplan_cli import ops

    return sorted(t for t in set(TABLE) | set(ops.all_ops()) if isinstance(facts(t), dict))


def refusal(ir, stage: str = "train") -> str | None:
    """Why onert 0.1.0 cannot train this training IR (its first op that fails), or None. With
    `stage="compile"`, only what stops onert before it allocates (load, compile)."""
    if stage not in STAGES:
        raise ValueError(f"stage {stage!r} (known: {', '.join(STAGES)})")
    backward = set(ir.backward_order)
    for op in ir.ops:
        why = _op_refusal(op, ir, op.index in backward)
        if why and not (stage == "compile" and isinstance(why, AfterCompile)):
            return f"onert cannot train op {op.label}: {why}"
    return None


def _run(fn, op, operands, after_compile: bool):
    why = fn(op, operands) if fn is not None else None
    return AfterCompile(why) if why and after_compile and not isinstance(why, AfterCompile) else why


def _op_refusal(op, ir, runs_backward: bool) -> str | None:
    f = facts(op.type)
    if isinstance(f, str):
        return f
    if op.act not in ACTIVATIONS:
        # measured: a fused TANH compiles, then the first step fails (outside the backward region too)
        return AfterCompile(f"fused activation {op.act} is not supported by {VERSION} (onert compiles, "
                            f"then its first training step fails)")
    why = _run(f.get("forward"), op, ir.operands, False) or _run(f.get("forward_run"), op, ir.operands, True)
    if not why and op.type not in OPTIONAL_INPUTS_OK and any(i < 0 for i in op.inputs):
        why = (f"an absent optional input, which onert 0.1.0's loader rejects for {op.type} "
               f"(\"loader doesn't support optional input tensor yet\")")
    if why or not runs_backward:
        return why
    # TensorPlanner::planDisposableBackPropTensors throws for any op of the essential backward order
    # whose inputs repeat a tensor, disposable back-props or not (measured: Add(x, x), Mul(x, x))
    if len(set(op.inputs)) != len(op.inputs):
        return (f"it reads the same tensor twice and {VERSION}'s TensorPlanner rejects duplicate inputs "
                f"of an op whose backward runs (onert fails to compile)")
    return _run(f.get("backward"), op, ir.operands, False) or _run(f.get("backward_run"), op, ir.operands, True)


def check(ir, stage: str = "train") -> None:
    """Raise UnsupportedOpError naming the first op onert 0.1.0 cannot train (see `refusal`)."""
    why = refusal(ir, stage)
    if why:
        raise UnsupportedOpError(why)
