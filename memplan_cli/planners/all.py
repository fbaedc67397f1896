"""Importing this module registers every planner. Add one import line per planner module."""
from memplan_cli.planners import naive  # noqa: F401
from memplan_cli.planners import onert  # noqa: F401
from memplan_cli.planners import singa  # noqa: F401
from memplan_cli.planners import nntrainer  # noqa: F401
from memplan_cli.planners import greedy  # noqa: F401
from memplan_cli.planners import exact, best  # noqa: F401
