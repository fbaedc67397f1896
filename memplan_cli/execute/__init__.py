"""Executing a training step inside a planned arena, to prove the plan (`memplan verify`).

`kernels/` holds NumPy reference kernels, one module per op family; `ops.py` binds them to training-
graph steps; `executor.py` binds a training graph's tensors to views of one byte arena per pool and
runs the schedule step by step, in lockstep with a run that gives every tensor its own allocation.
It takes a training graph and a layout and runs them; loading, analysing and choosing the step are
`memplan_cli.verification`'s. (The comparison of the kernels with the real onert runtime is
dev-only: `devtools/onert_check.py`.)
"""
