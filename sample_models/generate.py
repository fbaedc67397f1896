#!/usr/bin/env python3
"""Regenerate the memplan sample models (dev-only: needs tensorflow-cpu).

    python3 -m venv $TFENV
    $TFENV/bin/pip install tensorflow-cpu onnx circle-schema tflite onnxruntime
    $TFENV/bin/python sample_models/generate.py [mnist] [mobilenetv2]

Writes <name>.tflite, <name>.circle and <name>.onnx next to this file, then
re-reads them and prints the op census and parameter counts (with
scripts/check_samples.py, which does not need TensorFlow). onnxruntime is
optional: when present, tflite and ONNX outputs are compared numerically.
"""
from __future__ import annotations

import os
import re
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")  # bit-stable CPU kernels

import numpy as np  # noqa: E402
import flatbuffers  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "scripts"))
import check_samples  # noqa: E402

from circle_schema.v0_10.circle import (  # noqa: E402
    ActivationFunctionType as _Act,
    BuiltinOperator as _Op,
    BuiltinOptions as _Opts,
    Padding as _Padding,
    TensorType as _TT,
)
from circle_schema.v0_10.circle.Buffer import BufferT  # noqa: E402
from circle_schema.v0_10.circle.Model import ModelT  # noqa: E402
from circle_schema.v0_10.circle.OperatorCode import OperatorCodeT  # noqa: E402
from circle_schema.v0_10.circle.Operator import OperatorT  # noqa: E402
from circle_schema.v0_10.circle.PadOptions import PadOptionsT  # noqa: E402
from circle_schema.v0_10.circle.Tensor import TensorT  # noqa: E402

Act = _Act.ActivationFunctionType
Op = _Op.BuiltinOperator
Opts = _Opts.BuiltinOptions
Padding = _Padding.Padding
TT = _TT.TensorType

ONNX_OPSET = 18
ONNX_IR_VERSION = 10  # readable by onnx >= 1.16 and older runtimes

EXPECTED = {
    "mnist": {
        "ops": {"CONV_2D": 4, "MAX_POOL_2D": 2, "RESHAPE": 1, "FULLY_CONNECTED": 2, "SOFTMAX": 1},
        "float_params": 484_714,
    },
    "mobilenetv2": {
        "ops": {"CONV_2D": 35, "DEPTHWISE_CONV_2D": 17, "ADD": 10, "PAD": 4, "MEAN": 1,
                "FULLY_CONNECTED": 1, "SOFTMAX": 1},
        "float_params": 3_487_816,
    },
}


# --------------------------------------------------------------------------
# Keras models with seeded, all-non-zero weights
# --------------------------------------------------------------------------

def build_mnist(keras):
    """The Kaggle MNIST CNN (amyjang/tensorflow-mnist-cnn-tutorial)."""
    L = keras.layers
    inp = keras.Input(shape=(28, 28, 1), batch_size=1, name="input")
    x = L.Conv2D(32, 5, padding="same", activation="relu", name="conv1")(inp)
    x = L.Conv2D(32, 5, padding="same", activation="relu", name="conv2")(x)
    x = L.MaxPool2D(2, name="pool1")(x)
    x = L.Dropout(0.25, name="drop1")(x)
    x = L.Conv2D(64, 3, padding="same", activation="relu", name="conv3")(x)
    x = L.Conv2D(64, 3, padding="same", activation="relu", name="conv4")(x)
    x = L.MaxPool2D(2, strides=2, name="pool2")(x)
    x = L.Dropout(0.25, name="drop2")(x)
    x = L.Flatten(name="flatten")(x)
    x = L.Dense(128, activation="relu", name="fc1")(x)
    x = L.Dropout(0.5, name="drop3")(x)
    x = L.Dense(10, name="fc2")(x)
    out = L.Softmax(name="softmax")(x)
    return keras.Model(inp, out, name="mnist")


def build_mobilenetv2(keras):
    # input_tensor gives the static batch 1 that onert requires
    inp = keras.Input(shape=(224, 224, 3), batch_size=1, name="input")
    return keras.applications.MobileNetV2(
        alpha=1.0, input_tensor=inp, classes=1000, weights=None)


