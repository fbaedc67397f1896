"""What eager PyTorch does alike across op families, read by memplan_cli/profiles/torch/: which ops
keep a channels-last tensor's memory format (the profile refuses a convolution of one)."""
from __future__ import annotations

import re

# output memory format taken from the inputs (TensorIterator: the first input of the output's shape
# decides): elementwise ops, activations, batch_norm and dropout
FORMAT_KEEPING = frozenset({"Relu", "Relu6", "Sigmoid", "Tanh", "Clip", "Add", "Sub", "Mul", "Div", "Gelu", "SiLU",
                            "HardSwish", "HardSigmoid", "Elu", "LeakyRelu", "Dropout", "BatchNormalization", "Erf",
                            "Neg", "Exp", "Sqrt", "Abs", "Softplus", "Mish"})
# convolutions: oneDNN keeps a channels-last input's format, with kernels whose memory differs
CONVOLUTIONS = ("Conv2D", "DepthwiseConv2D", "ConvTranspose2D")
# permute: (0, 3, 1, 2) of contiguous NHWC data is a channels-last view, (0, 2, 3, 1) undoes it
TRANSPOSE = "Transpose"
# the aten calls a Transpose of a dynamo export stands for as itself; one recording another call
# (slice_scatter's, index_put's: the exporter moves the written axis first and back) is no eager view
PERMUTE_CALLS = frozenset({"aten.permute", "aten.transpose", "aten.t", "aten.movedim", "aten.swapaxes",
                           "aten.swapdims", "aten.numpy_T", "aten.adjoint"})

# output layout taken from the inputs' strides (TensorIterator; the profile tracks strides): the
# memory-format keepers above and the other elementwise ops
LAYOUT_KEEPING = FORMAT_KEEPING | frozenset({"Pow", "Max", "Min", "Rsqrt", "Reciprocal", "Log", "Sin", "Cos", "Tan",
                                             "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh",
                                             "Cast", "Where"})
# backward layout: the input's gradient an elementwise op's backward makes (a TensorIterator op whose
# first input is the incoming gradient: gelu_backward, silu_backward, sigmoid_backward, mul, ...) is
# laid out like the incoming gradient (TensorIterator orders dimensions by its first input's strides);
# batch_norm's backward lays it out like its input instead. threshold_backward (Relu) and
# leaky_relu_backward take the saved tensor first, so theirs is laid out like it (measured, the kernel
# alone); they stay listed until a network shows the difference (docs/torchprof.md)
GRAD_LAYOUT_KEEPING = LAYOUT_KEEPING - frozenset({"BatchNormalization"})
# elementwise math: a result that is a function of the inputs alone (dropout draws, batch norm computes
# statistics); a cast changes the dtype. What a written-out formula, or one aten op the exporter wrote
# as a chain (rsqrt: Sqrt, Reciprocal), is made of.
POINTWISE_MATH = LAYOUT_KEEPING - frozenset({"Dropout", "BatchNormalization"})
CAST = "Cast"
# views whose strides the profile derives: a permute, a broadcast (stride 0), narrows keeping the rank
EXPAND = "Expand"
NARROWS = ("Slice", "Split")
# torch.onnx's decomposition of F.scaled_dot_product_attention (profiles/torch/attention.py):
# MatMul(q * s, k^T * s) [+ mask] -> Softmax [-> Where(IsNaN(p), 0, p)] [-> Dropout] -> MatMul with v;
# k^T reached through Reshape / Transpose views, k and v through the grouped-query repeat
# (Unsqueeze, Expand, Reshape)
SDPA = {"matmul": "MatMul", "scale": "Mul", "mask": "Add", "softmax": "Softmax", "where": "Where",
        "isnan": "IsNaN", "dropout": "Dropout", "reshape": "Reshape", "unsqueeze": "Unsqueeze", "expand": EXPAND,
        "views": ("Reshape", TRANSPOSE)}
# torch's `var` (and `std`, then a Sqrt) as both exporters write it (TorchScript's symbolic, the dynamo
# exporter's prims.var): Mean(x, axes) -> Sub(x, mean) -> Mul(d, d) -> Mean(axes); eager runs one
# aten::var.correction (profiles/torch/rewrites.py `variances`; its facts: ops/reduce.py); "pow": the
# square of a written-out norm's variance, `(x - mean).pow(2)` (rewrites.py `centred_twice`)
VAR = {"mean": "Mean", "sub": "Sub", "square": "Mul", "pow": "Pow", "eager": "Var",
       "targets": ("var", "var_mean", "std", "std_mean")}
# a slice or index assignment (`k[..., :a].copy_(x)`, `x[idx] = v`) as both exporters write it: a
# ScatterND, which TorchScript writes only for those in-place writes (its index_put_ / copy_ symbolics)
# and the dynamo exporter for their functionalized `slice_scatter`; eager writes into the tensor
# itself (profiles/torch/rewrites.py `inplace_writes`; its facts: ops/scatter.py)
INPLACE_WRITE = {"type": "ScatterND", "targets": ("slice_scatter", "index_put"), "attr": "inplace",
                 # `x[..., i, :n] = v`: a slice_scatter into `select(x, i)`, written back by a select_scatter
                 "select": "select", "select_back": "select_scatter",
                 # `x[:, i] = v` alone: one select_scatter, a ScatterElements (rewrites._selected_rows)
                 "row_type": "ScatterElements"}
