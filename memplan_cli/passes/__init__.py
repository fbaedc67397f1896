"""The pass pipeline that turns a forward graph into a training graph (see `training_graph` for the
data model and `pipeline` for the passes in order). Per-op backward rules live in the op
registry (`memplan_cli/ops/`), one module per op family."""