def randomize(model, seed: int) -> None:
    """Seeded non-zero values for every variable.

    Converters drop all-zero biases, and default BN stats (mean 0, var 1,
    beta 0) would fold to zero biases, so everything gets a random value
    bounded away from zero.  Kernels are scaled by fan-in so activations
    stay O(1) through MobileNetV2's 52 convolutions.
    """
    rng = np.random.default_rng(seed)

    def away_from_zero(lo, hi, shape):
        return (rng.uniform(lo, hi, shape) * rng.choice([-1.0, 1.0], shape))

    for v in model.weights:
        shape = tuple(v.shape)
        leaf = v.path.rsplit("/", 1)[-1]
        if leaf in ("kernel", "depthwise_kernel"):
            if leaf == "depthwise_kernel":
                fan_in = shape[0] * shape[1]
            else:
                fan_in = int(np.prod(shape[:-1]))
            lim = np.sqrt(6.0 / fan_in)
            val = away_from_zero(0.05 * lim, lim, shape)
        elif leaf == "bias":
            val = away_from_zero(0.01, 0.1, shape)
        elif leaf == "gamma":
            val = rng.uniform(0.8, 1.2, shape)
        elif leaf == "beta":
            val = away_from_zero(0.01, 0.1, shape)
        elif leaf == "moving_mean":
            val = away_from_zero(0.01, 0.1, shape)
        elif leaf == "moving_variance":
            val = rng.uniform(0.8, 1.2, shape)
        else:
            raise ValueError(f"unexpected variable {v.path}")
        v.assign(val.astype(np.float32))


def to_tflite(tf, model) -> bytes:
    import contextlib
    import io
    conv = tf.lite.TFLiteConverter.from_keras_model(model)
    with contextlib.redirect_stdout(io.StringIO()):  # Keras prints the traced signature
        return bytes(conv.convert())


# --------------------------------------------------------------------------
# Put MobileNetV2's ZeroPadding2D back as explicit PAD ops
# --------------------------------------------------------------------------

class _AlignedBufferT(BufferT):
    """BufferT whose data vector is 16-byte aligned, as TF's converter writes it."""

    def Pack(self, builder):
        from circle_schema.v0_10.circle import Buffer as B
        data = None
        if self.data is not None and len(self.data):
            raw = np.asarray(self.data, dtype=np.uint8).tobytes()
            builder.StartVector(1, len(raw), 16)
            builder.head = builder.head - len(raw)
            builder.Bytes[builder.head:builder.head + len(raw)] = raw
            data = builder.EndVector()
        B.BufferStart(builder)
        if data is not None:
            B.BufferAddData(builder, data)
        if self.offset:
            B.BufferAddOffset(builder, self.offset)
        if self.size:
            B.BufferAddSize(builder, self.size)
        return B.BufferEnd(builder)


