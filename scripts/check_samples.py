#!/usr/bin/env python3
"""Print the op census and float parameter count of model files.

Uses only onnx, tflite and circle-schema (no TensorFlow), so anyone can
re-check the sample models:

    python scripts/check_samples.py                  # all of sample_models/
    python scripts/check_samples.py a.tflite b.onnx  # given files
    python scripts/check_samples.py --json ...       # machine-readable

The format is sniffed from the content: flatbuffer identifier TFL3 or CIR0
at offset 4, otherwise ONNX protobuf.
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np

SAMPLES_DIR = Path(__file__).resolve().parent.parent / "sample_models"

# tflite TensorType / circle TensorType share these codes.
_FLAT_DTYPES = {0: "float32", 1: "float16", 2: "int32", 3: "uint8", 4: "int64",
                6: "bool", 7: "int16", 9: "int8", 10: "float64"}
_ACT_NAMES = {0: "NONE", 1: "RELU", 2: "RELU_N1_TO_1", 3: "RELU6", 4: "TANH",
              5: "SIGN_BIT", 6: "SIGMOID"}


def sniff(data: bytes) -> str:
    ident = data[4:8]
    if ident == b"TFL3":
        return "tflite"
    if ident == b"CIR0":
        return "circle"
    return "onnx"


class _FlatSchema:
    """The generated reader classes of one flatbuffer schema (tflite or circle)."""

    def __init__(self, fmt: str):
        if fmt == "tflite":
            self._pkg = "tflite"
        else:
            self._pkg = "circle_schema.v0_10.circle"
        self.fmt = fmt

    def cls(self, name: str):
        mod = importlib.import_module(f"{self._pkg}.{name}")
        return getattr(mod, name)

    def enum_names(self, name: str) -> dict[int, str]:
        enum = self.cls(name)
        return {v: k for k, v in vars(enum).items()
                if not k.startswith("_") and isinstance(v, int)}


def _flat_census(data: bytes, fmt: str) -> dict:
    schema = _FlatSchema(fmt)
    Model = schema.cls("Model")
    if not Model.ModelBufferHasIdentifier(data, 0):
        raise ValueError(f"not a {fmt} flatbuffer (identifier {data[4:8]!r})")
    model = Model.GetRootAs(data, 0)
    op_names = schema.enum_names("BuiltinOperator")
    opt_names = schema.enum_names("BuiltinOptions")
    graph = model.Subgraphs(0)

    ops: Counter = Counter()
    fused: Counter = Counter()  # (op, activation) for ops that carry one
    for i in range(graph.OperatorsLength()):
        op = graph.Operators(i)
        code = model.OperatorCodes(op.OpcodeIndex())
        # deprecated_builtin_code is a byte: 127 means "look at builtin_code"
        dep = code.DeprecatedBuiltinCode()
        num = code.BuiltinCode() if dep == 127 else dep
        name = op_names.get(num, f"BUILTIN_{num}")
        ops[name] += 1
        table = op.BuiltinOptions()
        if table is not None and op.BuiltinOptionsType() in opt_names:
            opts = schema.cls(opt_names[op.BuiltinOptionsType()])()
            opts.Init(table.Bytes, table.Pos)
            if hasattr(opts, "FusedActivationFunction"):
                fused[(name, _ACT_NAMES.get(opts.FusedActivationFunction(), "?"))] += 1

    float_params = 0
    float_tensors = 0
    other_consts = []
    for t in range(graph.TensorsLength()):
        tensor = graph.Tensors(t)
        buf = model.Buffers(tensor.Buffer())
        # constants carry data inline; (offset, size) is the >2 GiB layout
        has_data = buf is not None and (buf.DataLength() > 0 or buf.Size() > 0)
        if not has_data:
            continue
        shape = tuple(int(d) for d in tensor.ShapeAsNumpy()) if tensor.ShapeLength() else ()
        dtype = _FLAT_DTYPES.get(tensor.Type(), f"type{tensor.Type()}")
        n = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if dtype == "float32":
            float_params += n
            float_tensors += 1
        else:
            other_consts.append(f"{dtype}{list(shape)}")
    return {
        "format": fmt,
        "ops": dict(sorted(ops.items())),
        "num_ops": sum(ops.values()),
        "fused_activations": {f"{k[0]}:{k[1]}": v for k, v in sorted(fused.items())},
        "float_params": float_params,
        "float_const_tensors": float_tensors,
        "other_consts": sorted(other_consts),
        "inputs": [_flat_shape(graph.Tensors(graph.Inputs(i))) for i in range(graph.InputsLength())],
        "outputs": [_flat_shape(graph.Tensors(graph.Outputs(i))) for i in range(graph.OutputsLength())],
    }


def _flat_shape(tensor) -> list[int]:
    return [int(d) for d in tensor.ShapeAsNumpy()]


def _onnx_census(data: bytes) -> dict:
    import onnx

    # from bytes there is no directory to resolve external data against
    model = onnx.load_from_string(data)
    graph = model.graph
    ops = Counter(node.op_type for node in graph.node)
    inits = {i.name: i for i in graph.initializer}
    # Clip's min/max are float initializers but not trainable parameters
    clip_bounds = {name for node in graph.node if node.op_type == "Clip"
                   for name in node.input[1:] if name}
    float_all = 0
    float_clip = 0
    other_consts = []
    for name, init in inits.items():
        n = int(np.prod(init.dims, dtype=np.int64)) if init.dims else 1
        if init.data_type == onnx.TensorProto.FLOAT:
            float_all += n
            if name in clip_bounds:
                float_clip += n
        else:
            dt = onnx.helper.tensor_dtype_to_np_dtype(init.data_type).name
            other_consts.append(f"{dt}{list(init.dims)}")

    def dims(vi):
        return [d.dim_value if d.HasField("dim_value") else d.dim_param
                for d in vi.type.tensor_type.shape.dim]

    return {
        "format": "onnx",
        "opset": {o.domain or "ai.onnx": o.version for o in model.opset_import},
        "ops": dict(sorted(ops.items())),
        "num_ops": sum(ops.values()),
        "float_params": float_all - float_clip,
        "float_initializer_elements": float_all,
        "clip_bound_elements": float_clip,
        "other_consts": sorted(other_consts),
        "inputs": [dims(v) for v in graph.input if v.name not in inits],
        "outputs": [dims(v) for v in graph.output],
    }


def census(path: Path) -> dict:
    data = Path(path).read_bytes()
    fmt = sniff(data)
    info = _onnx_census(data) if fmt == "onnx" else _flat_census(data, fmt)
    info["file"] = str(path)
    info["bytes"] = len(data)
    return info


def format_census(info: dict) -> str:
    lines = [f"{info['file']}  ({info['format']}, {info['bytes']:,} bytes)",
             f"  ops ({info['num_ops']}): " + ", ".join(f"{k} x{v}" for k, v in info["ops"].items())]
    if info.get("fused_activations"):
        lines.append("  fused activations: " + ", ".join(
            f"{k} x{v}" for k, v in info["fused_activations"].items()))
    lines.append(f"  float parameters: {info['float_params']:,}")
    if info["format"] == "onnx" and info["clip_bound_elements"]:
        lines.append(f"    (+{info['clip_bound_elements']} float elements of Clip min/max bounds,"
                     f" {info['float_initializer_elements']:,} float initializer elements in all)")
    if info["other_consts"]:
        lines.append("  non-float constants: " + ", ".join(info["other_consts"]))
    lines.append(f"  inputs {info['inputs']} -> outputs {info['outputs']}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--json", action="store_true", help="print one JSON list")
    args = parser.parse_args(argv)
    files = args.files or sorted(
        p for p in SAMPLES_DIR.iterdir() if p.suffix in (".tflite", ".circle", ".onnx"))
    infos = [census(f) for f in files]
    if args.json:
        print(json.dumps(infos, indent=1))
    else:
        print("\n".join(format_census(i) for i in infos))
    return 0


if __name__ == "__main__":
    sys.exit(main())
