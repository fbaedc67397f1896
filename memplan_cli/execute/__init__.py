"""Executing a training step inside a planned arena, to prove the plan (`memplan verify`).

`kernels/` holds NumPy reference kernels, one module per op family; `ops.py` binds them to training-
graph steps; `executor.py` binds a training graph's tensors to views of one byte arena per pool and
runs the schedule step by step, in lockstep with a run that gives every tensor its own allocation.
`onert_map.py` maps the onert profile's buffers onto tensors. (The comparison of the kernels with the
real onert runtime is dev-only: `devtools/onert_check.py`.)
"""
