"""Memory formats through the forward: where a channels-last tensor starts, which ops keep it, and
what a convolution of one runs."""
from __future__ import annotations

from memplan_cli.errors import UnsupportedOpError
from memplan_cli.ops._torch import CONVOLUTIONS, FORMAT_KEEPING, TRANSPOSE
from memplan_cli.profiles.torch.facts import ESTIMATED, ESTIMATED_WHY, facts
from memplan_cli.profiles.torch.strides import channels_last_2d, is_contiguous


UNSURE = "unsure"  # a channels-last tensor made from a piece `_piece` names (what the file cannot say)


def memory_format(op, opd, contig, cl, strides=None) -> None:
    """Channels-last tensors: `permute(0, 3, 1, 2)` of contiguous NHWC data (a LayerNorm over channels,
    as ConvNeXt writes it) is a channels-last view; elementwise ops keep the format of their first
    full-size input; `permute(0, 2, 3, 1)` of a channels-last tensor is contiguous again. A channels-last
    tensor is not contiguous (a Reshape copies it). A convolution of one runs oneDNN's channels-last
    kernels (its family's facts read attrs["memory_format"]) and writes a channels-last output; one its
    facts do not cover is refused."""
    x = op.inputs[0] if op.inputs else -1
    if x < 0:
        return
    ys = [v for v in op.outputs if v in contig]
    if op.type == TRANSPOSE and len(opd[x].shape) == 4 and ys:
        perm = tuple(op.attrs.get("perm") or ())
        if perm == (0, 3, 1, 2) and contig.get(x, True):
            cl[ys[0]] = True
        elif perm == (0, 2, 3, 1) and cl.get(x):
            contig[ys[0]] = True
        return
    if op.type in CONVOLUTIONS and (cl.get(x) if strides is None else
                                    x in strides and channels_last_2d(opd[x].shape, strides[x])):
        op.attrs["memory_format"] = "channels_last"
        unsure = False
        f = facts(op) or {}
        why = f.get("refuse") and f["refuse"](op, opd)
        if why:
            raise UnsupportedOpError(f"torch profile: op {op.label} ({op.type}) convolves a channels-last tensor "
                                     f"(as ConvNeXt's LayerNorm over channels leaves it): {why}")
        if f.get("estimated") and f["estimated"](op, opd):
            op.attrs[ESTIMATED] = True  # its channels-last facts cover it only approximately: named
        elif strides is not None and (_piece(opd[x].shape, strides[x]) or cl.get(x) == UNSURE):
            # a piece (a channel slice) of a permuted tensor: ATen's stride rule reads it channels-last,
            # as eager does when the code split the permuted tensor itself; code that made it
            # `.contiguous()` first (FocalNet's modulation) convolves channels-first pieces, and neither
            # exporter writes that copy: which kernels ran is not in the file
            op.attrs[ESTIMATED] = True
            op.attrs[ESTIMATED_WHY] = ("a channel slice of a permuted tensor: channels-last unless the code "
                                       "made it contiguous first (no node in the export)")
            unsure = True
        for v in ys:
            shape = tuple(opd[v].shape)
            if len(shape) == 4 and strides is not None:
                n, c, h, w = (int(d) for d in shape)
                st = (h * w * c, 1, w * c, c)
                strides[v] = st  # channels-last even where it is contiguous too (1 x 1 pixels)
                cl[v] = UNSURE if unsure else True
                contig[v] = is_contiguous(shape, st)
        return
    if op.type in FORMAT_KEEPING and ys:
        shape = tuple(opd[ys[0]].shape)
        first = next((v for v in op.inputs if v >= 0 and tuple(opd[v].shape) == shape), None)
        # (strides known: a result with 1 x 1 pixels is contiguous, TensorIterator's (C, 1, 1, 1))
        if first is not None and cl.get(first) and (strides is None or ys[0] in strides):
            for v in ys:
                cl[v] = cl[first]  # UNSURE stays so: the layout it came from is not known
                contig[v] = False


def _piece(shape, st) -> bool:
    """Strides of a channels-last tensor that is no dense one: a slice along its channels."""
    n, c, h, w = (int(d) for d in shape)
    return c > 1 and h * w > 1 and st[1] == 1 and tuple(st) != (h * w * c, 1, w * c, c)