def _same_pads(size: int, k: int, s: int, d: int = 1) -> tuple[int, int]:
    eff = (k - 1) * d + 1
    out = -(-size // s)
    total = max((out - 1) * s + eff - size, 0)
    return total // 2, total - total // 2


def restore_pads(tfl: bytes) -> bytes:
    """Insert PAD before each stride-2 SAME depthwise conv and make it VALID.

    TF 2.21 folds Keras' ZeroPadding2D(((0,1),(0,1))) + VALID depthwise into a
    SAME depthwise conv; ONE's published MobileNetV2 (and onert's training
    operand set) has the explicit PADs.  For stride 2, k=3 on even sizes SAME
    pads exactly [0,1] per spatial dim, so the rewrite is value-preserving.
    """
    m = ModelT.InitFromPackedBuf(bytearray(tfl), 0)
    g = m.subgraphs[0]

    def code_of(op):
        c = m.operatorCodes[op.opcodeIndex]
        return c.builtinCode if c.deprecatedBuiltinCode == 127 else max(c.builtinCode, c.deprecatedBuiltinCode)

    pad_code = OperatorCodeT()
    pad_code.builtinCode = Op.PAD
    pad_code.deprecatedBuiltinCode = Op.PAD
    pad_code.version = 1
    m.operatorCodes.append(pad_code)
    pad_idx = len(m.operatorCodes) - 1

    new_ops = []
    inserted = 0
    for op in g.operators:
        opts = op.builtinOptions
        if (code_of(op) == Op.DEPTHWISE_CONV_2D and opts.padding == Padding.SAME
                and opts.strideH == 2 and opts.strideW == 2):
            x = g.tensors[op.inputs[0]]
            w = g.tensors[op.inputs[1]]
            _, h, wd, c = [int(d) for d in x.shape]
            kh, kw = int(w.shape[1]), int(w.shape[2])
            ph = _same_pads(h, kh, 2, opts.dilationHFactor)
            pw = _same_pads(wd, kw, 2, opts.dilationWFactor)
            paddings = np.array([[0, 0], ph, pw, [0, 0]], dtype=np.int32)
            assert paddings.tolist() == [[0, 0], [0, 1], [0, 1], [0, 0]], paddings
            block = re.search(r"block_\d+", g.tensors[op.outputs[0]].name.decode())
            prefix = block.group(0) if block else f"pad{inserted}"

            buf = _AlignedBufferT()
            buf.data = np.frombuffer(paddings.tobytes(), dtype=np.uint8)
            m.buffers.append(buf)
            pt = TensorT()
            pt.shape = np.array([4, 2], dtype=np.int32)
            pt.type = TT.INT32
            pt.buffer = len(m.buffers) - 1
            pt.name = f"{prefix}_pad/paddings".encode()
            g.tensors.append(pt)
            paddings_t = len(g.tensors) - 1

            m.buffers.append(_AlignedBufferT())
            ot = TensorT()
            ot.shape = np.array([1, h + ph[0] + ph[1], wd + pw[0] + pw[1], c], dtype=np.int32)
            ot.type = TT.FLOAT32
            ot.buffer = len(m.buffers) - 1
            ot.name = f"{prefix}_pad/Pad".encode()
            g.tensors.append(ot)
            padded_t = len(g.tensors) - 1

            pad = OperatorT()
            pad.opcodeIndex = pad_idx
            pad.inputs = np.array([op.inputs[0], paddings_t], dtype=np.int32)
            pad.outputs = np.array([padded_t], dtype=np.int32)
            pad.builtinOptionsType = Opts.PadOptions
            pad.builtinOptions = PadOptionsT()
            new_ops.append(pad)

            op.inputs = np.array(op.inputs, dtype=np.int32)
            op.inputs[0] = padded_t
            opts.padding = Padding.VALID
            inserted += 1
        new_ops.append(op)
    assert inserted == 4, f"expected 4 stride-2 depthwise convs, found {inserted}"
    g.operators = new_ops
    # keep the converter's alignment for the existing constant buffers too
    m.buffers = [_realign(b) for b in m.buffers]

    builder = flatbuffers.Builder(len(tfl) + 4096)
    builder.Finish(m.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def _realign(b: BufferT) -> BufferT:
    if isinstance(b, _AlignedBufferT):
        return b
    nb = _AlignedBufferT()
    nb.data, nb.offset, nb.size = b.data, b.offset, b.size
    return nb


def to_circle(tfl: bytes) -> bytes:
    # circle's schema is field-compatible with tflite's; only the identifier differs
    assert tfl[4:8] == b"TFL3"
    return tfl[:4] + b"CIR0" + tfl[8:]


# --------------------------------------------------------------------------
# tflite graph -> ONNX (NCHW), reusing the exact parameter values
# --------------------------------------------------------------------------

_ONNX_NAMES = {Op.CONV_2D: "conv", Op.DEPTHWISE_CONV_2D: "dwconv", Op.MAX_POOL_2D: "maxpool",
               Op.RESHAPE: "reshape", Op.FULLY_CONNECTED: "fc", Op.SOFTMAX: "softmax",
               Op.ADD: "add", Op.PAD: "pad", Op.MEAN: "mean"}


def tflite_to_onnx(tfl: bytes, name: str) -> onnx.ModelProto:
    m = ModelT.InitFromPackedBuf(bytearray(tfl), 0)
    g = m.subgraphs[0]

    def const(ti):
        t = g.tensors[ti]
        data = m.buffers[t.buffer].data
        if data is None or len(data) == 0:
            return None
        dt = {TT.FLOAT32: np.float32, TT.INT32: np.int32, TT.INT64: np.int64}[t.type]
        return np.frombuffer(np.asarray(data, dtype=np.uint8).tobytes(), dtype=dt).reshape(
            [int(d) for d in t.shape])

    def code_of(op):
        c = m.operatorCodes[op.opcodeIndex]
        return c.builtinCode if c.deprecatedBuiltinCode == 127 else max(c.builtinCode, c.deprecatedBuiltinCode)

    nodes, inits = [], []
    names = {}          # tflite tensor index -> ONNX value name
    flat_hwc = {}       # ONNX value -> (H, W, C) if it is a flattened NCHW tensor
    clip_bounds = []

    def add_init(arr, nm):
        inits.append(numpy_helper.from_array(np.ascontiguousarray(arr), nm))
        return nm

    def activation(x, act, base):
        if act == Act.NONE:
            return x
        if act == Act.RELU:
            nodes.append(helper.make_node("Relu", [x], [f"{base}_relu"], name=f"{base}_relu"))
            return f"{base}_relu"
        if act == Act.RELU6:
            if not clip_bounds:  # one shared pair of scalars for all ReLU6
                clip_bounds.append(add_init(np.array(0.0, np.float32), "relu6_min"))
                clip_bounds.append(add_init(np.array(6.0, np.float32), "relu6_max"))
            nodes.append(helper.make_node("Clip", [x, *clip_bounds], [f"{base}_relu6"],
                                          name=f"{base}_relu6"))
            return f"{base}_relu6"
        raise NotImplementedError(f"fused activation {act}")

    def conv_pads(op, x_shape, w_hw):
        o = op.builtinOptions
        if o.padding == Padding.VALID:
            return [0, 0, 0, 0]
        ph = _same_pads(x_shape[1], w_hw[0], o.strideH, getattr(o, "dilationHFactor", 1))
        pw = _same_pads(x_shape[2], w_hw[1], o.strideW, getattr(o, "dilationWFactor", 1))
        return [ph[0], pw[0], ph[1], pw[1]]

    (in_t,) = g.inputs
    (out_t,) = g.outputs
    in_shape = [int(d) for d in g.tensors[in_t].shape]
    names[in_t] = "input"
    graph_input = helper.make_tensor_value_info(
        "input", TensorProto.FLOAT, [in_shape[0], in_shape[3], in_shape[1], in_shape[2]])

    counts: dict[str, int] = {}
    for op in g.operators:
        code = code_of(op)
        kind = _ONNX_NAMES[code]
        base = f"{kind}{counts.get(kind, 0)}"
        counts[kind] = counts.get(kind, 0) + 1
        o = op.builtinOptions
        x_t = op.inputs[0]
        x = names[x_t]
        x_shape = [int(d) for d in g.tensors[x_t].shape]
        y = base

        if code in (Op.CONV_2D, Op.DEPTHWISE_CONV_2D):
            w = const(op.inputs[1])
            b = const(op.inputs[2])
            if code == Op.CONV_2D:      # OHWI -> OIHW
                wo = w.transpose(0, 3, 1, 2)
                group = 1
            else:                       # 1,H,W,C*M -> C*M,1,H,W
                wo = w[0].transpose(2, 0, 1)[:, None]
                group = x_shape[3]
                assert o.depthMultiplier == 1 and w.shape[3] == group
            ins = [x, add_init(wo, f"{base}.weight")]
            if b is not None:
                ins.append(add_init(b, f"{base}.bias"))
            nodes.append(helper.make_node(
                "Conv", ins, [y], name=base, group=group,
                kernel_shape=list(w.shape[1:3]), strides=[o.strideH, o.strideW],
                dilations=[o.dilationHFactor, o.dilationWFactor],
                pads=conv_pads(op, x_shape, w.shape[1:3])))
            y = activation(y, o.fusedActivationFunction, base)
        elif code == Op.MAX_POOL_2D:
            nodes.append(helper.make_node(
                "MaxPool", [x], [y], name=base,
                kernel_shape=[o.filterHeight, o.filterWidth], strides=[o.strideH, o.strideW],
                pads=conv_pads(op, x_shape, (o.filterHeight, o.filterWidth))))
            y = activation(y, o.fusedActivationFunction, base)
        elif code == Op.RESHAPE:
            shape = const(op.inputs[1])
            assert len(x_shape) == 4 and shape.shape == (2,), "only NHWC -> 2-D flatten"
            nodes.append(helper.make_node(
                "Reshape", [x, add_init(shape.astype(np.int64), f"{base}.shape")], [y], name=base))
            flat_hwc[y] = tuple(x_shape[1:])
        elif code == Op.FULLY_CONNECTED:
            w = const(op.inputs[1])
            b = const(op.inputs[2]) if len(op.inputs) > 2 and op.inputs[2] >= 0 else None
            if x in flat_hwc:
                # tflite flattened NHWC, ONNX flattens NCHW: permute the columns
                h, wd, c = flat_hwc[x]
                w = w.reshape(-1, h, wd, c).transpose(0, 3, 1, 2).reshape(w.shape[0], -1)
            ins = [x, add_init(w, f"{base}.weight")]
            if b is not None:
                ins.append(add_init(b, f"{base}.bias"))
            nodes.append(helper.make_node("Gemm", ins, [y], name=base, transB=1))
            y = activation(y, o.fusedActivationFunction, base)
        elif code == Op.SOFTMAX:
            assert o.beta == 1.0
            nodes.append(helper.make_node("Softmax", [x], [y], name=base, axis=-1))
        elif code == Op.ADD:
            nodes.append(helper.make_node("Add", [x, names[op.inputs[1]]], [y], name=base))
            y = activation(y, o.fusedActivationFunction, base)
        elif code == Op.PAD:
            p = const(op.inputs[1])           # NHWC [[b, e], ...]
            nchw = p[[0, 3, 1, 2]]
            pads = np.concatenate([nchw[:, 0], nchw[:, 1]]).astype(np.int64)
            nodes.append(helper.make_node(
                "Pad", [x, add_init(pads, f"{base}.pads")], [y], name=base, mode="constant"))
        elif code == Op.MEAN:
            axes = const(op.inputs[1])
            assert sorted(axes.tolist()) == [1, 2] and not o.keepDims, "global spatial mean"
            nodes.append(helper.make_node(
                "ReduceMean", [x, add_init(np.array([2, 3], np.int64), f"{base}.axes")], [y],
                name=base, keepdims=0))
        else:
            raise NotImplementedError(kind)
        for t in op.outputs:
            names[int(t)] = y

    out_shape = [int(d) for d in g.tensors[out_t].shape]
    nodes[-1].output[0] = "output"
    graph = helper.make_graph(
        nodes, name, [graph_input],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, out_shape)],
        initializer=inits)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", ONNX_OPSET)],
        ir_version=ONNX_IR_VERSION, producer_name="memplan sample_models/generate.py",
        doc_string=f"{name}: same network and parameter values as {name}.tflite, NCHW layout")
    onnx.checker.check_model(model, full_check=True)
    return onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)


