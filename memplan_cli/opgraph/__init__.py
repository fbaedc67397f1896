"""Graph analyses that consult the op registry: above `ops`, so the IR core (`ir/`) knows no op.

- `contract`: each op checked against its registry entry (required inputs, attributes); the
  loaders run it (`contract.verify`) after the IR's own structural check.
- `rebatch`: a graph at another batch, each op by its registry batch rule.
- `shape_values`: the integer values a graph computes shapes with, followed through a re-batch.
- `fold`: constants the graph computes from constants, folded at load.
- `outputs`: which model outputs carry a loss, and their names.
"""
