"""Run the real onert (when installed) and read the ALLOC capacities it prints.

onert writes its log with C++ std::cout, so the runtime runs in a child interpreter with
ONERT_LOG_ENABLE=1 and CPU_MEMORY_PLANNER set, and this module reads the child's stdout.
Used by the tests and benchmarks/onert_match.py as ground truth; memplan never needs it.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

CAP_RE = re.compile(r"allocation capacity: (\d+)")
CLAIM_RE = re.compile(r"claim\(\s*%(\d+)\)", re.IGNORECASE)  # WIC/FF "claim(", Bump "CLAIM("
# TensorPlanner's "Start planning ..." messages -> category
SECTIONS = {"constant tensors": "trainable", "non-constant tensors": "non-const",
            "back-propagated tensors": "back-prop", "gradient tensors": "gradient",
            "disposable back-prop tensors": "disposable"}
ONERT_PLANNER = {"wic": "WIC", "bump": "Bump", "firstfit": "FirstFit"}

_CHILD = r"""
import json, sys, time
import numpy as np
from onert.experimental.train import session, optimizer, losses
path, batch, opt, loss, ntrain = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
t0 = time.perf_counter()
s = session(path, "train")
ins, outs = s.get_inputs_tensorinfo(), s.get_outputs_tensorinfo()
o = optimizer.Adam(0.001) if opt == "adam" else optimizer.SGD(0.001)
o.nums_trainable_ops = ntrain
l = losses.CategoricalCrossentropy() if loss == "cce" else losses.MeanSquaredError()
s.compile(optimizer=o, loss=l, batch_size=batch)
t1 = time.perf_counter()
steps = int(sys.argv[6])
if steps:
    rng = np.random.default_rng(0)
    xs = [rng.random([batch] + list(i.dims[1:i.rank]), dtype=np.float32) for i in ins]
    ys = [np.full([batch] + list(i.dims[1:i.rank]), 0.1, np.float32) for i in outs]
    s.train_step(xs, ys)
sys.stdout.flush()
print("@@DONE " + json.dumps({"compile_s": t1 - t0}), flush=True)
"""


def available(python: str | None = None) -> bool:
    py = python or sys.executable
    r = subprocess.run([py, "-c", "import onert.experimental.train"], capture_output=True)
    return r.returncode == 0


def run_onert(model: str, *, batch: int, optimizer: str = "sgd", loss: str = "mse",
              trainable_ops: int = -1, planner: str = "wic", steps: int = 0,
              python: str | None = None, timeout: float = 600) -> dict:
    """{"alloc_lines": [...], "compile_s": float, "ok": bool, "returncode": int, "tail": [...],
    "error": onert's "Error during ..." line or None, "claims": {category: [onert operand index in
    claim order]} from the planners' log} for one compile (and `steps` training steps)."""
    env = dict(os.environ, ONERT_LOG_ENABLE="1", CPU_MEMORY_PLANNER=ONERT_PLANNER[planner])
    argv = [python or sys.executable, "-c", _CHILD, model, str(batch), optimizer, loss,
            str(trainable_ops), str(steps)]
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         errors="replace")
    lines, done, tail, error = [], None, [], None
    claims, section = {}, None
    for ln in p.stdout:  # stream: the WIC planner's log is large
        if error is None and ln.startswith("Error during "):
            error = ln.strip()  # nnfw's own reason, e.g. "... : Tanh operation is not trainable yet"
        m = CAP_RE.search(ln)
        if m:
            lines.append(int(m.group(1)))
        elif "TensorPlanner" in ln:
            section = next((c for key, c in SECTIONS.items() if "Start planning " + key in ln), None)
        elif section and (m := CLAIM_RE.search(ln)):
            claims.setdefault(section, []).append(int(m.group(1)))
        elif ln.startswith("@@DONE "):
            done = json.loads(ln[7:])
        elif "ALLOC" not in ln:
            tail = (tail + [ln.rstrip()])[-8:]
    rc = p.wait(timeout=timeout)
    return {"alloc_lines": lines, "compile_s": (done or {}).get("compile_s"), "ok": done is not None,
            "returncode": rc, "wall_s": time.perf_counter() - t0, "tail": tail, "error": error,
            "claims": claims}
