"""Helpers shared by the op-family rule modules (they live beside the op registry)."""
from memplan_cli.ops.rule import bp_targets, forward_io, plain_rule  # noqa: F401
