"""Rematerialization under a memory budget: which forward results to drop and recompute so that one
training step fits, at the least added FLOPs.

- `problem.RematProblem`: one model + setup; builds the training graph once up to its execution
  order, then any plan (a set of dropped ops) through the rematerialization and aliasing passes
  (`passes/rematerialize.py`), and scores it: the lower bound of its buffer list and its FLOPs.
- `chen.py`: Chen et al.'s sqrt(n) segments, the baseline.
- `solve.py`: the solver (exact by enumeration on small instances; otherwise a seeded local search,
  reported as such), then plan, check the planned arena against the budget, tighten, repeat.
"""
