"""Rematerialization under a memory budget: which forward results to drop and recompute so that one
training step fits, at the least added FLOPs.

- `problem.RematProblem`: one model + setup; builds the training graph once up to its execution
  order, then any plan (a set of dropped ops) through the rematerialization and aliasing passes
  (`passes/rematerialize.py`), and scores it: the lower bound of its buffer list and its FLOPs.
- `chen.py`: Chen et al.'s sqrt(n) segments, the baseline.
- `relax.py`: a MILP relaxation (HiGHS) that never counts more bytes than a plan needs: its optimum
  is a proven lower bound on the added FLOPs (or proves nothing fits), its least peak a proven
  bound on how low any plan goes.
- `solve.py`: the solver (enumeration on small instances; otherwise the relaxation, each answer
  scored for real, with a seeded local search as the fallback, reported with the bound), then plan,
  check the planned arena against the budget, tighten, repeat.
"""
