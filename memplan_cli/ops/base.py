"""The registry's vocabulary: what an op family declares (`OpDef`) and what its loader converters
see (`OnnxNode`, `TfliteNode`) and return (`Canon`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable


class UnsupportedKernel(Exception):
    """No reference kernel for this op type / step kind, or for these attribute values."""


class AccessError(AssertionError):
    """A kernel needed a tensor the step does not declare (a schedule / rule mismatch)."""


@dataclass
class Canon:
    """A converter's answer: the canonical op type and attributes; `inputs` / `outputs` replace the
    node's operand lists when given (e.g. dropping a Clip's bound operands)."""

    type: str
    attrs: dict = field(default_factory=dict)
    inputs: list[int] | None = None
    outputs: list[int] | None = None


class _SourceNode:
    """What OnnxNode and TfliteNode share: their operands by input and output index (`inputs`,
    `outputs`, `operands`, `_values` are the dataclass fields of each)."""

    def input(self, k: int):
        """The operand of input k, or None when absent."""
        if k >= len(self.inputs) or self.inputs[k] < 0:
            return None
        return self.operands[self.inputs[k]]

    def shape(self, k: int) -> tuple | None:
        o = self.input(k)
        return None if o is None else tuple(o.shape)

    def out_shape(self, k: int = 0) -> tuple:
        return tuple(self.operands[self.outputs[k]].shape)

    def values(self, k: int) -> tuple | None:
        """Values of constant input k when it is small (<= 64 elements), else None."""
        if k >= len(self.inputs) or self.inputs[k] < 0:
            return None
        return self._values(k)


@dataclass
class OnnxNode(_SourceNode):
    """One ONNX node as a converter sees it: attributes decoded, operands already created (shapes
    from ONNX shape inference). `ints(k)` / `floats(k)` give a small constant input's values (the
    loader reads only small constants: shapes, axes, pads, scalars), or None when unknown."""

    op_type: str
    domain: str
    name: str
    attrs: dict
    inputs: list[int]
    outputs: list[int]
    operands: list
    opset: int
    _values: Callable[[int], tuple | None] = lambda k: None


@dataclass
class TfliteNode(_SourceNode):
    """One TFLite/circle operator as a converter sees it: `options` holds the builtin options table's
    scalar fields by snake_case name (e.g. `{"axis": 1, "batch_dims": 0}`); `values(k)` a small
    integer constant input's values."""

    builtin: str
    options: dict
    inputs: list[int]
    outputs: list[int]
    operands: list
    _values: Callable[[int], tuple | None] = lambda k: None


