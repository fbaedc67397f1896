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