# --------------------------------------------------------------------------
# Checks
# --------------------------------------------------------------------------

def check_all_nonzero(tfl: bytes) -> None:
    m = ModelT.InitFromPackedBuf(bytearray(tfl), 0)
    g = m.subgraphs[0]
    for t in g.tensors:
        data = m.buffers[t.buffer].data
        if t.type == TT.FLOAT32 and data is not None and len(data):
            arr = np.frombuffer(np.asarray(data, np.uint8).tobytes(), np.float32)
            if not np.all(arr != 0):
                raise AssertionError(f"zero value in {t.name!r}")


def check_fused(tfl: bytes, name: str) -> None:
    info = check_samples._flat_census(tfl, "tflite")
    fused = info["fused_activations"]
    if name == "mnist":
        # all four convs (including the second) and the first FC carry RELU
        assert fused.get("CONV_2D:RELU") == 4, fused
        assert fused.get("FULLY_CONNECTED:RELU") == 1, fused
        m = ModelT.InitFromPackedBuf(bytearray(tfl), 0)
        g = m.subgraphs[0]
        shape_t = g.operators[6].inputs[1]
        assert g.tensors[shape_t].type == TT.INT32 and list(g.tensors[shape_t].shape) == [2]
    else:
        assert fused.get("DEPTHWISE_CONV_2D:RELU6") == 17, fused
        assert fused.get("CONV_2D:RELU6") == 18 and fused.get("CONV_2D:NONE") == 17, fused


