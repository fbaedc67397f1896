"""The pass pipeline that turns a forward graph into a training graph (see `training_graph` for the
data model and `pipeline` for the passes in order). Per-op backward rules live in `passes/ops/`,
one module per op family."""
