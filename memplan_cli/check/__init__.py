"""Independent checks of plans and schedules (they share no code with what they check)."""
from memplan_cli.check.overlap import PlanError, check_plan

__all__ = ["PlanError", "check_plan"]