def check_census(info: dict, name: str) -> None:
    exp = EXPECTED[name]
    if info["format"] != "onnx":
        assert info["ops"] == exp["ops"], (info["file"], info["ops"])
    assert info["float_params"] == exp["float_params"], (info["file"], info["float_params"])


def compare_numerics(tf, keras_model, tfl: bytes, onx: onnx.ModelProto, in_shape, seed: int):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(in_shape).astype(np.float32)
    ref = np.asarray(keras_model(x, training=False))
    interp = tf.lite.Interpreter(model_content=tfl, num_threads=1)
    interp.allocate_tensors()
    interp.set_tensor(interp.get_input_details()[0]["index"], x)
    interp.invoke()
    got_tfl = interp.get_tensor(interp.get_output_details()[0]["index"])
    result = {"keras_vs_tflite": float(np.max(np.abs(ref - got_tfl)))}
    try:
        import onnxruntime as ort
    except ImportError:
        result["onnx"] = "onnxruntime not installed: skipped"
        return result
    sess = ort.InferenceSession(onx.SerializeToString(), providers=["CPUExecutionProvider"])
    got_onnx = sess.run(None, {"input": x.transpose(0, 3, 1, 2)})[0]
    result["tflite_vs_onnx"] = float(np.max(np.abs(got_tfl - got_onnx)))
    result["tflite_vs_onnx_rel"] = float(np.max(np.abs(got_tfl - got_onnx) / np.abs(got_tfl)))
    result["argmax_equal"] = bool(np.argmax(got_tfl) == np.argmax(got_onnx))
    assert result["tflite_vs_onnx"] < 1e-4, result
    assert result["keras_vs_tflite"] < 1e-4, result
    return result


