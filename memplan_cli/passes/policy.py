"""Saving rules a profile switches on or off. memplan's profile turns all of them on; each one, off,
reproduces what a runtime such as onert does instead (used to measure what each rule saves)."""
from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class Policy:
    # An activation's backward overwrites its own incoming back-prop; a standalone elementwise op's
    # output overwrites its input when nothing reads the input later. Off: separate buffers, and
    # fused activations get an extra |Y| buffer for the activation's back-prop (onert).
    inplace: bool = True
    # Reshape / Flatten output (and its back-prop) share their input's memory. Off: copies (onert).
    alias_reshape: bool = True
    # Add / Sub keep nothing for backward (their derivative needs no forward value). Off: they keep
    # both inputs alive until their backward (onert's BinaryArithmetic).
    add_keeps_nothing: bool = True
    # Off (memplan): back-prop only for operands downstream of a trained weight. On (onert): every
    # non-constant input of a backward op gets one, graph inputs and the label included.
    input_backprop: bool = False
    # On (onert): FC and Conv materialise transposed weights / inputs / back-props in backward.
    # Off (memplan): GEMM with transpose flags reads the originals.
    transpose_extras: bool = False
    # On (onert): optimizer state for every constant, frozen and integer ones included.
    opt_state_all_constants: bool = False
    # The first contribution to a branch point's back-prop (in backward order) is written straight
    # into it; only the later ones get a disposable buffer. Off: every contribution is disposable.
    accumulate_in_place: bool = True
    # MaxPool backward recomputes the window's argmax from its input when the input is kept anyway,
    # else keeps a 1-byte window index. Off: an int32-sized argmax from forward to backward (onert).
    maxpool_recompute: bool = True
    # A ReLU / ReLU6 / Clip output that only its own derivative reads in backward is replaced by a
    # 1-bit mask (derivative is 1 where lo < y < hi) written in forward. Off: the float output is kept.
    relu_mask: bool = True
    # Each gradient is applied right after its op's backward (its buffer dies there). Off: all
    # updates after the whole backward pass (every gradient alive at once).
    apply_immediately: bool = True
    # A forward result that later ops read in backward is recomputed right before its first backward
    # reader when that is cheap and reads only what backward keeps anyway (a training-mode BatchNorm
    # output from its input and statistics, a GELU output from its input; passes/cheap_recompute.py).
    # Off: it is kept from forward to backward (PyTorch, onert).
    cheap_recompute: bool = True
    # A constant folded from a broadcast (`Operand.broadcast_of`: DeBERTa's relative-position indices
    # expanded to batch x heads x seq²) holds only the values it repeats, a stride-0 view, as
    # PyTorch's `expand` does. Off: the broadcast's own bytes (the folded constant as a runtime
    # that materialises it holds it).
    broadcast_views: bool = True

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    @classmethod
    def baseline(cls) -> "Policy":
        """Every saving rule off."""
        return cls(inplace=False, alias_reshape=False, add_keeps_nothing=False, input_backprop=True,
                   transpose_extras=True, opt_state_all_constants=True, accumulate_in_place=False,
                   maxpool_recompute=False, relu_mask=False, apply_immediately=True, cheap_recompute=False,
                   broadcast_views=False)
