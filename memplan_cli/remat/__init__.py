"""Rematerialization under a memory budget: which forward results to drop and recompute so that one
training step fits, at the least added FLOPs.

- `problem.RematProblem`: one model + setup; runs the memplan profile's own pass list once up to
  the rematerialization pass, then the rest of it per plan (ops kept, recomputed once or before
  each use; chains recomputed from kept tensors; then cheap recompute and aliasing), and scores it:
  the lower bound of its buffer list and the FLOPs of its recompute steps (the step memplan runs).
- `full.py`: a relaxation of the whole remat space (any forward op recomputed any number of times):
  the floor no plan goes below and a proven lower bound on the added FLOPs (HiGHS), the only source
  of "proven" / "optimal".
- `chen.py`: Chen et al.'s sqrt(n) segments, the baseline and a seed.
- `relax.py`: a MILP of the single-recompute space (HiGHS), not used by the search;
  `benchmarks/remat_backends.py` still compares solvers on it.
- `solve.py`: a ladder of plans that does not depend on the budget (rungs from the plain plan down
  to the floor, each reached by greedy cuts from the rung above, from no plan and from the
  relaxation's plan at the rung, then improved by a local search; work counted in training steps
  built), then the cheapest plan on its front whose planned arena fits the budget.
- `section.py`: the report's `remat` object; its notes are written from structured claims.
"""
