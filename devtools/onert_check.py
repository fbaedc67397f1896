"""Cross-check the reference kernels against the real onert: the same training steps of a circle model
in onert 0.1.0 and in memplan's executor (inside memplan's plan), from the same weights and data.

memplan never reads model weights to plan; this check does, because onert trains from them. onert
runs in a child interpreter (its C++ logging and any crash stay there). After the first
`train_step` the child exports the trained model (`train_export_circle`), whose weights are compared
with the weights memplan's executor updated; the second step's loss (computed from the updated
weights) is compared too. onert 0.1.0's Python binding garbles the export path (the file appears in
the working directory under a corrupted name), so the child exports from an empty directory and
renames the one file that appears. In about 2 % of processes the export silently writes nothing;
the child is then run again (`EXPORT_ATTEMPTS`).

Used by `tests/execute/test_onert_check.py` (marked `onert`) and `benchmarks/verify_bench.py`.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import numpy as np

from devtools.onert_runtime import available  # noqa: F401  (re-exported: is onert importable)

_CHILD = r"""
import json, os, sys
import numpy as np
from onert.experimental.train import session, optimizer, losses
model, data, outdir, opt, lr, loss = sys.argv[1:7]
lr = float(lr)
d = np.load(data)
xs = [d[k] for k in sorted(d.files) if k.startswith("x")]
ys = [d[k] for k in sorted(d.files) if k.startswith("y")]
s = session(model, "train")
o = optimizer.Adam(lr) if opt == "adam" else optimizer.SGD(lr)
l = losses.CategoricalCrossentropy() if loss == "cce" else losses.MeanSquaredError()
s.compile(optimizer=o, loss=l, batch_size=xs[0].shape[0])
out = {"losses": []}
out["losses"].append([float(v) for v in s.train_step(xs, ys)["loss"]])
cwd = os.getcwd()
os.chdir(outdir)
before = set(os.listdir("."))
try:
    s.session.train_export_circle(os.path.join(outdir, "trained.circle"))
    new = [f for f in os.listdir(".") if f not in before]
    if "trained.circle" not in new and len(new) == 1:
        os.rename(new[0], "trained.circle")
    out["exported"] = os.path.exists("trained.circle")
except Exception as e:
    out["exported"] = False
    out["export_error"] = f"{type(e).__name__}: {e}"
