"""TF Lite's quantize / dequantize: the boundary ops of a quantized model.

No converter and no OpDef: they keep their TFLite names, and training through them is refused with
the op named (memplan trains float graphs). What the loaders and re-batching need to know about
them as source ops lives here: both keep dim 0 (one value in, one value out, per sample).
"""

# DEQUANTIZE of a float16 constant is a plain cast (no scale, no zero point): its values are the
# constant's, which a converter may read through it (flatbuffer_loader reads only float16 that way)
TFLITE_FACTS = {"QUANTIZE": {"keeps_batch": True}, "DEQUANTIZE": {"keeps_batch": True, "casts_values": True}}