@dataclass
class OpDef:
    """Everything memplan knows about one canonical op type.

    - `rule(op, ctx) -> OpRule`: the training rule (see `memplan_cli.ops.rule`). None: the op has no
      backward, and training through it is refused with the op named.
    - `kernels`: step kind ("forward", "calcGradient", "calcDerivative") -> `fn(ctx)` on the
      executor's StepContext (what `memplan verify` runs).
    - `flops(op, operands) -> (forward, backward)`: multiply-adds count as 2 FLOPs; backward is both
      calcGradient and calcDerivative when every input needs them.
    - `required_inputs`: leading inputs that must be present; `check(op, operands) -> reason | None`
      refuses attribute values the rule and kernels do not implement (checked at load).
    - Requires-grad facts: `no_grad` (outputs never carry a gradient: shapes, masks, indices),
      `nondiff_inputs` (input positions that never receive a back-prop, e.g. indices, shapes),
      `nondiff_outputs` (output positions no gradient flows back from, e.g. running statistics).
    - `batch`: how re-batching a fixed-batch model treats the op: "keep" (dim 0 of every output
      follows the batched inputs), "scale" (dim 0 scaled by the batched input's growth), or a function
      `fn(op, in_shapes, old_out_shapes, old_batch, new_batch) -> new_out_shapes`.
    - `profiles`: per-profile facts, e.g. `{"onert": {...}, "singa": {...}}`, read by the profiles.
    - `bias_inputs`: input positions that hold a bias (what `--train biases` trains), or
      `fn(op, operands) -> positions`.
    """

    type: str
    rule: Callable | None = None
    kernels: dict = field(default_factory=dict)
    flops: Callable | None = None
    required_inputs: int = 1
    check: Callable | None = None
    no_grad: bool = False
    nondiff_inputs: tuple = ()
    # output positions that never carry a gradient (BatchNormalization's running statistics): a model
    # output there gets no loss by default (passes/loss_insertion.py)
    nondiff_outputs: tuple = ()
    batch: object = "keep"
    # `fn(op, graph, shapes, batched) -> (attrs, why) | None`: attributes re-batching adds to the op
    # (a Concat broadcasting a batch-1 token), with a warning ({old_batch}, {batch_size} filled in)
    batch_attrs: Callable | None = None
    profiles: dict = field(default_factory=dict)
    bias_inputs: object = ()
    # float constant inputs that are not parameters of this op (an RNN's zero initial states): the
    # backward-insertion guard does not ask its rule to train them
    state_inputs: tuple = ()
    # input positions that only a layer's own parameters fill (a convolution's filter and bias, a
    # norm's scale and shift): a float constant read only there is a parameter whatever its name
    # (loaders/params.py); a Mul's or Add's constant may be a mask or a table, so they declare none
    weight_inputs: tuple = ()
    # input positions whose constant is a lookup table the op reads rows of (Gather's embedding): a
    # weight shaped like a table transposed may be its tied copy (loaders/params.py)
    table_inputs: tuple = ()
    # dim 0 of the output is not the input's batch (SpaceToBatchND moves blocks into it): a TF Lite
    # file's placeholder for it (the converter writes the file's batch) is resolved at load
    changes_batch: bool = False
    # a standalone activation: the fused-activation name it computes ("RELU", "SIGMOID", ...; "CLIP"
    # for bounds in its attributes), so the executor's mask and pre-activation paths treat it alike
    activation: str | None = None
    # integer shape arithmetic: `shape_value(op, ins) -> values` computes the output's values from its
    # inputs' (np.ndarray, None for an absent input) when the op moves or combines the small integer
    # tensors a graph computes shapes with (`opgraph/shape_values.py` follows them through a re-batch)
    shape_value: Callable | None = None
    # the output is the input's values rearranged or retyped (Reshape, Transpose, Cast, Identity...):
    # a constant folded through it keeps what it was (a parameter stays one; `opgraph/fold.py`)
    moves_data: bool = False
    # the output is a part of the input's values (Slice): a constant folded through it is a view of
    # the tensor it came from (`opgraph/fold.py` records that tensor: `ir.graph.FOLDED_FROM`)
    narrows: bool = False
    # a structural part the op plays for the graph-wide passes (opgraph/rebatch.py, opgraph/fold.py): "shape_of"
    # (its output is its input's shape, `start` / `end` attributes), "reshape" (its last input's
    # values give its output's shape, -1 and ONNX's 0 resolved), "fill" (its last input's values give
    # the shape of the constant it writes), "identity" (its output is its input), "broadcast" (its
    # output is its input broadcast to the output's shape: folded, a stride-0 view), "writes_into" (its
    # output is its input 0 with updates written in, out of place: a scatter); "" for none
    role: str = ""
    # `fn(op) -> "IO" | "OI"`: LoRA (`--lora`) may adapt the op, whose input 1 is its weight stored
    # [in, out] ("IO") or [out, in] ("OI"); None: LoRA does not adapt it (passes/lora.py)
    lora_layout: Callable | None = None
    # the forward is not a function of its reads (Dropout's mask): never recomputed, never folded
    random: bool = False
    # a normalisation whose output is an affine function of its input and the two statistics its
    # backward keeps (these extras' names): cheap to recompute (passes/cheap_recompute.py)
    recompute_stats: tuple = ()
    # a random op whose output is a function of its input and the mask its backward keeps (this
    # extra's name, or the op's mask output when it has one): cheap to recompute from the two
    # (Dropout: Y = X * mask / (1 - ratio); passes/cheap_recompute.py)
    recompute_mask: str = ""
    # with `--batchnorm frozen` the output is recomputed from the op's first N inputs (its stored
    # statistics); 0: no such mode
    recompute_frozen_inputs: int = 0
    # input position of a small integer constant that decides the output's shape (a Reshape's shape,
    # a Mean's axes): a TF Lite loader reads its values at load (loaders/flatbuffer_loader.py)
    shape_const_input: int | None = None
    # the dtype the op computes in under mixed precision (passes/precision.py), PyTorch autocast's
    # CPU cast policy for the aten op it stands for (aten/src/ATen/autocast_mode.cpp): "lower" (cast
    # down: convolutions, matmuls), "fp32" (cast up: the losses, 3-D pooling, prod), "first" (its input
    # 0's dtype: a norm whose float32 parameters do not promote), "fixed" (the file's dtype: a Cast),
    # "bias" (an Add of a bias constant after a cast-down op is that op's bias: its dtype; else
    # promotion), "" (type promotion over its float inputs); or fn(op) -> one of these
    autocast: object = ""
    doc: str = ""
    family: str = ""  # set by the registry: the module that defines it
