"""What eager PyTorch does alike across op families, read by memplan_cli/profiles/torch.py: which ops
keep a channels-last tensor's memory format (the profile refuses a convolution of one)."""
from __future__ import annotations

# output memory format taken from the inputs (TensorIterator: the first input of the output's shape
# decides): elementwise ops, activations, batch_norm and dropout
FORMAT_KEEPING = frozenset({"Relu", "Relu6", "Sigmoid", "Tanh", "Clip", "Add", "Sub", "Mul", "Div", "Gelu", "SiLU",
                            "HardSwish", "HardSigmoid", "Elu", "LeakyRelu", "Dropout", "BatchNormalization", "Erf",
                            "Neg", "Exp", "Sqrt", "Abs", "Softplus", "Mish"})
# convolutions: oneDNN keeps a channels-last input's format, with kernels whose memory differs
CONVOLUTIONS = ("Conv2D", "DepthwiseConv2D", "ConvTranspose2D")
# permute: (0, 3, 1, 2) of contiguous NHWC data is a channels-last view, (0, 2, 3, 1) undoes it
TRANSPOSE = "Transpose"

# output layout taken from the inputs' strides (TensorIterator; the profile tracks strides): the
# memory-format keepers above and the other elementwise ops
LAYOUT_KEEPING = FORMAT_KEEPING | frozenset({"Pow", "Max", "Min", "Rsqrt", "Reciprocal", "Log", "Sin", "Cos", "Cast",
                                             "Where"})
# views whose strides the profile derives: a permute, a broadcast (stride 0), narrows keeping the rank
EXPAND = "Expand"
NARROWS = ("Slice", "Split")
# torch.onnx's decomposition of F.scaled_dot_product_attention (profiles/torch.py `_attention`):
# MatMul(q * s, k^T * s) [+ mask] -> Softmax [-> Where(IsNaN(p), 0, p)] [-> Dropout] -> MatMul with v;
# k^T reached through Reshape / Transpose views, k and v through the grouped-query repeat
# (Unsqueeze, Expand, Reshape)
SDPA = {"matmul": "MatMul", "scale": "Mul", "mask": "Add", "softmax": "Softmax", "where": "Where",
        "isnan": "IsNaN", "dropout": "Dropout", "reshape": "Reshape", "unsqueeze": "Unsqueeze", "expand": EXPAND,
        "views": ("Reshape", TRANSPOSE)}
# a matmul against a 2-D weight folds its leading dims into rows (the fused Linear, FullyConnected)
WEIGHT_MATMULS = ("Linear", "FullyConnected")
