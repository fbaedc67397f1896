"""What onert 0.1.0's train backend can express, shared by the op families' `profiles["onert"]` facts
(memplan_cli/profiles/onert/ reads them): how a reason is told apart when onert finds it only after
it compiles, and how circle writes a 2-D window (conv and pool)."""
from __future__ import annotations

VERSION = "onert 0.1.0's train backend"


class AfterCompile(str):
    """A reason onert finds only after it compiles (and allocates): the training step fails, crashes
    or computes wrong values. `refusal(ir, stage="compile")` skips these, for replaying what onert
    allocates when it compiles such a model (tests and benchmarks); the profile refuses them."""


def shape(operands, i) -> tuple:
    return tuple(operands[i].shape) if i >= 0 else ()


def pair(v, n: int, default: int = 1) -> tuple:
    if v is None:
        return (default,) * n
    if isinstance(v, int):
        return (v,) * n
    return tuple(int(x) for x in v)


def channels_last(op) -> bool:
    return op.attrs.get("layout", "NHWC") != "NCHW"


def spatial(op, shape) -> tuple:
    return tuple(shape[1:-1]) if channels_last(op) else tuple(shape[2:])


def channels(op, shape) -> int:
    return shape[-1] if channels_last(op) else shape[1]


def kernel(op, operands) -> tuple:
    """Kernel size per spatial dim: the attribute, else the filter's shape."""
    k = op.attrs.get("kernel") or op.attrs.get("filter") or op.attrs.get("kernel_shape")
    if k:
        return tuple(int(x) for x in k)
    w = shape(operands, op.inputs[1]) if len(op.inputs) > 1 else ()
    if len(w) < 3:
        return ()
    # circle: [O, H, W, I] (depthwise [1, H, W, O]); ONNX: [O, I/g, *kernel]
    return tuple(w[1:-1]) if channels_last(op) else tuple(w[2:])


def dilation(op) -> tuple:
    d = op.attrs.get("dilation", op.attrs.get("dilations"))
    return tuple(int(x) for x in d) if d else ()


def window(op, operands) -> str | None:
    """A 2-D window op (conv or pool) as circle can write it: 4-D NHWC-able input, SAME or VALID
    padding, floor output sizes."""
    x, y = shape(operands, op.inputs[0]), shape(operands, op.outputs[0])
    if len(x) != 4 or len(y) != 4:
        n = max(len(x) - 2, 0)
        return f"{op.type} over {n} spatial dimension(s): {VERSION} has 2-D convolution and pooling only"
    ins, outs = spatial(op, x), spatial(op, y)
    k = kernel(op, operands)
    if len(k) != 2:
        return f"{op.type} with a kernel of {len(k)} dimension(s): {VERSION} has 2-D windows only"
    s = pair(op.attrs.get("stride", op.attrs.get("strides")), 2)
    d = dilation(op) or (1, 1)
    pad = op.attrs.get("padding", "VALID")
    pads = tuple(op.attrs.get("pads") or (0, 0, 0, 0))
    if op.attrs.get("ceil_mode"):
        return f"{op.type} with ceil_mode: circle's windows round output sizes down"
    same = tuple(same_pads(ins[i], outs[i], k[i], s[i], d[i]) for i in range(2))
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


def same_pads(size: int, out: int, k: int, s: int, d: int) -> tuple:
    """TF SAME: the total padding that gives `out`, the smaller half first."""
    total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
    return (total // 2, total - total // 2)


# ---- kernel-private buffers and training use-defs, shared by several families ----------------------

def act_buffers(op, ir) -> list:
    """A fused activation's own back-prop buffer (|Y|), which each train kernel allocates."""
    return [("act dY", ir.operands[op.outputs[0]].nbytes)] if op.act != "NONE" else []


def act_only_buffers(op, ir, threads, simd_width) -> list:
    """A kernel whose only private buffer is its fused activation's (AvgPool2D, Add, Sub, Mul, Div)."""
    return act_buffers(op, ir)


def weighted_usedef(op, c) -> None:
    """Conv2D / DepthwiseConv2D / FullyConnected (UseDefGenerator): the backward reads X and W (and Y
    under a fused activation), defines X's back-prop and the gradients of W and the bias."""
    ins, out = op.inputs, op.outputs[0]
    x, w = ins[0], ins[1]
    c.use(x)
    c.use(w)
    if op.act != "NONE":
        c.use(out)
    c.bp_def(x)
    c.grad_def(w)
    if len(ins) > 2 and ins[2] >= 0:
        c.grad_def(ins[2])


def first_input_usedef(op, c) -> None:
    """A backward that reads only the incoming back-prop (Mean, Reshape): X's back-prop."""
    c.bp_def(op.inputs[0])


def output_usedef(op, c) -> None:
    """A backward that reads Y (Softmax): X's back-prop."""
    c.use(op.outputs[0])
    c.bp_def(op.inputs[0])