os.chdir(cwd)
out["losses"].append([float(v) for v in s.train_step(xs, ys)["loss"]])
sys.stdout.flush()
print("@@RESULT " + json.dumps(out), flush=True)
"""


def circle_float_tensors(path: str) -> dict[str, np.ndarray]:
    """{tensor name: value} of every float32 tensor of subgraph 0 that has data (the weights)."""
    from circle_schema.v0_10.circle.Model import Model
    from circle_schema.v0_10.circle.TensorType import TensorType

    with open(path, "rb") as f:
        data = f.read()
    m = Model.GetRootAs(data, 0)
    sg = m.Subgraphs(0)
    out = {}
    for i in range(sg.TensorsLength()):
        t = sg.Tensors(i)
        if t.Type() != TensorType.FLOAT32:
            continue
        b = m.Buffers(t.Buffer())
        shape = tuple(int(d) for d in t.ShapeAsNumpy()) if t.ShapeLength() else ()
        n = int(np.prod(shape, dtype=np.int64))
        if b is None:
            continue
        if b.DataLength():
            arr = b.DataAsNumpy().view(np.float32)
        elif b.Offset() > 1:  # large models keep data after the flatbuffer
            arr = np.frombuffer(data, np.float32, count=n, offset=b.Offset())
        else:
            continue
        out[t.Name().decode()] = np.array(arr[:n]).reshape(shape)
    return out


# onert 0.1.0's train_export_circle silently writes nothing in about 2 % of processes (6 of 256
# measured), with no error: the whole child is run again (same data, same result) up to this many times
EXPORT_ATTEMPTS = 4


def _run_child(args: list[str], cwd: str, python: str | None, timeout: float) -> dict:
    """One onert child process: its @@RESULT record."""
    p = subprocess.run([python or sys.executable, "-c", _CHILD, *args], capture_output=True, text=True,
                       errors="replace", timeout=timeout, cwd=cwd)
    for ln in p.stdout.splitlines():
        if ln.startswith("@@RESULT "):
            return json.loads(ln[9:])
    raise RuntimeError("onert failed: " + " | ".join((p.stdout + p.stderr).strip().splitlines()[-6:]))


def run_onert_steps(model: str, xs: list[np.ndarray], ys: list[np.ndarray], *, optimizer: str = "sgd",
                    learning_rate: float = 0.01, loss: str = "mse", python: str | None = None,
                    timeout: float = 300, attempts: int = EXPORT_ATTEMPTS) -> dict:
    """Two `train_step`s of onert on (xs, ys): {"losses": [[step 1 per output], [step 2 ...]],
    "weights": {name: array after step 1} or None, "export_error": str | None, "attempts": n}.
    A child whose export wrote nothing is run again, at most `attempts` times in all."""
    with tempfile.TemporaryDirectory(prefix="memplan-onert-") as tmp:
        data = os.path.join(tmp, "data.npz")
        np.savez(data, **{f"x{k}": np.ascontiguousarray(x, np.float32) for k, x in enumerate(xs)},
                 **{f"y{k}": np.ascontiguousarray(y, np.float32) for k, y in enumerate(ys)})
        for attempt in range(1, attempts + 1):
            outdir = os.path.join(tmp, f"out{attempt}")
            os.mkdir(outdir)
            res = _run_child([os.path.abspath(model), data, outdir, optimizer, repr(float(learning_rate)), loss],
                             tmp, python, timeout)
            trained = os.path.join(outdir, "trained.circle")
            written = res.get("exported") and os.path.exists(trained) and os.path.getsize(trained) > 0
            if written:
                break
        weights = circle_float_tensors(trained) if written else None
        err = None if weights is not None else res.get("export_error", "onert wrote no trained model")
        if err is not None and attempts > 1:
            err += f" ({attempt} attempts)"
        return {"losses": res["losses"], "weights": weights, "export_error": err, "attempts": attempt}


def compare_with_onert(model: str, *, batch: int = 8, optimizer: str = "sgd", learning_rate: float = 0.01,
                       loss: str = "mse", profile: str = "memplan", seed: int = 0,
                       python: str | None = None) -> dict:
    """One training step of `model` in onert and in memplan's executor (inside `profile`'s plan, which
    must pass), from the model's own weights and the same seeded inputs and labels; then the second
    step's loss, from each side's updated weights.

    Returns {"loss": (memplan, onert), "loss2": (memplan, onert), "weights": n compared,
    "max_weight_diff", "max_weight_diff_at", "max_update": largest |w1 - w0| (the scale of a step),
    "max_update_diff_rel": largest |dw_memplan - dw_onert| / max |dw_onert|, "export_error"}."""
    from memplan_cli.analysis import analyze_graph
    from memplan_cli.config import TrainConfig
    from memplan_cli.verification import verify_analysis
    from memplan_cli.loaders import load_model

    graph = load_model(model, batch_size=batch)
    cfg = TrainConfig(batch_size=batch, optimizer=optimizer, loss=loss, learning_rate=learning_rate)
    a = analyze_graph(graph, cfg, profile=profile, path=model)
    w0 = circle_float_tensors(model)
    rng = np.random.default_rng(seed)
    inputs = [graph.operands[i] for i in graph.inputs]
    outputs = [graph.operands[o] for o in graph.outputs]
    if len(outputs) != 1:
        raise ValueError("the comparison supports models with one output (one loss)")
    xs = [rng.random(o.shape, dtype=np.float32) for o in inputs]
    k = outputs[0].shape[-1]
    ys = [np.eye(k, dtype=np.float32)[rng.integers(0, k, size=outputs[0].shape[:-1])]]
    feeds = {o.name: x for o, x in zip(inputs, xs)}
    feeds["label"] = ys[0]
    weights = {n: v for n, v in w0.items() if any(t.role == "weight" and t.name == n
                                                   for t in _tg(a).tensors)}
    rep1 = verify_analysis(a, model, feeds={**feeds, **weights})
    if not rep1.result.passed:
        raise RuntimeError(f"memplan's step failed in its own plan: {rep1.result.message}")
    w1 = rep1.result.updated
    rep2 = verify_analysis(a, model, feeds={**feeds, **weights, **w1})
    on = run_onert_steps(model, xs, ys, optimizer=optimizer, learning_rate=learning_rate, loss=loss, python=python)
    out = {"loss": (rep1.result.loss[0], on["losses"][0][0]), "loss2": (rep2.result.loss[0], on["losses"][1][0]),
           "weights": 0, "max_weight_diff": None, "max_weight_diff_at": "", "max_update": None,
           "max_update_diff_rel": None, "export_error": on["export_error"]}
    if on["weights"] is not None:
        worst, at, upd, rel = 0.0, "", 0.0, 0.0
        for n, v in w1.items():
            o = on["weights"].get(n)
            if o is None:
                continue
            d = float(np.max(np.abs(v.astype(np.float64) - o)))
            du_on = o.astype(np.float64) - w0[n]
            du_mp = v.astype(np.float64) - w0[n]
            scale = float(np.max(np.abs(du_on)))
            upd = max(upd, scale)
            if scale > 0:
                rel = max(rel, float(np.max(np.abs(du_mp - du_on))) / scale)
            if d >= worst:
                worst, at = d, n
            out["weights"] += 1
        out.update(max_weight_diff=worst, max_weight_diff_at=at, max_update=upd, max_update_diff_rel=rel)
    return out


def _tg(a):
    tg = getattr(a.buffers, "training_graph", None)
    if tg is None:
        from memplan_cli.verification import onert_map

        tg = onert_map.onert_training_graph(a.graph, a.config, a.buffers.info.get("backward_order"))
    return tg
