#!/usr/bin/env python3
"""Large models stay cheap: `memplan analyze` on an ONNX model with >= 1 GB of external weight data
and a tflite file of >= 500 MB, with the time and peak RSS of each run.

    .venv/bin/python benchmarks/large_models.py [--keep] [--dir DIR] [-- extra analyze flags]

The models are written to a temporary folder (removed afterwards unless --keep) and never committed.
Weights are real zero bytes on disk (not a sparse file), so a loader that read them would pay for it.
Target (issue 9): a few seconds and <= 200 MB peak RSS per run. Each run is a fresh
`python -m memplan_cli analyze` process; its peak RSS comes from wait4().
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WIDTH = 8192  # an 8192 x 8192 float32 weight is 256 MiB
CHUNK = 64 << 20


def _write_zeros(f, n: int) -> None:
    zero = bytes(min(CHUNK, n))
    while n > 0:
        k = min(n, len(zero))
        f.write(zero[:k])
        n -= k


def make_onnx(folder: str, layers: int = 4) -> tuple[str, int]:
    """x[1, W] -> layers x (MatMul W x W, Add bias, Relu); every initializer in one external file."""
    import onnx
    from onnx import TensorProto, helper

    data_name = "weights.bin"
    inits, nodes, offset = [], [], 0
    with open(os.path.join(folder, data_name), "wb") as f:
        prev = "x"
        for i in range(layers):
            for name, dims in ((f"w{i}", [WIDTH, WIDTH]), (f"b{i}", [WIDTH])):
                n = 4
                for d in dims:
                    n *= d
                t = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=dims)
                t.data_location = TensorProto.EXTERNAL
                for k, v in (("location", data_name), ("offset", str(offset)), ("length", str(n))):
                    e = t.external_data.add()
                    e.key, e.value = k, v
                inits.append(t)
                _write_zeros(f, n)
                offset += n
            nodes += [helper.make_node("MatMul", [prev, f"w{i}"], [f"m{i}"]),
                      helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"]),
                      helper.make_node("Relu", [f"a{i}"], [f"h{i}"])]
            prev = f"h{i}"
    graph = helper.make_graph(nodes, "large", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, WIDTH])],
                              [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [1, WIDTH])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    path = os.path.join(folder, "large.onnx")
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
    return path, offset


def make_tflite(folder: str, layers: int = 2) -> tuple[str, int]:
    """x[1, W] -> layers x FULLY_CONNECTED(W x W, bias), weights inside the flatbuffer."""
    import flatbuffers
    import numpy as np
    from circle_schema.v0_10.circle.Buffer import BufferT
    from circle_schema.v0_10.circle.BuiltinOperator import BuiltinOperator
    from circle_schema.v0_10.circle.Model import ModelT
    from circle_schema.v0_10.circle.Operator import OperatorT
    from circle_schema.v0_10.circle.OperatorCode import OperatorCodeT
    from circle_schema.v0_10.circle.SubGraph import SubGraphT
    from circle_schema.v0_10.circle.Tensor import TensorT

    def tensor(name, shape, buf):
        t = TensorT()
        t.name, t.shape, t.type, t.buffer = name.encode(), list(shape), 0, buf  # 0 = FLOAT32
        return t

    def buffer(nbytes):
        b = BufferT()
        b.data = np.zeros(nbytes, dtype=np.uint8) if nbytes else None
        return b

    buffers, tensors, ops = [buffer(0)], [tensor("x", (1, WIDTH), 0)], []
    data = 0
    for i in range(layers):
        for name, shape in ((f"w{i}", (WIDTH, WIDTH)), (f"b{i}", (WIDTH,))):
            n = 4 * (shape[0] * (shape[1] if len(shape) > 1 else 1))
            buffers.append(buffer(n))
            tensors.append(tensor(name, shape, len(buffers) - 1))
            data += n
        tensors.append(tensor(f"h{i}", (1, WIDTH), 0))
        op = OperatorT()
        prev = 0 if i == 0 else len(tensors) - 4
        op.opcodeIndex, op.inputs, op.outputs = 0, [prev, len(tensors) - 3, len(tensors) - 2], [len(tensors) - 1]
        ops.append(op)
    sg = SubGraphT()
    sg.tensors, sg.operators, sg.inputs, sg.outputs = tensors, ops, [0], [len(tensors) - 1]
    code = OperatorCodeT()
    code.builtinCode = code.deprecatedBuiltinCode = BuiltinOperator.FULLY_CONNECTED
    code.version = 1
    m = ModelT()
    m.version, m.operatorCodes, m.subgraphs, m.buffers = 3, [code], [sg], buffers
    b = flatbuffers.Builder(data + (1 << 20))
    b.Finish(m.Pack(b), file_identifier=b"TFL3")
    path = os.path.join(folder, "large.tflite")
    with open(path, "wb") as f:
        f.write(b.Output())
    return path, data


def run(args: list[str]) -> tuple[int, float, float, str]:
    """(exit status, seconds, peak RSS in MB, stderr) of one memplan process."""
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-m", "memplan_cli", *args], cwd=REPO,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = p.stderr.read().decode(errors="replace")
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    return p.returncode, time.perf_counter() - t0, ru.ru_maxrss / 1024, err.strip()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--keep", action="store_true", help="keep the generated models")
    ap.add_argument("--dir", default=None, help="folder for the models (default: a new temporary one)")
    ap.add_argument("--generate-only", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("extra", nargs="*", help="extra flags for memplan analyze (after --)")
    a = ap.parse_args()
    folder = a.dir or tempfile.mkdtemp(prefix="memplan-large-")
    os.makedirs(folder, exist_ok=True)
    if a.generate_only:
        print(*make_onnx(folder), *make_tflite(folder))
        return 0
    worst_rss, worst_t, failed = 0.0, 0.0, False
    try:
        t0 = time.perf_counter()
        # generate in a child so this process stays small: a forked child's peak RSS counts the
        # parent's pages until it execs
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "--generate-only", "--dir", folder],
                             check=True, capture_output=True, text=True).stdout.split()
        onnx_path, onnx_data, tfl_path, tfl_data = out[0], int(out[1]), out[2], int(out[3])
        print(f"generated in {time.perf_counter() - t0:.1f} s under {folder}")
        base = run(["--version"])
        print(f"baseline `memplan --version`: {base[1]:.2f} s, peak RSS {base[2]:.0f} MB")
        print(f"{'model':<14} {'file bytes':>15} {'weight bytes':>15} {'exit':>4} {'seconds':>8} {'peak RSS MB':>12}")
        for path, data in ((onnx_path, onnx_data), (tfl_path, tfl_data)):
            size = os.path.getsize(path)
            if path.endswith(".onnx"):
                size += os.path.getsize(os.path.join(folder, "weights.bin"))
            code, secs, rss, err = run(["analyze", path, *a.extra])
            print(f"{os.path.basename(path):<14} {size:>15,d} {data:>15,d} {code:>4} {secs:>8.2f} {rss:>12.0f}")
            if code != 0:
                print(f"  stderr: {err[:300]}")
                failed = True
            worst_rss, worst_t = max(worst_rss, rss), max(worst_t, secs)
        ok = not failed and worst_rss <= 200
        print(f"target <= 200 MB peak RSS, a few seconds: {'met' if ok else 'NOT met'} "
              f"(worst {worst_rss:.0f} MB, {worst_t:.2f} s)")
        return 0 if ok else 1
    finally:
        if not a.keep and not a.dir:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