# --------------------------------------------------------------------------

MODELS = {"mnist": (build_mnist, 1234, [1, 28, 28, 1]),
          "mobilenetv2": (build_mobilenetv2, 5678, [1, 224, 224, 3])}


def generate(name: str) -> None:
    import tensorflow as tf
    import keras

    build, seed, in_shape = MODELS[name]
    keras.utils.set_random_seed(seed)
    model = build(keras)
    randomize(model, seed)
    print(f"== {name}: Keras params {model.count_params():,}")

    tfl = to_tflite(tf, model)
    if name == "mobilenetv2":
        raw = check_samples._flat_census(tfl, "tflite")
        print(f"   converter output: {raw['num_ops']} ops {raw['ops']}")
        tfl = restore_pads(tfl)
    check_all_nonzero(tfl)
    check_fused(tfl, name)
    onx = tflite_to_onnx(tfl, name)

    paths = {ext: HERE / f"{name}.{ext}" for ext in ("tflite", "circle", "onnx")}
    paths["tflite"].write_bytes(tfl)
    paths["circle"].write_bytes(to_circle(tfl))
    paths["onnx"].write_bytes(onx.SerializeToString())

    for ext, p in paths.items():
        info = check_samples.census(p)
        check_census(info, name)
        print(check_samples.format_census(info))
    print("   numerics:", compare_numerics(tf, model, tfl, onx, in_shape, seed + 1))


def main(argv: list[str]) -> int:
    for name in argv or list(MODELS):
        generate(name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
