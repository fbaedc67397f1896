"""Executing a training step inside a planned arena, to prove the plan (`memplan verify`).

`kernels/` holds NumPy reference kernels, one module per op family; `executor.py` binds a training
graph's tensors to views of one byte arena per pool and runs the schedule step by step.
"""
