"""Test harness for op-family modules: load a tiny model the way users do, then check every gradient
a training graph computes against central finite differences of the loss (float64), under memplan's
own rules and with every saving rule off, and run `memplan verify` on it.

A family test builds a small ONNX model (or tflite) where the op under test sits between trained
parameters (so its calcDerivative runs: put a parameterised op such as Add(x, p) before it) and calls
`check_gradients(path)` and `check_verify(path)`.
"""
from __future__ import annotations

import json

import numpy as np
import onnx
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from memplan_cli.cli import main
from memplan_cli.config import TrainConfig
from memplan_cli.execute.executor import _Inputs
from memplan_cli.loaders import load_model
from memplan_cli.passes.pipeline import build_training_graph
from memplan_cli.passes.policy import Policy
from tests.execute.helpers import finite_difference_check

H = 1e-6
SAMPLES = 12


def onnx_model(nodes, inputs, outputs, inits, opset=17) -> onnx.ModelProto:
    """inputs/outputs: (name, shape[, elem_type]); inits: name -> numpy array."""
    def vi(t):
        return helper.make_tensor_value_info(t[0], t[2] if len(t) > 2 else TensorProto.FLOAT, list(t[1]))
    g = helper.make_graph(nodes, "g", [vi(t) for t in inputs], [vi(t) for t in outputs],
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def save(tmp_path, m, name="m.onnx") -> str:
    p = str(tmp_path / name)
    onnx.save(m, p)
    return p


def training_graph(path, policy=None, loss="mse", batch=None, **config):
    """`path`: a model file, or a function building a Graph (for graphs no loader writes)."""
    g = path() if callable(path) else load_model(path, batch_size=batch)
    for o in g.operands:
        if o.dtype == "float32":
            o.dtype = "float64"
    tg = build_training_graph(g, TrainConfig(optimizer="sgd", loss=loss, **config), policy=policy or Policy())
    for t in tg.tensors:
        if t.dtype == "float32":
            t.dtype = "float64"
    return tg


def check_gradients(path, *, loss="mse", policies=(Policy(), Policy.baseline()), min_checked=4, feeds=None,
                    **config) -> int:
    """Finite-difference check of every weight gradient; returns how many elements were checked.
    `feeds` ({tensor name: array}) replaces seeded values (e.g. an int input's indices, which are
    zeros otherwise)."""
    checked = 0
    for policy in policies:
        tg = training_graph(path, policy, loss, **config)
        src = _Inputs(tg, 0)
        targets = [(tg.fwd[o], g) for o, g in tg.grad.items()]
        values = {t: src.value(t, np.float64) for t, _ in targets}
        by_name = {t.name: t.id for t in tg.tensors}
        for name, v in (feeds or {}).items():
            values[by_name[name]] = np.asarray(v)
        checked += finite_difference_check(tg, values, targets, SAMPLES, H)
    assert checked >= min_checked
    return checked


def run_forward(op, inputs: list, out_shapes: list, dtype=np.float64) -> list:
    """Run the registry's forward kernel of `op` on `inputs` (None: an absent input) into fresh
    outputs of `out_shapes`, without a training graph: for checking a kernel against a reference."""
    from memplan_cli import ops

    outs = [np.zeros(s, dtype) for s in out_shapes]

    class Ctx:
        attrs = op.attrs

        def x(self, k, optional=False):
            return inputs[k] if k < len(inputs) else None

        def y(self, k=0, optional=False):
            return outs[k] if k < len(outs) else None

        def extra(self, what):
            return None

        def act(self):
            return "NONE"
    Ctx.op = op
    ops.get(op.type).kernels["forward"](Ctx())
    return outs


def check_verify(path, *args) -> dict:
    """`memplan verify PATH -f json` passes (memplan profile unless args say otherwise)."""
    r = CliRunner().invoke(main, ["verify", path, "-f", "json", *args], env={"NO_COLOR": "1"})
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["passed"], doc
    return doc


def analyze_json(path, *args) -> dict:
    r = CliRunner().invoke(main, ["analyze", path, "-f", "json", *args], env={"NO_COLOR": "1"})
    assert r.exit_code == 0, r.output
    return json.loads(r.output)
