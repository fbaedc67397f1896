"""Offset planners behind one interface: (sizes, firsts, lasts) -> Plan(offsets, arena).

Lifetimes are inclusive step indices. Planners that replay a runtime's claim order (onert's
Bump / FirstFit / WIC) read claim order from `firsts` (ties: list order).
"""
from memplan_cli.planners.base import Plan, Planner, get_planner, planner_names, register

__all__ = ["Plan", "Planner", "get_planner", "planner_names", "register"]
