"""Dev-only helpers for memplan's tests and benchmarks; not part of the installed package.

`pip install .` ships `memplan_cli` only (pyproject's `packages.find` includes `memplan_cli*`),
so nothing here reaches users. Import it from the repository root: pytest puts the root on
`sys.path` (`pythonpath = ["."]`) and the benchmarks insert it themselves.

- `modelgen.py`: ModelBuilder writes small circle models op by op; `to_graph` builds an IR graph.
- `zoo.py`: the test zoo of small models (residual, depthwise, pooling, branches, ...).
- `onert_runtime.py`: runs the real onert 0.1.0 in a child interpreter and reads its ALLOC lines.
- `onert_check.py`: trains the same steps in onert and in memplan's executor and compares them.

memplan_cli never imports this package (tests/test_layering.py checks it).
"""
