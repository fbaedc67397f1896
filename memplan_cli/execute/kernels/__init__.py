"""NumPy reference kernels for forward, backward (calcGradient / calcDerivative) and optimizer steps.

Conventions shared by every kernel:
- results go into caller-given arrays (`out`, `out_dx`, ...) that may be views into one arena;
  a kernel never keeps state between calls (temporaries inside one call are fine and are freed on
  return);
- `acc=True` adds the result into the output instead of overwriting it (back-prop accumulation);
- layouts follow circle/tflite: NHWC activations, Conv2D weights OHWI, DepthwiseConv2D weights
  [1, KH, KW, C*M], FullyConnected weights [O, I]; `conv.*_nchw` adapt ONNX's NCHW/OIHW at the boundary;
- fused activations are named as in tflite (`NONE`, `RELU`, `RELU6`, `RELU_N1_TO_1`, `TANH`,
  `SIGMOID`); their backward uses the op's output, as onert does.
"""
