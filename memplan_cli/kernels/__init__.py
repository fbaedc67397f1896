"""NumPy reference kernels for forward, backward (calcGradient / calcDerivative) and optimizer steps.

Conventions shared by every kernel:
- results go into caller-given arrays (`out`, `out_dx`, ...) that may be views into one arena;
  a kernel never keeps state between calls (temporaries inside one call are fine and are freed on
  return);
- `acc=True` adds the result into the output instead of overwriting it (back-prop accumulation);
- layouts follow circle/tflite: NHWC activations, FullyConnected weights [O, I] (convolution and
  pooling, in any layout and 1-3 spatial dims, live in `memplan_cli/ops/_window.py`);
- fused activations are named as in tflite (`NONE`, `RELU`, `RELU6`, `RELU_N1_TO_1`, `TANH`,
  `SIGMOID`); their backward uses the op's output, as onert does.
"""