# aten's factory functions (fx kinds): each call returns a new tensor, so equal fills the dynamo
# exporter folded and merged are one tensor per call in eager (profiles/torch/rewrites.py
# `merged_duplicates`); views of a shared tensor (a rotary table's `unsqueeze`) are not among them
FILLS = frozenset({"zeros", "ones", "full", "empty", "zeros_like", "ones_like", "full_like", "empty_like",
                   "new_zeros", "new_ones", "new_full", "new_empty", "eye", "arange", "scalar_tensor"})
# aten ops (fx kinds) whose result may be their input or a view of it (`contiguous`, `to` and
# `reshape` return `self` when they can): a folded value of another kind is a new tensor at each call
# that makes it (`_to_copy`, `repeat`, arithmetic), so merged equal ones are one per call in eager
# (profiles/torch/rewrites.py `merged_duplicates`)
MAY_ALIAS = frozenset({"view", "_unsafe_view", "view_as", "reshape", "_reshape_alias", "unsqueeze", "squeeze",
                       "transpose", "permute", "t", "numpy_T", "movedim", "expand", "expand_as", "select",
                       "slice", "narrow", "split", "split_with_sizes", "chunk", "unbind", "getitem",
                       "diagonal", "unfold", "as_strided", "alias", "detach", "flatten", "unflatten",
                       "contiguous", "to", "type_as", "lift_fresh_copy"})
# `x.unbind(d)` under dynamo: a Slice and a Squeeze per piece recording `%unbind`, read back as one eager
# op of this type (profiles/torch/rewrites.py `unbinds`; its facts in profiles/torch/facts.py)
UNBIND = {"target": "unbind", "type": "Unbind"}
# max.dim / min.dim with their indices read: TorchScript's symbolic writes a ReduceMax (ReduceMin) and
# an ArgMax (ArgMin) of the same input over the same axis (profiles/torch/rewrites.py `max_with_indices`)
MAX_INDICES = {"ReduceMax": "ArgMax", "ReduceMin": "ArgMin"}
# a Gather of one index from an activation is eager's select, a view (profiles/torch/rewrites.py `selects`)
GATHER = "Gather"
# aten calls the dynamo exporter writes as one op reading the call's tensor arguments in the same
# order (mul(%a, %b) -> Mul(a, b)), by the op's type: a dropped `.clone()` passed at any argument
# is read at that input (profiles/torch/rewrites.py `lost_clones`)
ARGS_IN_ORDER = {"aten.mul": "Mul", "aten.add": "Add", "aten.sub": "Sub", "aten.div": "Div",
                 "aten.maximum": "Max", "aten.minimum": "Min", "aten.matmul": "MatMul", "aten.bmm": "MatMul"}
# a matmul against a 2-D weight folds its leading dims into rows (the fused Linear, FullyConnected)
WEIGHT_MATMULS = ("Linear", "FullyConnected")

# the aten calls F.scaled_dot_product_attention reaches, and where each takes dropout_p (position, name):
# the dynamo exporter records the call beside each op of its decomposition (Operation.call) but
# writes no Dropout for it
SDPA_CALLS = {"aten.scaled_dot_product_attention": 4, "aten._scaled_dot_product_attention_math": 4,
              "aten._scaled_dot_product_flash_attention_for_cpu": 3}


def split_top(text: str) -> list[str]:
    """`text` split at the commas outside brackets."""
    out, depth, cur = [], 0, []
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        out.append("".join(cur).strip())
    return out


def fx_kind(name: str) -> str:
    """The aten op an fx value's name was made from: fx appends a counter to repeats of a target
    (`linear_3` -> linear, `sub_6` -> sub, `_unsafe_view_3` -> _unsafe_view)."""
    return re.sub(r"_\d+$", "", name)


def parse_call(call: str) -> tuple[str, str, list, dict] | None:
    """A recorded call (`Operation.call`, "y = aten.x.default(args = (%a, 1), kwargs = {k: v})") as
    (name, target without its overload, positional args, kwargs), all as text; None when malformed."""
    name, _, rest = call.partition(" = ")
    target, _, rest = rest.partition("(")
    if not rest.startswith("args = ("):
        return None
    args_text, _, kw_text = rest[len("args = ("):].partition("), kwargs = {")
    kwargs = dict(kv.split(": ", 1) for kv in split_top(kw_text.rstrip(")").rstrip("}")) if ": " in kv)
    return name, target.rsplit(".", 1)[0] if target.count(".") > 1 else target, split_top(args_text), kwargs


def sdpa_dropout(call: str) -> float | None:
    """The dropout_p of a recorded scaled-dot-product-attention call (`Operation.call`, e.g.
    "sdpa = aten.scaled_dot_product_attention.default(args = (%q, %k, %v, None, 0.1), kwargs = {scale: 0.25})"),
    its default 0.0 when not passed; None when `call` is no such call or its dropout_p is no number."""
    parsed = parse_call(call)
    pos = SDPA_CALLS.get(parsed[1]) if parsed else None
    if pos is None:
        return None
    _, _, args, kwargs = parsed
    value = kwargs.get("dropout_p", args[pos] if len(args) > pos else "0.0")
    try:
        return float(value)
    except ValueError:
        return None
