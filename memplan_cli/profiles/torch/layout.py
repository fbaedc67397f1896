"""Memory formats through the forward: where a channels-last tensor starts, which ops keep it, and
what a convolution of one runs."""
from __future__ import annotations

from memplan_cli.errors import UnsupportedOpError
from memplan_cli.ops._torch import CONVOLUTIONS, FORMAT_KEEPING, NARROWS, TRANSPOSE
from memplan_cli.profiles.torch.facts import ESTIMATED, ESTIMATED_WHY, facts
from memplan_cli.profiles.torch.strides import channels_last_2d, is_contiguous


UNSURE = "unsure"  # a channels-last tensor whose layout the file cannot say (`_split_of_permute`)
PERMUTED = "permuted"  # the channels-last view a permute (0, 3, 1, 2) itself returns


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
            cl[ys[0]] = PERMUTED
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
        elif cl.get(x) == UNSURE:
            # a channel piece of the permute's own result (`_split_of_permute`), or a channels-last
            # result of one: ATen's stride rule reads it channels-last, as eager does when the code split
            # the permuted tensor itself; code that made it `.contiguous()` first (FocalNet's modulation)
            # convolves channels-first pieces, and neither exporter writes that copy
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
    if ys and strides is not None and ys[0] in strides and (facts(op) or {}).get("format") == "all_inputs" \
            and channels_last_2d(opd[ys[0]].shape, strides[ys[0]]):
        # a result channels-last because every input is (cat, ops/concat.py)
        ins = [v for v in op.inputs if v >= 0]
        for v in ys:
            cl[v] = UNSURE if any(cl.get(i) == UNSURE for i in ins) else True
            contig[v] = False
        return
    if op.type in FORMAT_KEEPING and ys:
        shape = tuple(opd[ys[0]].shape)
        first = next((v for v in op.inputs if v >= 0 and tuple(opd[v].shape) == shape), None)
        # (strides known: a result with 1 x 1 pixels is contiguous, TensorIterator's (C, 1, 1, 1))
        if first is not None and cl.get(first) and (strides is None or ys[0] in strides):
            for v in ys:
                cl[v] = UNSURE if cl[first] == UNSURE else True  # the layout an UNSURE one came from is not known
                contig[v] = False
        return
    if _split_of_permute(op, cl.get(x)):
        for v in ys:
            cl[v] = UNSURE


def _split_of_permute(op, fmt) -> bool:
    """A Split or Slice along the channels of a permute's own channels-last result
    (`x.permute(0, 3, 1, 2)` then `torch.split(..., dim=1)`): where code that splits a permuted map
    writes `.contiguous()` between the two, which no export records. A split before the permute
    (MambaOut's), a chunk of a channels-last result of other ops (EdgeNeXt's) or a slice along the
    tokens are read as the file writes them, as every other view is."""
    if fmt != PERMUTED or op.type not in NARROWS:
        return False
    axes = (op.attrs.get("axis"),) if "axis" in op.attrs else tuple(op.attrs.get("axes") or ())
    return tuple(int(a) for a in axes if a is not None) in ((1,), (-3,))
