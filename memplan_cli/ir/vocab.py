"""Names every layer shares about ops without being about one op family."""

# Fused activations, as TFLite/circle name them (the index is the file's code).
ACTIVATIONS = ("NONE", "RELU", "RELU_N1_TO_1", "RELU6", "TANH", "SIGN_BIT", "SIGMOID")
