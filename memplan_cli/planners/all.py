"""Importing this module registers every planner. Add one import line per planner module."""
from memplan_cli.planners import naive  # noqa: F401
