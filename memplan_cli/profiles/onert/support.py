"""What onert 0.1.0's train backend can train: the onert profile refuses everything else.

onert puts every op of the model on its train backend, so an op it has no train kernel for fails the
compile wherever it is; some attribute values fail only when the op's backward is configured or runs
(the op is in the essential backward order); some compile and run but train wrongly. The profile
gives no figure for any of them: one line naming the op, the reason and what onert does.

Facts per op type come from its op family (`OpDef.profiles["onert"]`, memplan_cli/ops/; keys:
"forward", "backward", "forward_run", "backward_run", "refuse", "optional_inputs"); a type without
them is refused. Each check is `fn(op, operands) -> reason | None` on a `trainir.TOp` and the
TrainIR's operands (`.shape`, `.is_const`, `.name`), the signature of `OpDef.check`.

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

from memplan_cli import ops
from memplan_cli.errors import UnsupportedOpError
from memplan_cli.ops._onert import VERSION, AfterCompile

ACTIVATIONS = ("NONE", "RELU", "RELU6")
STAGES = ("compile", "train")


def facts(op_type: str) -> dict | str:
    """The onert facts of `op_type` (its op family's), or why onert cannot train it."""
    p = ops.profile_facts("onert", op_type)
    if p is None:
        return f"{op_type} has no kernel in {VERSION} (onert fails to compile)"
    if p.get("refuse"):
        return str(p["refuse"])
    return p


def supported_types() -> list[str]:
    """Op types the onert profile has train kernels for, sorted."""
    return sorted(t for t in ops.all_ops() if isinstance(facts(t), dict))


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
    if not why and not f.get("optional_inputs") and any(i < 0 for i in op.inputs):
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
